//! The `weir` command line: the binary's edge, where errors become messages and exit codes.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// Weir: stateful stream processing with WebAssembly operators.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    nats: NatsAuthArgs,
}

/// How every NATS client of this process authenticates (`weir run`, `serve`, `worker`,
/// `cluster`): one of a creds file, a user and password, a token or an nkey seed; and the
/// certificate authority of `tls://` servers.
#[derive(Debug, clap::Args)]
struct NatsAuthArgs {
    /// A NATS credentials file (user JWT and nkey seed), as `nsc` writes it.
    #[arg(long, global = true, value_name = "FILE")]
    nats_creds: Option<PathBuf>,
    /// A NATS user (with --nats-password or $WEIR_NATS_PASSWORD).
    #[arg(long, global = true)]
    nats_user: Option<String>,
    /// The NATS user's password.
    #[arg(
        long,
        global = true,
        env = "WEIR_NATS_PASSWORD",
        hide_env_values = true
    )]
    nats_password: Option<String>,
    /// A NATS token.
    #[arg(long, global = true, env = "WEIR_NATS_TOKEN", hide_env_values = true)]
    nats_token: Option<String>,
    /// A file holding an nkey seed (`SU...`).
    #[arg(long, global = true, value_name = "FILE")]
    nats_nkey: Option<PathBuf>,
    /// A PEM file of certificate authorities to trust for tls:// NATS servers.
    #[arg(long, global = true, value_name = "FILE")]
    nats_ca: Option<PathBuf>,
}

impl NatsAuthArgs {
    /// Makes these the credentials of every NATS client of the process.
    fn install(self) -> anyhow::Result<()> {
        let read = |flag: &str, path: &std::path::Path| {
            std::fs::read_to_string(path).with_context(|| format!("{flag} {}", path.display()))
        };
        // A password alone (from the environment) names no user: unused.
        let user = match (self.nats_user, self.nats_password) {
            (Some(user), Some(password)) => Some((user, password)),
            (Some(_), None) => {
                anyhow::bail!("--nats-user needs --nats-password (or $WEIR_NATS_PASSWORD)")
            }
            (None, _) => None,
        };
        let auth = weir::nats_client::NatsAuth {
            creds: self
                .nats_creds
                .map(|p| read("--nats-creds", &p))
                .transpose()?,
            user,
            token: self.nats_token,
            nkey_seed: self
                .nats_nkey
                .map(|p| read("--nats-nkey", &p))
                .transpose()?,
            ca: self.nats_ca,
        };
        auth.install().map_err(anyhow::Error::msg)
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a pipeline spec over its input to the end, then print a one-line summary.
    Run(RunArgs),
    /// Named copies of a pipeline's last checkpoint: create, list, restore.
    Savepoint(SavepointArgs),
    /// Run the HTTP API, the operator registry and live pipelines (see docs/api.md).
    Serve(Box<ServeArgs>),
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
    /// Share a pipeline among `weir worker` processes through a NATS server: deploy, status.
    Cluster(ClusterArgs),
    /// Run a share of a pipeline deployed with `weir cluster deploy`, with other workers.
    Worker(WorkerArgs),
}

/// The options of `weir cluster`.
#[derive(Debug, clap::Args)]
struct ClusterArgs {
    #[command(subcommand)]
    action: ClusterAction,
}

#[derive(Debug, Subcommand)]
enum ClusterAction {
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
        /// An enricher to roll out instead of the aggregate.
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
        /// An enricher instead of the aggregate.
        #[arg(long)]
        operator: Option<String>,
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
struct WorkerArgs {
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
    /// Serve Prometheus metrics at http://ADDR/metrics (no token: bind it where only the
    /// scraper can reach it, e.g. 127.0.0.1:9464).
    #[arg(long)]
    metrics_listen: Option<std::net::SocketAddr>,
}

/// The options of `weir new`.
#[derive(Debug, clap::Args)]
struct NewArgs {
    /// The operator's name (also its directory's).
    name: String,
    /// The language.
    #[arg(long, value_enum)]
    lang: weir::project::Language,
    /// Where to create the project's directory.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
}

/// The options of `weir build`.
#[derive(Debug, clap::Args)]
struct BuildArgs {
    /// The project's directory.
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// Where to write the component (default: build/<name>.wasm in the project).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// The options of `weir deploy`.
#[derive(Debug, clap::Args)]
struct DeployArgs {
    /// The server's address, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    server: String,
    /// An admin token (default: $WEIR_ADMIN_TOKEN).
    #[arg(long, env = "WEIR_ADMIN_TOKEN", hide_env_values = true)]
    token: String,
    /// The operator's name in the registry.
    name: String,
    /// The version to upload it as.
    version: String,
    /// The project's directory (its build/<name>.wasm is uploaded).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Upload this component file instead of the project's.
    #[arg(long)]
    module: Option<PathBuf>,
}

/// The options of `weir replay`.
#[derive(Debug, clap::Args)]
struct ReplayArgs {
    /// The server's address, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    server: String,
    /// An admin token (default: $WEIR_ADMIN_TOKEN).
    #[arg(long, env = "WEIR_ADMIN_TOKEN", hide_env_values = true)]
    token: String,
    /// The pipeline.
    pipeline: String,
    /// The version whose results go on the left.
    a: String,
    /// The version whose results go on the right.
    b: String,
    /// A key to show (repeat for more).
    #[arg(long = "key")]
    keys: Vec<String>,
    /// Or: show this many keys, chosen deterministically.
    #[arg(long, conflicts_with = "keys")]
    sample: Option<usize>,
    /// Only windows starting at or after this time (ms).
    #[arg(long)]
    from: Option<i64>,
    /// Only windows ending at or before this time (ms).
    #[arg(long)]
    to: Option<i64>,
    /// Start from this savepoint (default: empty state, the whole log).
    #[arg(long)]
    savepoint: Option<String>,
    /// Print the server's JSON answer instead of a table.
    #[arg(long)]
    json: bool,
}

/// The options of `weir run`.
#[derive(Debug, clap::Args)]
struct RunArgs {
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
    /// Serve Prometheus metrics at http://ADDR/metrics while the pipeline runs (no token: bind
    /// it where only the scraper can reach it, e.g. 127.0.0.1:9464).
    #[arg(long)]
    metrics_listen: Option<std::net::SocketAddr>,
}

/// The options of `weir savepoint`.
#[derive(Debug, clap::Args)]
struct SavepointArgs {
    #[command(subcommand)]
    action: SavepointAction,
    /// A running `weir serve` (e.g. http://127.0.0.1:8080): the target is then the name of one
    /// of its pipelines, which may be running, and the server takes the savepoint.
    #[arg(long, global = true)]
    server: Option<String>,
    /// An admin token for --server (default: $WEIR_ADMIN_TOKEN).
    #[arg(long, global = true, env = "WEIR_ADMIN_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

/// The options of `weir state`.
#[derive(Debug, clap::Args)]
struct StateArgs {
    /// A pipeline spec (its data directory is used) or a data directory.
    target: PathBuf,
    /// Only this key.
    #[arg(long)]
    key: Option<String>,
}

/// The options of `weir bench`.
#[derive(Debug, clap::Args)]
struct BenchArgs {
    /// Another benchmark than the count-sum.
    #[command(subcommand)]
    suite: Option<BenchSuite>,
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
    #[arg(long, default_value_t = weir::spec::DEFAULT_BATCH_SIZE)]
    batch_size: usize,
    /// Measure checkpoint cost instead: throughput with checkpoints every second versus
    /// none, and checkpoint duration as state grows (10 thousand to 1 million keys; add
    /// --large for 10 million).
    #[arg(long)]
    checkpoints: bool,
    /// Measure recovery instead: a count-sum over --keys keys with open windows is stopped
    /// after --events events (checkpointed), and the restart on its data directory is timed.
    #[arg(long)]
    recovery: bool,
    /// With --checkpoints: also measure a state of 10 million keys (needs about 2 GB of disk).
    #[arg(long, requires = "checkpoints")]
    large: bool,
    /// Read the same generated events from a JSON Lines file (written first to a temporary
    /// directory, about 45 bytes per event), so that decoding is measured too.
    #[arg(long, conflicts_with_all = ["checkpoints", "recovery"])]
    jsonl: bool,
    /// The count-sum component.
    #[arg(
        long,
        default_value = "target/wasm32-wasip2/release/weir_example_tumbling_count_sum.wasm"
    )]
    module: PathBuf,
    /// The Python count-sum (`make polyglot` builds it); skipped if absent.
    #[arg(
        long,
        default_value = "target/weir-components/tumbling-count-sum-python.wasm"
    )]
    python: PathBuf,
    /// The JavaScript count-sum (`make polyglot` builds it); skipped if absent.
    #[arg(
        long,
        default_value = "target/weir-components/tumbling-count-sum-js.wasm"
    )]
    js: PathBuf,
    /// Runs of the count-sum (each operator once per run, in turn; with --checkpoints, the run
    /// with checkpoints and the one without) or of `nexmark` (every query, Wasm then native, per
    /// run); with more than one, the medians and ranges follow. This machine's speed drifts:
    /// compare medians, not runs. Not with --recovery or `nats`, which run once.
    #[arg(long, global = true, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
}

/// The options of `weir serve`.
#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// The data directory (registry, pipelines, state).
    #[arg(long, default_value = "weir-data")]
    data: PathBuf,
    /// Address to listen on (port 0 picks a free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: std::net::SocketAddr,
    /// JSON file of tokens: [{"name": "ci", "token": "...", "scopes": ["admin"]}] (scopes: admin,
    /// ingest, metrics). Also read: WEIR_ADMIN_TOKEN, WEIR_INGEST_TOKEN, WEIR_METRICS_TOKEN.
    #[arg(long)]
    tokens: Option<PathBuf>,
    /// Largest request body (uploads, ingest), in bytes.
    #[arg(long, default_value_t = weir::api::DEFAULT_MAX_UPLOAD)]
    max_upload: usize,
    /// The most request body bytes received at once over all requests; more get 503. One token
    /// may hold half of it, one pipeline's requests a quarter.
    #[arg(long, default_value_t = weir::api::DEFAULT_MAX_INFLIGHT)]
    max_inflight: usize,
    /// The slowest a request body may arrive, in bytes per second, once --header-timeout has
    /// passed; a slower one is cut off with 408.
    #[arg(long, default_value_t = weir::api::DEFAULT_MIN_BODY_RATE)]
    min_body_rate: u64,
    /// Serve /metrics without a token on this address too (keep it private). On the main
    /// address /metrics needs a metrics or admin token.
    #[arg(long)]
    metrics_listen: Option<std::net::SocketAddr>,
    /// The most connections open at once; more wait until one closes.
    #[arg(long, default_value_t = 4_096)]
    max_connections: usize,
    /// Close a connection silent (nothing read or written) for this long, e.g. 60s.
    #[arg(long, default_value = "60s")]
    idle_timeout: String,
    /// Under pressure (three quarters of --max-connections open), the shorter silence allowed.
    #[arg(long, default_value = "2s")]
    pressure_timeout: String,
    /// How long a request's headers may take to arrive, however slowly they trickle in.
    #[arg(long, default_value = "10s")]
    header_timeout: String,
    /// How long a stop request waits for a busy pipeline before answering 202 (stopping).
    #[arg(long, default_value = "10s")]
    stop_wait: String,
    /// /healthz reports a running pipeline silent this long as not responding (503).
    #[arg(long, default_value = "30s")]
    stall_after: String,
    /// On SIGTERM, how long to wait for the pipelines' final checkpoints before exiting.
    #[arg(long, default_value = "30s")]
    shutdown_timeout: String,
    /// The most pipelines the server holds (each runs a few threads while started).
    #[arg(long, default_value_t = 1_000)]
    max_pipelines: usize,
    /// A NATS server pipelines may read a stream of and publish to: `NAME=nats://host:port`
    /// (or `tls://`), or a lone URL named `default`; repeat for more. A served spec names the
    /// server, never an address.
    #[arg(long = "nats", value_name = "[NAME=]URL")]
    nats: Vec<String>,
}

#[derive(Debug, Subcommand)]
enum SavepointAction {
    /// Save the last checkpoint of a stopped pipeline under a name.
    Create {
        /// A pipeline spec or its data directory.
        target: PathBuf,
        /// The savepoint's name.
        name: String,
    },
    /// List the savepoints.
    List {
        /// A pipeline spec or its data directory.
        target: PathBuf,
    },
    /// Make a savepoint the current state; the next `weir run` resumes from it.
    Restore {
        /// A pipeline spec or its data directory.
        target: PathBuf,
        /// The savepoint's name.
        name: String,
    },
    /// Delete a savepoint.
    Delete {
        /// A pipeline spec or its data directory.
        target: PathBuf,
        /// The savepoint's name.
        name: String,
    },
    /// With --server: create a new pipeline from a savepoint (stopped; its state is the
    /// savepoint's, its input the original's from the savepoint on).
    Fork {
        /// The pipeline the savepoint is of.
        target: PathBuf,
        /// The savepoint's name.
        name: String,
        /// The new pipeline's spec (JSON, with its own name).
        spec: PathBuf,
    },
}

/// File descriptors a started pipeline holds (ingest log writer and reader, state, three sinks,
/// shadow log), with room to spare.
const FILES_PER_PIPELINE: u64 = 8;
/// File descriptors kept for everything else (the registry, checkpoints, the process).
const FILES_FOR_THE_SERVER: u64 = 256;

/// Raises the process's soft limit on open files to its hard limit, and keeps the connection
/// caps (of the API and, if there is one, the metrics address) under it with room for
/// `max_pipelines` pipelines' files, so connections alone cannot make a pipeline fail to open a
/// file.
fn within_file_limit(max_connections: usize, metrics: bool, max_pipelines: usize) -> usize {
    let limit = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read or raise the open-file limit");
            return max_connections;
        }
    };
    let listeners = if metrics { 2 } else { 1 };
    let reserve = FILES_FOR_THE_SERVER + FILES_PER_PIPELINE * max_pipelines as u64;
    let room = limit.saturating_sub(reserve) / listeners;
    let capped = max_connections.min(room.max(16) as usize);
    if capped < max_connections {
        tracing::warn!(
            max_connections,
            capped,
            open_file_limit = limit,
            "--max-connections lowered to fit the open-file limit"
        );
    }
    capped
}

/// A duration option (`250ms`, `10s`, `2m`).
fn duration(option: &str, text: &str) -> anyhow::Result<std::time::Duration> {
    let ms = weir::time::parse_duration(text)
        .map_err(anyhow::Error::msg)
        .with_context(|| option.to_owned())?;
    Ok(std::time::Duration::from_millis(ms as u64))
}

/// The data directory named by a spec file or given directly.
fn data_dir(target: &std::path::Path) -> anyhow::Result<PathBuf> {
    if target.is_dir() {
        return Ok(target.to_owned());
    }
    let spec = weir::PipelineSpec::load(target)?;
    match spec.state {
        weir::spec::StateSpec::Redb(dir) => Ok(dir),
        weir::spec::StateSpec::Memory => anyhow::bail!(
            "pipeline {:?} keeps its state in memory: there is no data directory",
            spec.name
        ),
    }
}

fn describe(manifest: &weir::checkpoint::Manifest) -> String {
    format!(
        "checkpoint {} of pipeline {:?}: line {}, {} events, watermark {}, {}",
        manifest.id,
        manifest.pipeline,
        manifest.source.line,
        manifest.events,
        manifest.watermark,
        if manifest.finished {
            "input finished"
        } else {
            "input in progress"
        }
    )
}

fn bench_checkpoints(
    options: &weir::bench::BenchOptions,
    large: bool,
    runs: u32,
) -> anyhow::Result<()> {
    let rate = weir::bench::BenchReport::rate;
    println!(
        "checkpoint overhead: tumbling count+sum (Wasm), redb state, {} events, {} keys, {} shard(s)",
        options.events, options.keys, options.shards
    );
    let mut kept = Vec::new();
    let mut durations: Vec<f64> = Vec::new();
    for run in 1..=runs {
        if runs > 1 {
            println!("run {run} of {runs}:");
        }
        let (with, without) = weir::bench::checkpoint_throughput(options, 1_000)?;
        let these: Vec<f64> = with.checkpoints.iter().map(|c| c.duration_ms).collect();
        let mean = these.iter().sum::<f64>() / these.len().max(1) as f64;
        let cpu = |summary| Measured::of(String::new(), summary).cpu();
        println!(
            "no checkpoints        {:>12.0} events/s{}",
            rate(&without),
            cpu(&without).map_or_else(String::new, |cpu| format!("  ({cpu})"))
        );
        println!(
            "checkpoints every 1 s {:>12.0} events/s  ({} checkpoints, mean {:.1} ms, max {:.1} ms{})",
            rate(&with),
            these.len(),
            mean,
            these.iter().copied().fold(0.0, f64::max),
            cpu(&with).map_or_else(String::new, |cpu| format!(", {cpu}")),
        );
        kept.push(100.0 * rate(&with) / rate(&without));
        println!("throughput kept: {:.1} %", kept[kept.len() - 1]);
        durations.extend(these);
    }
    if runs > 1 {
        let (low, high) = range(&kept);
        let count = durations.len();
        let checkpoints = match p99(durations) {
            Some(p99) => format!("{count} checkpoints, p99 {p99:.1} ms"),
            None => "no checkpoint was taken".to_owned(),
        };
        println!(
            "median of {runs} runs: throughput kept {:.1} % ({low:.1}-{high:.1}); {checkpoints}",
            median(kept),
        );
    }
    let mut sizes = vec![10_000, 100_000, 1_000_000];
    if large {
        sizes.push(10_000_000);
    }
    println!("checkpoint of 10,000 changed keys as the state grows (median of 5):");
    println!(
        "{:>12} {:>14} {:>12}",
        "state keys", "hand-over ms", "commit ms"
    );
    for row in weir::bench::checkpoint_cost(&sizes, 10_000)? {
        println!(
            "{:>12} {:>14.1} {:>12.1}",
            row.state_keys,
            row.handover.as_secs_f64() * 1e3,
            row.commit.as_secs_f64() * 1e3
        );
    }
    Ok(())
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
    cli.nats.install()?;
    match cli.command {
        Command::Run(args) => run_pipeline(args),
        Command::Savepoint(args) => savepoint(args),
        Command::Replay(args) => replay(args),
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

/// `weir new`: an operator project.
fn new_project(args: NewArgs) -> anyhow::Result<()> {
    let dir = weir::project::new(&args.dir, &args.name, args.lang)?;
    println!(
        "created {} ({} aggregate): cd into it, then `weir build` and `weir run --fresh pipeline.toml`",
        dir.display(),
        args.lang
    );
    Ok(())
}

/// `weir build`: a project into a component.
fn build_project(args: BuildArgs) -> anyhow::Result<()> {
    let toolchains = weir::project::Toolchains::from_env();
    let out = weir::project::build(&args.dir, args.out.as_deref(), &toolchains)?;
    let size = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    println!("built {} ({size} bytes)", out.display());
    Ok(())
}

/// `weir deploy`: a built component into a server's registry.
fn deploy(args: DeployArgs) -> anyhow::Result<()> {
    let module = match args.module {
        Some(module) => module,
        None => weir::project::Project::open(&args.dir)?.default_output(),
    };
    let answer = weir::project::deploy(
        &args.server,
        &args.token,
        &args.name,
        &args.version,
        &module,
    )?;
    println!("{answer}");
    Ok(())
}

/// `weir replay`: asks the server for a replay and prints it.
fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    weir::names::check("pipeline name", &args.pipeline)?;
    let request = serde_json::json!({
        "versions": [args.a, args.b],
        "keys": args.keys,
        "sample": args.sample,
        "from": args.from,
        "to": args.to,
        "savepoint": args.savepoint,
    });
    let path = format!("/v1/pipelines/{}/replay", args.pipeline);
    let (status, body) = weir::client::post(
        &args.server,
        &args.token,
        &path,
        "application/json",
        request.to_string().as_bytes(),
        std::time::Duration::from_secs(1_200),
    )?;
    if status != 200 {
        anyhow::bail!("the server answered {status}: {body}");
    }
    let answer: serde_json::Value = serde_json::from_str(&body)?;
    if args.json {
        println!("{answer}");
    } else {
        print!("{}", weir::client::render_replay(&answer));
    }
    Ok(())
}

/// `weir run`: one pipeline over its input to the end.
fn run_pipeline(args: RunArgs) -> anyhow::Result<()> {
    let RunArgs {
        spec,
        shards,
        batch_size,
        checkpoint_interval,
        fresh,
        metrics_listen,
    } = args;
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
    if let Some(address) = metrics_listen {
        let bound = weir::api::spawn_metrics_endpoint(address)
            .with_context(|| format!("--metrics-listen {address}"))?;
        eprintln!("weir: metrics on http://{bound}/metrics");
    }
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

fn cluster(args: ClusterArgs) -> anyhow::Result<()> {
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
        ClusterAction::Status { nats, pipeline } => {
            let status = weir::cluster::status(&nats, &pipeline)?;
            println!("{status}");
        }
    }
    Ok(())
}

/// Runs a worker until SIGINT or SIGTERM, then gives its slices up (each after a final
/// checkpoint, uploaded) so the other workers take them at once.
fn worker(args: WorkerArgs) -> anyhow::Result<()> {
    let worker = weir::cluster::Worker::start(weir::cluster::WorkerOptions {
        url: args.nats,
        pipeline: args.pipeline,
        id: args.id,
        dir: args.dir,
    })?;
    if let Some(address) = args.metrics_listen {
        let bound = weir::api::spawn_metrics_endpoint(address)
            .with_context(|| format!("--metrics-listen {address}"))?;
        eprintln!("weir: metrics on http://{bound}/metrics");
    }
    eprintln!("weir: worker {} started", worker.id());
    let stop = worker.stopper();
    on_signals(move || stop.store(true, std::sync::atomic::Ordering::SeqCst))?;
    worker.run()?;
    eprintln!("weir: worker stopped");
    Ok(())
}

/// Calls `stop` on the first SIGINT or SIGTERM; a second one exits at once.
fn on_signals(stop: impl Fn() + Send + 'static) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let (mut interrupt, mut terminate) = {
        let _inside = runtime.enter();
        (
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
        )
    };
    std::thread::Builder::new()
        .name("weir-signals".into())
        .spawn(move || {
            runtime.block_on(async {
                for round in 0..2 {
                    tokio::select! {
                        _ = interrupt.recv() => {}
                        _ = terminate.recv() => {}
                    }
                    if round == 1 {
                        eprintln!("weir: stopping now (the last checkpoint holds)");
                        std::process::exit(130);
                    }
                    eprintln!("weir: stopping after a final checkpoint (again to stop now)");
                    stop();
                }
            })
        })?;
    Ok(())
}

/// SIGINT or SIGTERM stops the run after a final checkpoint (its windows stay open, so a
/// restart goes on where it stopped): how an endless input (stdin, NATS) is ended. A second
/// signal exits at once; the last checkpoint still holds.
fn stop_on_signals(control: Arc<weir::pipeline::PipelineControl>) -> anyhow::Result<()> {
    on_signals(move || control.stop())
}

/// A progress line on a terminal, redrawn every second while a pipeline runs: events in and
/// their rate, the watermark, results, late events and dead letters. Cleared when dropped.
struct Progress {
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

/// `weir savepoint`.
fn savepoint(args: SavepointArgs) -> anyhow::Result<()> {
    let SavepointArgs {
        action,
        server,
        token,
    } = args;
    if let Some(server) = server {
        let token =
            token.ok_or_else(|| anyhow::anyhow!("--server needs --token or $WEIR_ADMIN_TOKEN"))?;
        return savepoint_on_server(&server, &token, action);
    }
    use weir::checkpoint::{
        create_savepoint, delete_savepoint, list_savepoints, restore_savepoint,
    };
    match action {
        SavepointAction::Create { target, name } => {
            let saved = create_savepoint(&data_dir(&target)?, &name)?;
            println!("saved {:?}: {}", saved.name, describe(&saved.manifest));
        }
        SavepointAction::List { target } => {
            let listing = list_savepoints(&data_dir(&target)?)?;
            for saved in &listing.saved {
                println!("{}\t{}", saved.name, describe(&saved.manifest));
            }
            for (name, reason) in &listing.damaged {
                println!("{name}\tdamaged: {reason}");
            }
        }
        SavepointAction::Restore { target, name } => {
            let restored = restore_savepoint(&data_dir(&target)?, &name)?;
            println!(
                "restored {:?}: {}; `weir run` resumes from it",
                restored.name,
                describe(&restored.manifest)
            );
        }
        SavepointAction::Delete { target, name } => {
            delete_savepoint(&data_dir(&target)?, &name)?;
            println!("deleted {name:?}");
        }
        SavepointAction::Fork { .. } => {
            anyhow::bail!("fork creates a pipeline on a server: give --server (and a token)")
        }
    }
    Ok(())
}

/// `weir savepoint --server`: the same actions through the server's API, on a served pipeline
/// (named by the target).
fn savepoint_on_server(server: &str, token: &str, action: SavepointAction) -> anyhow::Result<()> {
    use std::time::Duration;
    let pipeline_of = |target: &std::path::Path| -> anyhow::Result<String> {
        let name = target.to_string_lossy().into_owned();
        weir::names::check("pipeline name", &name)?;
        Ok(name)
    };
    let (method, path, body, expected) = match &action {
        SavepointAction::Create { target, name } => (
            "POST",
            format!("/v1/pipelines/{}/savepoints", pipeline_of(target)?),
            Some(serde_json::json!({ "name": name }).to_string().into_bytes()),
            201,
        ),
        SavepointAction::List { target } => (
            "GET",
            format!("/v1/pipelines/{}/savepoints", pipeline_of(target)?),
            None,
            200,
        ),
        SavepointAction::Delete { target, name } => {
            weir::names::check("savepoint name", name)?;
            let pipeline = pipeline_of(target)?;
            (
                "DELETE",
                format!("/v1/pipelines/{pipeline}/savepoints/{name}"),
                None,
                204,
            )
        }
        SavepointAction::Fork { target, name, spec } => {
            weir::names::check("savepoint name", name)?;
            let pipeline = pipeline_of(target)?;
            let spec = std::fs::read(spec)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", spec.display()))?;
            (
                "POST",
                format!("/v1/pipelines/{pipeline}/savepoints/{name}/fork"),
                Some(spec),
                201,
            )
        }
        SavepointAction::Restore { .. } => anyhow::bail!(
            "a served pipeline is not restored in place: fork the savepoint into a new pipeline \
             (weir savepoint fork --server ...)"
        ),
    };
    let body = body.as_deref().map(|b| ("application/json", b));
    let (status, answer) =
        weir::client::call(server, token, method, &path, body, Duration::from_secs(120))?;
    if status != expected {
        anyhow::bail!("the server answered {status}: {answer}");
    }
    if !answer.is_empty() {
        println!("{answer}");
    } else {
        println!("done");
    }
    Ok(())
}

/// `weir serve`.
fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let ServeArgs {
        data,
        listen,
        tokens,
        max_upload,
        max_inflight,
        min_body_rate,
        metrics_listen,
        max_connections,
        idle_timeout,
        pressure_timeout,
        header_timeout,
        stop_wait,
        stall_after,
        shutdown_timeout,
        max_pipelines,
        nats,
    } = args;
    let nats = weir::serve::NatsServers::parse(&nats).map_err(anyhow::Error::msg)?;
    let tokens = weir::serve::Tokens::load(tokens.as_deref())?;
    anyhow::ensure!(
        !tokens.is_empty(),
        "no API tokens: set WEIR_ADMIN_TOKEN (and WEIR_INGEST_TOKEN), or pass --tokens FILE"
    );
    anyhow::ensure!(max_connections > 0, "--max-connections must be at least 1");
    let max_connections =
        within_file_limit(max_connections, metrics_listen.is_some(), max_pipelines);
    anyhow::ensure!(min_body_rate > 0, "--min-body-rate must be at least 1");
    let header_timeout = duration("--header-timeout", &header_timeout)?;
    let options = weir::api::ServeOptions {
        data,
        listen,
        metrics_listen,
        tokens,
        max_upload,
        bodies: weir::api::BodyPolicy {
            max_inflight,
            min_rate: min_body_rate,
            grace: header_timeout,
        },
        connections: weir::api::ConnectionLimits {
            max_connections,
            idle_timeout: duration("--idle-timeout", &idle_timeout)?,
            pressure_timeout: duration("--pressure-timeout", &pressure_timeout)?,
            header_timeout,
        },
        pipelines: weir::serve::PipelineLimits {
            stop_wait: duration("--stop-wait", &stop_wait)?,
            stall_after: duration("--stall-after", &stall_after)?,
            max_pipelines,
        },
        shutdown_timeout: duration("--shutdown-timeout", &shutdown_timeout)?,
        nats,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let served = runtime.block_on(weir::api::serve(options));
    // Requests still being answered (a stop waiting for a busy pipeline) do not hold
    // the exit.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    served?;
    Ok(())
}

/// `weir state`.
fn state(args: StateArgs) -> anyhow::Result<()> {
    let StateArgs { target, key } = args;
    let inspection = weir::checkpoint::inspect(&data_dir(&target)?, key.as_deref())?;
    match &inspection.manifest {
        Some(manifest) => println!("{}", serde_json::json!({"manifest": manifest})),
        None => println!("{}", serde_json::json!({"manifest": null})),
    }
    for row in &inspection.windows {
        println!("{}", serde_json::json!({"window": row}));
    }
    for row in &inspection.state {
        println!("{}", serde_json::json!({"state": row}));
    }
    Ok(())
}

/// The benchmarks besides the count-sum.
#[derive(Debug, clap::Subcommand)]
enum BenchSuite {
    /// Nexmark queries over the Nexmark source, each with its example component and natively:
    /// events/s on one shard and the ratio.
    Nexmark {
        /// The queries (q0, q1, q2, q5, q7, q7-global, q8, q11); all of them if none is given.
        #[arg(long = "query")]
        queries: Vec<String>,
        /// Events to generate (persons, auctions and bids; most queries read only the bids).
        #[arg(long, default_value_t = 10_000_000)]
        events: u64,
        /// Shards (1 measures per core).
        #[arg(long, default_value_t = 1)]
        shards: usize,
        /// Events per batch.
        #[arg(long, default_value_t = weir::spec::DEFAULT_BATCH_SIZE)]
        batch_size: usize,
        /// Where the query components are (`make components` builds them).
        #[arg(long, default_value = "target/wasm32-wasip2/release")]
        components: PathBuf,
    },
    /// The count-sum reading a NATS JetStream stream and publishing its results to one, against
    /// the same events from a file: events/s and the NATS path's cost per event. Needs a
    /// running `nats-server -js`.
    Nats {
        /// The server.
        #[arg(long, default_value = "nats://127.0.0.1:4222")]
        nats: String,
        /// Events.
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        /// Distinct keys.
        #[arg(long, default_value_t = 1_000)]
        keys: u64,
        /// The count-sum component.
        #[arg(
            long,
            default_value = "target/wasm32-wasip2/release/weir_example_tumbling_count_sum.wasm"
        )]
        module: PathBuf,
        /// Also share the pipeline among this many `weir worker` processes (repeat for more
        /// runs, e.g. --workers 1 --workers 3) and time them.
        #[arg(long)]
        workers: Vec<usize>,
        /// Events per NATS message (JSON Lines): a producer that batches pays a message's cost
        /// once per batch.
        #[arg(long, default_value_t = 1)]
        per_message: usize,
        /// With --workers: cut the stream into this many partitions by key, each read by its
        /// slice's worker alone (without: six slices, each reading the whole stream).
        #[arg(long)]
        partitions: Option<usize>,
        /// With --workers: pin worker i to core i (taskset).
        #[arg(long)]
        pin: bool,
    },
}

/// `weir bench nats`.
fn bench_nats(
    url: &str,
    events: u64,
    keys: u64,
    module: PathBuf,
    workers: &[usize],
    (per_message, partitions, pin): (usize, Option<usize>, bool),
) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=10_000).contains(&per_message),
        "--per-message from 1 to 10000"
    );
    anyhow::ensure!(
        events > 0 && keys > 0,
        "--events and --keys must be at least 1"
    );
    let options = weir::bench::BenchOptions {
        events,
        keys,
        shards: 1,
        module: module.clone(),
        others: Vec::new(),
        batch_size: weir::spec::DEFAULT_BATCH_SIZE,
        jsonl: false,
    };
    println!(
        "tumbling count+sum (Rust Wasm), {events} events, {keys} keys, 1 shard, one process, \
         {per_message} event(s) per NATS message"
    );
    let report = weir::bench::nats(&options, url, per_message)?;
    let rate = weir::bench::BenchReport::rate;
    let (file, nats) = (rate(&report.file), rate(&report.nats));
    println!("file source, results discarded    {file:>12.0} events/s");
    println!(
        "NATS source, results to NATS      {nats:>12.0} events/s  ({} results published)",
        report.nats.results_out
    );
    println!(
        "NATS path cost: {:.2} us per event more than the file ({:.2} x the file's rate); publishing the events took {:.0} events/s",
        (1.0 / nats - 1.0 / file) * 1e6,
        nats / file,
        report.publish_rate
    );
    for &count in workers {
        anyhow::ensure!((1..=16).contains(&count), "--workers from 1 to 16");
        let shape = weir::bench::ClusterShape {
            workers: count,
            partitions,
            per_message,
            pin,
        };
        let run = weir::bench::cluster(url, &module, (events, keys), shape)?;
        let millions = events as f64 / 1e6;
        println!(
            "shared by {count} worker process(es), {}{} {:>8.0} events/s  ({} results, {:.2} s from the workers' start; CPU per million events: workers {:.2} s, nats-server {:.2} s)",
            partitions.map_or("6 slices reading all".into(), |p| format!("{p} partitions")),
            if pin { ", pinned" } else { "" },
            run.rate(),
            run.results,
            run.elapsed.as_secs_f64(),
            run.workers_cpu.as_secs_f64() / millions,
            run.nats_cpu.as_secs_f64() / millions,
        );
    }
    Ok(())
}

/// `weir bench nexmark`.
fn bench_nexmark(
    mut queries: Vec<String>,
    events: u64,
    shards: usize,
    batch_size: usize,
    components: &std::path::Path,
    runs: u32,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=weir::spec::MAX_BATCH_SIZE).contains(&batch_size),
        "--batch-size must be 1 to {}",
        weir::spec::MAX_BATCH_SIZE
    );
    anyhow::ensure!(
        (1..=weir::spec::MAX_SHARDS).contains(&shards),
        "--shards must be 1 to {}",
        weir::spec::MAX_SHARDS
    );
    if queries.is_empty() {
        queries = weir::bench::NEXMARK_QUERIES.map(String::from).to_vec();
    }
    println!("nexmark, {events} events generated, {shards} shard(s), batches of {batch_size}");
    // Each query's runs (in the order given, a query given twice twice), Wasm then native
    // (native last, as `print_medians` wants).
    let mut measured: Vec<Vec<Vec<Measured>>> = queries.iter().map(|_| Vec::new()).collect();
    for run in 1..=runs {
        if runs > 1 {
            println!("run {run} of {runs}:");
        }
        let rows = weir::bench::nexmark(&queries, events, shards, batch_size, components)?;
        for (row, runs) in rows.into_iter().zip(&mut measured) {
            let [wasm, native] = [("wasm", &row.wasm), ("native", &row.native)]
                .map(|(label, summary)| Measured::of(label.into(), summary));
            println!(
                "{:<4} wasm {:>10.0} events/s  native {:>10.0} events/s  ({} events read, {} results; wasm/native {:.2})",
                row.query,
                wasm.rate,
                native.rate,
                row.wasm.events_in,
                row.wasm.results_out,
                wasm.rate / native.rate
            );
            anyhow::ensure!(
                row.wasm.results_out == row.native.results_out
                    && row.wasm.dead_letters == 0
                    && row.native.dead_letters == 0,
                "{}: Wasm and native disagree on the number of results, or one had dead letters",
                row.query
            );
            runs.push(vec![wasm, native]);
        }
    }
    if runs > 1 {
        for (query, runs) in queries.iter().zip(&measured) {
            print!("{query}: ");
            print_medians(runs);
        }
    }
    Ok(())
}

/// `weir bench`.
fn bench(args: BenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        !((args.jsonl || args.checkpoints || args.recovery) && args.suite.is_some()),
        "--jsonl, --checkpoints and --recovery apply to the count-sum benchmark only, not to \
         `weir bench nexmark` or `nats`"
    );
    if let Some(BenchSuite::Nexmark {
        queries,
        events,
        shards,
        batch_size,
        components,
    }) = args.suite
    {
        return bench_nexmark(queries, events, shards, batch_size, &components, args.runs);
    }
    anyhow::ensure!(
        args.runs == 1 || !(args.recovery || matches!(args.suite, Some(BenchSuite::Nats { .. }))),
        "--runs applies to the count-sum, --checkpoints and `weir bench nexmark`; --recovery and \
         `weir bench nats` run once"
    );
    if let Some(BenchSuite::Nats {
        nats,
        events,
        keys,
        module,
        workers,
        per_message,
        partitions,
        pin,
    }) = args.suite
    {
        let shape = (per_message, partitions, pin);
        return bench_nats(&nats, events, keys, module, &workers, shape);
    }
    let BenchArgs {
        suite: _,
        events,
        keys,
        shards,
        batch_size,
        module,
        python,
        js,
        checkpoints,
        recovery,
        large,
        jsonl,
        runs,
    } = args;
    let mut others = Vec::new();
    for (language, module) in [("python", python), ("js", js)] {
        if module.exists() {
            others.push((language.to_owned(), module));
        } else {
            println!(
                "{language}: {} not built, skipped (`make polyglot` builds it)",
                module.display()
            );
        }
    }
    anyhow::ensure!(
        shards > 0 && keys > 0 && batch_size > 0,
        "--shards, --keys and --batch-size must be at least 1"
    );
    let options = weir::bench::BenchOptions {
        events,
        keys,
        shards,
        module,
        others,
        batch_size,
        jsonl,
    };
    if checkpoints {
        return bench_checkpoints(&options, large, runs);
    }
    if recovery {
        println!(
            "recovery: count-sum over {keys} keys, one-day windows, redb, stopped after {events} events"
        );
        let report = weir::bench::recovery(&options, events)?;
        let mb = report.data_bytes as f64 / 1e6;
        println!(
            "data directory {mb:.0} MB after {} events; restart to running {:.2} s ({:.2} s per 100 MB)",
            report.events,
            report.restart.as_secs_f64(),
            report.restart.as_secs_f64() / mb.max(f64::EPSILON) * 100.0
        );
        return Ok(());
    }
    let from = if jsonl {
        "JSON Lines file"
    } else {
        "generator"
    };
    println!(
        "tumbling count+sum, 1 min windows, {events} events from the {from}, {keys} keys, {shards} shard(s), batches of {batch_size}"
    );
    let mut measured: Vec<Vec<Measured>> = Vec::new();
    for run in 1..=runs {
        if runs > 1 {
            println!("run {run} of {runs}:");
        }
        measured.push(print_count_sum(&weir::bench::run(&options)?)?);
    }
    if runs > 1 {
        print_medians(&measured);
    }
    Ok(())
}

/// One operator's figures in one run of the count-sum benchmark.
struct Measured {
    label: String,
    /// Events per second.
    rate: f64,
    /// Its shards' CPU time per event, in nanoseconds, where the platform tells it: the
    /// operator's cost even when the router, not the shard, limits the throughput.
    shard_ns: Option<f64>,
    /// Its router's CPU time per event (reading, decoding, routing), likewise.
    router_ns: Option<f64>,
}

impl Measured {
    fn of(label: String, summary: &weir::pipeline::Summary) -> Measured {
        let per_event =
            |cpu: std::time::Duration| cpu.as_nanos() as f64 / (summary.events_in as f64).max(1.0);
        Measured {
            label,
            rate: weir::bench::BenchReport::rate(summary),
            shard_ns: summary.shards_cpu.map(per_event),
            router_ns: summary.router_cpu.map(per_event),
        }
    }

    /// `CPU per event: shards .. ns, router .. ns` where the platform tells them: which of
    /// the two threads limits the run.
    fn cpu(&self) -> Option<String> {
        let (shard, router) = self.shard_ns.zip(self.router_ns)?;
        Some(format!(
            "CPU per event: shards {shard:.0} ns, router {router:.0} ns"
        ))
    }
}

/// Prints one run of the count-sum benchmark, checks that every operator gave the native
/// results, and returns each operator's figures (the native one last).
fn print_count_sum(report: &weir::bench::BenchReport) -> anyhow::Result<Vec<Measured>> {
    let mut rows = vec![("rust wasm".to_owned(), &report.wasm)];
    rows.extend(
        report
            .others
            .iter()
            .map(|(language, summary)| (format!("{language} wasm"), summary)),
    );
    rows.push(("native".to_owned(), &report.native));
    let measured: Vec<Measured> = (rows.iter())
        .map(|(label, summary)| Measured::of(label.clone(), summary))
        .collect();
    let native = native_of(&measured);
    for ((_, summary), this) in rows.iter().zip(&measured) {
        println!(
            "{:<12} {:>12.0} events/s  ({:.2} s, {} results, {} dead letters, {} traps, {:.2} x native{})",
            this.label,
            this.rate,
            summary.elapsed.as_secs_f64(),
            summary.results_out,
            summary.dead_letters,
            summary.traps,
            this.rate / native.rate,
            this.cpu()
                .map_or_else(String::new, |cpu| format!(", {cpu}")),
        );
    }
    println!(
        "wasm/native throughput ratio: {:.2}",
        measured[0].rate / native.rate
    );
    if let Some(ratio) = cost_ratio(&measured[0], native) {
        println!("wasm/native by shard CPU per event (native's cost over wasm's): {ratio:.2}");
    }
    for (label, summary) in &rows {
        anyhow::ensure!(
            summary.results_out == report.native.results_out && summary.dead_letters == 0,
            "{label} and native disagree on the number of results, or {label} had dead letters"
        );
    }
    Ok(measured)
}

/// The native operator's figures in a run's, which [`print_count_sum`] puts last.
fn native_of(run: &[Measured]) -> &Measured {
    run.last().expect("a run has the native operator, last")
}

/// Native's shard CPU per event over `this` one's: 1 when they cost the same, 0.5 when `this`
/// costs twice as much.
fn cost_ratio(this: &Measured, native: &Measured) -> Option<f64> {
    Some(native.shard_ns? / this.shard_ns?).filter(|ratio| ratio.is_finite())
}

/// Prints, for each operator of several runs, the median events/s and its ratio to the native
/// run of the same run (median, lowest, highest), and the same for shard CPU per event.
fn print_medians(runs: &[Vec<Measured>]) {
    println!("medians of {} runs (ratios within each run):", runs.len());
    let natives: Vec<&Measured> = runs.iter().map(|run| native_of(run)).collect();
    for (i, first) in runs[0].iter().enumerate() {
        let this: Vec<&Measured> = runs.iter().map(|run| &run[i]).collect();
        let ratios: Vec<f64> = (this.iter().zip(&natives))
            .map(|(this, native)| this.rate / native.rate)
            .collect();
        let (low, high) = range(&ratios);
        print!(
            "{:<12} {:>12.0} events/s  {:.2} x native ({low:.2}-{high:.2})",
            first.label,
            median(this.iter().map(|m| m.rate).collect()),
            median(ratios),
        );
        let costs: Option<Vec<f64>> = (this.iter().zip(&natives))
            .map(|(this, native)| cost_ratio(this, native))
            .collect();
        let nanos: Option<Vec<f64>> = this.iter().map(|m| m.shard_ns).collect();
        if let (Some(costs), Some(nanos)) = (costs, nanos) {
            let (low, high) = range(&costs);
            print!(
                "; shard CPU {:.0} ns/event, native's over this: {:.2} ({low:.2}-{high:.2})",
                median(nanos),
                median(costs),
            );
        }
        println!();
    }
}

/// The lowest and highest of `values` (positive figures: rates, ratios, shares).
fn range(values: &[f64]) -> (f64, f64) {
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    (low, values.iter().copied().fold(0.0, f64::max))
}

/// The 99th percentile of `values` (the nearest rank: the smallest value at or above 99 % of
/// them); none of no values.
fn p99(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let rank = (values.len() * 99).div_ceil(100);
    values.get(rank.checked_sub(1)?).copied()
}

/// The median of `values` (the mean of the middle two for an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    match values.len() % 2 {
        0 => (values[middle - 1] + values[middle]) / 2.0,
        _ => values[middle],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bench_args(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        let cli = Cli::try_parse_from(["weir", "bench"].iter().chain(args))?;
        match cli.command {
            Command::Bench(args) => Ok(args),
            other => panic!("not a bench command: {other:?}"),
        }
    }

    /// Options that would be silently ignored are refused instead; `--runs` may follow
    /// `nexmark`, which honours it.
    #[test]
    fn bench_options_that_do_not_apply_are_refused() {
        assert!(
            bench_args(&["--large"]).is_err(),
            "--large needs --checkpoints"
        );
        assert!(bench_args(&["--checkpoints", "--large"]).is_ok());
        let refused = |args: &[&str]| {
            let error = bench(bench_args(args).unwrap()).unwrap_err().to_string();
            assert!(error.contains("run once"), "{args:?}: {error}");
        };
        refused(&["--runs", "2", "--recovery"]);
        for flag in ["--recovery", "--checkpoints", "--jsonl"] {
            let error = bench(bench_args(&[flag, "nexmark"]).unwrap()).unwrap_err();
            assert!(
                error.to_string().contains("count-sum benchmark only"),
                "{error}"
            );
        }
        refused(&["--runs", "2", "nats"]);
        refused(&["nats", "--runs", "2"]);
        let nexmark = bench_args(&["nexmark", "--runs", "3", "--query", "q7"]).unwrap();
        assert_eq!(nexmark.runs, 3);
    }

    #[test]
    fn medians_ranges_and_percentiles_of_bench_figures() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(range(&[0.7, 0.9, 0.8]), (0.7, 0.9));
        assert_eq!(p99(vec![]), None);
        assert_eq!(p99(vec![5.0]), Some(5.0));
        // Of 100 values 1..=100 the 99th; of 101, the 100th (rank 99.99 rounds up).
        assert_eq!(p99((1..=100).rev().map(f64::from).collect()), Some(99.0));
        assert_eq!(p99((1..=101).map(f64::from).collect()), Some(100.0));
        assert_eq!(p99((1..=25).map(f64::from).collect()), Some(25.0));
    }

    #[test]
    fn the_cost_ratio_is_native_over_this_and_none_without_a_figure() {
        let measured = |shard_ns| Measured {
            label: "x".into(),
            rate: 1.0,
            shard_ns,
            router_ns: None,
        };
        let native = measured(Some(100.0));
        assert_eq!(cost_ratio(&measured(Some(200.0)), &native), Some(0.5));
        assert_eq!(cost_ratio(&measured(None), &native), None);
        assert_eq!(
            cost_ratio(&measured(Some(0.0)), &native),
            None,
            "not finite"
        );
        let run = [measured(Some(1.0)), native];
        assert_eq!(native_of(&run).shard_ns, Some(100.0));
    }
}
