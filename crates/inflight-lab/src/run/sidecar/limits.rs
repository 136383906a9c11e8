//! The limits of a sidecar's budgets over a run, for the run's timeline: the proxy's
//! `/budgets.json` read by the lab at the timeline's interval ([`LimitSampler`]), and the
//! samples laid on the runner's own by time ([`LimitSamples::fill`]).
//!
//! The lab reads them rather than the runner: the reads then cost nothing inside the runner's
//! CPU quota, and a run split between replicas reads its one proxy once, not once per replica.

use std::time::Duration;

use serde::Deserialize;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::results::{unix_now_s, Timeline};
use crate::runner::{MAX_TIMELINE_SAMPLES, TIMELINE_INTERVAL};

/// The most one read of `/budgets.json` may take; a slower one is abandoned and counted failed.
pub(crate) const READ_WITHIN: Duration = Duration::from_millis(500);

/// The limits one `/budgets.json` gives each dependency's budget: `None` for a budget whose
/// limit does not move (a fixed one, for which the timeline keeps none, as it keeps none for the
/// runner's own fixed budgets), or one the document lacks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) enrichment: Option<u32>,
    pub(crate) records: Option<u32>,
}

/// The fields of `/budgets.json` read here; the others are left unread.
#[derive(Deserialize)]
struct BudgetsDoc {
    budgets: Vec<BudgetEntry>,
}

#[derive(Deserialize)]
struct BudgetEntry {
    name: String,
    limit: u64,
    #[serde(default)]
    adaptive: bool,
}

/// The adaptive limits of the `enrichment` and `records` budgets in `/budgets.json`'s `text`.
///
/// # Errors
///
/// If `text` is not a budgets document (no `budgets` list of named budgets with a limit).
pub(crate) fn parse_limits(text: &str) -> Result<Limits, String> {
    let doc: BudgetsDoc =
        serde_json::from_str(text).map_err(|e| format!("not a budgets document: {e}"))?;
    let limit = |name: &str| {
        doc.budgets
            .iter()
            .find(|b| b.name == name && b.adaptive)
            .map(|b| u32::try_from(b.limit).unwrap_or(u32::MAX))
    };
    Ok(Limits {
        enrichment: limit("enrichment"),
        records: limit("records"),
    })
}

/// The limits read over a run, each at the time it was read.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LimitSamples {
    /// Seconds since the Unix epoch, ascending: halfway between a read's request and its answer.
    at: Vec<f64>,
    limits: Vec<Limits>,
    /// Reads that failed or took longer than [`READ_WITHIN`].
    failed: u64,
    /// Why the first of them failed.
    first_failure: Option<String>,
}

impl LimitSamples {
    fn push(&mut self, at: f64, limits: Limits) {
        self.at.push(at);
        self.limits.push(limits);
    }

    fn fail(&mut self, why: String) {
        self.failed += 1;
        self.first_failure.get_or_insert(why);
    }

    /// The reads that failed or took too long.
    pub(crate) fn failed(&self) -> u64 {
        self.failed
    }

    /// The reads tried, those that failed included.
    pub(crate) fn tried(&self) -> u64 {
        self.at.len() as u64 + self.failed
    }

    /// Why the first failed read failed.
    pub(crate) fn first_failure(&self) -> Option<&str> {
        self.first_failure.as_deref()
    }

    /// Fills the limits of `timeline` (a proxied strategy's runner has none of its own) from
    /// these reads: at each of its samples, the limit of the last read made by then (the first
    /// read's before it), by the runner's clock from [`Timeline::started_unix_s`]; a budget
    /// whose limit does not move gets none, as the runner's own fixed budgets get none. Counts
    /// the failed reads in [`Timeline::limit_samples_failed`]. Nothing is filled without a read,
    /// a start time, or where the runner sampled limits of its own.
    pub(crate) fn fill(&self, timeline: &mut Timeline) {
        timeline.limit_samples_failed = self.failed;
        let Some(start) = timeline.started_unix_s else {
            return;
        };
        if self.at.is_empty()
            || !timeline.enrichment_limit.is_empty()
            || !timeline.records_limit.is_empty()
        {
            return;
        }
        let interval_s = timeline.interval_ms / 1000.0;
        let samples = timeline.enrichment.len().max(timeline.records.len());
        let mut enrichment = Vec::with_capacity(samples);
        let mut records = Vec::with_capacity(samples);
        let mut last = 0;
        for i in 0..samples {
            let t = start + i as f64 * interval_s;
            while last + 1 < self.at.len() && self.at[last + 1] <= t {
                last += 1;
            }
            let limits = self.limits[last];
            enrichment.extend(limits.enrichment);
            records.extend(limits.records);
        }
        // A series only if every read had the budget's limit: one with gaps would not line up.
        if enrichment.len() == samples {
            timeline.enrichment_limit = enrichment;
        }
        if records.len() == samples {
            timeline.records_limit = records;
        }
    }
}

/// Reads a proxy's `/budgets.json` every [`TIMELINE_INTERVAL`] on one keep-alive connection,
/// from [`start`](LimitSampler::start) to [`finish`](LimitSampler::finish), one read at a time,
/// each within [`READ_WITHIN`]. A read that fails is counted and the next tick reads again.
pub(crate) struct LimitSampler {
    stop: oneshot::Sender<()>,
    task: JoinHandle<LimitSamples>,
}

impl LimitSampler {
    /// Starts reading `admin_url`'s `/budgets.json` (a loopback URL the proxy said).
    ///
    /// # Errors
    ///
    /// If no HTTP client can be built.
    pub(crate) fn start(admin_url: &str) -> Result<LimitSampler, String> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(1)
            .timeout(READ_WITHIN)
            .build()
            .map_err(|e| format!("cannot read the proxy's limits: {e}"))?;
        let url = format!("{admin_url}/budgets.json");
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(sample(client, url, stopped));
        Ok(LimitSampler { stop, task })
    }

    /// Stops reading and returns what was read.
    pub(crate) async fn finish(self) -> LimitSamples {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

async fn sample(
    client: reqwest::Client,
    url: String,
    mut stopped: oneshot::Receiver<()>,
) -> LimitSamples {
    let mut samples = LimitSamples::default();
    let mut ticks = tokio::time::interval(TIMELINE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while samples.tried() < MAX_TIMELINE_SAMPLES as u64 {
        tokio::select! {
            biased;
            _ = &mut stopped => break,
            _ = ticks.tick() => {}
        }
        let sent = unix_now_s();
        let read = tokio::select! {
            biased;
            _ = &mut stopped => break,
            read = read_limits(&client, &url) => read,
        };
        match read {
            Ok(limits) => samples.push((sent + unix_now_s()) / 2.0, limits),
            Err(why) => samples.fail(why),
        }
    }
    samples
}

async fn read_limits(client: &reqwest::Client, url: &str) -> Result<Limits, String> {
    let response = client.get(url).send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("{url} answered {status}"));
    }
    let text = response.text().await.map_err(|e| e.to_string())?;
    parse_limits(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/budgets.json` as `inflight proxy` serves it for `c5-proxy` (see `docs/guide/proxy.md`).
    const C5_PROXY: &str = r#"{ "version": 1, "draining": false, "uptime_s": 1.5,
      "budgets": [
        { "name": "enrichment", "listen": "127.0.0.1:40001", "upstream": "http://127.0.0.1:4000",
          "protocol": "http", "limit": 64, "max_concurrent": 64, "adaptive": true,
          "in_flight": 12, "waiting": 0, "peak_in_flight": 64, "peak_waiting": 0, "admitted": 120,
          "refused": { "queue_full": 0, "permit_timeout": 0, "rate_limited": 0, "paused": 0,
            "evicted": 0, "unavailable": 0 },
          "calls": { "ok": 110, "error": 0, "timeout": 0, "cancelled": 0 },
          "overloads": 0, "pauses": 0, "paused_for_ms": null, "paced": false,
          "wait_ms": { "p50": 0.0, "p99": 0.0 }, "call_ms": { "p50": 3.0, "p99": 9.0 },
          "limit_history": [ [-300.0, 64], [0.0, 64] ], "classes": [], "fleet": null },
        { "name": "records", "listen": "127.0.0.1:40002", "upstream": "http://127.0.0.1:4000",
          "protocol": "http", "limit": 7, "max_concurrent": 1000, "adaptive": true,
          "in_flight": 7, "waiting": 40, "peak_in_flight": 9, "peak_waiting": 57, "admitted": 80,
          "refused": { "queue_full": 0, "permit_timeout": 0, "rate_limited": 0, "paused": 0,
            "evicted": 0, "unavailable": 0 },
          "calls": { "ok": 70, "error": 3, "timeout": 0, "cancelled": 0 },
          "overloads": 3, "pauses": 0, "paused_for_ms": null, "paced": false,
          "wait_ms": { "p50": 20.0, "p99": 80.0 }, "call_ms": { "p50": 30.0, "p99": 90.0 },
          "limit_history": [ [-300.0, 4], [-0.5, 9], [0.0, 7] ], "classes": [], "fleet": null }
      ] }"#;

    #[test]
    fn budgets_json_gives_each_adaptive_budgets_limit() {
        assert_eq!(
            parse_limits(C5_PROXY).unwrap(),
            Limits {
                enrichment: Some(64),
                records: Some(7),
            }
        );
        // C4-PROXY's fixed budgets: no limit that moves, so none kept; a budget of another
        // name is not one of the run's dependencies.
        let fixed = C5_PROXY
            .replace(r#""adaptive": true"#, r#""adaptive": false"#)
            .replacen(r#""name": "enrichment""#, r#""name": "search""#, 1);
        assert_eq!(parse_limits(&fixed).unwrap(), Limits::default());
        // A document of an older proxy, without `adaptive`: nothing known to move.
        let bare = r#"{ "budgets": [ { "name": "records", "limit": 6 } ] }"#;
        assert_eq!(parse_limits(bare).unwrap(), Limits::default());
        for bad in [
            "",
            "not found (try /)",
            r#"{ "budgets": [ { "name": "records" } ] }"#,
        ] {
            let err = parse_limits(bad).unwrap_err();
            assert!(err.starts_with("not a budgets document: "), "{err}");
        }
    }

    fn timeline(samples: usize) -> Timeline {
        Timeline {
            interval_ms: 10.0,
            enrichment: vec![1; samples],
            records: vec![2; samples],
            started_unix_s: Some(1000.0),
            ..Timeline::default()
        }
    }

    fn read(records: u32) -> Limits {
        Limits {
            enrichment: Some(64),
            records: Some(records),
        }
    }

    #[test]
    fn each_sample_takes_the_last_limit_read_by_its_time() {
        let mut samples = LimitSamples::default();
        // Read before the runner's first sample, then between its samples; one read failed.
        samples.push(999.995, read(4));
        samples.push(1000.012, read(5));
        samples.fail("timed out".into());
        samples.push(1000.035, read(3));
        let mut t = timeline(6);
        samples.fill(&mut t);
        // Samples at 0, 10, ..., 50 ms: 4 until the read at 12 ms, 5 until 35 ms, then 3.
        assert_eq!(t.records_limit, [4, 4, 5, 5, 3, 3]);
        assert_eq!(t.enrichment_limit, [64; 6]);
        assert_eq!(t.limit_samples_failed, 1);
        assert_eq!(
            (samples.tried(), samples.first_failure()),
            (4, Some("timed out"))
        );

        // A first read after the runner's first sample: its limit stands for those before it.
        let mut late = LimitSamples::default();
        late.push(1000.021, read(8));
        let mut t = timeline(3);
        late.fill(&mut t);
        assert_eq!(t.records_limit, [8, 8, 8]);
    }

    #[test]
    fn only_limits_that_move_and_line_up_are_filled() {
        // A fixed enrichment budget: no series for it, as for the runner's own fixed budgets.
        let mut samples = LimitSamples::default();
        samples.push(
            1000.0,
            Limits {
                enrichment: None,
                records: Some(6),
            },
        );
        let mut t = timeline(2);
        samples.fill(&mut t);
        assert_eq!((t.enrichment_limit.len(), t.records_limit.len()), (0, 2));

        // No read at all, no start time, or limits the runner sampled itself: nothing filled.
        let mut t = timeline(2);
        LimitSamples::default().fill(&mut t);
        assert!(t.records_limit.is_empty());
        let mut t = Timeline {
            started_unix_s: None,
            ..timeline(2)
        };
        samples.fill(&mut t);
        assert!(t.records_limit.is_empty());
        let mut t = Timeline {
            records_limit: vec![9, 9],
            ..timeline(2)
        };
        samples.fill(&mut t);
        assert_eq!(t.records_limit, [9, 9]);
    }
}
