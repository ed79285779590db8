//! `farmem`: one binary, one subcommand per job.

mod cmd;

use clap::{CommandFactory, Parser, Subcommand};

/// farmem lets unmodified programs use memory that lives on other machines,
/// and simulates the same mechanisms where their hardware does not exist yet.
///
/// Start with `farmem demo`. Daemons: `farmem controller`, `farmem memnode`.
/// Measurements: `farmem bench`, `farmem sim`, `farmem eval`. Every command
/// that reports takes `--json` and then prints one JSON object on stdout.
#[derive(Parser)]
#[command(name = "farmem", version, propagate_version = true)]
struct Cli {
    /// Log more (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a memory node: stores extents granted by the controller.
    Memnode(cmd::memnode::Args),
    /// Run the rack controller: membership and Remote-Balloon allocation.
    Controller(cmd::controller::Args),
    /// Show a rack: memory nodes up or down, grants and leases per client.
    Status(cmd::status::Args),
    /// An operator's changes to the rack's memory nodes (`node remove`).
    #[command(subcommand)]
    Node(cmd::node::Node),
    /// Measure a part of the real system against its baseline, side by side.
    #[command(subcommand)]
    Bench(cmd::bench::Bench),
    /// Simulate a workload or trace through the memory hierarchy.
    Sim(cmd::sim::Args),
    /// Reproduce a paper's evaluation in the simulator.
    Eval(cmd::eval::Args),
    /// Generate, capture and inspect memory-access traces.
    #[command(subcommand)]
    Trace(cmd::trace::Trace),
    // No doc comment on these two: `--help` then shows their Args' whole
    // text, the listing its first sentence.
    Run(cmd::run::Args),
    Batch(cmd::batch::Args),
    /// The quick start: a local cluster and a memory-heavy job, side by side.
    Demo(cmd::demo::Args),
    /// Print a role's key derived from the cluster secret (for compute nodes).
    Token(cmd::token::Args),
    /// A live program's dirty data amplification per tracking granularity (Kona's KTracker).
    Track(cmd::track::Args),
    // No doc comment: `--help` shows the subcommands' whole text.
    #[command(subcommand)]
    Link(cmd::link::Link),
}

fn main() -> std::process::ExitCode {
    // A daemon's --config file becomes flags before parsing (cmd/config.rs).
    let argv = match cmd::config::expand(std::env::args_os().collect(), long_flags) {
        Ok(argv) => argv,
        Err(err) => {
            eprintln!("farmem: error: {err:#}");
            return std::process::ExitCode::from(2);
        }
    };
    let cli = Cli::parse_from(argv);
    init_logging(cli.verbose);
    let result = match cli.command {
        Command::Memnode(a) => cmd::memnode::run(a),
        Command::Controller(a) => cmd::controller::run(a),
        Command::Status(a) => cmd::status::run(a),
        Command::Node(c) => cmd::node::run(c),
        Command::Bench(b) => cmd::bench::run(b),
        Command::Sim(a) => cmd::sim::run(a),
        Command::Eval(a) => cmd::eval::run(a),
        Command::Trace(t) => cmd::trace::run(t),
        Command::Run(a) => cmd::run::run(a),
        Command::Batch(a) => cmd::batch::run(a),
        Command::Demo(a) => cmd::demo::run(a),
        Command::Token(a) => cmd::token::run(a),
        Command::Track(a) => cmd::track::run(a),
        Command::Link(c) => cmd::link::run(c),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("farmem: error: {err:#}");
            std::process::ExitCode::from(2)
        }
    }
}

/// The long flags of subcommand `name`.
fn long_flags(name: &str) -> Vec<String> {
    Cli::command()
        .find_subcommand(name)
        .map(|c| {
            c.get_arguments()
                .filter_map(|a| a.get_long().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // Colour only for a person at a terminal, never into a log file.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(false)
        .init();
}
