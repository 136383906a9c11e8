//! One module per subcommand, each with its `Args` (clap) and `run`.

pub mod check_config;
pub mod fanout;
pub mod lab;
pub mod pool_bench;
pub mod probe;
pub mod sim;
