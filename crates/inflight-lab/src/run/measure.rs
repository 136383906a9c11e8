//! Budgets the lab measures instead of being told: before the runs, for each scenario with a
//! strategy whose budget is `{ measure = "capacity" }`, a capacity sweep (`inflight capacity`)
//! of that dependency against the sim in that scenario; the budget in that scenario's runs is the
//! capacity found, or the highest level swept when there is no knee. Each level also reads how
//! many calls the sim had in service (its `/stats`), as the target saw them.

use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use inflight_capacity::knee::KneeRules;
use inflight_capacity::suggest::Basis;
use inflight_capacity::{InFlightSource, Levels, Stop, Sweep, Target};

use super::error::LabError;
use super::options::LabOptions;
use super::progress::Progress;
use super::scheduler::run_seed;
use crate::results::MeasuredBudget;
use crate::runner::CLIENT_TIMEOUT;
use crate::sim::client::SimClient;
use crate::strategy::Strategies;
use inflight_bench::shutdown::Shutdown;

/// Each level of a sweep lasts at most this long at time scale 1 (scaled like the sim), and
/// sends at most [`CALLS_PER_LEVEL`] calls.
const LEVEL_TIME: Duration = Duration::from_secs(15);
const CALLS_PER_LEVEL: u64 = 200;

/// The smallest time scale a sweep runs at, whatever the runs' (`--quick` is 0.2). Below it a
/// call's fixed costs (the HTTP stack, the timer's granularity) are a large share of a scaled
/// call, throughput per level turns noisy, and the knee with it. A capacity is a count, the same
/// at any scale; the service time is reported at the sweep's scale.
pub const MIN_SWEEP_TIME_SCALE: f64 = 0.4;

/// The share of failed calls at which a sweep stops climbing. Higher than `inflight capacity`'s
/// default (5%): the sim's hangs (5% of enrichment calls in slow-enrichment) are drawn whatever
/// the load, as the lab's gates treat them (a timeout is not an overload signal); a level past
/// the system of record's capacity and queue has far more refusals than this.
pub const STOP_ON_ERRORS: f64 = 0.2;

/// The repeat number whose seed the sweeps use: not one of the runs' (they count from 1).
const SWEEP_REPEAT: u32 = 0;

/// Measures every budget the cells' strategies leave to measurement, scenario by scenario.
pub(crate) async fn measure_budgets(
    opts: &LabOptions,
    strategies: &Strategies,
    shutdown: &Shutdown,
    control: &SimClient,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Vec<MeasuredBudget>, LabError> {
    // (scenario, dependency) pairs in the order the cells name them, with the most records any
    // of their strategies keeps in flight: the sweep climbs to it.
    let mut wanted: Vec<(String, &'static str, usize)> = Vec::new();
    for cell in &opts.cells {
        let strategy = strategies
            .get(&cell.strategy)
            .map_err(|e| LabError::Invalid(e.to_string()))?;
        let in_flight = strategy.records_in_flight.resolve();
        for dependency in strategy.measured() {
            match wanted
                .iter_mut()
                .find(|(s, d, _)| *s == cell.scenario && *d == dependency)
            {
                Some(entry) => entry.2 = entry.2.max(in_flight),
                None => wanted.push((cell.scenario.clone(), dependency, in_flight)),
            }
        }
    }
    let mut out = Vec::with_capacity(wanted.len());
    for (scenario, dependency, max) in wanted {
        if shutdown.fired() {
            return Err(LabError::Interrupted);
        }
        progress(Progress::Measuring {
            scenario: &scenario,
            dependency,
            max,
        });
        let measured = measure_one(
            opts, shutdown, control, &scenario, dependency, max, progress,
        )
        .await?;
        progress(Progress::MeasuredBudget(&measured));
        out.push(measured);
    }
    Ok(out)
}

async fn measure_one(
    opts: &LabOptions,
    shutdown: &Shutdown,
    control: &SimClient,
    scenario: &str,
    dependency: &'static str,
    max: usize,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<MeasuredBudget, LabError> {
    let invalid = |e: &dyn std::fmt::Display| {
        LabError::Invalid(format!(
            "cannot measure the {dependency} budget in {scenario}: {e}"
        ))
    };
    control
        .wait_idle(Duration::from_secs_f64(10.0 * opts.time_scale.max(0.1)))
        .await?;
    let time_scale = opts.time_scale.max(MIN_SWEEP_TIME_SCALE);
    control
        .set_scenario(
            scenario,
            run_seed(opts.seed, scenario, SWEEP_REPEAT),
            time_scale,
        )
        .await?;
    let target = match dependency {
        "records" => Target::new(&format!("{}/records", control.url()))
            .and_then(|t| t.method("POST"))
            .and_then(|t| t.body(r#"{"id": {n}, "complete": true}"#)),
        _ => Target::new(&format!("{}/enrich/1", control.url())),
    }
    .map_err(|e| invalid(&e))?;
    // The sim says how many calls it has in service: the sweep reads it at every level.
    let endpoint = if dependency == "records" {
        "records"
    } else {
        "enrich"
    };
    let in_service = InFlightSource::new(
        &format!("{}/stats", control.url()),
        &format!("/{endpoint}/in_service"),
    )
    .map_err(|e| invalid(&e))?;
    let levels = Levels::doubling(max as u64).map_err(|e| invalid(&e))?;
    let calls = NonZeroU64::new(CALLS_PER_LEVEL.max(3 * max as u64)).expect("not zero");
    let sweep = Sweep::new(target, levels)
        .requests_per_level(calls)
        .duration_per_level(LEVEL_TIME.mul_f64(time_scale))
        .timeout(CLIENT_TIMEOUT.mul_f64(time_scale))
        .rules(KneeRules {
            stop_on_errors: STOP_ON_ERRORS,
            ..KneeRules::default()
        })
        .target_in_flight(in_service)
        .name(dependency);
    let started = Instant::now();
    let report = sweep
        .run(shutdown, |p| {
            if let inflight_capacity::Progress::Measured(level) = p {
                progress(Progress::SweepLevel(level));
            }
        })
        .await
        .map_err(|e| invalid(&e))?;
    if matches!(report.stopped, Some(Stop::Interrupted)) || shutdown.fired() {
        return Err(LabError::Interrupted);
    }
    let Some(suggested) = &report.suggested else {
        return Err(invalid(&report.conclusion));
    };
    Ok(MeasuredBudget {
        scenario: scenario.to_string(),
        dependency: dependency.to_string(),
        max_concurrent: suggested.max_concurrent as usize,
        basis: match suggested.basis {
            Basis::Knee => "knee",
            Basis::LowerBound => "lower_bound",
        }
        .to_string(),
        capacity: report.capacity,
        service_time_ms: report.service_time_ms,
        max_rate_per_s: report.max_rate_per_s,
        conclusion: report.conclusion.clone(),
        levels: report.levels.clone(),
        sweep_time_scale: time_scale,
        sweep_s: started.elapsed().as_secs_f64(),
    })
}
