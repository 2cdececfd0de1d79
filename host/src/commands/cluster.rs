//! `weir cluster` (deploy, stop, start, withdraw, status, rollout, rollback of a shared
//! pipeline) and `weir worker`. Uses
//! the library's `api` and `cluster`.

use std::path::PathBuf;

use clap::Subcommand;

use super::{MetricsArgs, NatsAuthArgs, on_signals};

/// The options of `weir cluster`.
#[derive(Debug, clap::Args)]
pub(crate) struct ClusterArgs {
    #[command(subcommand)]
    action: ClusterAction,
    /// How this command's NATS clients authenticate.
    #[command(flatten)]
    auth: NatsAuthArgs,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ClusterAction {
    /// Store a pipeline spec and its components on the NATS server for workers to run.
    Deploy {
        /// The NATS server, nats://host:port.
        #[arg(long)]
        nats: String,
        /// The spec file (its source a NATS stream, its results a NATS subject).
        spec: PathBuf,
        /// How many slices the key groups are cut into (1-64; the most workers that get work).
        #[arg(long)]
        slices: Option<usize>,
    },
    /// Route a share of the keys of the aggregate (or of an enricher) to another version;
    /// every worker's slices switch at their next checkpoint.
    Rollout {
        /// The NATS server, nats://host:port.
        #[arg(long)]
        nats: String,
        /// The pipeline.
        pipeline: String,
        /// The candidate version.
        version: String,
        /// Its component (needed the first time this version is rolled out).
        #[arg(long)]
        module: Option<PathBuf>,
        /// Share of keys (0-100) the candidate serves.
        #[arg(long)]
        percent: u8,
        /// Run the candidate in shadow (it serves nothing).
        #[arg(long)]
        shadow: bool,
        /// An enricher or a stage's operator to roll out instead of the aggregate.
        #[arg(long)]
        operator: Option<String>,
    },
    /// Send every key back to the live version.
    Rollback {
        /// The NATS server, nats://host:port.
        #[arg(long)]
        nats: String,
        /// The pipeline.
        pipeline: String,
        /// An enricher or a stage's operator instead of the aggregate.
        #[arg(long)]
        operator: Option<String>,
    },
    /// Stop the pipeline: its workers give every slice up after a final checkpoint, and run
    /// none until it is started again.
    Stop {
        /// The NATS server, nats://host:port.
        #[arg(long)]
        nats: String,
        /// The pipeline.
        pipeline: String,
    },
    /// Start a stopped pipeline again: its workers take its slices from their checkpoints.
    Start {
        /// The NATS server, nats://host:port.
        #[arg(long)]
        nats: String,
        /// The pipeline.
        pipeline: String,
    },
    /// Withdraw the pipeline with everything the cluster keeps of it (its checkpoints too):
    /// it is stopped first, its slices given up (waiting up to 10 s), then forgotten.
    Withdraw {
        /// The NATS server, nats://host:port.
        #[arg(long)]
        nats: String,
        /// The pipeline.
        pipeline: String,
    },
    /// Print the pipeline's slices, live workers and who runs each slice, as JSON.
    Status {
        /// The NATS server, nats://host:port.
        #[arg(long)]
        nats: String,
        /// The pipeline.
        pipeline: String,
    },
}

/// The options of `weir worker`.
#[derive(Debug, clap::Args)]
pub(crate) struct WorkerArgs {
    /// How this command's NATS clients authenticate.
    #[command(flatten)]
    auth: NatsAuthArgs,
    /// The NATS server, nats://host:port.
    #[arg(long)]
    nats: String,
    /// The pipeline (deployed with `weir cluster deploy`).
    #[arg(long)]
    pipeline: String,
    /// This worker's name, unique among the pipeline's workers (default: host name and pid).
    #[arg(long)]
    id: Option<String>,
    /// Where to keep local state and components.
    #[arg(long, default_value = "weir-worker")]
    dir: PathBuf,
    /// Prometheus metrics.
    #[command(flatten)]
    metrics: MetricsArgs,
}

pub(crate) fn cluster(args: ClusterArgs) -> anyhow::Result<()> {
    args.auth.install()?;
    let stopping = matches!(args.action, ClusterAction::Stop { .. });
    match args.action {
        ClusterAction::Deploy { nats, spec, slices } => {
            let record = weir::cluster::deploy(&nats, &spec, slices)?;
            eprintln!(
                "weir: pipeline {} deployed in {} slices ({} components)",
                record.name,
                record.slices,
                record.code.len()
            );
        }
        ClusterAction::Rollout {
            nats,
            pipeline,
            version,
            module,
            percent,
            shadow,
            operator,
        } => {
            let routing = weir::cluster::rollout(
                &nats,
                &pipeline,
                operator.as_deref(),
                &version,
                module.as_deref(),
                percent,
                shadow,
            )?;
            eprintln!("weir: routing stored: {}", serde_json::to_string(&routing)?);
        }
        ClusterAction::Rollback {
            nats,
            pipeline,
            operator,
        } => {
            let routing = weir::cluster::rollback(&nats, &pipeline, operator.as_deref())?;
            eprintln!("weir: routing stored: {}", serde_json::to_string(&routing)?);
        }
        ClusterAction::Stop { nats, pipeline } | ClusterAction::Start { nats, pipeline } => {
            let cluster = weir::cluster::Cluster::connect(&nats)?;
            cluster.set_stopped(&pipeline, stopping)?;
            let what = if stopping { "stopped" } else { "started" };
            eprintln!("weir: pipeline {pipeline} {what}");
        }
        ClusterAction::Withdraw { nats, pipeline } => {
            let cluster = weir::cluster::Cluster::connect(&nats)?;
            cluster.withdraw(&pipeline, std::time::Duration::from_secs(10))?;
            eprintln!("weir: pipeline {pipeline} withdrawn");
        }
        ClusterAction::Status { nats, pipeline } => {
            let status = weir::cluster::status(&nats, &pipeline)?;
            println!("{status}");
        }
    }
    Ok(())
}

/// Runs a worker until SIGINT or SIGTERM, then gives its slices up (each after a final
/// checkpoint, uploaded) so the other workers take them at once.
pub(crate) fn worker(args: WorkerArgs) -> anyhow::Result<()> {
    args.auth.install()?;
    let worker = weir::cluster::Worker::start(weir::cluster::WorkerOptions {
        url: args.nats,
        pipeline: args.pipeline,
        id: args.id,
        dir: args.dir,
    })?;
    args.metrics.start()?;
    eprintln!("weir: worker {} started", worker.id());
    let stop = worker.stopper();
    on_signals(move || stop.store(true, std::sync::atomic::Ordering::SeqCst))?;
    worker.run()?;
    eprintln!("weir: worker stopped");
    Ok(())
}
