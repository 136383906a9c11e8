//! [`Fixed`]: a limit that never changes, the default.

use super::{Limit, Sample};

/// A limit that never changes: `max_concurrent` calls at once, whatever the calls report.
///
/// ```
/// use inflight::limit::{Fixed, Limit};
///
/// let limit = Fixed::new(6);
/// assert_eq!(limit.current(), 6);
/// assert!(!limit.learns());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fixed(usize);

impl Fixed {
    /// A limit of `n` calls at once.
    pub fn new(n: usize) -> Fixed {
        Fixed(n)
    }
}

impl Limit for Fixed {
    fn current(&self) -> usize {
        self.0
    }

    fn max(&self) -> usize {
        self.0
    }

    fn on_sample(&mut self, _: &Sample) {}

    fn learns(&self) -> bool {
        false
    }
}
