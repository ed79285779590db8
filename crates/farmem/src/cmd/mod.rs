//! One module per subcommand; each has `Args` (or a subcommand enum) and `run`.

pub mod bench;
pub mod controller;
pub mod demo;
pub mod eval;
pub mod memnode;
pub mod run;
pub mod sim;
pub mod trace;

/// What every subcommand returns: the process exit code, or an error the
/// CLI prints with its context chain.
pub type Outcome = anyhow::Result<std::process::ExitCode>;
