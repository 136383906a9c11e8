//! What `inflight lab run` is asked, resolved: the flags as given ([`LabArgs`]) checked, with
//! their defaults, what `--quick` stands for, the host's CPU count and, for `--resume`, the
//! plan of the folder resumed, into one [`LabRequest`] whose [`LabOptions`] the run uses.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use super::options::LabOptions;
use super::out_dir::{default_out_dir, OutDir};
use super::plan::{PlanFiles, Resume, Setting};
use super::session::LabRun;
use crate::files::{LabConfig, LabFiles, HYPOTHESES, SCENARIOS, STRATEGIES};
use crate::hypothesis::Hypothesis;
use crate::runner::loopback_base;
use crate::scenario::{time_scale_ok, MAX_TIME_SCALE};

/// The time scale of `--quick`: at 0.1 a call's fixed ~0.55 ms cost C1 4-6% against a full run;
/// at 0.2 most medians scaled back were measured within 3% of a full run's (lab/README.md: "Quick mode
/// and the full run").
pub const QUICK_TIME_SCALE: f64 = 0.2;
/// The repeats of `--quick`.
pub const QUICK_REPEATS: u32 = 3;
/// The repeats of a run that does not say.
pub const DEFAULT_REPEATS: u32 = 5;
/// The records per run of a run that does not say.
pub const DEFAULT_RECORDS: u64 = 200;
/// The base seed of a run that does not say.
pub const DEFAULT_SEED: u64 = 1;
/// The most records per run.
pub const MAX_RECORDS: u64 = 1_000_000;
/// The most runner processes per run (`--replicas`).
pub const MAX_REPLICAS: u32 = 16;
/// The smallest CPU quota: the kernel's, 1 ms per 100 ms.
pub const MIN_CPUS: f64 = 0.01;
/// The largest CPU quota taken.
pub const MAX_CPUS: f64 = 1024.0;

/// The flags of `inflight lab run` as given: `None` (or `false`) for each one left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabArgs {
    pub strategies: Option<Vec<String>>,
    pub scenarios: Option<Vec<String>>,
    pub cpus: Option<Vec<f64>>,
    pub records: Option<u64>,
    pub repeats: Option<u32>,
    pub time_scale: Option<f64>,
    pub seed: Option<u64>,
    pub out: Option<PathBuf>,
    pub replace: bool,
    pub resume: Option<PathBuf>,
    pub sim_url: Option<String>,
    pub quick: bool,
    pub metrics_addr: Option<SocketAddr>,
    pub no_limit: bool,
    pub replicas: Option<u32>,
    pub redis_url: Option<String>,
    pub lab_dir: Option<PathBuf>,
}

/// A new run's folder, or the partial one resumed.
#[derive(Debug)]
enum Start {
    New {
        out: PathBuf,
        replace: bool,
    },
    Resume {
        resume: Box<Resume>,
        /// Where the runners and the sim read the plan's strategies and scenarios: held, so
        /// that temporary copies last until the runs are over.
        _files: PlanFiles,
    },
}

/// A lab run's request, resolved and checked: its [`LabOptions`], the lab files it reads (for
/// the reference figures), the hypotheses it evaluates, and the folder it writes, new or
/// resumed. [`open`](LabRequest::open) then makes (or reopens) the folder.
#[derive(Debug)]
pub struct LabRequest {
    options: LabOptions,
    lab: LabConfig,
    start: Start,
    /// The lab folder's for a new run; the plan's for a resumed one.
    hypotheses: Vec<Hypothesis>,
    /// What the user should know before the run, said once (a resumed plan that kept no
    /// hypotheses).
    notes: Vec<String>,
}

impl LabRequest {
    /// Checks `args` and resolves them into a request that starts `exe` as the sim and the
    /// runners. Nothing is written but, for `--resume`, temporary copies of the plan's files
    /// where the lab folder no longer holds them.
    ///
    /// # Errors
    ///
    /// A flag out of range, a lab file that cannot be used, a matrix with more CPUs than the
    /// host has, or a folder that cannot be resumed (or not with the flags given); the message
    /// names the flag.
    pub fn resolve(args: LabArgs, exe: PathBuf) -> anyhow::Result<LabRequest> {
        let args = check(args)?;
        let lab = LabConfig::load(LabFiles::find(args.lab_dir.as_deref())?)?;
        match &args.resume {
            None => new_request(args, lab, exe),
            Some(dir) => {
                let dir = dir.clone();
                resumed_request(args, &dir, lab, exe)
            }
        }
    }

    /// The options the run uses.
    pub fn options(&self) -> &LabOptions {
        &self.options
    }

    /// The lab files: the reference figures to compare with, and the lab folder's hypotheses
    /// (a resumed run evaluates its plan's instead: see [`hypotheses`](LabRequest::hypotheses)).
    pub fn lab(&self) -> &LabConfig {
        &self.lab
    }

    /// The hypotheses to evaluate: the lab folder's for a new run, and for a resumed one those
    /// its plan kept when it started, whatever the lab folder holds now (the lab folder's only
    /// for a document written before plans kept them, which [`notes`](LabRequest::notes) says).
    pub fn hypotheses(&self) -> &[Hypothesis] {
        &self.hypotheses
    }

    /// What to tell the user once before the run starts, each a sentence without the `lab: `
    /// prefix.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Whether this continues a partial folder.
    pub fn is_resume(&self) -> bool {
        matches!(self.start, Start::Resume { .. })
    }

    /// One line saying what will run and where it is written (`lab: 11 cells x 3 repeats = 33
    /// runs of 200 records, time scale 0.2, seed 1; writing to lab-results/...`), or which
    /// folder is resumed with how many runs to go.
    pub fn describe(&self) -> String {
        let o = &self.options;
        match &self.start {
            Start::New { out, .. } => {
                let total = o.cells.len() * o.repeats as usize;
                let split = if o.replicas > 1 {
                    format!(", each split between {} replicas", o.replicas)
                } else {
                    String::new()
                };
                format!(
                    "lab: {} x {} = {total} {} of {} records{split}, time scale {}, seed {}; writing to {}",
                    count(o.cells.len(), "cell"),
                    count(o.repeats as usize, "repeat"),
                    if total == 1 { "run" } else { "runs" },
                    o.records,
                    o.time_scale,
                    o.seed,
                    out.display()
                )
            }
            Start::Resume { resume, .. } => {
                let done = resume.doc().runs.len();
                let planned = resume.doc().meta.runs_planned;
                let to_run = match resume.missing().len() {
                    0 => "none to run, the report to write".to_string(),
                    n => format!("{n} to run"),
                };
                format!(
                    "lab: resuming {}: {done} of {planned} runs done, {to_run} ({} x {} of {} records, time scale {}, seed {})",
                    resume.dir().display(),
                    count(o.cells.len(), "cell"),
                    count(o.repeats as usize, "repeat"),
                    o.records,
                    o.time_scale,
                    o.seed,
                )
            }
        }
    }

    /// Makes the report folder (checked to be writable) of a new run, or reopens the one
    /// resumed, and the [`LabRun`] to [`run`](LabRun::run) into it with
    /// [`options`](LabRequest::options). Call it once the signals are watched: a signal from
    /// here on ends in a message that says what was kept.
    ///
    /// # Errors
    ///
    /// If the folder cannot be made or written, already holds files (unless `--replace`), or
    /// holds a partial run to resume instead.
    pub fn open(&self) -> anyhow::Result<LabRun> {
        match &self.start {
            Start::New { out, replace } => {
                LabRun::new(&self.options, OutDir::create(out, *replace)?)
            }
            Start::Resume { resume, .. } => LabRun::resume(resume.as_ref().clone()),
        }
    }
}

/// `1 cell`, `3 cells`.
fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// The flags checked one by one, the name lists trimmed and without repeats.
fn check(mut args: LabArgs) -> anyhow::Result<LabArgs> {
    for list in [&mut args.strategies, &mut args.scenarios]
        .into_iter()
        .flatten()
    {
        list.iter_mut().for_each(|s| *s = s.trim().to_string());
        if list.iter().any(String::is_empty) {
            bail!("--strategies and --scenarios take comma-separated names, with none empty");
        }
        let mut seen = std::collections::HashSet::new();
        list.retain(|s| seen.insert(s.clone()));
    }
    if let Some(cpus) = &args.cpus {
        if let Some(bad) = cpus
            .iter()
            .find(|c| !(c.is_finite() && **c >= MIN_CPUS && **c <= MAX_CPUS))
        {
            bail!(
                "--cpus must be between {MIN_CPUS} (the kernel's smallest quota, 1 ms per 100 ms) and {MAX_CPUS} CPUs, got {bad}"
            );
        }
    }
    if let Some(addr) = args.metrics_addr.filter(|a| !a.ip().is_loopback()) {
        bail!("--metrics-addr must be a loopback address (127.0.0.1 or [::1]), got {addr}");
    }
    if args.repeats == Some(0) {
        bail!("--repeats must be at least 1");
    }
    if let Some(records) = args.records.filter(|r| *r == 0 || *r > MAX_RECORDS) {
        bail!("--records must be between 1 and {MAX_RECORDS}, got {records}");
    }
    if let Some(t) = args.time_scale.filter(|t| !time_scale_ok(*t)) {
        bail!("--time-scale must be a number above 0 and at most {MAX_TIME_SCALE}, got {t}");
    }
    if let Some(url) = &args.sim_url {
        loopback_base(url)?;
    }
    if let Some(url) = &args.redis_url {
        super::redis::check_url(url)?;
    }
    if let Some(replicas) = args.replicas {
        if !(1..=MAX_REPLICAS).contains(&replicas) {
            bail!("--replicas must be between 1 and {MAX_REPLICAS}, got {replicas}");
        }
        if let Some(records) = args.records.filter(|r| u64::from(replicas) > *r) {
            bail!(
                "--replicas {replicas} needs at least one record per replica, but --records is {records}"
            );
        }
    }
    // A quota above the host's CPUs gives the runner only the host's, under the quota's label.
    if let Some((bad, host_cpus)) = args
        .cpus
        .iter()
        .flatten()
        .find_map(|c| inflight_cpu::more_than_available(*c).map(|host| (c, host)))
    {
        bail!(
            "--cpus {bad} is more than this host's {}: the runner would have {host_cpus} while its rows said {bad}; give at most {host_cpus}",
            count(host_cpus, "CPU")
        );
    }
    Ok(args)
}

/// A value given on the command line, with the flag that gave it.
type Given<T> = Option<(T, &'static str)>;

/// What `--quick` stands for where the flag itself is left out: (repeats, time scale), each
/// with the flag that gave it.
fn quick_defaults(args: &LabArgs) -> (Given<u32>, Given<f64>) {
    let repeats = match (args.repeats, args.quick) {
        (Some(n), _) => Some((n, "--repeats")),
        (None, true) => Some((QUICK_REPEATS, "--quick")),
        (None, false) => None,
    };
    let time_scale = match (args.time_scale, args.quick) {
        (Some(t), _) => Some((t, "--time-scale")),
        (None, true) => Some((QUICK_TIME_SCALE, "--quick")),
        (None, false) => None,
    };
    (repeats, time_scale)
}

fn new_request(args: LabArgs, lab: LabConfig, exe: PathBuf) -> anyhow::Result<LabRequest> {
    let cells = lab.plan(
        args.strategies.as_deref(),
        args.scenarios.as_deref(),
        args.cpus.as_deref(),
    )?;
    if let Some((cell, host_cpus)) = cells
        .iter()
        .find_map(|c| inflight_cpu::more_than_available(c.cpus).map(|host| (c, host)))
    {
        bail!(
            "the matrix runs {} in {} at {} CPUs, more than this host's {}: the runner would have {host_cpus} while its rows said {}; give --cpus {host_cpus} (or fewer)",
            cell.strategy,
            cell.scenario,
            cell.cpus,
            count(host_cpus, "CPU"),
            cell.cpus
        );
    }
    let (repeats, time_scale) = quick_defaults(&args);
    let options = LabOptions {
        exe,
        cells,
        repeats: repeats.map_or(DEFAULT_REPEATS, |(n, _)| n),
        records: args.records.unwrap_or(DEFAULT_RECORDS),
        time_scale: time_scale.map_or(1.0, |(t, _)| t),
        seed: args.seed.unwrap_or(DEFAULT_SEED),
        strategies_file: lab.files.path(STRATEGIES),
        scenarios_file: lab.files.path(SCENARIOS),
        hypotheses_file: lab.files.path(HYPOTHESES),
        sim_url: args.sim_url,
        no_limit: args.no_limit,
        metrics_addr: args.metrics_addr,
        replicas: args.replicas.unwrap_or(1),
        redis_url: args.redis_url,
        lab_files: lab.files.origin().to_string(),
    };
    let start = Start::New {
        out: args.out.unwrap_or_else(default_out_dir),
        replace: args.replace,
    };
    Ok(LabRequest {
        options,
        hypotheses: lab.hypotheses.clone(),
        lab,
        start,
        notes: Vec::new(),
    })
}

fn resumed_request(
    args: LabArgs,
    dir: &Path,
    lab: LabConfig,
    exe: PathBuf,
) -> anyhow::Result<LabRequest> {
    if args.out.is_some() || args.replace {
        bail!("--resume cannot be used with --out or --replace: a resumed run writes into the folder it resumes");
    }
    let resume = Resume::open(dir)?;
    let (repeats, time_scale) = quick_defaults(&args);
    let mut given = Vec::new();
    if let Some(names) = &args.strategies {
        given.push(("--strategies", Setting::Strategies(names.clone())));
    }
    if let Some(names) = &args.scenarios {
        given.push(("--scenarios", Setting::Scenarios(names.clone())));
    }
    if let Some(cpus) = &args.cpus {
        given.push(("--cpus", Setting::Cpus(cpus.clone())));
    }
    if let Some(records) = args.records {
        given.push(("--records", Setting::Records(records)));
    }
    if let Some((repeats, flag)) = repeats {
        given.push((flag, Setting::Repeats(repeats)));
    }
    if let Some((time_scale, flag)) = time_scale {
        given.push((flag, Setting::TimeScale(time_scale)));
    }
    if let Some(seed) = args.seed {
        given.push(("--seed", Setting::Seed(seed)));
    }
    if args.lab_dir.is_some() {
        let files = Setting::files_of(&lab.files).context("cannot read the lab files")?;
        given.extend(files.map(|s| ("--lab-dir", s)));
        let hypotheses = Setting::hypotheses_of(&lab.files).context("cannot read the lab files")?;
        given.push(("--lab-dir", hypotheses));
    }
    resume.check(&given)?;
    let meta = &resume.doc().meta;
    if let Some(replicas) = args.replicas.filter(|r| *r != meta.replicas) {
        bail!(
            "--replicas asks for {replicas}, but the run in {} was planned with {}; leave it out to resume",
            dir.display(),
            meta.replicas
        );
    }
    let mut notes = Vec::new();
    let hypotheses = match resume.hypotheses() {
        Some(kept) => kept.with_context(|| {
            format!(
                "--resume {}: cannot use the hypotheses its plan kept",
                dir.display()
            )
        })?,
        None => {
            let now = match lab.files.path(HYPOTHESES) {
                Some(path) => format!("those of {} as it reads now", path.display()),
                None => "the built-in ones".to_string(),
            };
            notes.push(format!(
                "{} was written before plans kept their hypotheses: evaluating {now}",
                dir.join(super::out_dir::RESULTS_JSON).display(),
            ));
            lab.hypotheses.clone()
        }
    };
    let files = resume
        .files()
        .context("cannot write the plan's strategies and scenarios for the runners")?;
    let plan = resume.plan();
    let options = LabOptions {
        exe,
        cells: plan.cells.clone(),
        repeats: meta.repeats,
        records: meta.records,
        time_scale: meta.time_scale,
        seed: meta.seed,
        strategies_file: files.strategies.clone(),
        scenarios_file: files.scenarios.clone(),
        hypotheses_file: lab.files.path(HYPOTHESES),
        sim_url: args.sim_url,
        no_limit: args.no_limit,
        metrics_addr: args.metrics_addr,
        replicas: meta.replicas,
        redis_url: args.redis_url,
        lab_files: plan.lab_files.clone(),
    };
    Ok(LabRequest {
        options,
        lab,
        start: Start::Resume {
            resume: Box::new(resume),
            _files: files,
        },
        hypotheses,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::results::ResultsDoc;
    use crate::run::out_dir::RESULTS_JSON;
    use crate::run::scheduler::runner_args;

    fn repo_lab() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab")
    }

    fn quick(out: &Path) -> LabArgs {
        LabArgs {
            strategies: Some(vec!["c3".into(), " c4".into(), "c3".into()]),
            scenarios: Some(vec!["slow-write".into()]),
            quick: true,
            lab_dir: Some(repo_lab()),
            out: Some(out.to_path_buf()),
            no_limit: true,
            ..LabArgs::default()
        }
    }

    #[test]
    fn quick_stands_for_three_repeats_at_a_fifth_of_the_time() {
        let dir = tempfile::tempdir().unwrap();
        let request = LabRequest::resolve(quick(&dir.path().join("r")), "inflight".into()).unwrap();
        let o = request.options();
        assert_eq!((o.repeats, o.time_scale), (QUICK_REPEATS, QUICK_TIME_SCALE));
        assert_eq!(
            (o.records, o.seed, o.replicas),
            (DEFAULT_RECORDS, DEFAULT_SEED, 1)
        );
        let names: Vec<&str> = o.cells.iter().map(|c| c.strategy.as_str()).collect();
        assert_eq!(names, ["c3", "c4"], "trimmed, without repeats");
        assert_eq!(o.lab_files, format!("--lab-dir {}", repo_lab().display()));
        assert!(!request.is_resume());
        assert!(
            request.describe().starts_with(
                "lab: 2 cells x 3 repeats = 6 runs of 200 records, time scale 0.2, seed 1; writing to "
            ),
            "{}",
            request.describe()
        );
        // A flag given wins over --quick.
        let args = LabArgs {
            time_scale: Some(0.5),
            ..quick(&dir.path().join("r"))
        };
        let request = LabRequest::resolve(args, "inflight".into()).unwrap();
        assert_eq!(request.options().time_scale, 0.5);
        assert!(!dir.path().join("r").exists(), "resolving writes nothing");
    }

    #[test]
    fn time_scales_beyond_the_labs_bound_are_refused_by_it() {
        for t in [0.0, -1.0, f64::NAN, MAX_TIME_SCALE * 1.01] {
            let args = LabArgs {
                time_scale: Some(t),
                ..LabArgs::default()
            };
            let err = LabRequest::resolve(args, "inflight".into())
                .unwrap_err()
                .to_string();
            assert_eq!(
                err,
                format!("--time-scale must be a number above 0 and at most 100, got {t}")
            );
        }
        assert!(time_scale_ok(MAX_TIME_SCALE));
    }

    /// A resumed run evaluates the hypotheses its plan kept, whatever the lab folder holds by
    /// then; the lab folder's only for a document from before plans kept them, and says so.
    #[test]
    fn a_resumed_run_evaluates_its_plans_hypotheses() {
        let dir = tempfile::tempdir().unwrap();
        let lab = dir.path().join("lab");
        std::fs::create_dir(&lab).unwrap();
        for name in [STRATEGIES, SCENARIOS] {
            std::fs::copy(repo_lab().join(name), lab.join(name)).unwrap();
        }
        let one = |id: &str| {
            format!("[[hypothesis]]\nid = \"{id}\"\nclaim = \"c4 completes\"\nmetric = \"complete\"\nscenario = \"slow-write\"\nstrategies = [\"c4\"]\ncompare = \">\"\nthreshold = 0\n")
        };
        std::fs::write(lab.join(HYPOTHESES), one("K1")).unwrap();
        let out = dir.path().join("r");
        let fresh = LabRequest::resolve(
            LabArgs {
                lab_dir: Some(lab.clone()),
                ..quick(&out)
            },
            "inflight".into(),
        )
        .unwrap();
        let ids = |r: &LabRequest| -> Vec<String> {
            r.hypotheses().iter().map(|h| h.id.clone()).collect()
        };
        assert_eq!(ids(&fresh), ["K1"]);
        let first = fresh.open().unwrap();
        let plan = first.doc().meta.plan.clone().unwrap();
        assert_eq!(
            plan.hypotheses_origin,
            lab.join(HYPOTHESES).display().to_string()
        );
        assert_eq!(plan.hypotheses_toml, one("K1"));
        let json = serde_json::to_string(first.doc()).unwrap();
        std::fs::write(out.join(RESULTS_JSON), &json).unwrap();

        std::fs::write(lab.join(HYPOTHESES), one("K2")).unwrap();
        let resume = |lab_dir: Option<&Path>| {
            let args = LabArgs {
                resume: Some(out.clone()),
                lab_dir: lab_dir.map(Path::to_path_buf),
                ..LabArgs::default()
            };
            LabRequest::resolve(args, "inflight".into())
        };
        let resumed = resume(None).unwrap();
        assert_eq!(ids(&resumed), ["K1"]);
        assert!(resumed.notes().is_empty(), "{:?}", resumed.notes());
        // The changed file is refused, as changed strategies are.
        let err = resume(Some(&lab)).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "--lab-dir asks for the hypotheses of {}",
                lab.join(HYPOTHESES).display()
            )),
            "{err}"
        );

        // From before plans kept them: the lab folder's, said once.
        let mut doc: ResultsDoc = serde_json::from_str(&json).unwrap();
        let plan = doc.meta.plan.as_mut().unwrap();
        plan.hypotheses_origin.clear();
        plan.hypotheses_toml.clear();
        std::fs::write(out.join(RESULTS_JSON), serde_json::to_string(&doc).unwrap()).unwrap();
        let resumed = resume(Some(&lab)).unwrap();
        assert_eq!(ids(&resumed), ["K2"]);
        assert_eq!(
            resumed.notes(),
            [format!(
                "{} was written before plans kept their hypotheses: evaluating those of {} as it reads now",
                out.join(RESULTS_JSON).display(),
                lab.join(HYPOTHESES).display()
            )]
        );
    }

    /// The first part of a quick run and its resumed rest start the sim and every runner with
    /// the same command line.
    #[test]
    fn a_resumed_run_starts_the_sim_and_runners_as_the_first_part_did() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("r");
        let fresh = LabRequest::resolve(quick(&out), "inflight".into()).unwrap();
        // As an interrupted run leaves its folder: the plan saved, no run finished.
        let first = fresh.open().unwrap();
        let json = serde_json::to_string(first.doc()).unwrap();
        std::fs::write(out.join(RESULTS_JSON), json).unwrap();

        let args = LabArgs {
            resume: Some(out.clone()),
            ..LabArgs::default()
        };
        let resumed = LabRequest::resolve(args, "inflight".into()).unwrap();
        assert!(resumed.is_resume());
        let (a, b) = (fresh.options(), resumed.options());
        assert_eq!(a.sim_command(), b.sim_command());
        assert_eq!(
            (a.strategies_file.as_ref(), a.scenarios_file.as_ref()),
            (b.strategies_file.as_ref(), b.scenarios_file.as_ref())
        );
        assert_eq!(a.cells, b.cells);
        assert_eq!(
            (
                a.records,
                a.repeats,
                a.replicas,
                a.seed,
                a.time_scale.to_bits()
            ),
            (
                b.records,
                b.repeats,
                b.replicas,
                b.seed,
                b.time_scale.to_bits()
            )
        );
        assert_eq!(a.lab_files, b.lab_files);
        for repeat in 1..=a.repeats {
            for cell in &a.cells {
                let line = |o: &LabOptions| {
                    runner_args(o, "http://127.0.0.1:4000", cell, repeat, 0, None, &[], None)
                        .command_line()
                };
                assert_eq!(line(a), line(b), "{cell:?} repeat {repeat}");
            }
        }
        let doc: ResultsDoc =
            serde_json::from_str(&std::fs::read_to_string(out.join(RESULTS_JSON)).unwrap())
                .unwrap();
        assert_eq!(doc.meta.plan.unwrap().lab_files, a.lab_files);
    }
}
