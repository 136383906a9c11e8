//! `inflight sim`: serve the lab's simulated dependencies on 127.0.0.1 until interrupted.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::output::note;
use anyhow::Context;
use inflight_lab::scenario::ScenarioSet;
use inflight_lab::sim::{Sim, SimConfig};

/// Serve the enrichment API (`GET /enrich/{id}`) and the system of record (`POST /records`) with the
/// latencies and capacity of a scenario, plus `GET /stats`, `POST /stats/reset`, `GET|POST /scenario`.
///
/// Listens on 127.0.0.1 only. Once listening it prints one line to stdout:
/// `inflight sim listening on http://127.0.0.1:<port>`. Stops on Ctrl-C or SIGTERM.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  inflight sim --port 9465 --scenario slow-write
  curl -s localhost:9465/stats; curl -s localhost:9465/metrics")]
pub struct Args {
    /// Port on 127.0.0.1 to listen on; 0 picks a free one (printed on the first line).
    #[arg(long, default_value_t = 0)]
    port: u16,

    /// Scenario to start in (switch later with `POST /scenario`).
    #[arg(long, default_value = "healthy")]
    scenario: String,

    /// Scenarios file. Default: lab/scenarios.toml if it exists here, else the built-in copy of it.
    #[arg(long, value_name = "FILE")]
    scenarios: Option<PathBuf>,

    /// Seed of the latency RNG, so runs can be repeated.
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// Multiply every duration by this factor (1.0 is the seed's timing; 0.1 is ten times faster).
    #[arg(
        long,
        default_value_t = 1.0,
        value_name = "F",
        allow_negative_numbers = true
    )]
    time_scale: f64,

    /// Also exit when stdin is closed (the lab passes this so a killed lab never leaves a sim behind).
    #[arg(long)]
    exit_on_stdin_close: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let scenarios = ScenarioSet::load_or_default(args.scenarios.as_deref())?;
    let config = SimConfig {
        scenarios,
        scenario: args.scenario,
        seed: args.seed,
        time_scale: args.time_scale,
    };
    let runtime = super::async_runtime()?;
    runtime.block_on(serve(config, args.port, args.exit_on_stdin_close))?;
    Ok(ExitCode::SUCCESS)
}

async fn serve(config: SimConfig, port: u16, exit_on_stdin_close: bool) -> anyhow::Result<()> {
    let origin = config.scenarios.origin.clone();
    let sim = Sim::bind(config, port).await?;
    let current = sim.state().current();
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "inflight sim listening on {}", sim.url())
            .and_then(|_| stdout.flush())
            .context("cannot write to stdout")?;
    }
    note!(
        "scenario `{}` from {origin}, seed {}, time scale {}",
        current.scenario.name,
        current.seed,
        current.time_scale
    );
    sim.serve(shutdown_signal(exit_on_stdin_close))
        .await
        .context("the sim's server failed")?;
    Ok(())
}

/// Completes on Ctrl-C, SIGTERM, or (if asked) end of stdin.
async fn shutdown_signal(exit_on_stdin_close: bool) {
    let stdin_closed = async {
        if !exit_on_stdin_close {
            return std::future::pending::<()>().await;
        }
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        // A plain thread: a blocking read cannot be cancelled, and the process exits under it anyway.
        std::thread::spawn(move || {
            super::wait_for_stdin_close();
            let _ = tx.send(());
        });
        let _ = rx.await;
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => note!("interrupted; stopping the sim"),
        _ = terminate => note!("terminated; stopping the sim"),
        _ = stdin_closed => note!("stdin closed; stopping the sim"),
    }
}
