//! `inflight fleet`: look at the fleet budgets of a budgets file in their Redis.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::output::{self, note, outln};
use anyhow::Context;
use inflight::config::{FleetFail, LeaseMode, Scope};
use serde_json::{json, Value};

/// Look at the fleet budgets of a budgets file in the Redis they share.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Show each fleet budget as its Redis holds it now: the node that owns it, the leases
    /// held and waiting, shares, the epoch, and whether Redis can be reached at all.
    Status(StatusArgs),
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
For each budget with scope = \"fleet\", one round trip to the node that owns it (a Redis
Cluster is followed from any node's address, a primary found through its sentinels):
  node      the node that owns the budget, and its role
  holders   leases held now across the fleet (calls at the dependency, as Redis knows them),
            how many of them are calls a process admitted on its local fallback, and expired
            leases no acquire has taken back yet
  waiters   callers queued in Redis (lease_mode = \"per_call\"): a process brings at most its
            max_concurrent there, its leases held included; its other callers wait in the
            process (its /budgets.json waiting)
  shares    processes holding a share, the permits they reserve and what they want
  epoch     moves when Redis loses the budget's state (a restart without persistence, a flush,
            a failover that lost writes); while the budget learns, nothing new is granted
When Redis cannot be reached, the budget shows its fail policy instead: the processes refuse
(fail = \"closed\") or run on their local limit (fail = \"local\").
Nothing is changed. The URL is shown without its password. With --json every budget has every
key (null for what an unreached Redis did not say), and a refused file gives {\"file\", \"error\"}.
Exit status: 0 when every budget was read, 1 when Redis could not be reached for one, 2 when the
file is invalid or keeps no budget in Redis (no [fleet] table, or no budget with scope = \"fleet\").

Examples:
  inflight fleet status --config budgets.toml
  inflight fleet status --config budgets.toml --json | jq '.budgets[] | {name, holders, epoch}'")]
pub struct StatusArgs {
    /// The budgets file with a [fleet] table.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Command::Status(args) => status(args),
    }
}

/// One fleet budget of the file, and what its Redis said.
struct Row {
    name: String,
    limit: usize,
    lease_mode: LeaseMode,
    fail: FleetFail,
    read: Result<(inflight_redis::FleetStatus, Duration), String>,
}

fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let (json, file) = (args.json, args.config.display().to_string());
    let shown = status_of(args);
    if let (true, Err(e)) = (json, &shown) {
        // A script reading the JSON is told why there is none, as check-config --json does.
        let doc = json!({ "file": file, "error": e.to_string() });
        outln!("{}", serde_json::to_string_pretty(&doc)?)?;
    }
    shown
}

fn status_of(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let budgets = inflight::config::BudgetsFile::from_path(&args.config)
        .and_then(super::budgets_file)?
        .into_budgets();
    let Some(config) = budgets.fleet().cloned() else {
        anyhow::bail!(
            "{}: no [fleet] table: this file keeps no budget in Redis (add [fleet] url = \"redis://...\" and scope = \"fleet\" to a budget)",
            args.config.display()
        );
    };
    // One line, as check-config says it (the error's causes repeat its message).
    let (budgets, fleet) = inflight_redis::attach_fleet(budgets)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.config.display()))?;
    let fleet = fleet.context("no fleet")?;
    let names: Vec<(String, usize, LeaseMode, FleetFail)> = budgets
        .iter()
        .filter_map(|b| match budgets.scope(b.name()) {
            Some(Scope::Fleet { fail }) => Some((
                b.name().to_string(),
                b.config().max_concurrent(),
                budgets.lease_mode(b.name()).unwrap_or_default(),
                fail,
            )),
            _ => None,
        })
        .collect();
    if names.is_empty() {
        anyhow::bail!(
            "{}: no budget has scope = \"fleet\": this file keeps no budget in Redis",
            args.config.display()
        );
    }
    let rows: Vec<Row> = super::async_runtime()?.block_on(async {
        let mut rows = Vec::new();
        for (name, limit, lease_mode, fail) in names {
            let start = Instant::now();
            let read = fleet
                .status(&name)
                .await
                .map(|s| (s, start.elapsed()))
                .map_err(|e| e.to_string());
            rows.push(Row {
                name,
                limit,
                lease_mode,
                fail,
                read,
            });
        }
        rows
    });
    let topology = fleet
        .topology()
        .unwrap_or("topology not known: redis not reached");
    let unreachable = rows.iter().filter(|r| r.read.is_err()).count();
    if args.json {
        let doc = json!({
            "file": args.config.display().to_string(),
            "url": config.shown_url(),
            "topology": fleet.topology(),
            "lease_ms": fleet.lease().as_nanos() as f64 / 1e6,
            "budgets": rows.iter().map(row_json).collect::<Vec<_>>(),
        });
        outln!("{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        outln!(
            "fleet {} ({topology}), lease {}",
            config.shown_url(),
            humantime::format_duration(fleet.lease())
        )?;
        for row in &rows {
            output::out(&render(row))?;
        }
    }
    if unreachable > 0 {
        if !args.json {
            note!("error: redis could not be reached for {unreachable} budget(s)");
        }
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn mode_name(mode: LeaseMode) -> &'static str {
    match mode {
        LeaseMode::Shares => "shares",
        _ => "per_call",
    }
}

fn fail_text(fail: FleetFail) -> String {
    match fail {
        FleetFail::Local(n) => format!("local (each process runs at most {n} while redis is away, from a lease and a third into the outage)"),
        _ => "closed (calls are refused while redis is away)".to_string(),
    }
}

fn row_json(row: &Row) -> Value {
    let mut doc = json!({
        "name": row.name,
        "limit": row.limit,
        "lease_mode": mode_name(row.lease_mode),
        "fail": match row.fail { FleetFail::Local(_) => "local", _ => "closed" },
        "local_limit": match row.fail { FleetFail::Local(n) => Some(n), _ => None },
        "reachable": row.read.is_ok(),
    });
    // Every key in every row: what Redis did not say is null.
    let read = row.read.as_ref().ok();
    let extra = json!({
        "node": read.map(|(s, _)| &s.node),
        "role": read.map(|(s, _)| &s.role),
        "holders": read.map(|(s, _)| s.holders),
        "local_registered": read.map(|(s, _)| s.local_registered),
        "expired": read.map(|(s, _)| s.expired),
        "waiters": read.map(|(s, _)| s.waiters),
        "epoch": read.map(|(s, _)| s.epoch),
        "version": read.map(|(s, _)| s.version),
        "learning_ms": read.map(|(s, _)| s.learning.as_millis() as u64),
        "share_processes": read.map(|(s, _)| s.share_processes),
        "shares_reserved": read.map(|(s, _)| s.shares_reserved),
        "shares_wanted": read.map(|(s, _)| s.shares_wanted),
        "round_trip_ms": read.map(|(_, took)| took.as_secs_f64() * 1e3),
        "error": row.read.as_ref().err(),
        "fallback": row.read.is_err().then_some(match row.fail {
            FleetFail::Local(_) => "local",
            _ => "refusing",
        }),
    });
    if let (Value::Object(doc), Value::Object(extra)) = (&mut doc, extra) {
        doc.extend(extra);
    }
    doc
}

fn render(row: &Row) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n[{}]  limit {}, lease_mode {}",
        row.name,
        row.limit,
        mode_name(row.lease_mode)
    );
    match &row.read {
        Ok((s, took)) => {
            let _ = writeln!(out, "  node            {} ({})", s.node, s.role);
            let _ = writeln!(
                out,
                "  holders         {} of {}{}{}",
                s.holders,
                row.limit,
                if s.local_registered > 0 {
                    format!(", {} of them from local fallbacks", s.local_registered)
                } else {
                    String::new()
                },
                if s.expired > 0 {
                    format!("; {} expired, not taken back yet", s.expired)
                } else {
                    String::new()
                }
            );
            if row.lease_mode == LeaseMode::PerCall {
                let _ = writeln!(out, "  waiters         {}", s.waiters);
            } else {
                let _ = writeln!(
                    out,
                    "  shares          {} processes reserve {} of {}, want {}",
                    s.share_processes, s.shares_reserved, row.limit, s.shares_wanted
                );
            }
            let learning = if s.learning.is_zero() {
                "no".to_string()
            } else {
                format!(
                    "yes, {} more (nothing new is granted)",
                    humantime::format_duration(
                        Duration::from_millis(s.learning.as_millis() as u64)
                    )
                )
            };
            let epoch = if s.epoch == 0 {
                "none yet (no process has met the budget in this redis)".to_string()
            } else {
                format!("{} (version {})", s.epoch, s.version)
            };
            let _ = writeln!(out, "  epoch           {epoch}, learning: {learning}");
            let _ = writeln!(
                out,
                "  fail            {}; redis answered in {:.1} ms",
                fail_text(row.fail),
                took.as_secs_f64() * 1e3
            );
        }
        Err(e) => {
            let _ = writeln!(out, "  redis           NOT REACHED: {e}");
            let _ = writeln!(
                out,
                "  fallback        the processes run on their fail policy: {}",
                fail_text(row.fail)
            );
        }
    }
    out
}
