//! The gate in front of each dependency, built from the strategy's budgets.

use std::collections::BTreeMap;
use std::time::Duration;

use super::RunnerError;
use crate::gate::{Gate, RetryCounts, Retrying};
use crate::strategy::{BudgetPlan, GateSpec, Strategy};

/// The gates of each dependency; with a shared budget both are clones of one budget. Each
/// budget's call timeout is the client's, so it starts once the permit is held. A strategy with
/// a `retry` table retries through each dependency's gate.
#[derive(Clone)]
pub(super) struct Gates {
    pub(super) enrichment: Option<Retrying>,
    pub(super) records: Option<Retrying>,
}

impl Gates {
    pub(super) fn new(
        strategy: &Strategy,
        budgets: &BudgetPlan,
        call_timeout: Duration,
        time_scale: f64,
        fleet: Option<&inflight_redis::RedisFleet>,
        measured: &BTreeMap<String, usize>,
    ) -> Result<Gates, RunnerError> {
        let make = |name: &str, spec: &GateSpec| {
            let spec = match (spec, measured.get(name)) {
                (GateSpec::Measured, Some(&n)) => GateSpec::Fixed(n),
                _ => spec.clone(),
            };
            let gate = Gate::new(name, &spec, call_timeout, time_scale, fleet)
                .map_err(RunnerError::Budget)?;
            Retrying::new(gate, strategy.retry.as_ref(), time_scale)
                .map_err(|e| RunnerError::Budget(format!("{name}: {e}")))
        };
        Ok(match budgets {
            BudgetPlan::None => Gates {
                enrichment: None,
                records: None,
            },
            BudgetPlan::Shared(n) => {
                let shared = make("shared", &GateSpec::Fixed(*n))?;
                Gates {
                    enrichment: Some(shared.clone()),
                    records: Some(shared),
                }
            }
            BudgetPlan::PerDependency {
                enrichment,
                records,
            } => Gates {
                enrichment: enrichment
                    .as_ref()
                    .map(|g| make("enrichment", g))
                    .transpose()?,
                records: records.as_ref().map(|g| make("records", g)).transpose()?,
            },
        })
    }
}

impl Gates {
    /// The distinct `inflight` budgets among the gates (a shared budget once).
    pub(super) fn budgets(&self) -> Vec<inflight::Budget> {
        let mut out: Vec<inflight::Budget> = Vec::new();
        for gate in [&self.enrichment, &self.records].into_iter().flatten() {
            if let Gate::Budget(b) = gate.gate() {
                if !out.iter().any(|o| o.name() == b.name()) {
                    out.push(b.clone());
                }
            }
        }
        out
    }

    /// The retries each dependency's gate made and was denied.
    pub(super) fn retries(gate: &Option<Retrying>) -> RetryCounts {
        gate.as_ref().map(Retrying::retries).unwrap_or_default()
    }
}
