//! The timeline of a run: the calls in flight to each dependency, and each gate's limit, sampled
//! every [`TIMELINE_INTERVAL`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::record::Shared;
use super::{MAX_TIMELINE_SAMPLES, TIMELINE_INTERVAL};
use crate::gate::Retrying;
use crate::results::Timeline;

/// Samples the calls in flight every [`TIMELINE_INTERVAL`] until told to stop or full.
pub(super) async fn sample_timeline(shared: Arc<Shared>, stop: Arc<AtomicBool>) -> Timeline {
    let mut timeline = Timeline {
        interval_ms: TIMELINE_INTERVAL.as_secs_f64() * 1000.0,
        ..Timeline::default()
    };
    let limit_of = |gate: &Option<Retrying>| gate.as_ref().and_then(|g| g.gate().limit());
    let mut ticks = tokio::time::interval(TIMELINE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::SeqCst) && timeline.enrichment.len() < MAX_TIMELINE_SAMPLES {
        ticks.tick().await;
        if timeline.started_unix_s.is_none() {
            // The first tick is now: the lab lines a proxy's limits up with the samples from it.
            timeline.started_unix_s = Some(crate::results::unix_now_s());
        }
        let clamp = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        timeline.enrichment.push(clamp(shared.enrichment.current()));
        timeline.records.push(clamp(shared.writes.current()));
        if let Some(limit) = limit_of(&shared.gates.enrichment) {
            timeline.enrichment_limit.push(clamp(limit as u64));
        }
        if let Some(limit) = limit_of(&shared.gates.records) {
            timeline.records_limit.push(clamp(limit as u64));
        }
    }
    timeline
}
