//! The `weir` command line: the binary's edge, where errors become messages and exit codes. Depends
//! on `commands` only (the library through them).

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

mod commands;

use commands::*;

/// Weir: stateful stream processing with WebAssembly operators.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a pipeline spec over its input to the end, then print a one-line summary.
    Run(RunArgs),
    /// Named copies of a pipeline's last checkpoint: create, list, restore.
    Savepoint(SavepointArgs),
    /// Run the HTTP API, the operator registry and live pipelines (see docs/api.md).
    Serve(Box<ServeArgs>),
    /// Make, list, rotate and revoke the tokens of a running `weir serve`.
    Token(TokenArgs),
    /// Show the state in a data directory (offline, read-only), as JSON lines.
    State(StateArgs),
    /// Measure events/second of a tumbling count-and-sum, Wasm versus native.
    Bench(BenchArgs),
    /// Create an operator project (source, weir.toml, pipeline spec, sample events, a test).
    New(NewArgs),
    /// Build the operator project in a directory into a component, whatever its language.
    Build(BuildArgs),
    /// Upload a built operator to a running `weir serve` as NAME VERSION.
    Deploy(DeployArgs),
    /// Replay a served pipeline's recorded input through two operator versions, side by side.
    Replay(ReplayArgs),
    /// Write a test in the operator's language that reproduces one row of a served pipeline
    /// (a result, shadow result, replay row or dead letter): passes on the live version, fails on the candidate.
    Repro(ReproArgs),
    /// Share a pipeline among `weir worker` processes through a NATS server: deploy, status.
    Cluster(ClusterArgs),
    /// Run a share of a pipeline deployed with `weir cluster deploy`, with other workers.
    Worker(WorkerArgs),
}

/// mimalloc instead of glibc's malloc: allocation and free were 17 % of a Wasm count-sum run
/// (perf); `docs/performance-log.md` ("mimalloc") has the before and after.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("weir: error: {}", report(&error));
            ExitCode::FAILURE
        }
    }
}

/// The error with its causes, each said once: most of Weir's messages already name their cause
/// (`cannot read {path}: {source}`), so a cause whose words the text holds is not repeated.
fn report(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(args) => run_pipeline(args),
        Command::Savepoint(args) => savepoint(args),
        Command::Token(args) => token(args),
        Command::Replay(args) => replay(args),
        Command::Repro(args) => repro(args),
        Command::Cluster(args) => cluster(args),
        Command::Worker(args) => worker(args),
        Command::Serve(args) => serve(*args),
        Command::State(args) => state(args),
        Command::Bench(args) => bench(args),
        Command::New(args) => new_project(args),
        Command::Build(args) => build_project(args),
        Command::Deploy(args) => deploy(args),
    }
}
