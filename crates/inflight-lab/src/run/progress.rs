//! What a lab run reports while it runs ([`Progress`]), and [`ProgressReporter`], which shows it on
//! stderr: a progress bar on a terminal, one plain line per run otherwise.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::matrix::Cell;
use crate::results::{Metric, RunResult, Unit};

/// What the lab reports while it runs.
#[derive(Debug)]
pub enum Progress<'a> {
    /// The sim is listening (started by the lab or given with `--sim-url`).
    SimReady { url: &'a str, started: bool },
    /// A capacity sweep of `dependency` in `scenario`, climbing to `max` at once, starts.
    Measuring {
        scenario: &'a str,
        dependency: &'a str,
        max: usize,
    },
    /// A level of a capacity sweep was measured.
    SweepLevel(&'a inflight_capacity::Level),
    /// A budget was measured.
    MeasuredBudget(&'a crate::results::MeasuredBudget),
    /// The Redis of the run's fleet budgets answers; `started` if the lab started it.
    RedisReady { url: &'a str, started: bool },
    /// No CPU quota can be enforced and `--no-limit` was given.
    NoLimit { message: &'a str },
    /// Run `index` (1-based) of `total` is starting.
    RunStarting {
        index: usize,
        total: usize,
        cell: &'a Cell,
        repeat: u32,
    },
    /// Run `index` of `total` ended with this result.
    RunDone {
        index: usize,
        total: usize,
        result: &'a RunResult,
    },
    /// Something worth a warning that does not stop the lab.
    Warning(String),
}

/// Shows [`Progress`] on stderr. On a terminal, a bar (sized to the terminal, with an ETA) sits
/// below the finished runs' lines; otherwise each run gets one line when it starts and one when
/// it ends, and nothing is redrawn.
#[derive(Debug)]
pub struct ProgressReporter {
    terminal: bool,
    bar: Option<ProgressBar>,
    /// No CPU quota is enforced (`--no-limit`): cells are named unlimited.
    unlimited: bool,
}

impl Default for ProgressReporter {
    fn default() -> Self {
        ProgressReporter::new()
    }
}

impl ProgressReporter {
    /// A reporter that draws a bar if stderr is a terminal.
    pub fn new() -> ProgressReporter {
        ProgressReporter {
            terminal: std::io::stderr().is_terminal(),
            bar: None,
            unlimited: false,
        }
    }

    /// Reports one event.
    pub fn report(&mut self, progress: Progress<'_>) {
        match progress {
            Progress::SimReady { url, started } => {
                let how = if started { "started" } else { "using" };
                self.line(format!("lab: {how} sim at {url}"));
            }
            Progress::Measuring {
                scenario,
                dependency,
                max,
            } => self.line(format!(
                "lab: measuring the {dependency} budget in {scenario}: a capacity sweep of 1 to {max} calls at once ..."
            )),
            Progress::SweepLevel(level) => {
                let p50 = level
                    .p50_ms
                    .map_or("-".to_string(), |ms| format!("{ms:.1} ms"));
                let seen = level
                    .target_in_flight
                    .as_ref()
                    .and_then(|t| t.max)
                    .map_or(String::new(), |m| format!(", at most {m} in service at the sim"));
                self.line(format!(
                    "lab:   {} at once: {:.1} ok/s, p50 {p50}, {} of {} calls failed{seen}",
                    level.concurrency, level.throughput_per_s, level.errors.total, level.requests
                ));
            }
            Progress::MeasuredBudget(m) => {
                let service = m.service_time_ms.map_or(String::new(), |t| {
                    format!(
                        ", service time {t:.1} ms at time scale {}",
                        m.sweep_time_scale
                    )
                });
                let basis = if m.basis == "knee" {
                    "the capacity found".to_string()
                } else {
                    format!("no knee up to {}", m.max_concurrent)
                };
                self.line(format!(
                    "lab: measured the {} budget in {}: {} ({basis}{service}, {:.1} s)",
                    m.dependency, m.scenario, m.max_concurrent, m.sweep_s
                ));
            }
            Progress::RedisReady { url, started } => {
                let how = if started {
                    "started redis-server"
                } else {
                    "using Redis"
                };
                self.line(format!("lab: {how} at {url} for the fleet budgets"));
            }
            Progress::NoLimit { message } => {
                self.unlimited = true;
                self.line(format!("lab: warning: no CPU limit can be enforced, running without one (--no-limit): {message}"));
            }
            Progress::Warning(message) => self.line(format!("lab: warning: {message}")),
            Progress::RunStarting {
                index,
                total,
                cell,
                repeat,
            } => {
                let what = format!(
                    "{} {} {} repeat {repeat}",
                    cell.strategy,
                    cell.scenario,
                    crate::results::cpus_words(cell.cpus, !self.unlimited)
                );
                if self.terminal {
                    let bar = self.bar(total);
                    bar.set_position(index as u64 - 1);
                    bar.set_message(what);
                } else {
                    crate::stderr::line(format_args!("[{index}/{total}] {what} ..."));
                }
            }
            Progress::RunDone {
                index,
                total,
                result,
            } => {
                self.line(format!("[{index}/{total}] {}", describe(result)));
                if index >= total {
                    // The last run: clear the bar before the sim's goodbye and the tables.
                    self.finish();
                } else if let Some(bar) = &self.bar {
                    bar.set_position(index as u64);
                    bar.set_message("");
                }
            }
        }
    }

    /// Removes the bar; call when the runs are over.
    pub fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }

    /// The bar, made on first use.
    fn bar(&mut self, total: usize) -> &ProgressBar {
        self.bar.get_or_insert_with(|| {
            let bar =
                ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template("[{bar:30}] {pos}/{len} eta {eta} {wide_msg}")
                .expect("the progress template is valid")
                .progress_chars("=> ");
            bar.set_style(style);
            bar
        })
    }

    /// A whole line on stderr, above the bar if there is one.
    fn line(&self, text: String) {
        match &self.bar {
            Some(bar) => bar.suspend(|| crate::stderr::line(format_args!("{text}"))),
            None => crate::stderr::line(format_args!("{text}")),
        }
    }
}

impl Drop for ProgressReporter {
    fn drop(&mut self) {
        self.finish();
    }
}

/// One line about a finished run: its cell, then each metric the registry puts on the progress
/// line ([`Shown::progress`](crate::results::Shown::progress)): times, outcome counts and peaks.
pub fn describe(r: &RunResult) -> String {
    let metrics: Vec<String> = Metric::ALL
        .into_iter()
        .filter_map(|m| {
            let label = m.def().shown.progress?;
            let value = m.read(r);
            Some(match m.def().unit {
                Unit::Count => format!("{label} {value}"),
                Unit::Seconds | Unit::PerSecond => format!("{value:.2} {label}"),
                Unit::Fraction => format!("{label} {:.1}%", value * 100.0),
            })
        })
        .collect();
    let mut s = format!(
        "{} {} {} repeat {}: {}",
        r.strategy,
        r.scenario,
        crate::results::cpus_words(r.cpus, !r.unlimited),
        r.repeat,
        metrics.join(", ")
    );
    if !r.failed_by_kind.is_empty() {
        let kinds: Vec<String> = r
            .failed_by_kind
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        s.push_str(&format!(" ({})", kinds.join(", ")));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_described_on_one_line_with_its_failures_by_kind() {
        let mut r = RunResult {
            strategy: "c4".into(),
            scenario: "slow-write".into(),
            cpus: 1.0,
            repeat: 2,
            records: 10,
            complete: 8,
            failed: 2,
            completion_s: 1.5,
            accepted_per_s: 5.333,
            ..RunResult::default()
        };
        r.failed_by_kind.insert("write_timeout".into(), 2);
        let line = describe(&r);
        assert!(
            line.starts_with("c4 slow-write 1 CPU repeat 2: 1.50 s, 5.33 accepted/s, complete 8"),
            "{line}"
        );
        assert!(line.ends_with(" (write_timeout 2)"), "{line}");
        assert!(!line.contains('\n'));
        // Without a CPU quota the cell is not named after one.
        r.unlimited = true;
        r.cpus = 2.0;
        let line = describe(&r);
        assert!(
            line.starts_with("c4 slow-write unlimited (2 planned) repeat 2:"),
            "{line}"
        );
    }
}
