//! One module per subcommand, each with its `Args` (clap) and `run`.

use anyhow::Context;

mod args;
pub mod capacity;
pub mod check_config;
pub mod fanout;
pub mod fleet;
pub mod lab;
pub mod pool_bench;
pub mod probe;
pub mod proxy;
pub mod sim;

/// A budgets file with every key checked by the crate that reads it: the budgets' own and
/// `[fleet]` by `inflight`, the proxy's by `inflight-proxy`. Every subcommand that reads a
/// budgets file reads it so, so that one file serves them all.
pub(crate) fn budgets_file(
    file: inflight::config::BudgetsFile,
) -> Result<inflight_proxy::config::ProxyFile, inflight::ConfigError> {
    inflight_proxy::config::ProxyFile::from_file(&file)
}

/// A multi-threaded tokio runtime built with defaults, like a service's, so its worker count
/// follows the CPU quota.
pub(crate) fn async_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Blocks until stdin is closed (end of file) or can no longer be read.
pub(crate) fn wait_for_stdin_close() {
    let mut sink = [0u8; 256];
    let mut stdin = std::io::stdin();
    while matches!(std::io::Read::read(&mut stdin, &mut sink), Ok(n) if n > 0) {}
}
