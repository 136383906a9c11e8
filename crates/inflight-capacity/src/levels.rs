//! [`Levels`]: the concurrency levels a sweep climbs, checked and in order.

/// The most calls at once a sweep will hold against one endpoint.
pub const MAX_CONCURRENCY: u32 = 1024;

/// Why a list of levels was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LevelsError {
    #[error("concurrency levels must be at least 1, got 0")]
    Zero,
    #[error("concurrency levels must be at most {MAX_CONCURRENCY}, got {0}")]
    TooHigh(u64),
    #[error("`{0}` is not a concurrency level (expected a whole number, e.g. 1,2,4,8)")]
    NotANumber(String),
    #[error("no concurrency levels given")]
    Empty,
}

/// Concurrency levels, ascending and distinct, each within `1..=`[`MAX_CONCURRENCY`].
///
/// ```
/// use inflight_capacity::Levels;
///
/// assert_eq!(Levels::doubling(20)?.as_slice(), [1, 2, 4, 8, 16, 20]);
/// assert_eq!(Levels::parse("8, 1,2,2")?.as_slice(), [1, 2, 8]);
/// assert!(Levels::parse("0").is_err());
/// # Ok::<(), inflight_capacity::LevelsError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Levels(Vec<u32>);

impl Levels {
    /// The given levels, sorted and without repeats.
    ///
    /// # Errors
    ///
    /// If the list is empty or a level is 0 or above [`MAX_CONCURRENCY`].
    pub fn list(levels: &[u64]) -> Result<Levels, LevelsError> {
        if levels.is_empty() {
            return Err(LevelsError::Empty);
        }
        let mut out = Vec::with_capacity(levels.len());
        for &level in levels {
            if level == 0 {
                return Err(LevelsError::Zero);
            }
            if level > u64::from(MAX_CONCURRENCY) {
                return Err(LevelsError::TooHigh(level));
            }
            out.push(level as u32);
        }
        out.sort_unstable();
        out.dedup();
        Ok(Levels(out))
    }

    /// A comma-separated list, as `--levels 1,2,4,8` gives it.
    ///
    /// # Errors
    ///
    /// As [`Levels::list`], and [`LevelsError::NotANumber`] for an entry that is not a number.
    pub fn parse(text: &str) -> Result<Levels, LevelsError> {
        let levels = text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<u64>()
                    .map_err(|_| LevelsError::NotANumber(s.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Levels::list(&levels)
    }

    /// 1, 2, 4, 8, ... up to `max`, and `max` itself.
    ///
    /// # Errors
    ///
    /// If `max` is 0 or above [`MAX_CONCURRENCY`].
    pub fn doubling(max: u64) -> Result<Levels, LevelsError> {
        let mut levels = Vec::new();
        let mut level = 1u64;
        while level < max {
            levels.push(level);
            level *= 2;
        }
        levels.push(max);
        Levels::list(&levels)
    }

    /// The levels, ascending.
    pub fn as_slice(&self) -> &[u32] {
        &self.0
    }

    /// The highest level.
    pub fn max(&self) -> u32 {
        self.0.last().copied().unwrap_or(1)
    }

    /// How many levels there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none (never, for levels that were built).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_levels_are_refused() {
        assert_eq!(Levels::parse("0"), Err(LevelsError::Zero));
        assert_eq!(Levels::parse("1,0,2"), Err(LevelsError::Zero));
        assert_eq!(Levels::parse(""), Err(LevelsError::Empty));
        assert_eq!(Levels::parse("2000"), Err(LevelsError::TooHigh(2000)));
        assert!(matches!(
            Levels::parse("1,x"),
            Err(LevelsError::NotANumber(_))
        ));
        assert_eq!(Levels::doubling(0), Err(LevelsError::Zero));
    }

    #[test]
    fn doubling_ends_at_max() {
        assert_eq!(Levels::doubling(1).unwrap().as_slice(), [1]);
        assert_eq!(
            Levels::doubling(64).unwrap().as_slice(),
            [1, 2, 4, 8, 16, 32, 64]
        );
        assert_eq!(Levels::doubling(12).unwrap().max(), 12);
    }
}
