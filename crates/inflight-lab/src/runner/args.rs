//! The runner's command line (`inflight lab runner ...`), both sides of it: the flags a lab run
//! starts a runner with ([`RunnerArgs::command_line`]) and the runner's reading of them back
//! ([`RunnerArgs`] as clap parses it, then [`RunnerArgs::config`]).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::bail;

use super::RunnerConfig;
use crate::scenario::ScenarioSet;
use crate::strategy;

/// The subcommand of the `inflight` binary that runs one runner.
pub const RUNNER_SUBCOMMAND: [&str; 2] = ["lab", "runner"];

/// One run of one strategy against the sim: the flags of `inflight lab runner`, which a lab run
/// starts inside a CPU-quota cgroup; it prints a JSON run result.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct RunnerArgs {
    /// The strategy to run.
    #[arg(long)]
    pub strategy: String,
    /// The strategies file (default: the copy built into the binary).
    #[arg(long, value_name = "FILE")]
    pub strategies: Option<PathBuf>,
    /// The scenario the sim runs, whose record classes (if it gives records classes) the
    /// runner names to its budgets and reports apart.
    #[arg(long, value_name = "NAME")]
    pub scenario: Option<String>,
    /// The scenarios file (default: the copy built into the binary).
    #[arg(long, value_name = "FILE")]
    pub scenarios: Option<PathBuf>,
    /// The sim's loopback URL.
    #[arg(long, value_name = "URL")]
    pub sim_url: String,
    #[arg(long, default_value_t = 200)]
    pub records: u64,
    /// Multiplies the client's 2 s timeout.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub time_scale: f64,
    /// The run's seed, as given to the sim (which draws the latencies; the runner draws nothing
    /// and reports it in its result).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Exit when stdin closes, so a killed lab never leaves a runner behind.
    #[arg(long)]
    pub exit_on_stdin_close: bool,
    /// Serve the budgets' metrics as Prometheus text at http://ADDR/metrics while the run lasts
    /// (a loopback address, e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// The id of this runner's first record (replicas of one run take separate ranges).
    #[arg(long, default_value_t = 0)]
    pub first_id: u64,
    /// The Redis that fleet budgets keep their permits in.
    #[arg(long, value_name = "URL")]
    pub redis_url: Option<String>,
    /// The measured size of a budget given as `{ measure = "capacity" }`, e.g. `records=6`.
    #[arg(long, value_name = "DEPENDENCY=N", value_parser = parse_measured)]
    pub measured: Vec<(String, usize)>,
    /// Send enrichment calls here instead of the sim (the loopback URL of the proxy that
    /// enforces a strategy with `enforce = "proxy"`).
    #[arg(long, value_name = "URL")]
    pub enrichment_url: Option<String>,
    /// Send writes here instead of the sim.
    #[arg(long, value_name = "URL")]
    pub records_url: Option<String>,
}

impl RunnerArgs {
    /// The arguments after the binary that start a runner with these flags:
    /// `lab runner --strategy ...`, every flag written out, so that what the runner reads back
    /// is exactly this.
    pub fn command_line(&self) -> Vec<OsString> {
        let mut out: Vec<OsString> = RUNNER_SUBCOMMAND.iter().map(OsString::from).collect();
        let mut flag = |name: &str, value: OsString| {
            out.push(name.into());
            out.push(value);
        };
        flag("--strategy", self.strategy.clone().into());
        if let Some(file) = &self.strategies {
            flag("--strategies", file.clone().into());
        }
        if let Some(scenario) = &self.scenario {
            flag("--scenario", scenario.clone().into());
        }
        if let Some(file) = &self.scenarios {
            flag("--scenarios", file.clone().into());
        }
        flag("--sim-url", self.sim_url.clone().into());
        flag("--records", self.records.to_string().into());
        flag("--time-scale", self.time_scale.to_string().into());
        flag("--seed", self.seed.to_string().into());
        flag("--first-id", self.first_id.to_string().into());
        if let Some(addr) = self.metrics_addr {
            flag("--metrics-addr", addr.to_string().into());
        }
        if let Some(url) = &self.redis_url {
            flag("--redis-url", url.clone().into());
        }
        for (dependency, n) in &self.measured {
            flag("--measured", format!("{dependency}={n}").into());
        }
        if let Some(url) = &self.enrichment_url {
            flag("--enrichment-url", url.clone().into());
        }
        if let Some(url) = &self.records_url {
            flag("--records-url", url.clone().into());
        }
        if self.exit_on_stdin_close {
            out.push("--exit-on-stdin-close".into());
        }
        out
    }

    /// What the runner is asked to do, its strategy read from the strategies file.
    ///
    /// # Errors
    ///
    /// If the strategies file cannot be read, lacks the strategy, or no record is asked for;
    /// if a scenario is named and the scenarios file cannot be read or lacks it.
    pub fn config(&self) -> anyhow::Result<RunnerConfig> {
        let strategies = match &self.strategies {
            Some(path) => strategy::load(path)?,
            None => strategy::builtin(),
        };
        let strategy = strategies.get(&self.strategy)?.clone();
        if self.records == 0 {
            bail!("--records must be at least 1");
        }
        let classes = match &self.scenario {
            Some(name) => {
                let scenarios = match &self.scenarios {
                    Some(path) => ScenarioSet::load(path)?,
                    None => ScenarioSet::builtin(),
                };
                scenarios.get(name)?.classes.clone()
            }
            None if self.scenarios.is_some() => bail!("--scenarios needs --scenario"),
            None => None,
        };
        Ok(RunnerConfig {
            strategy,
            sim_url: self.sim_url.clone(),
            records: self.records,
            time_scale: self.time_scale,
            seed: self.seed,
            metrics_addr: self.metrics_addr,
            first_id: self.first_id,
            redis_url: self.redis_url.clone(),
            measured: self.measured.iter().cloned().collect::<BTreeMap<_, _>>(),
            enrichment_url: self.enrichment_url.clone(),
            records_url: self.records_url.clone(),
            classes,
        })
    }
}

fn parse_measured(text: &str) -> Result<(String, usize), String> {
    let (dependency, n) = text
        .split_once('=')
        .ok_or_else(|| format!("expected DEPENDENCY=N, got `{text}`"))?;
    let n: usize = n
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("the size must be a positive integer, got `{n}`"))?;
    Ok((dependency.to_string(), n))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `inflight lab runner` as the binary parses it.
    #[derive(Debug, Parser)]
    struct Binary {
        #[command(subcommand)]
        lab: Lab,
    }

    #[derive(Debug, clap::Subcommand)]
    enum Lab {
        Lab {
            #[command(subcommand)]
            runner: Runner,
        },
    }

    #[derive(Debug, clap::Subcommand)]
    enum Runner {
        Runner(RunnerArgs),
    }

    fn read_back(args: &RunnerArgs) -> RunnerArgs {
        let mut line: Vec<OsString> = vec!["inflight".into()];
        line.extend(args.command_line());
        let Lab::Lab {
            runner: Runner::Runner(back),
        } = Binary::try_parse_from(line).unwrap().lab;
        back
    }

    fn args() -> RunnerArgs {
        RunnerArgs {
            strategy: "c4".into(),
            strategies: Some(PathBuf::from("lab dir/strategies.toml")),
            scenario: Some("priority".into()),
            scenarios: Some(PathBuf::from("lab dir/scenarios.toml")),
            sim_url: "http://127.0.0.1:4000".into(),
            records: 67,
            time_scale: 0.2,
            seed: 0x9e37_79b9_7f4a_7c15,
            exit_on_stdin_close: true,
            metrics_addr: Some("127.0.0.1:9465".parse().unwrap()),
            first_id: 134,
            redis_url: Some("redis://127.0.0.1:6380".into()),
            measured: vec![("records".into(), 6), ("enrichment".into(), 12)],
            enrichment_url: Some("http://127.0.0.1:4001".into()),
            records_url: Some("http://127.0.0.1:4002".into()),
        }
    }

    #[test]
    fn the_runner_reads_back_every_flag_the_lab_writes() {
        let all = args();
        assert_eq!(read_back(&all), all);
        let fewest = RunnerArgs {
            strategies: None,
            scenario: None,
            scenarios: None,
            exit_on_stdin_close: false,
            metrics_addr: None,
            redis_url: None,
            measured: Vec::new(),
            enrichment_url: None,
            records_url: None,
            ..all
        };
        assert_eq!(read_back(&fewest), fewest);
        // An odd time scale survives the text form whole.
        let odd = RunnerArgs {
            time_scale: 0.1 + 0.2,
            ..fewest
        };
        assert_eq!(
            read_back(&odd).time_scale.to_bits(),
            (0.1f64 + 0.2).to_bits()
        );
    }

    #[test]
    fn the_config_keeps_the_seed_and_the_measured_sizes() {
        let args = RunnerArgs {
            strategies: None,
            scenarios: None,
            ..args()
        };
        let config = args.config().unwrap();
        assert_eq!(config.seed, args.seed);
        assert_eq!(config.strategy.name, "c4");
        assert_eq!(
            (config.records, config.first_id, config.time_scale),
            (67, 134, 0.2)
        );
        assert_eq!(config.measured.get("records"), Some(&6));
        assert_eq!(config.measured.get("enrichment"), Some(&12));
        let classes = config.classes.expect("priority gives records classes");
        assert_eq!(
            classes.names().collect::<Vec<_>>(),
            ["batch", "interactive"]
        );
        let plain = RunnerArgs {
            scenario: Some("degrading".into()),
            ..args.clone()
        };
        assert_eq!(plain.config().unwrap().classes, None);
        let unknown = RunnerArgs {
            scenario: Some("nope".into()),
            ..args.clone()
        };
        let err = unknown.config().unwrap_err().to_string();
        assert!(err.contains("unknown scenario `nope`"), "{err}");
        let none = RunnerArgs { records: 0, ..args };
        let err = none.config().unwrap_err().to_string();
        assert!(err.contains("--records must be at least 1"), "{err}");
        assert_eq!(
            parse_measured("records=0").unwrap_err(),
            "the size must be a positive integer, got `0`"
        );
    }
}
