//! Every summary metric of the lab, each defined once: its name, unit and label, its value in a
//! run, and where the reports show it (see [`MetricDef`](super::MetricDef)).
//!
//! The order is that of the summary's fields in `results.json`: a new metric goes at the end.
//! A name, once used, is kept: hypotheses files, reference figures and scripts read it.

use super::metric::{fraction, metrics, Chart, Shown, Terminal, Unit};

metrics! {
    /// Wall time from the first record started to the last record ended.
    CompletionS => completion_s {
        unit: Unit::Seconds,
        label: "completion s",
        read: |r| r.completion_s,
        shown: Shown {
            table: true,
            terminal: Some(Terminal { order: 1, drop_rank: 0 }),
            csv: true,
            progress: Some("s"),
            chart: None,
        },
    }
    /// Records accepted (complete + incomplete) per second of the run's completion time.
    AcceptedPerS => accepted_per_s {
        unit: Unit::PerSecond,
        label: "accepted/s",
        read: |r| r.accepted_per_s,
        shown: Shown {
            table: true,
            terminal: Some(Terminal { order: 2, drop_rank: 0 }),
            csv: true,
            progress: Some("accepted/s"),
            chart: Some(Chart {
                title: "Accepted records per second",
                heading: "Accepted records per second",
                axis: "accepted records/s",
                caption: "Median accepted records/s (complete + incomplete, divided by completion time) per strategy and scenario; whiskers span the min and max over the repeats.",
            }),
        },
    }
    /// Records written and marked complete.
    Complete => complete {
        unit: Unit::Count,
        label: "complete",
        read: |r| r.complete as f64,
        shown: Shown {
            table: true,
            csv: true,
            progress: Some("complete"),
            ..Shown::NOWHERE
        },
    }
    /// Records written and marked incomplete (an enrichment call timed out).
    Incomplete => incomplete {
        unit: Unit::Count,
        label: "incomplete",
        read: |r| r.incomplete as f64,
        shown: Shown {
            table: true,
            csv: true,
            progress: Some("incomplete"),
            ..Shown::NOWHERE
        },
    }
    /// Records the system of record refused (503), retries spent.
    Rejected => rejected {
        unit: Unit::Count,
        label: "rejected",
        read: |r| r.rejected as f64,
        shown: Shown {
            table: true,
            terminal: Some(Terminal { order: 6, drop_rank: 4 }),
            csv: true,
            progress: Some("rejected"),
            chart: None,
        },
    }
    /// Records that failed otherwise (timeouts, connection errors, other statuses).
    Failed => failed {
        unit: Unit::Count,
        label: "failed",
        read: |r| r.failed as f64,
        shown: Shown {
            table: true,
            terminal: Some(Terminal { order: 5, drop_rank: 3 }),
            csv: true,
            progress: Some("failed"),
            chart: None,
        },
    }
    /// Writes answered 503 by the system of record, every attempt's.
    Write503s => write_503s {
        unit: Unit::Count,
        label: "write 503s",
        read: |r| r.write_503s as f64,
        shown: Shown {
            table: true,
            terminal: Some(Terminal { order: 4, drop_rank: 1 }),
            csv: true,
            progress: Some("503s"),
            chart: Some(Chart {
                title: "503s from the system of record",
                heading: "503s from the system of record per run",
                axis: "write 503s per run",
                caption: "Median writes answered 503 per run, per strategy and scenario; whiskers span the min and max over the repeats.",
            }),
        },
    }
    /// Most writes inside the system of record at once, counting those about to be refused
    /// (sim stats).
    PeakWritesOffered => peak_writes_offered {
        unit: Unit::Count,
        label: "peak writes offered",
        read: |r| r.peak_writes_offered as f64,
        shown: Shown {
            table: true,
            terminal: Some(Terminal { order: 7, drop_rank: 5 }),
            csv: true,
            progress: Some("peak writes offered"),
            chart: None,
        },
    }
    /// Most enrichment calls in flight at once.
    PeakEnrichmentInFlight => peak_enrichment_in_flight {
        unit: Unit::Count,
        label: "peak enrichment in flight",
        read: |r| r.peak_enrichment_in_flight as f64,
        shown: Shown {
            table: true,
            terminal: Some(Terminal { order: 8, drop_rank: 6 }),
            csv: true,
            progress: Some("peak enrichment"),
            chart: None,
        },
    }
    /// Fraction of records marked incomplete (median over repeats).
    IncompleteFraction => incomplete_fraction {
        unit: Unit::Fraction,
        label: "incomplete %",
        read: |r| fraction(r.incomplete, r.records),
        shown: Shown {
            table: true,
            terminal: Some(Terminal { order: 3, drop_rank: 2 }),
            ..Shown::NOWHERE
        },
    }
    /// Writes answered 503, as a fraction of the records started.
    Write503Fraction => write_503_fraction {
        unit: Unit::Fraction,
        label: "write 503s %",
        read: |r| fraction(r.write_503s, r.records),
        shown: Shown::NOWHERE,
    }
    /// Enrichment calls answered 429 (over the enrichment API's quota).
    Enrichment429s => enrichment_429s {
        unit: Unit::Count,
        label: "enrichment 429s",
        read: |r| r.enrichment_429s as f64,
        shown: Shown::NOWHERE,
    }
    /// Records complete, as a fraction of the records started.
    CompleteFraction => complete_fraction {
        unit: Unit::Fraction,
        label: "complete %",
        read: |r| fraction(r.complete, r.records),
        shown: Shown::NOWHERE,
    }
    /// Enrichment calls answered 429, as a fraction of the enrichment calls made (every attempt).
    Enrichment429Fraction => enrichment_429_fraction {
        unit: Unit::Fraction,
        label: "enrichment 429s %",
        read: |r| fraction(r.enrichment_429s, r.enrichment_calls),
        shown: Shown::NOWHERE,
    }
    /// Retries of enrichment calls.
    EnrichmentRetries => enrichment_retries {
        unit: Unit::Count,
        label: "enrichment retries",
        read: |r| r.enrichment_retries as f64,
        shown: Shown::NOWHERE,
    }
    /// Retries of writes.
    WriteRetries => write_retries {
        unit: Unit::Count,
        label: "write retries",
        read: |r| r.write_retries as f64,
        shown: Shown::NOWHERE,
    }
    /// Records the system of record refused (503), as a fraction of the records started: the
    /// share of the load a strategy turned into refusals.
    RejectedFraction => rejected_fraction {
        unit: Unit::Fraction,
        label: "rejected %",
        read: |r| fraction(r.rejected, r.records),
        shown: Shown::NOWHERE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{sample_run, summarize, Spread};

    #[test]
    fn rejected_fraction_is_the_share_of_records_refused() {
        let runs: Vec<_> = [1, 3, 0]
            .into_iter()
            .enumerate()
            .map(|(i, rejected)| {
                let mut run = sample_run("c2", "slow-write", 1.0, i as u32 + 1, 2.0);
                (run.rejected, run.complete) = (rejected, 7 - rejected);
                run
            })
            .collect();
        assert_eq!(Metric::RejectedFraction.read(&runs[1]), 0.3);
        let row = &summarize(&runs)[0];
        assert_eq!(
            row.rejected_fraction,
            Spread {
                median: 0.1,
                min: 0.0,
                max: 0.3
            }
        );
        assert_eq!(
            Metric::from_name("rejected_fraction"),
            Some(Metric::RejectedFraction)
        );
        // A summary written before the metric existed still reads; `lab report` computes it again.
        let mut old = serde_json::to_value(row).unwrap();
        old.as_object_mut().unwrap().remove("rejected_fraction");
        let old: crate::results::SummaryRow = serde_json::from_value(old).unwrap();
        assert_eq!(old.rejected_fraction, Spread::default());
    }
}
