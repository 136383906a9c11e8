//! The goals `inflight proxy` is held to against HAProxy, judged on a run's medians: each
//! [`Goal`] is met, missed, or not measured, with the figures it was judged on.

use serde::Serialize;

use super::instructions::InstructionsStatus;
use super::plan::{Who, BUDGET_LIMIT};
use super::summary::Summary;
use crate::spread::Spread;

/// The most memory an idle client connection may cost the proxy, KiB.
pub const MAX_KIB_PER_IDLE_CONNECTION: f64 = 2.0;

/// One goal and its verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Goal {
    /// What is asked, e.g. `CPU per answer at saturation ≤ HAProxy's`.
    pub goal: String,
    /// Met, missed, or `None` when it could not be judged (not measured).
    pub met: Option<bool>,
    /// The goal with the figures it was judged on.
    pub text: String,
}

impl Goal {
    fn judged(goal: String, met: bool, figures: String) -> Goal {
        let text = format!("{goal}: {figures}");
        Goal {
            goal,
            met: Some(met),
            text,
        }
    }

    fn not_measured(goal: String, why: &str) -> Goal {
        let text = format!("{goal}: not measured ({why})");
        Goal {
            goal,
            met: None,
            text,
        }
    }

    /// `met`, `MISSED` or `n/a`.
    pub fn verdict(&self) -> &'static str {
        match self.met {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "n/a",
        }
    }
}

fn figure(s: &Spread, digits: usize, unit: &str) -> String {
    format!(
        "{:.digits$}{unit} ({:.digits$}-{:.digits$})",
        s.median, s.min, s.max
    )
}

/// The goals, judged on `summary`'s medians: CPU and instructions per answer at saturation no
/// more than HAProxy's, at most [`MAX_KIB_PER_IDLE_CONNECTION`] per idle connection, added p50
/// and p99 no more than HAProxy's at each load point; and, kept from the first version of the
/// benchmark, throughput at saturation at least HAProxy's and exactly [`BUDGET_LIMIT`] at the
/// upstream. `instructions` says whether and how instructions were counted: at saturation by
/// `perf`, or by callgrind in steps of their own.
pub fn judge(summary: &Summary, instructions: &InstructionsStatus) -> Vec<Goal> {
    let mut goals = Vec::new();
    let sat = |w: Who| summary.saturation_of(w);

    // Per answer at saturation: lower is better.
    let per_answer =
        |goal: &str, unit: &str, digits: usize, pick: &dyn Fn(Who) -> Option<Spread>| {
            let goal = goal.to_string();
            match (pick(Who::Inflight), pick(Who::Haproxy)) {
                (Some(i), Some(h)) => Goal::judged(
                    goal,
                    i.median <= h.median,
                    format!(
                        "inflight {}, HAProxy {} (median, min-max)",
                        figure(&i, digits, unit),
                        figure(&h, digits, unit)
                    ),
                ),
                _ => Goal::not_measured(goal, "inflight and HAProxy were not both measured"),
            }
        };
    goals.push(per_answer(
        "CPU per answer at saturation ≤ HAProxy's",
        " µs",
        1,
        &|w| sat(w)?.cpu_us_per_answer,
    ));
    goals.push(match (instructions.measured, instructions.tool) {
        (false, _) => Goal::not_measured(
            "instructions per answer at saturation ≤ HAProxy's".into(),
            instructions.reason.as_deref().unwrap_or("not counted"),
        ),
        (true, "callgrind") => per_answer(
            "instructions per answer (callgrind, user space) ≤ HAProxy's",
            "",
            0,
            &|w| summary.callgrind_of(w)?.per_answer,
        ),
        (true, _) => per_answer(
            "instructions per answer at saturation ≤ HAProxy's",
            "",
            0,
            &|w| sat(w)?.instructions_per_answer,
        ),
    });

    let idle_goal = format!("KiB per idle connection ≤ {MAX_KIB_PER_IDLE_CONNECTION}");
    goals.push(
        match summary
            .idle_of(Who::Inflight)
            .and_then(|r| Some((r, r.kib_per_connection?)))
        {
            Some((row, kib)) => Goal::judged(
                idle_goal,
                kib.median <= MAX_KIB_PER_IDLE_CONNECTION,
                format!(
                    "inflight {} at {} connections{}",
                    figure(&kib, 2, " KiB"),
                    row.connections,
                    summary
                        .idle_of(Who::Haproxy)
                        .and_then(|h| h.kib_per_connection)
                        .map(|h| format!(", HAProxy {}", figure(&h, 2, " KiB")))
                        .unwrap_or_default()
                ),
            ),
            None => Goal::not_measured(idle_goal, "inflight's idle connections were not measured"),
        },
    );

    for point in &summary.latency {
        for (name, pick) in [
            (
                "p50",
                (|r: &super::summary::LatencyRow| r.added_p50_ms) as fn(&_) -> _,
            ),
            ("p99", |r: &super::summary::LatencyRow| r.added_p99_ms),
        ] {
            let goal = format!("added {name} at {} load ≤ HAProxy's", point.point);
            let of = |w: Who| point.rows.iter().find(|r| r.target == w).and_then(pick);
            goals.push(match (of(Who::Inflight), of(Who::Haproxy)) {
                (Some(i), Some(h)) => Goal::judged(
                    goal,
                    i.median <= h.median,
                    format!(
                        "inflight {:+.3} ms ({:+.3} to {:+.3}), HAProxy {:+.3} ms ({:+.3} to {:+.3})",
                        i.median, i.min, i.max, h.median, h.min, h.max
                    ),
                ),
                _ => Goal::not_measured(
                    goal,
                    "no repeat kept a run of inflight or HAProxy together with one of direct",
                ),
            });
        }
    }

    let throughput_goal = "throughput at saturation ≥ HAProxy's".to_string();
    goals.push(
        match (
            sat(Who::Inflight).and_then(|r| r.ok_per_s),
            sat(Who::Haproxy).and_then(|r| r.ok_per_s),
        ) {
            (Some(i), Some(h)) => Goal::judged(
                throughput_goal,
                i.median >= h.median,
                format!(
                    "inflight {}, HAProxy {} ({:+.1}%)",
                    figure(&i, 0, "/s"),
                    figure(&h, 0, "/s"),
                    (i.median / h.median - 1.0) * 100.0
                ),
            ),
            _ => Goal::not_measured(
                throughput_goal,
                "inflight and HAProxy were not both measured",
            ),
        },
    );

    let budget_goal = format!("exactly {BUDGET_LIMIT} at the upstream through inflight's budget");
    goals.push(
        match summary
            .budget_of(Who::Inflight)
            .and_then(|r| Some((r.upstream_peak?, r.ok_per_s?)))
        {
            Some((peak, rate)) => Goal::judged(
                budget_goal,
                peak.min == BUDGET_LIMIT as f64 && peak.max == BUDGET_LIMIT as f64,
                format!(
                    "the upstream saw {:.0} to {:.0} at most, at {}",
                    peak.min,
                    peak.max,
                    figure(&rate, 1, "/s")
                ),
            ),
            None => Goal::not_measured(budget_goal, "inflight's budget case was not measured"),
        },
    );
    goals
}
