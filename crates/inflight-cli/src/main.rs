//! The `inflight` command: glue between the command line and the `inflight`, `inflight-cpu`,
//! `inflight-bench`, `inflight-lab` and `inflight-capacity` libraries. Each subcommand lives in `cmd/<name>.rs` with its
//! `Args` and a `run` function.
//!
//! # Layers
//!
//! From the top down: a module uses only modules on lower lines (`scripts/check-layers.py`
//! checks it in CI).
//!
//! - `cmd`
//! - `output`

// The commands' doc comments are their `--help` text, written for a terminal: `[fleet]` and
// `<name>` there are a budgets file's table and a placeholder, not links or HTML.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;
mod output;

/// Decide, and enforce, how many calls your I/O-bound work sends to each service it depends on.
#[derive(Debug, Parser)]
#[command(name = "inflight", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate a budgets file and print each budget's limits and Little's-law figures.
    CheckConfig(cmd::check_config::Args),
    /// Find a dependency's capacity and service time by measurement, and the budget to configure.
    Capacity(cmd::capacity::Args),
    /// Show the CPU budget of this process: cores, affinity, cgroup quotas, what runtimes would pick.
    Probe(cmd::probe::Args),
    /// Run a CPU-bound task on thread pools of several sizes, optionally under a real cgroup quota.
    PoolBench(cmd::pool_bench::Args),
    /// Compare fan-out strategies (unbounded, bounded) against a stand-in downstream.
    Fanout(cmd::fanout::Args),
    /// Serve the lab's simulated dependencies (enrichment API, system of record) on 127.0.0.1.
    Sim(cmd::sim::Args),
    /// Run the lab: strategies x scenarios x repeats under a real CPU quota, with a report.
    Lab(cmd::lab::Args),
    /// Forward requests to each dependency only once they hold a permit of its budget (a sidecar).
    Proxy(cmd::proxy::Args),
    /// Look at the fleet budgets of a budgets file in the Redis they share (`fleet status`).
    Fleet(cmd::fleet::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Commands that write to no socket end quietly in a pipe closed early; the others must
    // not die of a peer's closed socket (see `reset_sigpipe`).
    if matches!(
        cli.command,
        Command::CheckConfig(_) | Command::Probe(_) | Command::PoolBench(_)
    ) {
        output::reset_sigpipe();
    }
    let result = match cli.command {
        Command::CheckConfig(args) => cmd::check_config::run(args),
        Command::Capacity(args) => cmd::capacity::run(args),
        Command::Probe(args) => cmd::probe::run(args),
        Command::PoolBench(args) => cmd::pool_bench::run(args),
        Command::Fanout(args) => cmd::fanout::run(args),
        Command::Sim(args) => cmd::sim::run(args),
        Command::Lab(args) => cmd::lab::run(args),
        Command::Proxy(args) => cmd::proxy::run(args),
        Command::Fleet(args) => cmd::fleet::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            output::print_error(&err);
            ExitCode::from(2)
        }
    }
}
