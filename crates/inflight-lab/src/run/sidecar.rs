//! The `inflight proxy` sidecar of a strategy whose budgets a proxy enforces (`enforce =
//! "proxy"`): its budgets file, written from the strategy's budgets, and its process, started for
//! one run in front of the sim, in a CPU quota of its own outside the runner's, as a sidecar
//! container would be. Its budgets' limits over the run are sampled from its admin address
//! (`limits`) for the run's timeline.

pub(crate) mod limits;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use inflight_cpu::QuotaGroup;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Child;
use tokio::task::JoinHandle;

use super::runner_process::spawn_in;
use crate::runner::CLIENT_TIMEOUT;
use crate::strategy::{BudgetPlan, GateSpec, Strategy};

pub(crate) use self::limits::LimitSampler;

/// The CPU quota of the proxy's own cgroup: one CPU, as a sidecar is commonly given.
pub(crate) const PROXY_CPUS: f64 = 1.0;

/// How long the proxy may take to say it is ready.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// The most of the proxy's stderr kept for a message.
const KEPT_STDERR: usize = 4096;

/// The budgets file that has `inflight proxy` enforce `strategy`'s budgets in front of the sim at
/// `sim_url`, at `time_scale`, with one listener per dependency on a free loopback port.
///
/// Each budget is the strategy's table as written, with what the runner gives its own budgets:
/// the client's call timeout (times the time scale), starting once the permit is held; a rate
/// divided by the time scale, as the sim divides its quotas; no permit deadline; and a call
/// timeout that tells the limit nothing (`overload_on_timeout = false`), as the lab's gates
/// treat it (the sim's hangs are drawn per call, whatever the load). A dependency the strategy
/// leaves unlimited is proxied too, with a budget as large as the records in flight, which never
/// binds: the runner sends every call to the proxy, as an application behind a sidecar does.
/// The admin server listens on a free loopback port, for the lab to read the budgets' limits.
///
/// # Errors
///
/// If the strategy has a budget a proxy cannot enforce (the strategies file refuses those).
pub(crate) fn budgets_file(
    strategy: &Strategy,
    sim_url: &str,
    time_scale: f64,
) -> Result<String, String> {
    let BudgetPlan::PerDependency {
        enrichment,
        records,
    } = &strategy.budgets
    else {
        return Err(format!(
            "strategy `{}` has no per-dependency budgets for a proxy",
            strategy.name
        ));
    };
    let unbounded = strategy.records_in_flight.resolve();
    let call_timeout = CLIENT_TIMEOUT.mul_f64(time_scale);
    let mut out = String::from("[proxy]\ndrain = \"1s\"\nadmin = \"127.0.0.1:0\"\n");
    for (dependency, gate) in [("enrichment", enrichment), ("records", records)] {
        let mut table: toml::Table = match gate {
            None => toml::Table::from_iter([("max_concurrent".into(), (unbounded as i64).into())]),
            Some(GateSpec::Fixed(n)) => {
                toml::Table::from_iter([("max_concurrent".into(), (*n as i64).into())])
            }
            Some(GateSpec::Budget(text)) => text
                .parse()
                .map_err(|e| format!("{dependency} budget: {e}"))?,
            Some(other) => {
                return Err(format!(
                    "the {dependency} gate ({other}) is not an inflight budget a proxy can enforce"
                ))
            }
        };
        if let Some(config) = gate.as_ref().and_then(|g| g.budget_config(dependency)) {
            if let Some((rate, _)) = config.rate_limit() {
                let scaled = rate.events_per_second() / time_scale;
                table.insert("rate".into(), format!("{scaled}/s").into());
            }
        }
        table.insert(
            "call_timeout".into(),
            format!("{}us", call_timeout.as_micros().max(1)).into(),
        );
        table.insert("upstream".into(), sim_url.into());
        table.insert("listen".into(), "127.0.0.1:0".into());
        table.insert("overload_on_timeout".into(), false.into());
        let body = toml::to_string(&table).map_err(|e| e.to_string())?;
        out.push_str(&format!("\n[budgets.{dependency}]\n{body}"));
    }
    Ok(out)
}

/// A running proxy, with the loopback URL of each dependency's listener.
pub(crate) struct Sidecar {
    child: Child,
    /// Held while the proxy runs: it drains and exits when this closes, so a lab that is killed
    /// leaves no proxy behind.
    _stdin: Option<tokio::process::ChildStdin>,
    err: JoinHandle<Vec<u8>>,
    /// Removed when the sidecar is dropped.
    _file: tempfile::NamedTempFile,
    /// Dropped only once the proxy is reaped, so the group is empty and can be removed.
    group: Option<QuotaGroup>,
    pub(crate) enrichment_url: String,
    pub(crate) records_url: String,
    /// The admin server's loopback URL (`/budgets.json`), if the proxy said where it listens.
    pub(crate) admin_url: Option<String>,
}

impl Sidecar {
    /// Starts `exe proxy` with `budgets` (a budgets file's text), inside `group` when given and in
    /// a process group of its own, and waits until it says it is ready.
    ///
    /// # Errors
    ///
    /// If it cannot be started, exits or says nothing within 20 s; the message holds what it said.
    pub(crate) async fn start(
        exe: &Path,
        budgets: &str,
        group: Option<QuotaGroup>,
    ) -> Result<Sidecar, String> {
        let mut file = tempfile::Builder::new()
            .prefix("inflight-lab-proxy-")
            .suffix(".toml")
            .tempfile()
            .map_err(|e| format!("cannot write the proxy's budgets file: {e}"))?;
        std::io::Write::write_all(&mut file, budgets.as_bytes())
            .map_err(|e| format!("cannot write the proxy's budgets file: {e}"))?;
        let mut cmd = std::process::Command::new(exe);
        cmd.arg("proxy")
            .arg("--config")
            .arg(file.path())
            .arg("--exit-on-stdin-close")
            .stdin(Stdio::piped());
        let mut child = spawn_in(cmd, group.as_ref())
            .map_err(|e| format!("cannot start {} proxy: {e}", exe.display()))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut stderr = child.stderr.take().expect("stderr is piped");
        // Read all along, so that the proxy never blocks on a full pipe; the end is kept.
        let err = tokio::spawn(async move {
            let mut kept = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = stderr.read(&mut buf).await {
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > 2 * KEPT_STDERR {
                    kept.drain(..kept.len() - KEPT_STDERR);
                }
            }
            kept
        });
        let mut sidecar = Sidecar {
            child,
            _stdin: stdin,
            err,
            _file: file,
            group,
            enrichment_url: String::new(),
            records_url: String::new(),
            admin_url: None,
        };
        let ready = tokio::time::timeout(READY_WITHIN, sidecar.read_listeners(stdout)).await;
        match ready {
            Ok(Ok(())) => Ok(sidecar),
            Ok(Err(e)) => Err(sidecar.fail(e).await),
            Err(_) => Err(sidecar.fail("it was not ready within 20 s".into()).await),
        }
    }

    /// Reads the proxy's stdout up to `inflight proxy: ready`, taking each listener's address and
    /// the admin server's.
    async fn read_listeners(&mut self, stdout: tokio::process::ChildStdout) -> Result<(), String> {
        let mut lines = BufReader::new(stdout).lines();
        while let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? {
            let Some(said) = line.strip_prefix("inflight proxy: ") else {
                continue;
            };
            if said == "ready" {
                if self.enrichment_url.is_empty() || self.records_url.is_empty() {
                    return Err(format!("it was ready without both listeners: {said}"));
                }
                // Nothing more is read: the proxy prints nothing else on stdout.
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                return Ok(());
            }
            let Some((name, rest)) = said.split_once(" listening on ") else {
                continue;
            };
            let addr = rest.split(',').next().unwrap_or(rest);
            let url = format!("http://{addr}");
            match name {
                "enrichment" => self.enrichment_url = url,
                "records" => self.records_url = url,
                "admin" => self.admin_url = Some(url),
                _ => {}
            }
        }
        Err("it exited before it was ready".into())
    }

    /// Stops the proxy and returns `message` with what it said on stderr.
    async fn fail(self, message: String) -> String {
        let said = self.stop().await;
        if said.is_empty() {
            message
        } else {
            format!("{message}: {said}")
        }
    }

    /// Kills and reaps the proxy, removes its cgroup, and returns the end of what it said on
    /// stderr.
    pub(crate) async fn stop(mut self) -> String {
        let _ = self.child.kill().await;
        drop(self.group.take());
        let err = (&mut self.err).await.unwrap_or_default();
        let text = String::from_utf8_lossy(&err);
        let text = text.trim();
        let start = text.len().saturating_sub(KEPT_STDERR);
        let start = (start..=text.len())
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(text.len());
        text[start..].to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strategy(name: &str) -> Strategy {
        crate::strategy::builtin().get(name).unwrap().clone()
    }

    #[test]
    fn the_budgets_file_is_the_strategys_budgets_in_front_of_the_sim() {
        let text = budgets_file(&strategy("c5-proxy"), "http://127.0.0.1:4000", 0.5).unwrap();
        let file = inflight_proxy::config::ProxyFile::from_toml_str(&text).unwrap();
        let budgets = file.budgets();
        let records = budgets.get("records").unwrap();
        let enrichment = budgets.get("enrichment").unwrap();
        // The strategy's own limits, as the runner would build them.
        let c5 = strategy("c5");
        let BudgetPlan::PerDependency {
            enrichment: Some(e),
            records: Some(r),
        } = &c5.budgets
        else {
            panic!("c5 has both budgets");
        };
        let (e, r) = (
            e.budget_config("enrichment").unwrap(),
            r.budget_config("records").unwrap(),
        );
        assert_eq!(
            records.config().adaptive_limit().map(|a| a.algorithm()),
            r.adaptive_limit().map(|a| a.algorithm())
        );
        assert_eq!(enrichment.config().max_concurrent(), e.max_concurrent());
        // The client's timeout at the time scale, from the permit on; no permit deadline.
        assert_eq!(records.call_timeout(), Some(Duration::from_secs(1)));
        assert_eq!(records.config().permit_timeout_limit(), None);
        for name in ["records", "enrichment"] {
            let route = file.route(name).expect("proxied");
            assert_eq!(route.upstream().url(), "http://127.0.0.1:4000");
            assert_eq!(route.listen().port(), 0);
            assert!(!route.overload_on_timeout());
        }
        // An admin server on a free loopback port, where the lab reads the limits.
        let admin = file
            .proxy()
            .and_then(|p| p.admin())
            .expect("an admin address");
        assert!(admin.ip().is_loopback() && admin.port() == 0, "{admin}");
    }

    #[test]
    fn an_unlimited_dependency_gets_a_budget_that_never_binds_and_a_rate_is_scaled() {
        let mut c4 = strategy("c4-proxy");
        let text = budgets_file(&c4, "http://127.0.0.1:4000", 1.0).unwrap();
        let budgets = inflight_proxy::config::ProxyFile::from_toml_str(&text)
            .unwrap()
            .into_budgets();
        assert_eq!(budgets.get("records").unwrap().config().max_concurrent(), 6);
        assert_eq!(
            budgets.get("enrichment").unwrap().config().max_concurrent(),
            64
        );
        c4.budgets = BudgetPlan::PerDependency {
            enrichment: Some(GateSpec::Budget(
                "max_concurrent = 24\nrate = \"50/s\"\n".into(),
            )),
            records: Some(GateSpec::Fixed(6)),
        };
        let text = budgets_file(&c4, "http://127.0.0.1:4000", 0.25).unwrap();
        let budgets = inflight_proxy::config::ProxyFile::from_toml_str(&text)
            .unwrap()
            .into_budgets();
        let (rate, _) = budgets
            .get("enrichment")
            .unwrap()
            .config()
            .rate_limit()
            .unwrap();
        assert_eq!(rate.events_per_second(), 200.0);
    }
}
