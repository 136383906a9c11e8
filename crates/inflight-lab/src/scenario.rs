//! The scenarios file (`lab/scenarios.toml`): how the simulated dependencies behave in each scenario.
//!
//! A scenario gives the enrichment API and the system of record a log-normal latency (median and
//! spread) with an optional chance of hanging, and gives the system of record a capacity and a queue.
//! It may also give each record a priority class ([`RecordClasses`]), drawn from the run's seed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rand::Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

/// The scenarios file shipped with the lab, compiled in so `inflight sim` works from any directory.
pub const BUILTIN_SCENARIOS: &str = include_str!("../lab/scenarios.toml");

/// The scenarios file path the lab uses by default (relative to the working directory).
pub const DEFAULT_SCENARIOS_PATH: &str = "lab/scenarios.toml";

/// The largest time scale the lab takes (the sim, the runner and `lab run --time-scale`): beyond
/// it a hanging call would outlive any sensible run.
pub const MAX_TIME_SCALE: f64 = 100.0;

/// Whether `time_scale` is one the lab takes: a number above 0 and at most [`MAX_TIME_SCALE`].
pub fn time_scale_ok(time_scale: f64) -> bool {
    time_scale.is_finite() && time_scale > 0.0 && time_scale <= MAX_TIME_SCALE
}

/// Why a scenarios file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read scenarios file {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid scenarios file {origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("invalid scenarios file {origin}: scenario `{scenario}`: {message}")]
    Invalid {
        origin: String,
        scenario: String,
        message: String,
    },
    #[error("scenarios file {origin} defines no scenarios (expected [scenarios.NAME] tables)")]
    Empty { origin: String },
    #[error("unknown scenario `{name}`; known scenarios: {}", known.join(", "))]
    Unknown { name: String, known: Vec<String> },
}

/// The longest median or hang a scenario may give (before time scaling), so that a drawn latency
/// times the largest time scale stays far inside what a `Duration` holds.
const MAX_LATENCY: Duration = Duration::from_secs(3600);

/// Latency of one kind of call: `median * exp(sigma * N(0,1))`, or `hang` with `hang_probability`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Latency {
    #[serde(with = "duration_str")]
    pub median: Duration,
    pub sigma: f64,
    pub hang_probability: f64,
    #[serde(with = "duration_str")]
    pub hang: Duration,
}

impl Latency {
    /// Draws one call's latency (before time scaling) and whether the call hangs.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> (Duration, bool) {
        // Draw both numbers every time so the RNG sequence does not depend on the hang outcome.
        let u: f64 = rng.gen();
        let z: f64 = StandardNormal.sample(rng);
        if self.hang_probability > 0.0 && u < self.hang_probability {
            return (self.hang, true);
        }
        let factor = (self.sigma * z).exp();
        (self.median.mul_f64(factor), false)
    }
}

/// The system of record: latency plus how many it serves at once and how many may wait.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordsSpec {
    #[serde(flatten)]
    pub latency: Latency,
    pub capacity: usize,
    pub queue: usize,
    /// Changes of capacity and queue during a run, in time order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schedule: Vec<Phase>,
}

/// From `at` after the run's first request on, the system of record serves `capacity` at once
/// and lets `queue` wait.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Phase {
    #[serde(with = "duration_str")]
    pub at: Duration,
    pub capacity: usize,
    pub queue: usize,
}

/// A rate the enrichment API enforces: calls beyond it are answered 429 at once.
///
/// A GCRA: calls spaced `1 / per_second` apart, of which `burst` may come back to back.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Quota {
    pub per_second: f64,
    pub burst: u32,
}

/// The enrichment API: latency, and an optional quota.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EnrichmentSpec {
    #[serde(flatten)]
    pub latency: Latency,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota: Option<Quota>,
}

impl std::ops::Deref for EnrichmentSpec {
    type Target = Latency;

    fn deref(&self) -> &Latency {
        &self.latency
    }
}

/// One named scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub enrichment: EnrichmentSpec,
    pub records: RecordsSpec,
    /// The priority class of each record, if the scenario gives records classes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classes: Option<RecordClasses>,
}

/// The most classes a scenario may give its records (as many as a budget takes).
pub const MAX_RECORD_CLASSES: usize = inflight::budget::MAX_CLASSES;

/// The priority classes of a scenario's records and the share of records in each
/// (`classes = { interactive = 0.2, batch = 0.8 }`).
///
/// Each record's class is drawn from the run's seed and the record's id alone, so that in one
/// (scenario, repeat) the same records are in the same class for every strategy, and every
/// replica of a run draws its own records' classes as one process would.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordClasses {
    /// Each class and its share of the records, sorted by name; the shares add up to 1.
    shares: Vec<(String, f64)>,
}

impl RecordClasses {
    /// Classes with these shares of the records.
    ///
    /// # Errors
    ///
    /// If there are none or more than [`MAX_RECORD_CLASSES`], a name is empty or not made of
    /// letters, digits, `-` and `_`, a share is not between 0 and 1, or the shares do not add
    /// up to 1 (within 0.001).
    pub fn new(shares: Vec<(String, f64)>) -> Result<RecordClasses, String> {
        if shares.is_empty() || shares.len() > MAX_RECORD_CLASSES {
            return Err(format!(
                "classes must name 1 to {MAX_RECORD_CLASSES} classes, got {}",
                shares.len()
            ));
        }
        for (name, share) in &shares {
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(format!(
                    "classes: a class name may hold only letters, digits, `-` and `_`, got {name:?}"
                ));
            }
            if !share.is_finite() || !(0.0..=1.0).contains(share) {
                return Err(format!(
                    "classes.{name} must be a share of the records between 0 and 1, got {share}"
                ));
            }
        }
        let total: f64 = shares.iter().map(|(_, s)| s).sum();
        if (total - 1.0).abs() > 1e-3 {
            return Err(format!(
                "classes: the shares must add up to 1, got {}",
                crate::numbers::fmt_num(total)
            ));
        }
        Ok(RecordClasses { shares })
    }

    /// The classes and their shares.
    pub fn shares(&self) -> &[(String, f64)] {
        &self.shares
    }

    /// The class names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.shares.iter().map(|(name, _)| name.as_str())
    }

    /// The class of record `id` in a run with this `seed`: a uniform draw from the two alone
    /// (splitmix64), placed among the shares.
    pub fn class_of(&self, seed: u64, id: u64) -> &str {
        let u = unit_draw(seed, id);
        let mut upto = 0.0;
        for (name, share) in &self.shares {
            upto += share;
            if u < upto {
                return name;
            }
        }
        // Float sums may fall short of 1 by a hair: the last class with a share takes the rest.
        self.shares
            .iter()
            .rev()
            .find(|(_, share)| *share > 0.0)
            .map_or(&self.shares[0].0, |(name, _)| name)
    }
}

/// A number in [0, 1) from `seed` and `id` alone: splitmix64 of the two, top 53 bits.
fn unit_draw(seed: u64, id: u64) -> f64 {
    let mut z = seed ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5851_f42d_4c95_7f2d;
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// All scenarios from one file, by name, with where they came from.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioSet {
    /// The file path, or `built-in` for [`BUILTIN_SCENARIOS`].
    pub origin: String,
    pub scenarios: BTreeMap<String, Scenario>,
}

impl ScenarioSet {
    /// Parses and validates a scenarios file's text; `origin` names it in error messages.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ScenarioError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            origin: origin.to_string(),
            message: e.to_string().trim().to_string(),
        })?;
        if raw.scenarios.is_empty() {
            return Err(ScenarioError::Empty {
                origin: origin.to_string(),
            });
        }
        let mut scenarios = BTreeMap::new();
        for (name, raw_scenario) in raw.scenarios {
            let invalid = |message: String| ScenarioError::Invalid {
                origin: origin.to_string(),
                scenario: name.clone(),
                message,
            };
            let quota = raw_scenario.enrichment.quota().map_err(invalid)?;
            let enrichment = raw_scenario
                .enrichment
                .latency()
                .into_latency("enrichment")
                .map_err(invalid)?;
            let records_latency = raw_scenario
                .records
                .latency()
                .into_latency("records")
                .map_err(invalid)?;
            if raw_scenario.records.capacity == 0 {
                return Err(invalid("records.capacity must be at least 1".into()));
            }
            let schedule = raw_scenario.records.schedule().map_err(invalid)?;
            let classes = raw_scenario
                .classes
                .map(|shares| RecordClasses::new(shares.into_iter().collect()))
                .transpose()
                .map_err(invalid)?;
            scenarios.insert(
                name.clone(),
                Scenario {
                    name: name.clone(),
                    description: raw_scenario.description,
                    enrichment: EnrichmentSpec {
                        latency: enrichment,
                        quota,
                    },
                    records: RecordsSpec {
                        latency: records_latency,
                        capacity: raw_scenario.records.capacity,
                        queue: raw_scenario.records.queue,
                        schedule,
                    },
                    classes,
                },
            );
        }
        Ok(Self {
            origin: origin.to_string(),
            scenarios,
        })
    }

    /// Reads and validates a scenarios file.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// The scenarios compiled into the binary (a copy of `lab/scenarios.toml`).
    pub fn builtin() -> Self {
        Self::parse(BUILTIN_SCENARIOS, "built-in").expect("the built-in scenarios file is valid")
    }

    /// `path` if given; else `lab/scenarios.toml` if it exists here; else the built-in copy.
    pub fn load_or_default(path: Option<&Path>) -> Result<Self, ScenarioError> {
        match path {
            Some(path) => Self::load(path),
            None if Path::new(DEFAULT_SCENARIOS_PATH).is_file() => {
                Self::load(Path::new(DEFAULT_SCENARIOS_PATH))
            }
            None => Ok(Self::builtin()),
        }
    }

    /// The scenario called `name`, or an error listing the known ones.
    pub fn get(&self, name: &str) -> Result<&Scenario, ScenarioError> {
        self.scenarios
            .get(name)
            .ok_or_else(|| ScenarioError::Unknown {
                name: name.to_string(),
                known: self.names(),
            })
    }

    /// The scenario names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.scenarios.keys().cloned().collect()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    scenarios: BTreeMap<String, RawScenario>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    #[serde(default)]
    description: String,
    enrichment: RawEnrichment,
    records: RawRecords,
    classes: Option<BTreeMap<String, f64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnrichment {
    median: String,
    #[serde(default)]
    sigma: f64,
    #[serde(default)]
    hang_probability: f64,
    hang: Option<String>,
    quota: Option<String>,
    quota_burst: Option<u32>,
}

impl RawEnrichment {
    fn latency(&self) -> RawLatency {
        RawLatency {
            median: self.median.clone(),
            sigma: self.sigma,
            hang_probability: self.hang_probability,
            hang: self.hang.clone(),
        }
    }

    fn quota(&self) -> Result<Option<Quota>, String> {
        let Some(text) = &self.quota else {
            if self.quota_burst.is_some() {
                return Err("enrichment.quota_burst needs enrichment.quota".into());
            }
            return Ok(None);
        };
        let rate: inflight::Rate = text.parse().map_err(|e| format!("enrichment.quota: {e}"))?;
        let per_second = rate.events_per_second();
        if !(0.01..=1e6).contains(&per_second) {
            return Err(format!(
                "enrichment.quota must be between 0.01/s and 1000000/s, got {text:?}"
            ));
        }
        // Default burst: a tenth of a second's worth, so that calls paced at exactly the quota
        // still pass when the network bunches a few of them.
        let burst = self
            .quota_burst
            .unwrap_or_else(|| ((per_second / 10.0).round() as u32).max(1));
        if !(1..=1_000_000).contains(&burst) {
            return Err(format!(
                "enrichment.quota_burst must be between 1 and 1000000, got {burst}"
            ));
        }
        Ok(Some(Quota { per_second, burst }))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPhase {
    at: String,
    capacity: usize,
    queue: usize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLatency {
    median: String,
    #[serde(default)]
    sigma: f64,
    #[serde(default)]
    hang_probability: f64,
    hang: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRecords {
    median: String,
    #[serde(default)]
    sigma: f64,
    #[serde(default)]
    hang_probability: f64,
    hang: Option<String>,
    capacity: usize,
    queue: usize,
    #[serde(default)]
    schedule: Vec<RawPhase>,
}

impl RawRecords {
    fn schedule(&self) -> Result<Vec<Phase>, String> {
        let mut phases: Vec<Phase> = Vec::new();
        for (i, raw) in self.schedule.iter().enumerate() {
            let at =
                parse_duration(&raw.at).map_err(|e| format!("records.schedule[{i}].at: {e}"))?;
            if at > MAX_LATENCY {
                return Err(format!("records.schedule[{i}].at must be at most 1h"));
            }
            if raw.capacity == 0 {
                return Err(format!("records.schedule[{i}].capacity must be at least 1"));
            }
            if raw.capacity > 100_000 || raw.queue > 100_000 {
                return Err(format!(
                    "records.schedule[{i}]: capacity and queue must be at most 100000"
                ));
            }
            if phases.last().is_some_and(|p| p.at >= at) {
                return Err(format!(
                    "records.schedule[{i}].at must come after the phase before it"
                ));
            }
            phases.push(Phase {
                at,
                capacity: raw.capacity,
                queue: raw.queue,
            });
        }
        Ok(phases)
    }

    fn latency(&self) -> RawLatency {
        RawLatency {
            median: self.median.clone(),
            sigma: self.sigma,
            hang_probability: self.hang_probability,
            hang: self.hang.clone(),
        }
    }
}

trait IntoLatency {
    fn into_latency(self, part: &str) -> Result<Latency, String>;
}

impl IntoLatency for RawLatency {
    fn into_latency(self, part: &str) -> Result<Latency, String> {
        let median = parse_duration(&self.median).map_err(|e| format!("{part}.median: {e}"))?;
        if median.is_zero() {
            return Err(format!("{part}.median must be above 0"));
        }
        if median > MAX_LATENCY {
            return Err(format!(
                "{part}.median must be at most 1h, got {}",
                humantime::format_duration(median)
            ));
        }
        if !self.sigma.is_finite() || self.sigma < 0.0 || self.sigma > 3.0 {
            return Err(format!(
                "{part}.sigma must be between 0 and 3, got {}",
                self.sigma
            ));
        }
        if !(0.0..=1.0).contains(&self.hang_probability) {
            return Err(format!(
                "{part}.hang_probability must be between 0 and 1, got {}",
                self.hang_probability
            ));
        }
        let hang = match &self.hang {
            Some(text) => {
                let hang = parse_duration(text).map_err(|e| format!("{part}.hang: {e}"))?;
                if hang > MAX_LATENCY {
                    return Err(format!(
                        "{part}.hang must be at most 1h, got {}",
                        humantime::format_duration(hang)
                    ));
                }
                hang
            }
            None if self.hang_probability > 0.0 => {
                return Err(format!(
                    "{part}.hang is required when hang_probability is above 0"
                ))
            }
            None => Duration::ZERO,
        };
        Ok(Latency {
            median,
            sigma: self.sigma,
            hang_probability: self.hang_probability,
            hang,
        })
    }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("`{text}` is not a duration like \"120ms\" or \"1.2s\" ({e})"))
}

mod duration_str {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn builtin_file_has_the_scenarios_with_documented_values() {
        let set = ScenarioSet::builtin();
        assert_eq!(
            set.names(),
            vec![
                "degrading",
                "hard-limit",
                "healthy",
                "priority",
                "quota",
                "slow-enrichment",
                "slow-write"
            ]
        );
        let degrading = set.get("degrading").unwrap();
        let phases: Vec<_> = degrading
            .records
            .schedule
            .iter()
            .map(|p| (p.at, p.capacity, p.queue))
            .collect();
        assert_eq!(
            phases,
            [
                (Duration::from_millis(1500), 3, 1),
                (Duration::from_millis(3500), 6, 6)
            ]
        );
        let quota = set.get("quota").unwrap().enrichment.quota.unwrap();
        assert_eq!((quota.per_second, quota.burst), (50.0, 5));
        let healthy = set.get("healthy").unwrap();
        assert_eq!(healthy.enrichment.median, Duration::from_millis(120));
        assert_eq!(healthy.records.latency.median, Duration::from_millis(30));
        assert_eq!(healthy.records.capacity, 6);
        assert_eq!(healthy.records.queue, 6);
        let slow_write = set.get("slow-write").unwrap();
        assert_eq!(
            slow_write.records.latency.median,
            Duration::from_millis(150)
        );
        let hard_limit = set.get("hard-limit").unwrap();
        assert_eq!(
            (hard_limit.records.capacity, hard_limit.records.queue),
            (6, 0)
        );
        assert_eq!(hard_limit.records.latency, slow_write.records.latency);
        let slow_enrichment = set.get("slow-enrichment").unwrap();
        assert_eq!(
            slow_enrichment.enrichment.median,
            Duration::from_millis(1200)
        );
        assert_eq!(slow_enrichment.enrichment.hang_probability, 0.05);
        assert_eq!(slow_enrichment.enrichment.hang, Duration::from_secs(8));
    }

    #[test]
    fn unknown_scenario_names_the_known_ones() {
        let err = ScenarioSet::builtin().get("nope").unwrap_err().to_string();
        assert!(err.contains("unknown scenario `nope`"), "{err}");
        assert!(
            err.contains(
                "degrading, hard-limit, healthy, priority, quota, slow-enrichment, slow-write"
            ),
            "{err}"
        );
    }

    #[test]
    fn bad_files_are_rejected_with_the_field_named() {
        let cases = [
            ("", "defines no scenarios"),
            ("[scenarios.a]\nenrichment = { median = \"10ms\" }\n", "records"),
            (
                "[scenarios.a]\nenrichment = { median = \"ten\" }\nrecords = { median = \"1ms\", capacity = 1, queue = 0 }\n",
                "enrichment.median",
            ),
            (
                "[scenarios.a]\nenrichment = { median = \"10ms\", hang_probability = 0.1 }\nrecords = { median = \"1ms\", capacity = 1, queue = 0 }\n",
                "enrichment.hang is required",
            ),
            (
                "[scenarios.a]\nenrichment = { median = \"10ms\", sigma = -1 }\nrecords = { median = \"1ms\", capacity = 1, queue = 0 }\n",
                "enrichment.sigma",
            ),
            (
                "[scenarios.a]\nenrichment = { median = \"10ms\" }\nrecords = { median = \"1ms\", capacity = 0, queue = 0 }\n",
                "records.capacity",
            ),
            (
                "[scenarios.a]\nenrichment = { median = \"10ms\", typo = 1 }\nrecords = { median = \"1ms\", capacity = 1, queue = 0 }\n",
                "typo",
            ),
            (
                "[scenarios.a]\nenrichment = { median = \"10ms\" }\nrecords = { median = \"1000years\", capacity = 1, queue = 0 }\n",
                "records.median must be at most 1h",
            ),
            (
                "[scenarios.a]\nenrichment = { median = \"10ms\", hang_probability = 0.1, hang = \"2h\" }\nrecords = { median = \"1ms\", capacity = 1, queue = 0 }\n",
                "enrichment.hang must be at most 1h",
            ),
        ];
        for (text, needle) in cases {
            let err = ScenarioSet::parse(text, "t.toml").unwrap_err().to_string();
            assert!(err.contains(needle), "{needle:?} not in {err:?}");
            assert!(err.contains("t.toml"), "{err}");
        }
    }

    #[test]
    fn priority_is_degrading_with_a_fifth_of_the_records_interactive() {
        let set = ScenarioSet::builtin();
        let (priority, degrading) = (set.get("priority").unwrap(), set.get("degrading").unwrap());
        assert_eq!(priority.records, degrading.records, "degrading's schedule");
        assert_eq!(priority.enrichment, degrading.enrichment);
        assert_eq!(degrading.classes, None);
        let classes = priority.classes.as_ref().unwrap();
        assert_eq!(
            classes.shares(),
            [("batch".to_string(), 0.8), ("interactive".to_string(), 0.2)]
        );
        let interactive = |seed| {
            (0..10_000)
                .filter(|&id| classes.class_of(seed, id) == "interactive")
                .count()
        };
        // 20% of 10 000 with a binomial spread of 40: far inside 1 800-2 200.
        let n = interactive(7);
        assert!((1_800..=2_200).contains(&n), "{n} interactive of 10 000");
        assert_eq!(n, interactive(7), "the seed decides");
        let same: Vec<&str> = (0..50).map(|id| classes.class_of(7, id)).collect();
        let other: Vec<&str> = (0..50).map(|id| classes.class_of(8, id)).collect();
        assert_ne!(same, other, "another seed draws other records");
    }

    #[test]
    fn bad_record_classes_are_named() {
        let scenario = |classes: &str| {
            format!("[scenarios.a]\nclasses = {classes}\nenrichment = {{ median = \"10ms\" }}\nrecords = {{ median = \"1ms\", capacity = 1, queue = 0 }}\n")
        };
        for (classes, says) in [
            ("{}", "1 to 16 classes, got 0"),
            ("{ a = 0.5, b = 0.4 }", "add up to 1, got 0.9"),
            ("{ a = 1.5, b = -0.5 }", "classes.a must be a share"),
            ("{ \"a b\" = 1.0 }", "a class name may hold only"),
            ("{ a = \"most\" }", "classes"),
        ] {
            let err = ScenarioSet::parse(&scenario(classes), "t.toml")
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(says) && err.contains("t.toml"),
                "{classes}: {err}"
            );
        }
        let one = ScenarioSet::parse(&scenario("{ only = 1 }"), "t.toml").unwrap();
        let classes = one.get("a").unwrap().classes.clone().unwrap();
        assert!((0..100).all(|id| classes.class_of(3, id) == "only"));
    }

    #[test]
    fn latency_sampling_is_seeded_and_log_normal() {
        let latency = Latency {
            median: Duration::from_millis(100),
            sigma: 0.25,
            hang_probability: 0.05,
            hang: Duration::from_secs(8),
        };
        let draw = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            (0..2000)
                .map(|_| latency.sample(&mut rng))
                .collect::<Vec<_>>()
        };
        let a = draw(7);
        assert_eq!(a, draw(7), "same seed, same draws");
        assert_ne!(a, draw(8));
        let hangs = a.iter().filter(|(_, hang)| *hang).count();
        assert!((60..=140).contains(&hangs), "about 5% hang: {hangs}");
        let mut normal: Vec<f64> = a
            .iter()
            .filter(|(_, hang)| !*hang)
            .map(|(d, _)| d.as_secs_f64())
            .collect();
        normal.sort_by(f64::total_cmp);
        let median = normal[normal.len() / 2];
        assert!(
            (0.09..0.11).contains(&median),
            "median near 100 ms: {median}"
        );
    }
}
