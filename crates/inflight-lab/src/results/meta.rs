//! The settings of a lab run as its results document keeps them ([`RunMeta`]), and its plan
//! ([`RunPlan`]), which `--resume` runs again.

use inflight_cpu::Enforcement;
use serde::{Deserialize, Serialize};

use crate::matrix::Cell;

/// The settings and environment of a lab run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunMeta {
    /// RFC 3339 time the run started.
    pub started_at: String,
    pub records: u64,
    pub repeats: u32,
    pub time_scale: f64,
    pub seed: u64,
    /// How the CPU quota was enforced; `cgroup-v1`, `cgroup-v2` or `none` in JSON.
    #[serde(with = "enforcement_name")]
    pub enforcement: Enforcement,
    pub host_cpus: usize,
    pub inflight_version: String,
    /// How that inflight was built: `release` or `debug` (whose sim and runners are slower, so
    /// the runs of two builds do not compare); empty in documents written before it was kept.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub inflight_build: String,
    /// Runner processes per run, each in its own CPU quota, splitting the records between them
    /// (`lab run --replicas`); 1 in documents written before replicas existed.
    #[serde(default = "one")]
    pub replicas: u32,
    /// Whether the document lacks runs of its plan, or its final report: the lab was interrupted
    /// (or killed) first. `inflight lab run --resume DIR` runs what is missing.
    #[serde(default)]
    pub partial: bool,
    /// The runs the plan holds (cells x repeats); 0 in documents written before plans were kept.
    #[serde(default)]
    pub runs_planned: usize,
    /// The runs in `runs`.
    #[serde(default)]
    pub runs_finished: usize,
    /// RFC 3339 times at which `--resume` continued the run, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resumed_at: Vec<String>,
    /// What the lab was asked to run, kept so that `--resume` runs exactly the missing runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<RunPlan>,
}

/// The plan of a lab run besides the settings already in [`RunMeta`] (records, repeats, time
/// scale, seed, enforcement): its cells, the strategies and scenarios as the runs read them, and
/// the hypotheses as the run read them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RunPlan {
    /// The cells in the order they run; every repeat runs them all in this order.
    pub cells: Vec<Cell>,
    /// Where the strategies came from: a file's path, or `built-in`.
    pub strategies_origin: String,
    /// The strategies file's text, as the runners read it.
    pub strategies_toml: String,
    /// Where the scenarios came from: a file's path, or `built-in`.
    pub scenarios_origin: String,
    /// The scenarios file's text, as the sim read it.
    pub scenarios_toml: String,
    /// Where the hypotheses came from: a file's path, or `built-in`; empty in documents written
    /// before they were kept, whose resumed runs evaluate the lab folder's.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hypotheses_origin: String,
    /// The hypotheses file's text, as the run read it when it started: the hypotheses a resumed
    /// run evaluates.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hypotheses_toml: String,
    /// Where the lab's files came from: `--lab-dir DIR`, `lab/ in the current directory`, the
    /// lab folder of the workspace inflight was built in, or the copies built into inflight
    /// ([`crate::files::Origin`]); empty in documents written before it was kept.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub lab_files: String,
    /// The `inflight` binary that ran the lab and started its sim and runners; empty in
    /// documents written before it was kept.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub exe: String,
}

impl RunPlan {
    /// Whether the plan keeps the hypotheses (it does from when a run starts; documents written
    /// before they were kept do not).
    pub fn keeps_hypotheses(&self) -> bool {
        !self.hypotheses_origin.is_empty()
    }
}

pub(super) fn one() -> u32 {
    1
}

impl Default for RunMeta {
    fn default() -> RunMeta {
        RunMeta {
            started_at: String::new(),
            records: 0,
            repeats: 0,
            time_scale: 0.0,
            seed: 0,
            enforcement: Enforcement::None,
            host_cpus: 0,
            inflight_version: String::new(),
            inflight_build: String::new(),
            replicas: 1,
            partial: false,
            runs_planned: 0,
            runs_finished: 0,
            resumed_at: Vec::new(),
            plan: None,
        }
    }
}

/// [`Enforcement`] as its name (`cgroup-v1`, `cgroup-v2`, `none`).
mod enforcement_name {
    use inflight_cpu::Enforcement;
    use serde::{de, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(e: &Enforcement, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(e.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Enforcement, D::Error> {
        let name = String::deserialize(d)?;
        [
            Enforcement::CgroupV1,
            Enforcement::CgroupV2,
            Enforcement::None,
        ]
        .into_iter()
        .find(|e| e.as_str() == name)
        .ok_or_else(|| {
            de::Error::custom(format!(
                "unknown enforcement `{name}` (expected cgroup-v1, cgroup-v2 or none)"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enforcement_is_written_by_name() {
        let meta = RunMeta {
            enforcement: Enforcement::CgroupV2,
            ..RunMeta::default()
        };
        let json = serde_json::to_value(&meta).unwrap();
        assert_eq!(json["enforcement"], "cgroup-v2");
        let back: RunMeta = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, meta);
        let mut bad = json;
        bad["enforcement"] = "cgroup-v3".into();
        let err = serde_json::from_value::<RunMeta>(bad)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown enforcement `cgroup-v3`"), "{err}");
    }
}
