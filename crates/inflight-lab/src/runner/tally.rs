//! How each record ended ([`Outcome`]) and the run's count of them ([`Tally`]), checked to add
//! up to the records started.

use std::collections::BTreeMap;

use serde::Serialize;

/// How one record ended. Every record started ends in exactly one of these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// All enrichment calls answered and the write was accepted.
    Complete,
    /// At least one enrichment call timed out; the record was written, marked incomplete, and the
    /// write was accepted.
    Incomplete,
    /// The system of record answered 503.
    Rejected,
    /// Any other error; the string is its kind (`enrich_status_500`, `write_timeout`, ...).
    Failed(String),
}

/// The outcome counts of a run, kept so they can be checked against the records started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub started: u64,
    pub complete: u64,
    pub incomplete: u64,
    pub rejected: u64,
    pub failed: u64,
    pub failed_by_kind: BTreeMap<String, u64>,
}

impl Tally {
    pub fn start(&mut self) {
        self.started += 1;
    }

    pub fn end(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Complete => self.complete += 1,
            Outcome::Incomplete => self.incomplete += 1,
            Outcome::Rejected => self.rejected += 1,
            Outcome::Failed(kind) => {
                self.failed += 1;
                *self.failed_by_kind.entry(kind).or_default() += 1;
            }
        }
    }

    /// Records that ended, whatever the outcome.
    pub fn ended(&self) -> u64 {
        self.complete + self.incomplete + self.rejected + self.failed
    }

    /// Checks that the four outcomes add up to the records started and the failures by kind add
    /// up to the failures.
    pub fn check(&self) -> Result<(), String> {
        if self.ended() != self.started {
            return Err(format!(
                "{} records started but complete {} + incomplete {} + rejected {} + failed {} = {}",
                self.started,
                self.complete,
                self.incomplete,
                self.rejected,
                self.failed,
                self.ended()
            ));
        }
        let by_kind: u64 = self.failed_by_kind.values().sum();
        if by_kind != self.failed {
            return Err(format!(
                "{} records failed but the failures by kind add up to {by_kind}",
                self.failed
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_adds_up_and_notices_when_it_does_not() {
        let mut t = Tally::default();
        for outcome in [
            Outcome::Complete,
            Outcome::Incomplete,
            Outcome::Rejected,
            Outcome::Failed("write_timeout".into()),
            Outcome::Failed("write_timeout".into()),
            Outcome::Failed("enrich_status_500".into()),
        ] {
            t.start();
            t.end(outcome);
        }
        assert_eq!(t.check(), Ok(()));
        assert_eq!(
            (t.complete, t.incomplete, t.rejected, t.failed),
            (1, 1, 1, 3)
        );
        assert_eq!(t.failed_by_kind["write_timeout"], 2);
        t.start();
        let err = t.check().unwrap_err();
        assert!(
            err.contains("7 records started") && err.contains("= 6"),
            "{err}"
        );
    }
}
