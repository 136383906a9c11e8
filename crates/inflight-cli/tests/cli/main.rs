//! Command-line tests: one integration binary, a module per subcommand, helpers in `support`.

mod capacity;
mod check_config;
mod docs;
mod fanout;
mod fleet;
mod lab;
mod pool_bench;
mod probe;
mod proxy;
mod proxy_fleet;
mod sim;
mod support;
