//! The `weir` command line: the binary's edge, where errors become messages and exit codes.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

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
    Run {
        /// The pipeline spec (TOML, or JSON if it ends in .json).
        spec: PathBuf,
        /// Number of shards (overrides the spec; default: one per core).
        #[arg(long)]
        shards: Option<usize>,
        /// Events per batch (overrides the spec).
        #[arg(long)]
        batch_size: Option<usize>,
    },
    /// Measure events/second of a tumbling count-and-sum, Wasm versus native.
    Bench {
        /// Events to generate.
        #[arg(long, default_value_t = 10_000_000)]
        events: u64,
        /// Distinct keys.
        #[arg(long, default_value_t = 1_000)]
        keys: u64,
        /// Shards.
        #[arg(long, default_value_t = 1)]
        shards: usize,
        /// Events per batch.
        #[arg(long, default_value_t = 4_096)]
        batch_size: usize,
        /// The count-sum component.
        #[arg(
            long,
            default_value = "target/wasm32-wasip2/release/weir_example_tumbling_count_sum.wasm"
        )]
        module: PathBuf,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("weir: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run {
            spec,
            shards,
            batch_size,
        } => {
            let mut pipeline = weir::PipelineSpec::load(&spec)?;
            if let Some(shards) = shards {
                anyhow::ensure!(shards > 0, "--shards must be at least 1");
                pipeline.shards = Some(shards);
            }
            if let Some(batch_size) = batch_size {
                anyhow::ensure!(batch_size > 0, "--batch-size must be at least 1");
                pipeline.batch_size = batch_size;
            }
            let summary = weir::run(&pipeline)
                .with_context(|| format!("pipeline {:?} failed", pipeline.name))?;
            eprintln!("weir: {summary}");
            Ok(())
        }
        Command::Bench {
            events,
            keys,
            shards,
            batch_size,
            module,
        } => {
            anyhow::ensure!(
                shards > 0 && keys > 0 && batch_size > 0,
                "--shards, --keys and --batch-size must be at least 1"
            );
            let options = weir::bench::BenchOptions {
                events,
                keys,
                shards,
                module,
                batch_size,
            };
            println!(
                "tumbling count+sum, 1 min windows, {events} events, {keys} keys, {shards} shard(s), batches of {batch_size}"
            );
            let report = weir::bench::run(&options)?;
            let (wasm, native) = (
                weir::bench::BenchReport::rate(&report.wasm),
                weir::bench::BenchReport::rate(&report.native),
            );
            println!(
                "wasm   {:>12.0} events/s  ({:.2} s, {} results)",
                wasm,
                report.wasm.elapsed.as_secs_f64(),
                report.wasm.results_out
            );
            println!(
                "native {:>12.0} events/s  ({:.2} s, {} results)",
                native,
                report.native.elapsed.as_secs_f64(),
                report.native.results_out
            );
            println!("wasm/native throughput ratio: {:.2}", wasm / native);
            anyhow::ensure!(
                report.wasm.results_out == report.native.results_out,
                "the two runs disagree on the number of results"
            );
            Ok(())
        }
    }
}
