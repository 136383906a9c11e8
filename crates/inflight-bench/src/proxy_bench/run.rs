//! A whole benchmark run ([`run`]): the upstream started once, then for each repeat each
//! target in the repeat's [`rotation`](super::plan::rotation): a proxy is started fresh for its
//! idle connections, fresh again under callgrind if instructions are counted that way, then
//! once more for the load steps (saturation, the latency load points, the budget case), and
//! stopped. Every step's measurement is kept as a [`Record`]; after each step the caller gets
//! the JSON document so far, and a signal stops the run with what finished.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use inflight_cpu::QuotaGroup;
use serde_json::{json, Map, Value};

use super::awake::{AwakeCpu, AwakeStatus};
use super::goals::{self, Goal};
use super::host::{self, Pinning};
use super::idle::{self, IdlePlan};
use super::instructions::{self, Callgrind, CallgrindReport, InstructionsStatus};
use super::load::{self, LoadPlan, LoadReport, Loop};
use super::plan::{
    self, Settings, Who, BUDGET_LIMIT, CALLGRIND_CONNECTIONS, CALLGRIND_WARMUP_REQUESTS,
    MAX_SEND_LAG,
};
use super::report::{self, Completion, Conditions};
use super::servers::{self, Configs, Ports, Process, Tools};
use super::summary::{Case, Record, Summary, Throttled};
use super::{reset_upstream, upstream_stats, ProxyBenchError, Target};
use crate::shutdown::Shutdown;

/// Time between steps (starting and stopping processes, reading counters), for the estimate of
/// the time left.
const STEP_OVERHEAD_S: f64 = 0.5;

/// The idle step's short load first, so that the memory before already holds what serving
/// needs (the upstream connections, the first buffers).
const IDLE_WARMING: Duration = Duration::from_millis(300);

/// Everything a run needs.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// What to measure.
    pub settings: Settings,
    /// The programs to start.
    pub tools: Tools,
    /// Put each proxy in a cgroup with a quota of one CPU (when the machine allows it).
    pub cgroup: bool,
    /// The CPUs of the proxies and of the load side, as pinned by the caller.
    pub pinning: Pinning,
    /// How to count instructions: `perf stat` over the saturation steps where it works, or
    /// callgrind in steps of their own, or not at all.
    pub instructions: instructions::Mode,
    /// The first of seven consecutive loopback ports, or `None` for a free block below the
    /// ephemeral range ([`Ports::pick`]).
    pub base_port: Option<u16>,
    /// The folder for configuration files and logs.
    pub work_dir: PathBuf,
    /// Keep the load CPU out of its deep idle states during the latency runs ([`AwakeCpu`]).
    pub awake_load_cpu: bool,
}

/// How a run's CPU limit is enforced.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CpuLimit {
    /// `cgroup-v1`, `cgroup-v2` or `none`.
    pub enforcement: inflight_cpu::Enforcement,
    /// Whether each proxy ran under a quota of one CPU.
    pub enforced: bool,
    /// What is enforced, or why not, in words.
    pub text: String,
    /// The cgroups created (removed at the end).
    pub groups: Vec<PathBuf>,
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The JSON document ([`report::document`]).
    pub document: Value,
    /// The tables and goals, for stdout.
    pub tables: String,
    /// Whether every step ran.
    pub completion: Completion,
}

/// Where the progress goes: one line per call (the caller prints it to stderr), and the JSON
/// document after each step.
pub trait Progress {
    /// A line of progress.
    fn line(&mut self, line: &str);
    /// The document so far, after a step.
    fn checkpoint(&mut self, document: &Value);
}

/// Runs the benchmark of `config`, with `meta` (what the caller knows: date, commit, machine)
/// in the document. A shutdown stops it between or during steps: what finished is in the
/// outcome, marked partial.
///
/// # Errors
///
/// When the run cannot start: settings that cannot run, a program missing, a configuration
/// refused, the upstream not starting, too low a limit on open files. A failure once steps have
/// run ends the run with what finished instead ([`Completion::Stopped`]).
pub async fn run(
    config: RunConfig,
    mut meta: Map<String, Value>,
    shutdown: &Shutdown,
    progress: &mut dyn Progress,
) -> Result<Outcome, ProxyBenchError> {
    let settings = &config.settings;
    settings.check()?;
    let started = Instant::now();
    meta.insert("load_average_at_start".into(), json!(host::load_average()));

    for who in settings.targets.iter().filter(|w| w.is_proxy()) {
        let program = config.tools.of(*who).expect("a proxy has a program");
        let version = servers::version(*who, program)?;
        progress.line(&format!("  {who}: {version}"));
        meta.insert(format!("{who}_version"), json!(version));
    }
    let any_proxy = settings.targets.iter().any(|w| w.is_proxy());
    // The generator holds every idle connection at once, and so does the proxy measured, which
    // inherits the limit.
    let needed = if any_proxy {
        servers::connection_room(settings) as u64 + 1024
    } else {
        1024
    };
    let open_files = host::raise_open_files(needed)?;
    meta.insert("open_files_limit".into(), json!(open_files));

    let instructions = match config.instructions {
        _ if !any_proxy => InstructionsStatus::not_measured("no proxy measured"),
        instructions::Mode::Off => {
            InstructionsStatus::not_measured("not asked for (--instructions off)")
        }
        instructions::Mode::Perf => instructions::probe(),
        instructions::Mode::Callgrind => instructions::probe_callgrind(),
    };
    progress.line(&format!("  {}", instructions.describe()));
    meta.insert("instructions".into(), json!(instructions));

    let pinning = &config.pinning;
    let pinning_text = if pinning.applied {
        format!(
            "pinning: each proxy on CPU {}; the load generator and the upstream on CPU {}",
            pinning.proxy_cpu, pinning.load_cpu
        )
    } else {
        format!(
            "pinning: NOT APPLIED ({}); every process runs where the scheduler puts it",
            pinning.note.as_deref().unwrap_or("unknown reason")
        )
    };
    progress.line(&format!("  {pinning_text}"));
    meta.insert("pinning".into(), json!(pinning));

    let awake = match (config.awake_load_cpu, pinning.applied) {
        (true, true) => AwakeCpu::probe(pinning.load_cpu),
        (true, false) => {
            AwakeStatus::not_applied(pinning.load_cpu, "the load side is not pinned to it".into())
        }
        (false, _) => AwakeStatus::not_applied(
            pinning.load_cpu,
            "not asked for (--load-cpu-may-idle)".into(),
        ),
    };
    progress.line(&format!("  {}", awake.describe()));
    meta.insert("load_cpu_awake".into(), json!(awake));

    let (groups, cpu_limit) = quota_groups(&config, any_proxy);
    progress.line(&format!("  CPU limit: {}", cpu_limit.text));
    meta.insert("cpu_limit".into(), json!(cpu_limit));

    let ports = Ports::pick(config.base_port)?;
    meta.insert("ports".into(), json!(ports));
    meta.insert("work_dir".into(), json!(config.work_dir));
    let configs = Configs::write(
        &config.work_dir,
        &config.tools,
        &settings.targets,
        &ports,
        settings,
    )?;
    meta.insert("settings".into(), settings_json(settings));

    let planned: f64 = (0..settings.repeats)
        .flat_map(|_| settings.targets.iter())
        .map(|w| settings.planned_seconds(*w, STEP_OVERHEAD_S))
        .sum();
    let mut upstream = Process::spawn(
        "the upstream",
        servers::upstream_command(
            &config.tools,
            ports.upstream,
            Duration::from_secs_f64(planned * 4.0 + 600.0),
        ),
        &config.work_dir.join("upstream.log"),
        pinning,
        pinning.load_cpu,
        None,
    )?;
    upstream
        .wait_ready(&[ports.upstream], None, servers::START_PATIENCE)
        .await?;
    progress.line(&format!(
        "  upstream on 127.0.0.1:{} (/ at once, /slow after {} ms); about {} to go",
        ports.upstream,
        plan::BUDGET_SERVICE_MS,
        clock(Duration::from_secs_f64(planned))
    ));

    let mut bench = Bench {
        config: &config,
        ports,
        configs,
        groups,
        records: Vec::new(),
        meta,
        conditions: vec![
            cpu_limit_line(&cpu_limit),
            pinning_text,
            awake.describe(),
            instructions.describe(),
        ],
        instructions,
        awake,
        started,
        planned,
        done: 0.0,
        repeats_done: 0,
    };
    let stopped = {
        let work = bench.measure(progress);
        tokio::select! {
            result = work => result.err().map(|e| format!("error: {e}")),
            _ = shutdown.wait() => Some(shutdown.signal_name().unwrap_or("a shutdown").to_string()),
        }
    };
    drop(upstream);
    let completion = match stopped {
        None => Completion::Complete,
        Some(why) => Completion::Stopped(why),
    };
    bench
        .meta
        .insert("load_average_at_end".into(), json!(host::load_average()));
    bench.meta.insert(
        "run_seconds".into(),
        json!((started.elapsed().as_secs_f64() * 10.0).round() / 10.0),
    );
    let (document, tables) = bench.render(&completion);
    // The groups go last, once every process in them has been stopped.
    drop(bench);
    Ok(Outcome {
        document,
        tables,
        completion,
    })
}

fn cpu_limit_line(limit: &CpuLimit) -> String {
    format!("CPU limit: {}", limit.text)
}

/// One quota group of one CPU per proxy, or why there are none.
fn quota_groups(config: &RunConfig, any_proxy: bool) -> (Vec<(Who, QuotaGroup)>, CpuLimit) {
    let pinned = if config.pinning.applied {
        format!(
            "each proxy is only pinned to CPU {}",
            config.pinning.proxy_cpu
        )
    } else {
        "each proxy may use every CPU".to_string()
    };
    let none = |why: String| CpuLimit {
        enforcement: inflight_cpu::Enforcement::None,
        enforced: false,
        text: format!("NOT ENFORCED: {why}; {pinned}"),
        groups: Vec::new(),
    };
    if !any_proxy {
        return (Vec::new(), none("no proxy measured".into()));
    }
    if !config.cgroup {
        return (Vec::new(), none("no cgroup quota (--no-cgroup)".into()));
    }
    let mut groups = Vec::new();
    for who in config.settings.targets.iter().filter(|w| w.is_proxy()) {
        match QuotaGroup::create(1.0) {
            Ok(g) => groups.push((*who, g)),
            Err(e) => {
                return (
                    Vec::new(),
                    none(format!("no cgroup quota could be set: {e}")),
                )
            }
        }
    }
    let enforcement = groups[0].1.enforcement();
    let quota = match enforcement {
        inflight_cpu::Enforcement::CgroupV1 => format!(
            "cpu.cfs_quota_us = {} per cpu.cfs_period_us = {}",
            groups[0].1.quota_us(),
            inflight_cpu::PERIOD_US
        ),
        _ => format!(
            "cpu.max = \"{} {}\"",
            groups[0].1.quota_us(),
            inflight_cpu::PERIOD_US
        ),
    };
    let limit = CpuLimit {
        enforcement,
        enforced: true,
        text: format!("{enforcement} quota of one CPU per proxy ({quota}), each in its own cgroup"),
        groups: groups.iter().map(|(_, g)| g.path().to_path_buf()).collect(),
    };
    (groups, limit)
}

fn settings_json(s: &Settings) -> Value {
    json!({
        "targets": s.targets,
        "repeats": s.repeats,
        "warmup_s": s.warmup.as_secs_f64(),
        "duration_s": s.duration.as_secs_f64(),
        "connections": s.connections,
        "load_points": s.points.iter().map(|p| p.label()).collect::<Vec<_>>(),
        "retries": s.retries,
        "max_send_lag_us": MAX_SEND_LAG.as_micros() as u64,
        "idle_connections": s.idle_connections,
        "idle_settle_s": s.idle_settle.as_secs_f64(),
        "callgrind_requests": s.callgrind_requests,
        "inflight_routes": s.inflight_routes,
        "budget": BUDGET_LIMIT,
        "slow_ms": plan::BUDGET_SERVICE_MS,
    })
}

/// `1h02m`, `12m30s` or `45s`.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

struct Bench<'a> {
    config: &'a RunConfig,
    ports: Ports,
    configs: Configs,
    records: Vec<Record>,
    meta: Map<String, Value>,
    instructions: InstructionsStatus,
    awake: AwakeStatus,
    conditions: Vec<String>,
    started: Instant,
    planned: f64,
    done: f64,
    repeats_done: usize,
    // Dropped last (fields drop in order): the processes in them are stopped by then.
    groups: Vec<(Who, QuotaGroup)>,
}

impl Bench<'_> {
    fn settings(&self) -> &Settings {
        &self.config.settings
    }

    fn render(&self, completion: &Completion) -> (Value, String) {
        let points: Vec<String> = self.settings().points.iter().map(|p| p.label()).collect();
        let summary = Summary::of(&self.records, &self.settings().targets, &points);
        let goals: Vec<Goal> = goals::judge(&summary, &self.instructions);
        let document = report::document(
            self.meta.clone(),
            completion,
            &self.records,
            &summary,
            &goals,
        );
        let mut lines = self.conditions.clone();
        if let Completion::Stopped(why) = completion {
            lines.insert(0, format!("PARTIAL RUN: stopped by {why}; what finished:"));
        }
        let tables = report::tables(
            &summary,
            &goals,
            &Conditions {
                lines,
                repeats: (self.repeats_done, self.settings().repeats),
                connections: self.settings().connections,
                duration_s: self.settings().duration.as_secs_f64(),
            },
        );
        (document, tables)
    }

    fn checkpoint(&self, progress: &mut dyn Progress) {
        let (document, _) = self.render(&Completion::Running);
        progress.checkpoint(&document);
    }

    async fn measure(&mut self, progress: &mut dyn Progress) -> Result<(), ProxyBenchError> {
        let repeats = self.settings().repeats;
        for repeat in 0..repeats {
            let order = plan::rotation(repeat, &self.settings().targets);
            for who in order {
                let left = self.planned - self.done;
                let eta = plan::eta(self.started.elapsed(), self.done, left);
                progress.line(&format!(
                    "==> repeat {}/{repeats}: {who} (about {} left)",
                    repeat + 1,
                    clock(eta)
                ));
                self.target(repeat + 1, who, progress).await?;
                self.done += self.settings().planned_seconds(who, STEP_OVERHEAD_S);
            }
            self.repeats_done = repeat + 1;
            self.checkpoint(progress);
        }
        Ok(())
    }

    fn group(&self, who: Who) -> Option<&QuotaGroup> {
        self.groups.iter().find(|(w, _)| *w == who).map(|(_, g)| g)
    }

    fn command(&self, who: Who, single: bool) -> std::process::Command {
        self.configs
            .command(&self.config.tools, who, single)
            .expect("a proxy has a command")
    }

    async fn start(&mut self, who: Who) -> Result<Process, ProxyBenchError> {
        let cmd = self.command(who, false);
        self.start_with(who, cmd, servers::START_PATIENCE).await
    }

    /// Starts `cmd`, which runs `who`, on the proxies' CPU and in `who`'s quota group, and
    /// waits until it serves.
    async fn start_with(
        &mut self,
        who: Who,
        cmd: std::process::Command,
        patience: Duration,
    ) -> Result<Process, ProxyBenchError> {
        let log = self.config.work_dir.join(format!("{who}.log"));
        let mut process = Process::spawn(
            &format!("{who}"),
            cmd,
            &log,
            &self.config.pinning,
            self.config.pinning.proxy_cpu,
            self.group(who),
        )?;
        let (wide, six) = self.ports.of(who);
        let mut ports = vec![wide];
        ports.extend(six);
        let ready = (who == Who::Inflight).then_some("inflight proxy: ready");
        process.wait_ready(&ports, ready, patience).await?;
        let key = format!("{who}_process");
        if !self.meta.contains_key(&key) {
            self.meta.insert(
                key,
                json!({
                    "threads": host::threads_of(process.pid()).ok(),
                    "cpus_allowed": host::cpus_of(process.pid()).ok(),
                }),
            );
        }
        Ok(process)
    }

    fn url(&self, who: Who, slow: bool) -> Target {
        let (wide, six) = self.ports.of(who);
        let (port, path) = if slow {
            (six.unwrap_or(wide), super::upstream::SLOW_PATH)
        } else {
            (wide, "/")
        };
        Target::parse(&format!("http://127.0.0.1:{port}{path}")).expect("a loopback URL parses")
    }

    fn plan(&self, target: Target, mode: Loop, pids: &[u32], instructions: bool) -> LoadPlan {
        let s = self.settings();
        LoadPlan {
            target,
            connections: s.connections,
            mode,
            warmup: s.warmup,
            duration: s.duration,
            request_timeout: s.request_timeout,
            pids: pids.to_vec(),
            count_instructions: instructions
                && self.instructions.measured
                && self.instructions.tool == "perf"
                && !pids.is_empty(),
            samples: false,
        }
    }

    /// A load step with the upstream's counters reset before and read after, and the quota
    /// group's throttling over it.
    async fn load(
        &self,
        who: Who,
        plan: LoadPlan,
    ) -> Result<(LoadReport, super::UpstreamStats, Option<Throttled>), ProxyBenchError> {
        let up = std::net::SocketAddr::from(([127, 0, 0, 1], self.ports.upstream));
        reset_upstream(up).await?;
        let group = self.group(who);
        let before = group.and_then(|g| g.throttle_stats().ok());
        let report = load::run(plan).await?;
        let stats = upstream_stats(up).await?;
        let throttled = match (group.and_then(|g| g.throttle_stats().ok()), before) {
            (Some(after), Some(before)) => {
                let d = after.since(&before);
                Some(Throttled {
                    periods: d.nr_periods,
                    throttled_periods: d.nr_throttled,
                    throttled_s: d.throttled.as_secs_f64(),
                })
            }
            _ => None,
        };
        Ok((report, stats, throttled))
    }

    async fn target(
        &mut self,
        repeat: usize,
        who: Who,
        progress: &mut dyn Progress,
    ) -> Result<(), ProxyBenchError> {
        if who.is_proxy() {
            let process = self.start(who).await?;
            self.idle(repeat, who, process.pid(), progress).await?;
            drop(process);
            self.checkpoint(progress);
            if self.instructions.measured && self.instructions.tool == "callgrind" {
                self.callgrind(repeat, who, progress).await?;
                self.checkpoint(progress);
            }
        }
        let process = match who.is_proxy() {
            true => Some(self.start(who).await?),
            false => None,
        };
        let pids: Vec<u32> = process.iter().map(Process::pid).collect();

        let plan = self.plan(self.url(who, false), Loop::Closed, &pids, true);
        let (report, stats, throttled) = self.load(who, plan).await?;
        progress.line(&format!(
            "    saturation: {:.0} 2xx/s, p99 {:.3} ms{}{}{}",
            report.ok_per_s,
            report.latency_ms.p99,
            report
                .proxy_cpu_us_per_answer
                .map(|c| format!(", CPU {c:.1} µs/answer"))
                .unwrap_or_default(),
            report
                .proxy_instructions_per_answer
                .map(|n| format!(", {n:.0} instructions/answer"))
                .unwrap_or_default(),
            failures(&report)
        ));
        let saturation = Some(report.ok_per_s);
        let mut record = Record::new(repeat, who, Case::Saturation);
        record.load = Some(report);
        record.upstream = Some(stats);
        record.throttled = throttled;
        self.records.push(record);
        self.checkpoint(progress);

        // Held over the latency runs only: the other cases measure as they always have.
        let _awake = self.keep_load_cpu_awake(progress);
        for point in self.settings().points.clone() {
            let label = point.label();
            let Some(rate) = point.rate(saturation) else {
                progress.line(&format!(
                    "    latency at {label}: skipped, no saturation throughput to take it of"
                ));
                continue;
            };
            let attempts = 1 + self.settings().retries;
            for attempt in 1..=attempts {
                let plan = self.plan(self.url(who, false), Loop::Open { rate }, &pids, false);
                let (report, stats, throttled) = self.load(who, plan).await?;
                let verdict = plan::send_lag_verdict(&report);
                let load_cpu = self.config.pinning.load_cpu;
                progress.line(&format!(
                    "    latency at {label} ({rate:.0}/s): p50 {:.3} ms, p99 {:.3} ms, send lag p99 {:.0} µs{}{}{}",
                    report.latency_ms.p50,
                    report.latency_ms.p99,
                    report.send_lag_ms.map_or(f64::NAN, |l| l.p99 * 1000.0),
                    match report.steal_ms.as_ref().and_then(|s| s.get(load_cpu)) {
                        Some(ms) => format!(", steal on CPU {load_cpu} {ms:.0} ms"),
                        None => String::new(),
                    },
                    failures(&report),
                    match (&verdict, attempt < attempts) {
                        (Ok(()), _) => String::new(),
                        (Err(_), true) => format!("; discarded, again ({}/{attempts})", attempt + 1),
                        (Err(_), false) => format!("; discarded, {attempts} attempts were all discarded"),
                    }
                ));
                let mut record = Record::new(repeat, who, Case::Latency);
                record.point = Some(label.clone());
                record.attempt = attempt;
                record.discarded = verdict.as_ref().err().cloned();
                record.load = Some(report);
                record.upstream = Some(stats);
                record.throttled = throttled;
                self.records.push(record);
                self.checkpoint(progress);
                if verdict.is_ok() {
                    break;
                }
            }
        }

        if who.is_proxy() {
            let plan = self.plan(self.url(who, true), Loop::Closed, &pids, false);
            let (report, stats, throttled) = self.load(who, plan).await?;
            progress.line(&format!(
                "    budget of {BUDGET_LIMIT}: {:.1} 2xx/s, upstream peak {}{}",
                report.ok_per_s,
                stats.peak,
                failures(&report)
            ));
            let mut record = Record::new(repeat, who, Case::Budget);
            record.load = Some(report);
            record.upstream = Some(stats);
            record.throttled = throttled;
            self.records.push(record);
            self.checkpoint(progress);
        }
        Ok(())
    }

    /// The load CPU's deep idle states off, when the probe at the start found it can be done.
    fn keep_load_cpu_awake(&self, progress: &mut dyn Progress) -> Option<AwakeCpu> {
        if !self.awake.applied {
            return None;
        }
        AwakeCpu::hold(self.awake.cpu)
            .map_err(|e| progress.line(&format!("    load CPU not kept awake this time: {e}")))
            .ok()
    }

    /// A fresh `who` under callgrind: warmed with a few requests, then its instructions over a
    /// fixed number of requests, between two dumps of its counters.
    async fn callgrind(
        &mut self,
        repeat: usize,
        who: Who,
        progress: &mut dyn Progress,
    ) -> Result<(), ProxyBenchError> {
        let callgrind = Callgrind::new(&self.config.work_dir, &format!("callgrind.{who}"));
        let cmd = callgrind.wrap(&self.command(who, true));
        let process = self
            .start_with(who, cmd, servers::VALGRIND_START_PATIENCE)
            .await?;
        let target = self.url(who, false);
        let timeout = self.settings().request_timeout * 20;
        let requests = self.settings().callgrind_requests;
        load::send_count(
            &target,
            CALLGRIND_CONNECTIONS,
            CALLGRIND_WARMUP_REQUESTS,
            timeout,
        )
        .await;
        let pids = super::procs::members_of_trees(&[process.pid()])?;
        let counted = async {
            callgrind.dump(&pids)?;
            let sent = load::send_count(&target, CALLGRIND_CONNECTIONS, requests, timeout).await;
            callgrind.dump(&pids)?;
            Ok::<_, String>((sent, callgrind.last_totals(&pids)?))
        }
        .await;
        drop(process);
        let mut record = Record::new(repeat, who, Case::Instructions);
        match counted {
            Ok((sent, totals)) => {
                let per_answer = |n: u64| (sent.ok > 0).then(|| n as f64 / sent.ok as f64);
                let report = CallgrindReport {
                    requests: sent.sent,
                    ok: sent.ok,
                    instructions: totals.instructions,
                    per_answer: per_answer(totals.instructions),
                    l1d_misses: totals.l1d_misses,
                    l1d_misses_per_answer: totals.l1d_misses.and_then(per_answer),
                    processes: pids.len(),
                };
                progress.line(&format!(
                    "    instructions (callgrind): {} per answer, L1d misses {} per answer, over {} answers{}",
                    report.per_answer.map_or("-".into(), |n| format!("{n:.0}")),
                    report
                        .l1d_misses_per_answer
                        .map_or("-".into(), |n| format!("{n:.0}")),
                    report.ok,
                    match sent.other + sent.errors {
                        0 => String::new(),
                        n => format!(", {n} requests not answered 2xx"),
                    }
                ));
                record.callgrind = Some(report);
            }
            Err(why) => {
                progress.line(&format!("    instructions (callgrind): not counted: {why}"));
                record.discarded = Some(format!("callgrind could not count: {why}"));
            }
        }
        self.records.push(record);
        Ok(())
    }

    async fn idle(
        &mut self,
        repeat: usize,
        who: Who,
        pid: u32,
        progress: &mut dyn Progress,
    ) -> Result<(), ProxyBenchError> {
        let s = self.settings();
        let warm = LoadPlan {
            connections: 4,
            warmup: Duration::ZERO,
            duration: IDLE_WARMING,
            ..self.plan(self.url(who, false), Loop::Closed, &[], false)
        };
        load::run(warm).await?;
        let report = idle::run(IdlePlan {
            target: self.url(who, false),
            connections: s.idle_connections,
            pids: vec![pid],
            settle: s.idle_settle,
            request_timeout: s.request_timeout,
        })
        .await?;
        progress.line(&format!(
            "    idle: {} of {} still open, {} -> {} KiB over {} process(es), {:.2} KiB per connection",
            report.still_open,
            report.opened,
            report.rss_before_kib,
            report.rss_after_kib,
            report.processes,
            report.kib_per_connection
        ));
        let mut record = Record::new(repeat, who, Case::Idle);
        record.idle = Some(report);
        self.records.push(record);
        Ok(())
    }
}

fn failures(report: &LoadReport) -> String {
    let non_2xx: u64 = report
        .statuses
        .iter()
        .filter(|(s, _)| !(200..300).contains(*s))
        .map(|(_, n)| n)
        .sum();
    match (non_2xx, report.errors) {
        (0, 0) => String::new(),
        (n, e) => format!(", {n} non-2xx, {e} errors"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks() {
        assert_eq!(clock(Duration::from_secs(45)), "45s");
        assert_eq!(clock(Duration::from_secs(750)), "12m30s");
        assert_eq!(clock(Duration::from_secs(3720)), "1h02m");
    }
}
