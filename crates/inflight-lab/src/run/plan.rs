//! The plan of a lab run, kept in its `results.json` so that an interrupted run can be resumed:
//! the runs it holds ([`planned_runs`]), the partial results folder to continue ([`Resume`]) with
//! the files and hypotheses its plan kept, and whether settings given next to `--resume` agree
//! with the plan ([`Setting`]).

use std::fmt;
use std::path::{Path, PathBuf};

use super::out_dir::RESULTS_JSON;
use crate::hypothesis::{Hypothesis, HypothesisError};
use crate::matrix::Cell;
use crate::results::{ResultsDoc, RunPlan, RunResult};

/// How this inflight was built, as [`RunMeta::inflight_build`](crate::results::RunMeta) keeps
/// it: `debug` or `release`.
pub const INFLIGHT_BUILD: &str = if cfg!(debug_assertions) {
    "debug"
} else {
    "release"
};

/// One run of a plan: a cell at a repeat.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedRun {
    pub cell: Cell,
    /// 1-based.
    pub repeat: u32,
}

impl PlannedRun {
    /// Whether `run` is this run's result.
    pub fn matches(&self, run: &RunResult) -> bool {
        run.strategy == self.cell.strategy
            && run.scenario == self.cell.scenario
            && (run.cpus - self.cell.cpus).abs() < 1e-9
            && run.repeat == self.repeat
    }
}

impl fmt::Display for PlannedRun {
    /// `c4 healthy 1 CPU repeat 2`, as the progress lines name runs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} CPU repeat {}",
            self.cell.strategy, self.cell.scenario, self.cell.cpus, self.repeat
        )
    }
}

/// Every run of `cells` x `repeats` in the order the lab runs them: repeats outermost, so that
/// an early stop leaves every cell with about as many repeats as the others.
pub fn planned_runs(cells: &[Cell], repeats: u32) -> Vec<PlannedRun> {
    (1..=repeats)
        .flat_map(|repeat| {
            cells.iter().map(move |cell| PlannedRun {
                cell: cell.clone(),
                repeat,
            })
        })
        .collect()
}

/// The place of `run` in the plan's order, if the plan holds it.
pub(crate) fn plan_index(plan: &[PlannedRun], run: &RunResult) -> Option<usize> {
    plan.iter().position(|p| p.matches(run))
}

/// The runs of `plan` (cells x `repeats`) that `runs` lacks, in order; an error says which run
/// is not in the plan or is there twice.
pub fn missing_runs(
    plan: &RunPlan,
    repeats: u32,
    runs: &[RunResult],
) -> Result<Vec<PlannedRun>, String> {
    let all = planned_runs(&plan.cells, repeats);
    let mut seen = vec![false; all.len()];
    for run in runs {
        let label = format!(
            "{} {} {} CPU repeat {}",
            run.strategy, run.scenario, run.cpus, run.repeat
        );
        match plan_index(&all, run) {
            None => return Err(format!("run {label} is not in the plan")),
            Some(i) if seen[i] => return Err(format!("run {label} is there twice")),
            Some(i) => seen[i] = true,
        }
    }
    Ok(all
        .into_iter()
        .zip(seen)
        .filter(|(_, seen)| !seen)
        .map(|(run, _)| run)
        .collect())
}

/// Why a folder cannot be resumed, or not with the flags given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResumeError {
    #[error("--resume {}: no such folder", path.display())]
    Missing { path: PathBuf },
    #[error("--resume {}: not a lab results folder (it holds no {RESULTS_JSON})", path.display())]
    NotResults { path: PathBuf },
    #[error("--resume {}: cannot read {RESULTS_JSON}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--resume {}: {RESULTS_JSON} is not a lab results document", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("--resume {}: {RESULTS_JSON} holds no plan (it was written by an inflight older than --resume), so which runs are missing is unknown; start a new run with --out", path.display())]
    NoPlan { path: PathBuf },
    #[error("--resume {}: this run is complete ({runs} of {runs} runs, and its report); nothing to resume", path.display())]
    Complete { path: PathBuf, runs: usize },
    #[error("--resume {}: {RESULTS_JSON} does not match its plan: {message}", path.display())]
    Inconsistent { path: PathBuf, message: String },
    #[error("--resume {}: its runs were measured by inflight {theirs} and this is {ours}; runs of different versions do not mix, so start a new run with --out", path.display())]
    Version {
        path: PathBuf,
        theirs: String,
        ours: String,
    },
    #[error("--resume {}: its runs were measured by a {theirs} build of inflight ({exe}) and this is a {ours} build, whose sim and runners run at another speed; resume it with that binary", path.display())]
    Build {
        path: PathBuf,
        theirs: String,
        ours: String,
        exe: String,
    },
    #[error("{flag} asks for {given}, but the run in {} was planned with {planned}; leave {flag} out to resume it", path.display())]
    Conflict {
        path: PathBuf,
        flag: String,
        given: String,
        planned: String,
    },
}

/// A plan setting given on the command line next to `--resume`, checked against the plan by
/// [`Resume::check`].
#[derive(Debug, Clone, PartialEq)]
pub enum Setting {
    Strategies(Vec<String>),
    Scenarios(Vec<String>),
    Cpus(Vec<f64>),
    Records(u64),
    Repeats(u32),
    TimeScale(f64),
    Seed(u64),
    /// The strategies file's text, and where it was read (a path, or `built-in`).
    StrategiesFile {
        origin: String,
        text: String,
    },
    /// The scenarios file's text, and where it was read.
    ScenariosFile {
        origin: String,
        text: String,
    },
    /// The hypotheses file's text, and where it was read.
    HypothesesFile {
        origin: String,
        text: String,
    },
}

impl Setting {
    /// The same setting as the plan of `doc` has it.
    fn planned(&self, doc: &ResultsDoc, plan: &RunPlan) -> Setting {
        fn distinct<T: PartialEq + Clone>(items: impl Iterator<Item = T>) -> Vec<T> {
            let mut out: Vec<T> = Vec::new();
            for item in items {
                if !out.contains(&item) {
                    out.push(item);
                }
            }
            out
        }
        let cells = &plan.cells;
        match self {
            Setting::Strategies(_) => {
                Setting::Strategies(distinct(cells.iter().map(|c| c.strategy.clone())))
            }
            Setting::Scenarios(_) => {
                Setting::Scenarios(distinct(cells.iter().map(|c| c.scenario.clone())))
            }
            Setting::Cpus(_) => Setting::Cpus(distinct(cells.iter().map(|c| c.cpus))),
            Setting::Records(_) => Setting::Records(doc.meta.records),
            Setting::Repeats(_) => Setting::Repeats(doc.meta.repeats),
            Setting::TimeScale(_) => Setting::TimeScale(doc.meta.time_scale),
            Setting::Seed(_) => Setting::Seed(doc.meta.seed),
            Setting::StrategiesFile { .. } => Setting::StrategiesFile {
                origin: plan.strategies_origin.clone(),
                text: plan.strategies_toml.clone(),
            },
            Setting::ScenariosFile { .. } => Setting::ScenariosFile {
                origin: plan.scenarios_origin.clone(),
                text: plan.scenarios_toml.clone(),
            },
            // A plan that kept no hypotheses evaluates the lab folder's: any agrees.
            Setting::HypothesesFile { .. } if !plan.keeps_hypotheses() => self.clone(),
            Setting::HypothesesFile { .. } => Setting::HypothesesFile {
                origin: plan.hypotheses_origin.clone(),
                text: plan.hypotheses_toml.clone(),
            },
        }
    }

    /// The strategies and scenarios files of the lab folder `files`, as settings to check.
    ///
    /// # Errors
    ///
    /// If a file cannot be read.
    pub fn files_of(files: &crate::files::LabFiles) -> std::io::Result<[Setting; 2]> {
        use crate::files::{SCENARIOS, STRATEGIES};
        let read = |name: &str, builtin: &str| -> std::io::Result<(String, String)> {
            match files.path(name) {
                Some(path) => Ok((path.display().to_string(), std::fs::read_to_string(&path)?)),
                None => Ok(("built-in".to_string(), builtin.to_string())),
            }
        };
        let (origin, text) = read(STRATEGIES, crate::strategy::BUILTIN_STRATEGIES)?;
        let strategies = Setting::StrategiesFile { origin, text };
        let (origin, text) = read(SCENARIOS, crate::scenario::BUILTIN_SCENARIOS)?;
        Ok([strategies, Setting::ScenariosFile { origin, text }])
    }

    /// The hypotheses file of the lab folder `files`, as a setting to check.
    ///
    /// # Errors
    ///
    /// If the file cannot be read.
    pub fn hypotheses_of(files: &crate::files::LabFiles) -> std::io::Result<Setting> {
        let (origin, text) = match files.path(crate::files::HYPOTHESES) {
            Some(path) => (path.display().to_string(), std::fs::read_to_string(&path)?),
            None => (
                "built-in".to_string(),
                crate::hypothesis::BUILTIN_HYPOTHESES.to_string(),
            ),
        };
        Ok(Setting::HypothesesFile { origin, text })
    }

    /// Whether two values of the same setting agree; lists as sets (their order only changes
    /// the order of the runs, not their seeds).
    fn agrees(&self, other: &Setting) -> bool {
        fn same_set<T: PartialEq>(a: &[T], b: &[T]) -> bool {
            a.iter().all(|x| b.contains(x)) && b.iter().all(|x| a.contains(x))
        }
        match (self, other) {
            (Setting::Strategies(a), Setting::Strategies(b))
            | (Setting::Scenarios(a), Setting::Scenarios(b)) => same_set(a, b),
            (Setting::Cpus(a), Setting::Cpus(b)) => same_set(a, b),
            (Setting::StrategiesFile { text: a, .. }, Setting::StrategiesFile { text: b, .. })
            | (Setting::ScenariosFile { text: a, .. }, Setting::ScenariosFile { text: b, .. })
            | (Setting::HypothesesFile { text: a, .. }, Setting::HypothesesFile { text: b, .. }) => {
                a == b
            }
            _ => self == other,
        }
    }
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Setting::Strategies(names) => write!(f, "strategies {}", names.join(",")),
            Setting::Scenarios(names) => write!(f, "scenarios {}", names.join(",")),
            Setting::Cpus(cpus) => {
                let cpus: Vec<String> = cpus.iter().map(f64::to_string).collect();
                write!(f, "CPUs {}", cpus.join(","))
            }
            Setting::Records(n) => write!(f, "{n} records per run"),
            Setting::Repeats(n) => write!(f, "{n} repeats"),
            Setting::TimeScale(t) => write!(f, "time scale {t}"),
            Setting::Seed(s) => write!(f, "seed {s}"),
            Setting::StrategiesFile { origin, .. } => write!(f, "the strategies of {origin}"),
            Setting::ScenariosFile { origin, .. } => write!(f, "the scenarios of {origin}"),
            Setting::HypothesesFile { origin, .. } => write!(f, "the hypotheses of {origin}"),
        }
    }
}

/// A partial results folder to continue: its document, and the runs of its plan it lacks.
#[derive(Debug, Clone)]
pub struct Resume {
    dir: PathBuf,
    doc: ResultsDoc,
    missing: Vec<PlannedRun>,
}

impl Resume {
    /// Reads the results folder `dir` and checks it can be resumed: it holds a `results.json`
    /// with a plan, written by this version of inflight, whose runs are all in the plan, and it
    /// is partial (runs are missing, or the final report is).
    pub fn open(dir: &Path) -> Result<Resume, ResumeError> {
        let path = dir.to_path_buf();
        if !dir.is_dir() {
            return Err(ResumeError::Missing { path });
        }
        let file = dir.join(RESULTS_JSON);
        if !file.is_file() {
            return Err(ResumeError::NotResults { path });
        }
        let text = std::fs::read_to_string(&file).map_err(|source| ResumeError::Read {
            path: path.clone(),
            source,
        })?;
        let doc: ResultsDoc = serde_json::from_str(&text).map_err(|source| ResumeError::Parse {
            path: path.clone(),
            source,
        })?;
        let Some(plan) = &doc.meta.plan else {
            return Err(ResumeError::NoPlan { path });
        };
        let ours = env!("CARGO_PKG_VERSION");
        if doc.meta.inflight_version != ours {
            return Err(ResumeError::Version {
                path,
                theirs: doc.meta.inflight_version.clone(),
                ours: ours.to_string(),
            });
        }
        let theirs = &doc.meta.inflight_build;
        if !theirs.is_empty() && theirs != INFLIGHT_BUILD {
            return Err(ResumeError::Build {
                path,
                theirs: theirs.clone(),
                ours: INFLIGHT_BUILD.to_string(),
                exe: if plan.exe.is_empty() {
                    "its path was not kept".to_string()
                } else {
                    plan.exe.clone()
                },
            });
        }
        let inconsistent = |message: String| ResumeError::Inconsistent {
            path: path.clone(),
            message,
        };
        if plan.cells.is_empty() || doc.meta.repeats == 0 || doc.meta.records == 0 {
            return Err(inconsistent(
                "the plan holds no run (no cell, repeat or record)".into(),
            ));
        }
        let missing = missing_runs(plan, doc.meta.repeats, &doc.runs).map_err(inconsistent)?;
        if !doc.meta.partial {
            if missing.is_empty() {
                return Err(ResumeError::Complete {
                    path,
                    runs: doc.runs.len(),
                });
            }
            return Err(inconsistent(format!(
                "it is not marked partial, yet {} planned runs are missing",
                missing.len()
            )));
        }
        Ok(Resume {
            dir: path,
            doc,
            missing,
        })
    }

    /// The folder being resumed.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The document as the folder holds it.
    pub fn doc(&self) -> &ResultsDoc {
        &self.doc
    }

    /// The plan.
    pub fn plan(&self) -> &RunPlan {
        self.doc
            .meta
            .plan
            .as_ref()
            .expect("checked by Resume::open")
    }

    /// The runs still to run, in order.
    pub fn missing(&self) -> &[PlannedRun] {
        &self.missing
    }

    /// Checks settings given on the command line next to `--resume` (with the flag that gave
    /// each, e.g. `--records` or `--quick`) against the plan; the error names the first that
    /// differs, and what the plan has.
    pub fn check(&self, given: &[(&str, Setting)]) -> Result<(), ResumeError> {
        for (flag, setting) in given {
            let planned = setting.planned(&self.doc, self.plan());
            if !setting.agrees(&planned) {
                let planned = match &planned {
                    // The same origin may hold another text by now.
                    Setting::StrategiesFile { .. }
                    | Setting::ScenariosFile { .. }
                    | Setting::HypothesesFile { .. } => {
                        format!("{planned} as it read when the run started")
                    }
                    _ => planned.to_string(),
                };
                return Err(ResumeError::Conflict {
                    path: self.dir.clone(),
                    flag: flag.to_string(),
                    given: setting.to_string(),
                    planned,
                });
            }
        }
        Ok(())
    }

    /// The hypotheses the plan kept, read as a hypotheses file is, for the resumed run to
    /// evaluate what the first part did; `None` when the document was written before plans kept
    /// them. An error names this folder's `results.json`.
    pub fn hypotheses(&self) -> Option<Result<Vec<Hypothesis>, HypothesisError>> {
        let plan = self.plan();
        if !plan.keeps_hypotheses() {
            return None;
        }
        let origin = format!(
            "{} (meta.plan.hypotheses_toml, kept from {})",
            self.dir.join(RESULTS_JSON).display(),
            plan.hypotheses_origin
        );
        Some(crate::hypothesis::parse(&plan.hypotheses_toml, &origin))
    }

    /// The plan's strategies and scenarios files, for the runners and the sim, so that the
    /// missing runs read exactly what the finished ones did, from where they read it when they
    /// can: the file the plan names while it still holds the plan's text (so that a resumed
    /// run's runners and sim are started as the first part's were), else the built-in copy
    /// where the plan's text is its, else a copy of the plan's text in a temporary folder.
    ///
    /// # Errors
    ///
    /// If the temporary folder or a file in it cannot be written.
    pub fn files(&self) -> std::io::Result<PlanFiles> {
        let plan = self.plan();
        let mut files = PlanFiles::default();
        let mut source = |origin: &str,
                          text: &str,
                          builtin: &str,
                          name: &str|
         -> std::io::Result<Option<PathBuf>> {
            let named = Path::new(origin);
            if origin != "built-in" && std::fs::read_to_string(named).is_ok_and(|t| t == text) {
                return Ok(Some(named.to_path_buf()));
            }
            // Without a file the sim reads `lab/scenarios.toml` where there is one, not its
            // built-in copy.
            let sim_default = Path::new(crate::scenario::DEFAULT_SCENARIOS_PATH);
            let shadowed = name == crate::files::SCENARIOS
                && std::fs::read_to_string(sim_default).is_ok_and(|t| t != builtin);
            if text == builtin && !shadowed {
                return Ok(None);
            }
            if files.dir.is_none() {
                files.dir = Some(
                    tempfile::Builder::new()
                        .prefix("inflight-resume-")
                        .tempdir()?,
                );
            }
            let path = files.dir.as_ref().expect("made above").path().join(name);
            std::fs::write(&path, text)?;
            Ok(Some(path))
        };
        let strategies = source(
            &plan.strategies_origin,
            &plan.strategies_toml,
            crate::strategy::BUILTIN_STRATEGIES,
            crate::files::STRATEGIES,
        )?;
        let scenarios = source(
            &plan.scenarios_origin,
            &plan.scenarios_toml,
            crate::scenario::BUILTIN_SCENARIOS,
            crate::files::SCENARIOS,
        )?;
        files.strategies = strategies;
        files.scenarios = scenarios;
        Ok(files)
    }
}

/// Where the runners and the sim of a resumed run read the plan's strategies and scenarios
/// (`None`: the built-in copies); the temporary copies are removed when this is dropped.
#[derive(Debug, Default)]
pub struct PlanFiles {
    pub strategies: Option<PathBuf>,
    pub scenarios: Option<PathBuf>,
    dir: Option<tempfile::TempDir>,
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::results::sample_run;

    fn plan() -> RunPlan {
        RunPlan {
            cells: vec![
                Cell::new("c1", "healthy", 1.0),
                Cell::new("c4", "healthy", 1.0),
                Cell::new("c4", "slow-write", 1.0),
            ],
            strategies_origin: "built-in".into(),
            strategies_toml: crate::strategy::BUILTIN_STRATEGIES.into(),
            scenarios_origin: "built-in".into(),
            scenarios_toml: crate::scenario::BUILTIN_SCENARIOS.into(),
            hypotheses_origin: "built-in".into(),
            hypotheses_toml: crate::hypothesis::BUILTIN_HYPOTHESES.into(),
            lab_files: "the copies built into inflight".into(),
            exe: "inflight".into(),
        }
    }

    fn partial_doc(runs: Vec<RunResult>) -> ResultsDoc {
        let mut doc = ResultsDoc::default();
        doc.meta.records = 10;
        doc.meta.repeats = 2;
        doc.meta.time_scale = 0.05;
        doc.meta.seed = 1;
        doc.meta.partial = true;
        doc.meta.inflight_version = env!("CARGO_PKG_VERSION").into();
        doc.meta.plan = Some(plan());
        doc.runs = runs;
        doc
    }

    fn write(dir: &Path, doc: &ResultsDoc) {
        std::fs::write(
            dir.join(RESULTS_JSON),
            serde_json::to_string_pretty(doc).unwrap(),
        )
        .unwrap();
    }

    #[test]
    fn runs_go_repeat_by_repeat_through_the_cells() {
        let runs = planned_runs(&plan().cells, 2);
        let names: Vec<String> = runs.iter().map(|r| r.to_string()).collect();
        assert_eq!(
            names,
            [
                "c1 healthy 1 CPU repeat 1",
                "c4 healthy 1 CPU repeat 1",
                "c4 slow-write 1 CPU repeat 1",
                "c1 healthy 1 CPU repeat 2",
                "c4 healthy 1 CPU repeat 2",
                "c4 slow-write 1 CPU repeat 2",
            ]
        );
    }

    #[test]
    fn the_missing_runs_are_those_without_a_result() {
        let runs = vec![
            sample_run("c1", "healthy", 1.0, 1, 1.0),
            sample_run("c4", "healthy", 1.0, 1, 1.0),
            sample_run("c4", "healthy", 1.0, 2, 1.0),
        ];
        let missing = missing_runs(&plan(), 2, &runs).unwrap();
        let names: Vec<String> = missing.iter().map(|r| r.to_string()).collect();
        assert_eq!(
            names,
            [
                "c4 slow-write 1 CPU repeat 1",
                "c1 healthy 1 CPU repeat 2",
                "c4 slow-write 1 CPU repeat 2",
            ]
        );
        let mut twice = runs.clone();
        twice.push(sample_run("c1", "healthy", 1.0, 1, 2.0));
        let err = missing_runs(&plan(), 2, &twice).unwrap_err();
        assert_eq!(err, "run c1 healthy 1 CPU repeat 1 is there twice");
        let stranger = vec![sample_run("c1", "healthy", 1.0, 3, 1.0)];
        let err = missing_runs(&plan(), 2, &stranger).unwrap_err();
        assert_eq!(err, "run c1 healthy 1 CPU repeat 3 is not in the plan");
    }

    #[test]
    fn a_partial_folder_resumes_with_its_missing_runs() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &partial_doc(vec![sample_run("c1", "healthy", 1.0, 1, 1.0)]),
        );
        let resume = Resume::open(dir.path()).unwrap();
        assert_eq!(resume.missing().len(), 5);
        assert_eq!(resume.missing()[0].to_string(), "c4 healthy 1 CPU repeat 1");
        // Every run done but the report: nothing to run, the report still to write.
        let all: Vec<RunResult> = planned_runs(&plan().cells, 2)
            .iter()
            .map(|p| sample_run(&p.cell.strategy, &p.cell.scenario, 1.0, p.repeat, 1.0))
            .collect();
        write(dir.path(), &partial_doc(all));
        assert!(Resume::open(dir.path()).unwrap().missing().is_empty());
    }

    #[test]
    fn folders_that_cannot_be_resumed_say_why() {
        let dir = tempfile::tempdir().unwrap();
        let err = |dir: &Path| Resume::open(dir).unwrap_err().to_string();
        assert!(
            err(&dir.path().join("nope")).ends_with("nope: no such folder"),
            "{}",
            err(&dir.path().join("nope"))
        );
        assert!(err(dir.path()).contains("not a lab results folder (it holds no results.json)"));
        std::fs::write(dir.path().join(RESULTS_JSON), "[1, 2]").unwrap();
        assert!(err(dir.path()).contains("results.json is not a lab results document"));

        let mut doc = partial_doc(Vec::new());
        doc.meta.plan = None;
        write(dir.path(), &doc);
        assert!(
            err(dir.path()).contains("holds no plan"),
            "{}",
            err(dir.path())
        );

        let other = if INFLIGHT_BUILD == "debug" {
            "release"
        } else {
            "debug"
        };
        let mut doc = partial_doc(Vec::new());
        doc.meta.inflight_build = other.into();
        doc.meta.plan.as_mut().unwrap().exe = "/opt/inflight/bin/inflight".into();
        write(dir.path(), &doc);
        assert!(
            err(dir.path()).contains(&format!(
                "measured by a {other} build of inflight (/opt/inflight/bin/inflight) and this is a {INFLIGHT_BUILD} build"
            )),
            "{}",
            err(dir.path())
        );
        // Documents from before the build was kept resume as they did.
        doc.meta.inflight_build = String::new();
        write(dir.path(), &doc);
        assert!(Resume::open(dir.path()).is_ok());

        let mut doc = partial_doc(Vec::new());
        doc.meta.inflight_version = "0.0.1".into();
        write(dir.path(), &doc);
        assert!(
            err(dir.path()).contains("measured by inflight 0.0.1"),
            "{}",
            err(dir.path())
        );

        let doc = partial_doc(vec![sample_run("c2", "healthy", 1.0, 1, 1.0)]);
        write(dir.path(), &doc);
        assert!(
            err(dir.path()).contains(
                "does not match its plan: run c2 healthy 1 CPU repeat 1 is not in the plan"
            ),
            "{}",
            err(dir.path())
        );

        let all: Vec<RunResult> = planned_runs(&plan().cells, 2)
            .iter()
            .map(|p| sample_run(&p.cell.strategy, &p.cell.scenario, 1.0, p.repeat, 1.0))
            .collect();
        let mut doc = partial_doc(all);
        doc.meta.partial = false;
        write(dir.path(), &doc);
        assert!(
            err(dir.path())
                .contains("this run is complete (6 of 6 runs, and its report); nothing to resume"),
            "{}",
            err(dir.path())
        );
    }

    #[test]
    fn settings_next_to_resume_must_agree_with_the_plan() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &partial_doc(Vec::new()));
        let resume = Resume::open(dir.path()).unwrap();
        let agreeing = [
            (
                "--strategies",
                Setting::Strategies(vec!["c4".into(), "c1".into()]),
            ),
            (
                "--scenarios",
                Setting::Scenarios(vec!["healthy".into(), "slow-write".into()]),
            ),
            ("--cpus", Setting::Cpus(vec![1.0])),
            ("--records", Setting::Records(10)),
            ("--repeats", Setting::Repeats(2)),
            ("--time-scale", Setting::TimeScale(0.05)),
            ("--seed", Setting::Seed(1)),
        ];
        resume.check(&agreeing).unwrap();
        let [strategies, scenarios] =
            Setting::files_of(&crate::files::LabFiles::builtin()).unwrap();
        let hypotheses = Setting::hypotheses_of(&crate::files::LabFiles::builtin()).unwrap();
        resume
            .check(&[
                ("--lab-dir", strategies),
                ("--lab-dir", scenarios),
                ("--lab-dir", hypotheses),
            ])
            .unwrap();
        for (flag, setting, needle) in [
            (
                "--strategies",
                Setting::Strategies(vec!["c1".into()]),
                "--strategies asks for strategies c1, but the run in",
            ),
            (
                "--records",
                Setting::Records(99),
                "--records asks for 99 records per run",
            ),
            (
                "--quick",
                Setting::TimeScale(0.1),
                "--quick asks for time scale 0.1, but the run in",
            ),
            (
                "--cpus",
                Setting::Cpus(vec![1.0, 2.0]),
                "planned with CPUs 1",
            ),
            (
                "--seed",
                Setting::Seed(2),
                "planned with seed 1; leave --seed out",
            ),
            (
                "--lab-dir",
                Setting::StrategiesFile {
                    origin: "lab2/strategies.toml".into(),
                    text: "[c9]\n".into(),
                },
                "--lab-dir asks for the strategies of lab2/strategies.toml, but the run in",
            ),
            (
                "--lab-dir",
                Setting::HypothesesFile {
                    origin: "lab2/hypotheses.toml".into(),
                    text: "[[hypothesis]]\n".into(),
                },
                "--lab-dir asks for the hypotheses of lab2/hypotheses.toml, but the run in",
            ),
        ] {
            let err = resume.check(&[(flag, setting)]).unwrap_err().to_string();
            assert!(err.contains(needle), "{needle:?} not in {err:?}");
        }
    }

    #[test]
    fn a_resumed_run_evaluates_the_hypotheses_its_plan_kept() {
        let dir = tempfile::tempdir().unwrap();
        let kept = "[[hypothesis]]\nid = \"K1\"\nclaim = \"c4 completes\"\nmetric = \"complete\"\nscenario = \"healthy\"\nstrategies = [\"c4\"]\ncompare = \">\"\nthreshold = 0\n";
        let mut doc = partial_doc(Vec::new());
        let plan = doc.meta.plan.as_mut().unwrap();
        plan.hypotheses_origin = "lab/hypotheses.toml".into();
        plan.hypotheses_toml = kept.into();
        write(dir.path(), &doc);
        let resume = Resume::open(dir.path()).unwrap();
        let ids: Vec<String> = resume
            .hypotheses()
            .unwrap()
            .unwrap()
            .into_iter()
            .map(|h| h.id)
            .collect();
        assert_eq!(ids, ["K1"]);
        // The lab folder's file, changed since, is refused next to --resume.
        let changed = Setting::HypothesesFile {
            origin: "lab/hypotheses.toml".into(),
            text: kept.replace("K1", "K2"),
        };
        let err = resume
            .check(&[("--lab-dir", changed.clone())])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("was planned with the hypotheses of lab/hypotheses.toml as it read when the run started; leave --lab-dir out"),
            "{err}"
        );

        // Text the parser refuses: the error names the document that kept it.
        doc.meta.plan.as_mut().unwrap().hypotheses_toml = "[[hypothesis]]\nid = 1\n".into();
        write(dir.path(), &doc);
        let err = Resume::open(dir.path())
            .unwrap()
            .hypotheses()
            .unwrap()
            .unwrap_err()
            .to_string();
        let named = format!(
            "invalid hypotheses file {} (meta.plan.hypotheses_toml, kept from lab/hypotheses.toml): ",
            dir.path().join(RESULTS_JSON).display()
        );
        assert!(err.starts_with(&named), "{err}");

        // A document from before plans kept them: the lab folder's, whatever they are.
        let plan = doc.meta.plan.as_mut().unwrap();
        plan.hypotheses_origin.clear();
        plan.hypotheses_toml.clear();
        write(dir.path(), &doc);
        let json = std::fs::read_to_string(dir.path().join(RESULTS_JSON)).unwrap();
        assert!(!json.contains("hypotheses_"), "nothing written for them");
        let resume = Resume::open(dir.path()).unwrap();
        assert!(resume.hypotheses().is_none());
        resume.check(&[("--lab-dir", changed)]).unwrap();
    }

    #[test]
    fn the_plan_files_are_the_builtin_copies_or_temporary_copies_of_its_text() {
        let dir = tempfile::tempdir().unwrap();
        let mut doc = partial_doc(Vec::new());
        write(dir.path(), &doc);
        let files = Resume::open(dir.path()).unwrap().files().unwrap();
        assert_eq!((files.strategies, files.scenarios), (None, None));

        doc.meta.plan.as_mut().unwrap().strategies_toml = "[c9]\n".into();
        write(dir.path(), &doc);
        let files = Resume::open(dir.path()).unwrap().files().unwrap();
        let path = files.strategies.clone().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "[c9]\n");
        assert_eq!(files.scenarios, None);
        drop(files);
        assert!(!path.exists(), "the copy goes with PlanFiles");

        // The file the plan was read from, while it holds the plan's text: the first part's
        // runners read it there, and so do the missing runs'.
        let lab = tempfile::tempdir().unwrap();
        let named = lab.path().join(crate::files::STRATEGIES);
        std::fs::write(&named, "[c9]\n").unwrap();
        doc.meta.plan.as_mut().unwrap().strategies_origin = named.display().to_string();
        write(dir.path(), &doc);
        let files = Resume::open(dir.path()).unwrap().files().unwrap();
        assert_eq!(files.strategies, Some(named.clone()));
        // Changed since: the plan's text, copied.
        std::fs::write(&named, "[c8]\n").unwrap();
        let files = Resume::open(dir.path()).unwrap().files().unwrap();
        let copy = files.strategies.clone().unwrap();
        assert_ne!(copy, named);
        assert_eq!(std::fs::read_to_string(&copy).unwrap(), "[c9]\n");
    }
}
