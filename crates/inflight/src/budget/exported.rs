//! A budget's histogram handles (feature `metrics`), taken from the recorder installed when it
//! was built: the waits and calls recorded as they end. Gauges and counters are read from the
//! budget's own counters when [`crate::metrics::publish`] runs.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use ::metrics::{histogram, Histogram};

use crate::metric_names::{CALL_DURATION, CLASS_PERMIT_WAIT, PERMIT_WAIT};

/// A budget's histogram handles, taken from the recorder installed when it was built.
pub(crate) struct Handles {
    wait: Histogram,
    call: Histogram,
    /// Zero waits already added to the wait histogram.
    zero_waits_published: AtomicU64,
}

impl Handles {
    pub(crate) fn new(budget: &str) -> Handles {
        Handles {
            wait: histogram!(PERMIT_WAIT, "budget" => budget.to_string()),
            call: histogram!(CALL_DURATION, "budget" => budget.to_string()),
            zero_waits_published: AtomicU64::new(0),
        }
    }

    pub(crate) fn waited(&self, d: Duration) {
        self.wait.record(d.as_secs_f64());
    }

    pub(crate) fn called(&self, d: Duration) {
        self.call.record(d.as_secs_f64());
    }

    /// Adds the zero waits counted since the last call (`total` so far) to the wait histogram.
    pub(crate) fn zero_waits(&self, total: u64) {
        let before = self.zero_waits_published.swap(total, Relaxed);
        if total > before {
            self.wait.record_many(0.0, (total - before) as usize);
        }
    }
}

/// One class's histogram handle, taken from the recorder installed when its budget was built.
pub(crate) struct ClassHandles {
    wait: Histogram,
    zero_waits_published: AtomicU64,
}

impl ClassHandles {
    pub(crate) fn new(budget: &str, class: &str) -> ClassHandles {
        ClassHandles {
            wait: histogram!(CLASS_PERMIT_WAIT, "budget" => budget.to_string(), "class" => class.to_string()),
            zero_waits_published: AtomicU64::new(0),
        }
    }

    pub(crate) fn waited(&self, d: Duration) {
        self.wait.record(d.as_secs_f64());
    }

    /// As [`Handles::zero_waits`], for the class.
    pub(crate) fn zero_waits(&self, total: u64) {
        let before = self.zero_waits_published.swap(total, Relaxed);
        if total > before {
            self.wait.record_many(0.0, (total - before) as usize);
        }
    }
}
