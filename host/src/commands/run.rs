//! `weir run`: a pipeline spec over its input, with a progress line on a terminal. Uses the
//! library's `api`, `pipeline`, `spec` and `time`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use super::{MetricsArgs, NatsAuthArgs, stop_on_signals};

/// The options of `weir run`.
#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// How this command's NATS clients authenticate.
    #[command(flatten)]
    auth: NatsAuthArgs,
    /// The pipeline spec (TOML, or JSON if it ends in .json).
    spec: PathBuf,
    /// Number of shards (overrides the spec; default: one per core).
    #[arg(long)]
    shards: Option<usize>,
    /// Events per batch (overrides the spec).
    #[arg(long)]
    batch_size: Option<usize>,
    /// Time between checkpoints, e.g. 500ms or 2s, or "off" (overrides the spec).
    #[arg(long)]
    checkpoint_interval: Option<String>,
    /// Discard any checkpoint in the data directory and start from the beginning.
    #[arg(long)]
    fresh: bool,
    /// Prometheus metrics while the pipeline runs.
    #[command(flatten)]
    metrics: MetricsArgs,
}

/// `weir run`: one pipeline over its input to the end.
pub(crate) fn run_pipeline(args: RunArgs) -> anyhow::Result<()> {
    let RunArgs {
        spec,
        shards,
        batch_size,
        checkpoint_interval,
        fresh,
        metrics,
        auth,
    } = args;
    auth.install()?;
    let mut pipeline = weir::PipelineSpec::load(&spec)?;
    if let Some(shards) = shards {
        anyhow::ensure!(
            (1..=weir::spec::MAX_SHARDS).contains(&shards),
            "--shards must be 1 to {}",
            weir::spec::MAX_SHARDS
        );
        pipeline.shards = Some(shards);
    }
    if let Some(batch_size) = batch_size {
        anyhow::ensure!(
            (1..=weir::spec::MAX_BATCH_SIZE).contains(&batch_size),
            "--batch-size must be 1 to {}",
            weir::spec::MAX_BATCH_SIZE
        );
        pipeline.batch_size = batch_size;
    }
    if let Some(interval) = checkpoint_interval {
        pipeline.checkpoint_interval = match interval.as_str() {
            "off" => None,
            text => Some(
                weir::time::parse_duration(text)
                    .map_err(anyhow::Error::msg)
                    .context("--checkpoint-interval")?
                    .max(1),
            ),
        };
    }
    metrics.start()?;
    let control = weir::pipeline::standalone_control(&pipeline.name);
    stop_on_signals(control.clone())?;
    let progress = std::io::stderr()
        .is_terminal()
        .then(|| Progress::start(control.clone()));
    let result = weir::pipeline::run_controlled(
        &pipeline,
        weir::RunOptions {
            fresh,
            ..Default::default()
        },
        Some(control),
    );
    drop(progress);
    let summary = result.with_context(|| format!("pipeline {:?} failed", pipeline.name))?;
    eprintln!("weir: {summary}");
    Ok(())
}

/// A progress line on a terminal, redrawn every second while a pipeline runs: events in and
/// their rate, the watermark, results, late events and dead letters. Cleared when dropped.
pub(crate) struct Progress {
    done: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    fn start(control: Arc<weir::pipeline::PipelineControl>) -> Progress {
        use std::sync::atomic::Ordering::Relaxed;
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop = done.clone();
        let thread = std::thread::spawn(move || {
            let mut last = (std::time::Instant::now(), 0u64);
            while !stop.load(Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(250));
                if last.0.elapsed() < std::time::Duration::from_secs(1) {
                    continue;
                }
                let stats = &control.stats;
                let events = stats.events_in.load(Relaxed);
                let rate = (events - last.1.min(events)) as f64 / last.0.elapsed().as_secs_f64();
                last = (std::time::Instant::now(), events);
                let watermark = match stats.watermark.load(Relaxed) {
                    i64::MIN => "none yet".to_owned(),
                    i64::MAX => "end of input".to_owned(),
                    ms => chrono::DateTime::from_timestamp_millis(ms).map_or(ms.to_string(), |t| {
                        t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
                    }),
                };
                eprint!(
                    "\r\x1b[2Kweir: {events} events ({rate:.0}/s), watermark {watermark}, {} results, {} late, {} dead letters",
                    stats.results_out.load(Relaxed),
                    stats.late.load(Relaxed),
                    stats.dead_letters.load(Relaxed),
                );
            }
            eprint!("\r\x1b[2K");
        });
        Progress {
            done,
            thread: Some(thread),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
