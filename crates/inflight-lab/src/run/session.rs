//! A lab session in its report folder ([`LabRun`]): the plan saved, the sim started, the runs
//! run and each kept as it finishes, then the report, complete or partial ([`LabEnd`]).

use std::path::{Path, PathBuf};

use anyhow::Context;
use inflight_cpu::Enforcement;

use crate::hypothesis::Hypothesis;
use crate::report::Reference;
use crate::results::{ResultsDoc, RunMeta, RunPlan, RunResult, SummaryRow};
use crate::runner::loopback_base;
use crate::sim::client::{SimClient, SimClientError};
use crate::sim::process::SimProcess;
use crate::strategy::Strategies;

use inflight_bench::shutdown::Shutdown;

use super::error::LabError;
use super::measure;
use super::options::LabOptions;
use super::out_dir::{write_outputs, OutDir};
use super::plan::{self, planned_runs, PlannedRun, Resume, INFLIGHT_BUILD};
use super::progress::Progress;
use super::redis::LabRedis;
use super::scheduler::{probe_enforcement, run_cells, RunEnv};
use crate::results::summarize;

/// How a lab session ended ([`LabRun::conclude`]).
#[derive(Debug)]
pub struct LabEnd {
    /// Why the lab stopped before every run of the session finished; `None` when it did not.
    pub stopped: Option<LabError>,
    /// The run that was in progress when the lab stopped (`c1 healthy 1 CPU repeat 1`): stopped
    /// and discarded.
    pub unfinished: Option<String>,
    /// The report folder (removed again when nothing was kept, if this run made it).
    pub dir: PathBuf,
    /// The document written into `dir` with its report; `None` when nothing was kept: a new run
    /// that stopped before any of its runs finished.
    pub kept: Option<ResultsDoc>,
}

impl LabEnd {
    /// Whether a signal (Ctrl-C, SIGTERM, SIGHUP) stopped the lab.
    pub fn interrupted(&self) -> bool {
        matches!(self.stopped, Some(LabError::Interrupted))
    }

    /// What the lab kept, in a sentence: `..., so nothing was kept`, or the runs of a partial
    /// report; `None` for a run that finished.
    pub fn kept_line(&self) -> Option<String> {
        let Some(doc) = &self.kept else {
            let why = match &self.unfinished {
                Some(run) => format!("no run had finished ({run} was in progress)"),
                None => "the lab stopped before its first run finished".to_string(),
            };
            return Some(format!("{why}, so nothing was kept"));
        };
        if !doc.meta.partial {
            return None;
        }
        let discarded = match &self.unfinished {
            Some(run) => format!("; the run in progress ({run}) was stopped and discarded"),
            None => String::new(),
        };
        Some(format!(
            "partial report: {} of {} runs finished{discarded}",
            doc.runs.len(),
            doc.meta.runs_planned
        ))
    }
}

/// A lab run in its report folder: the plan and the runs finished so far, kept in
/// `results.json` (marked partial until the report is written) and saved before the first run
/// and after every run.
///
/// Start one with [`LabRun::new`] (a new plan) or [`LabRun::resume`] (the runs a partial folder
/// lacks), [`run`](LabRun::run) it, then [`write_report`](LabRun::write_report): complete when
/// every planned run finished, partial when the lab stopped early.
#[derive(Debug)]
pub struct LabRun {
    doc: ResultsDoc,
    out: OutDir,
    /// The runs still to run, in order.
    todo: Vec<PlannedRun>,
    /// The runs the folder held when this session began.
    done_before: usize,
    /// Whether this continues a partial folder.
    resumed: bool,
    /// The run started and not finished, if any: the one an interruption discards.
    in_progress: Option<String>,
}

impl LabRun {
    /// A new run of `opts` into `out` (from [`OutDir::create`]); nothing is written yet. The
    /// plan keeps the strategies, scenarios and hypotheses files' text, so a resumed run reads
    /// and evaluates the same.
    pub fn new(opts: &LabOptions, out: OutDir) -> anyhow::Result<LabRun> {
        if opts.cells.is_empty() || opts.repeats == 0 || opts.records == 0 {
            anyhow::bail!("nothing to run: need at least one cell, one repeat and one record");
        }
        if opts.replicas == 0 || u64::from(opts.replicas) > opts.records {
            anyhow::bail!(
                "--replicas must be at least 1 and at most the records per run ({}), got {}",
                opts.records,
                opts.replicas
            );
        }
        let text = |file: &Option<PathBuf>, builtin: &str| -> anyhow::Result<(String, String)> {
            match file {
                Some(path) => Ok((
                    path.display().to_string(),
                    std::fs::read_to_string(path)
                        .with_context(|| format!("cannot read {}", path.display()))?,
                )),
                None => Ok(("built-in".to_string(), builtin.to_string())),
            }
        };
        let (strategies_origin, strategies_toml) =
            text(&opts.strategies_file, crate::strategy::BUILTIN_STRATEGIES)?;
        let (scenarios_origin, scenarios_toml) =
            text(&opts.scenarios_file, crate::scenario::BUILTIN_SCENARIOS)?;
        let (hypotheses_origin, hypotheses_toml) =
            text(&opts.hypotheses_file, crate::hypothesis::BUILTIN_HYPOTHESES)?;
        let todo = planned_runs(&opts.cells, opts.repeats);
        let doc = ResultsDoc {
            meta: RunMeta {
                started_at: now(),
                records: opts.records,
                repeats: opts.repeats,
                time_scale: opts.time_scale,
                seed: opts.seed,
                // Decided when the run starts (`run`), before anything is saved.
                enforcement: Enforcement::None,
                host_cpus: crate::strategy::available_parallelism(),
                inflight_version: env!("CARGO_PKG_VERSION").to_string(),
                inflight_build: INFLIGHT_BUILD.to_string(),
                replicas: opts.replicas,
                partial: true,
                runs_planned: todo.len(),
                runs_finished: 0,
                resumed_at: Vec::new(),
                plan: Some(RunPlan {
                    cells: opts.cells.clone(),
                    strategies_origin,
                    strategies_toml,
                    scenarios_origin,
                    scenarios_toml,
                    hypotheses_origin,
                    hypotheses_toml,
                    lab_files: opts.lab_files.clone(),
                    exe: opts.exe.display().to_string(),
                }),
            },
            ..ResultsDoc::default()
        };
        Ok(LabRun {
            doc,
            out,
            todo,
            done_before: 0,
            resumed: false,
            in_progress: None,
        })
    }

    /// Continues the partial run `resume` read, in its folder: [`run`](LabRun::run) runs the
    /// missing runs only. The [`LabOptions`] given to `run` must be the plan's (see
    /// [`Resume::files`] for the strategies and scenarios files).
    pub fn resume(resume: Resume) -> anyhow::Result<LabRun> {
        let out = OutDir::resume(resume.dir())?;
        let todo = resume.missing().to_vec();
        let mut doc = resume.doc().clone();
        doc.meta.resumed_at.push(now());
        Ok(LabRun {
            done_before: doc.runs.len(),
            doc,
            out,
            todo,
            resumed: true,
            in_progress: None,
        })
    }

    /// The document: the plan and the runs finished so far.
    pub fn doc(&self) -> &ResultsDoc {
        &self.doc
    }

    /// The report folder.
    pub fn dir(&self) -> &Path {
        self.out.path()
    }

    /// The runs the folder already held when this session began (0 for a new run).
    pub fn done_before(&self) -> usize {
        self.done_before
    }

    /// The runs this session has to run.
    pub fn to_run(&self) -> usize {
        self.todo.len()
    }

    /// The run that was started and did not finish (`c4 healthy 1 CPU repeat 2`), if any: after
    /// an interruption, the one discarded.
    pub fn unfinished(&self) -> Option<&str> {
        self.in_progress.as_deref()
    }

    /// Whether nothing here is worth keeping: a new run that stopped before any run finished.
    pub fn is_empty(&self) -> bool {
        !self.resumed && self.doc.runs.is_empty()
    }

    /// Removes what this run wrote, and its folder if it made it (see [`OutDir::discard`]).
    pub fn discard(self) {
        self.out.discard();
    }

    /// Runs the runs still to run, saving `results.json` before the first (with the plan) and
    /// after each. Starts the sim unless `opts.sim_url` names one, and stops it at the end.
    /// `progress` hears about each run.
    ///
    /// # Errors
    ///
    /// [`LabError::Interrupted`] when `shutdown` fires (the run in progress is stopped and not
    /// kept), or why the lab could not go on. Either way the runs that finished are in
    /// [`doc`](LabRun::doc) and in the folder, ready for [`write_report`](LabRun::write_report).
    pub async fn run(
        &mut self,
        opts: &LabOptions,
        shutdown: &Shutdown,
        progress: &mut dyn FnMut(Progress<'_>),
    ) -> Result<(), LabError> {
        // A signal while the lab started up: nothing saved yet, nothing started.
        if shutdown.fired() {
            return Err(LabError::Interrupted);
        }
        self.check_options(opts)?;
        let limited = self.enforce(opts, progress)?;
        self.save()?;
        if self.todo.is_empty() {
            return Ok(());
        }

        let (sim, url) = match &opts.sim_url {
            Some(url) => {
                let url = loopback_base(url).map_err(|e| LabError::Invalid(e.to_string()))?;
                (None, url)
            }
            None => {
                let sim = SimProcess::start(&opts.sim_command(), shutdown.wait()).await?;
                let url = sim.url().to_string();
                (Some(sim), url)
            }
        };
        if let Err(e) = check_sim(&url).await {
            if let Some(sim) = sim {
                sim.stop().await;
            }
            return Err(e);
        }
        progress(Progress::SimReady {
            url: &url,
            started: sim.is_some(),
        });

        let prepared = self.prepare(opts, shutdown, progress, &url).await;
        let (redis, strategies) = match prepared {
            Ok(prepared) => prepared,
            Err(e) => {
                if let Some(sim) = sim {
                    sim.stop().await;
                }
                return Err(e);
            }
        };

        let todo = self.todo.clone();
        let all = planned_runs(&opts.cells, opts.repeats);
        let measured = self.doc.measured.clone();
        let LabRun {
            doc,
            out,
            in_progress,
            ..
        } = self;
        let mut track = |p: Progress<'_>| {
            match &p {
                Progress::RunStarting { cell, repeat, .. } => {
                    *in_progress = Some(
                        PlannedRun {
                            cell: (*cell).clone(),
                            repeat: *repeat,
                        }
                        .to_string(),
                    );
                }
                Progress::RunDone { .. } => *in_progress = None,
                _ => {}
            }
            progress(p);
        };
        let mut finished = |result: &RunResult| {
            keep_run(doc, &all, result.clone());
            out.save(doc).map_err(|source| LabError::Save {
                path: out.path().to_path_buf(),
                source,
            })
        };
        let env = RunEnv {
            url: &url,
            limited,
            redis: redis.as_ref(),
            measured: &measured,
            strategies: &strategies,
        };
        let result = run_cells(opts, &todo, shutdown, &env, &mut track, &mut finished).await;
        if let Some(redis) = redis {
            redis.stop().await;
        }
        if let Some(sim) = sim {
            sim.stop().await;
        }
        self.todo
            .retain(|p| !self.doc.runs.iter().any(|r| p.matches(r)));
        result
    }

    /// Evaluates the hypotheses and writes the report and `results.json` into the folder: the
    /// complete report when every planned run has finished, else one from the runs that did,
    /// marked partial in the document, the tables and the page.
    pub fn write_report(
        &mut self,
        hypotheses: &[Hypothesis],
        reference: &Reference,
    ) -> anyhow::Result<()> {
        self.doc.meta.partial = self.doc.runs.len() < self.doc.meta.runs_planned;
        evaluate_hypotheses(&mut self.doc, hypotheses);
        write_outputs(&self.doc, reference, self.out.path())
    }

    /// Ends the session after [`run`](LabRun::run) returned `result`: a new run that stopped
    /// before any run finished keeps nothing (its folder is removed again, see
    /// [`discard`](LabRun::discard)); otherwise the report is written
    /// ([`write_report`](LabRun::write_report)), complete or partial. The end says which, and
    /// why the lab stopped, for the command line to tell.
    ///
    /// # Errors
    ///
    /// If the report cannot be written.
    pub fn conclude(
        mut self,
        result: Result<(), LabError>,
        hypotheses: &[Hypothesis],
        reference: &Reference,
    ) -> anyhow::Result<LabEnd> {
        let stopped = result.err();
        let unfinished = self.in_progress.take();
        let dir = self.out.path().to_path_buf();
        if stopped.is_some() && self.is_empty() {
            self.discard();
            return Ok(LabEnd {
                stopped,
                unfinished,
                dir,
                kept: None,
            });
        }
        self.write_report(hypotheses, reference)?;
        Ok(LabEnd {
            stopped,
            unfinished,
            dir,
            kept: Some(self.doc),
        })
    }

    /// The options must be the plan's: a resumed run that read them wrong would mix runs of
    /// two plans in one document.
    fn check_options(&self, opts: &LabOptions) -> Result<(), LabError> {
        let m = &self.doc.meta;
        let same = m.plan.as_ref().is_some_and(|p| p.cells == opts.cells)
            && m.records == opts.records
            && m.repeats == opts.repeats
            && m.time_scale == opts.time_scale
            && m.seed == opts.seed
            && m.replicas == opts.replicas;
        if same {
            Ok(())
        } else {
            Err(LabError::Invalid(format!(
                "the options of this run differ from the plan in {}",
                self.out.path().display()
            )))
        }
    }

    /// Decides whether runs get a CPU quota: a new run probes for one (running without if none
    /// can be enforced and `--no-limit`); a resumed run does as its finished runs did.
    fn enforce(
        &mut self,
        opts: &LabOptions,
        progress: &mut dyn FnMut(Progress<'_>),
    ) -> Result<bool, LabError> {
        let mut cpus: Vec<f64> = Vec::new();
        for run in &self.todo {
            if !cpus.contains(&run.cell.cpus) {
                cpus.push(run.cell.cpus);
            }
        }
        if !self.resumed {
            let enforcement = match probe_enforcement(&cpus) {
                Ok(e) => e,
                Err((_, message)) if opts.no_limit => {
                    progress(Progress::NoLimit { message: &message });
                    Enforcement::None
                }
                Err((c, message)) => return Err(LabError::NoLimit { cpus: c, message }),
            };
            self.doc.meta.enforcement = enforcement;
            return Ok(enforcement != Enforcement::None);
        }
        let planned = self.doc.meta.enforcement;
        if self.todo.is_empty() {
            return Ok(planned != Enforcement::None);
        }
        if planned == Enforcement::None {
            progress(Progress::NoLimit {
                message:
                    "the runs already done ran without a CPU limit, so the missing ones do too",
            });
            return Ok(false);
        }
        match probe_enforcement(&cpus) {
            Ok(now) => {
                if now != planned {
                    progress(Progress::Warning(format!(
                        "the runs already done were limited through {planned}, the missing ones are through {now}"
                    )));
                }
                Ok(true)
            }
            Err((c, message)) => Err(LabError::NoLimit {
                cpus: c,
                message: format!(
                    "{message}; the runs already done ran under a CPU quota ({planned}), so the missing ones must too"
                ),
            }),
        }
    }

    /// What the runs need besides the sim: the Redis of fleet budgets, started or reached, and
    /// the budgets measured against the sim (kept in the document, so a resumed run reuses them).
    async fn prepare(
        &mut self,
        opts: &LabOptions,
        shutdown: &Shutdown,
        progress: &mut dyn FnMut(Progress<'_>),
        url: &str,
    ) -> Result<(Option<LabRedis>, Strategies), LabError> {
        let strategies = match &opts.strategies_file {
            Some(path) => {
                crate::strategy::load(path).map_err(|e| LabError::Invalid(e.to_string()))?
            }
            None => crate::strategy::builtin(),
        };
        let redis = start_redis(opts, &strategies).await?;
        if let Some(redis) = &redis {
            progress(Progress::RedisReady {
                url: redis.url(),
                started: redis.started_here(),
            });
        }
        if self.doc.measured.is_empty() {
            let control = SimClient::new(url.to_string())?;
            match measure::measure_budgets(opts, &strategies, shutdown, &control, progress).await {
                Ok(measured) if !measured.is_empty() => {
                    self.doc.measured = measured;
                    self.save()?;
                }
                Ok(_) => {}
                Err(e) => {
                    if let Some(redis) = redis {
                        redis.stop().await;
                    }
                    return Err(e);
                }
            }
        }
        Ok((redis, strategies))
    }

    fn save(&self) -> Result<(), LabError> {
        self.out.save(&self.doc).map_err(|source| LabError::Save {
            path: self.out.path().to_path_buf(),
            source,
        })
    }
}

/// Fails early, with the sim's own message, if no sim answers at `url` (a `--sim-url` where
/// nothing listens): before the budgets are measured or a run starts.
async fn check_sim(url: &str) -> Result<(), LabError> {
    let control = SimClient::new(url.to_string())?;
    control.stats().await.map_err(|e| SimClientError {
        message: format!(
            "no `inflight sim` answers there (start one with `inflight sim --port <port>`, or leave out --sim-url): {}",
            e.message
        ),
        url: e.url,
    })?;
    Ok(())
}

/// The Redis the run's fleet budgets need: `opts.redis_url`, or one started here; `None` when no
/// strategy of the run keeps a budget in Redis.
async fn start_redis(
    opts: &LabOptions,
    strategies: &crate::strategy::Strategies,
) -> Result<Option<LabRedis>, LabError> {
    let mut needed = false;
    for cell in &opts.cells {
        let strategy = strategies
            .get(&cell.strategy)
            .map_err(|e| LabError::Invalid(e.to_string()))?;
        needed |= strategy.uses_fleet();
    }
    match (&opts.redis_url, needed) {
        (_, false) => Ok(None),
        (Some(url), true) => LabRedis::connect(url).await.map(Some),
        (None, true) => LabRedis::start().await.map(Some),
    }
}

/// Adds a finished run to `doc`, in plan order whatever order runs finished in, and brings the
/// counts and the summary up to date.
fn keep_run(doc: &mut ResultsDoc, plan: &[PlannedRun], mut run: RunResult) {
    // The lab knows whether it put the runner under a quota.
    run.unlimited = doc.meta.enforcement == Enforcement::None;
    doc.runs.push(run);
    doc.runs
        .sort_by_key(|r| plan::plan_index(plan, r).unwrap_or(usize::MAX));
    doc.meta.runs_finished = doc.runs.len();
    doc.summary = summarize(&doc.runs);
}

fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// Evaluates the preregistered hypotheses against the document's summary and stores the results
/// in the document. A failed hypothesis is a finding, not an error.
///
/// In a partial document only the cells with every planned repeat count: a hypothesis about a
/// cell with fewer is skipped, and says the lab stopped before its repeats finished.
pub fn evaluate_hypotheses(doc: &mut ResultsDoc, hypotheses: &[Hypothesis]) {
    if !doc.meta.partial {
        doc.hypotheses = crate::hypothesis::evaluate(hypotheses, doc);
        return;
    }
    let finished = ResultsDoc {
        meta: doc.meta.clone(),
        summary: doc
            .summary
            .iter()
            .filter(|row| row.repeats >= doc.meta.repeats)
            .cloned()
            .collect(),
        ..ResultsDoc::default()
    };
    let mut results = crate::hypothesis::evaluate(hypotheses, &finished);
    if let Some(plan) = &doc.meta.plan {
        // What would be evaluated had every planned run finished.
        let whole = ResultsDoc {
            meta: doc.meta.clone(),
            summary: plan
                .cells
                .iter()
                .map(|cell| SummaryRow {
                    strategy: cell.strategy.clone(),
                    scenario: cell.scenario.clone(),
                    cpus: cell.cpus,
                    repeats: doc.meta.repeats,
                    ..SummaryRow::default()
                })
                .collect(),
            ..ResultsDoc::default()
        };
        let planned = crate::hypothesis::evaluate(hypotheses, &whole);
        for (result, planned) in results.iter_mut().zip(planned) {
            if result.outcome == "skipped" && planned.outcome != "skipped" {
                result.observed.push_str(
                    "; planned, but the lab stopped before every repeat of these cells finished (resume the run to evaluate it)",
                );
            }
        }
    }
    doc.hypotheses = results;
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::matrix::Cell;
    use crate::results::sample_run;
    use crate::run::out_dir::RESULTS_JSON;

    const HYPOTHESES: &str = r#"
[[hypothesis]]
id = "A"
claim = "c4 completes in healthy"
metric = "complete"
scenario = "healthy"
strategies = ["c4"]
compare = ">"
threshold = 0

[[hypothesis]]
id = "B"
claim = "c1 completes in healthy"
metric = "complete"
scenario = "healthy"
strategies = ["c1"]
compare = ">"
threshold = 0

[[hypothesis]]
id = "C"
claim = "c9 is not planned"
metric = "complete"
scenario = "healthy"
strategies = ["c9"]
compare = ">"
threshold = 0
"#;

    fn doc_of(runs: Vec<RunResult>, partial: bool) -> ResultsDoc {
        let cells = vec![
            Cell::new("c4", "healthy", 1.0),
            Cell::new("c1", "healthy", 1.0),
        ];
        let plan = planned_runs(&cells, 2);
        let mut doc = ResultsDoc::default();
        doc.meta.repeats = 2;
        doc.meta.runs_planned = plan.len();
        doc.meta.partial = partial;
        doc.meta.plan = Some(RunPlan {
            cells,
            ..RunPlan::default()
        });
        for run in runs {
            keep_run(&mut doc, &plan, run);
        }
        doc
    }

    #[test]
    fn kept_runs_are_in_plan_order_with_counts_and_summary() {
        let doc = doc_of(
            vec![
                sample_run("c1", "healthy", 1.0, 1, 2.0),
                sample_run("c4", "healthy", 1.0, 2, 1.0),
                sample_run("c4", "healthy", 1.0, 1, 1.0),
            ],
            true,
        );
        let order: Vec<(&str, u32)> = doc
            .runs
            .iter()
            .map(|r| (r.strategy.as_str(), r.repeat))
            .collect();
        assert_eq!(order, [("c4", 1), ("c1", 1), ("c4", 2)]);
        assert_eq!(doc.meta.runs_finished, 3);
        assert_eq!(doc.summary.len(), 2);
        assert_eq!(doc.summary[0].repeats, 2);
    }

    #[test]
    fn a_partial_document_skips_hypotheses_whose_cells_lack_repeats() {
        let hypotheses = crate::hypothesis::parse(HYPOTHESES, "test").unwrap();
        let runs = vec![
            sample_run("c4", "healthy", 1.0, 1, 1.0),
            sample_run("c1", "healthy", 1.0, 1, 2.0),
            sample_run("c4", "healthy", 1.0, 2, 1.0),
        ];
        let mut doc = doc_of(runs.clone(), true);
        evaluate_hypotheses(&mut doc, &hypotheses);
        let outcomes: Vec<&str> = doc.hypotheses.iter().map(|h| h.outcome.as_str()).collect();
        assert_eq!(outcomes, ["pass", "skipped", "skipped"]);
        assert!(
            doc.hypotheses[1]
                .observed
                .contains("the lab stopped before every repeat"),
            "{}",
            doc.hypotheses[1].observed
        );
        assert!(
            !doc.hypotheses[2].observed.contains("the lab stopped"),
            "c9 was never planned: {}",
            doc.hypotheses[2].observed
        );
        // The same runs in a complete document count every cell.
        let mut doc = doc_of(runs, false);
        evaluate_hypotheses(&mut doc, &hypotheses);
        assert_eq!(doc.hypotheses[1].outcome, "pass");
    }

    #[test]
    fn a_new_run_saves_nothing_until_it_runs_and_plans_repeat_by_repeat() {
        let dir = tempfile::tempdir().unwrap();
        let opts = LabOptions {
            exe: PathBuf::from("inflight"),
            cells: vec![
                Cell::new("c4", "healthy", 1.0),
                Cell::new("c1", "healthy", 1.0),
            ],
            repeats: 3,
            records: 10,
            time_scale: 0.1,
            seed: 7,
            strategies_file: None,
            scenarios_file: None,
            hypotheses_file: None,
            sim_url: None,
            no_limit: true,
            metrics_addr: None,
            replicas: 1,
            redis_url: None,
            lab_files: "the copies built into inflight".into(),
        };
        let out = OutDir::create(&dir.path().join("r"), false).unwrap();
        let run = LabRun::new(&opts, out).unwrap();
        assert!(!dir.path().join("r").join(RESULTS_JSON).exists());
        assert_eq!((run.done_before(), run.to_run()), (0, 6));
        let meta = &run.doc().meta;
        assert!(meta.partial);
        assert_eq!(meta.runs_planned, 6);
        let plan = meta.plan.as_ref().unwrap();
        assert_eq!(plan.strategies_origin, "built-in");
        assert_eq!(plan.strategies_toml, crate::strategy::BUILTIN_STRATEGIES);
        assert_eq!(plan.hypotheses_origin, "built-in");
        assert_eq!(plan.hypotheses_toml, crate::hypothesis::BUILTIN_HYPOTHESES);
        assert_eq!(plan.exe, "inflight");
        assert_eq!(meta.inflight_build, INFLIGHT_BUILD);
        assert!(run.is_empty());
        let mut bad = opts.clone();
        bad.repeats = 0;
        let out = OutDir::create(&dir.path().join("s"), false).unwrap();
        let err = LabRun::new(&bad, out).unwrap_err().to_string();
        assert!(err.contains("nothing to run"), "{err}");
    }
}
