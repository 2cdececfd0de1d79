//! `weir serve`: its options, turned into the server's limits, and the server run until a
//! signal. Uses the library's `api`, `serve` and `time`.

use std::path::PathBuf;

use anyhow::Context;

use super::NatsAuthArgs;

/// The options of `weir serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// How this command's NATS clients authenticate.
    #[command(flatten)]
    auth: NatsAuthArgs,
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
    /// A Kafka cluster pipelines may read a topic of and produce to: `NAME=host:port[,...]`
    /// (its bootstrap brokers), or lone brokers named `default`; repeat for more. A served
    /// spec names the cluster, never an address.
    #[arg(long = "kafka", value_name = "[NAME=]BROKERS")]
    kafka: Vec<String>,
    /// Serve HTTPS with this certificate chain (PEM; with --tls-key). SIGHUP reads it and the
    /// key again, for a renewed certificate without a restart.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM; with --tls-cert).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

/// File descriptors a started pipeline holds (ingest log writer and reader, state, three sinks,
/// shadow log), with room to spare.
pub(crate) const FILES_PER_PIPELINE: u64 = 8;

/// File descriptors kept for everything else (the registry, checkpoints, the process).
pub(crate) const FILES_FOR_THE_SERVER: u64 = 256;

/// Raises the process's soft limit on open files to its hard limit, and keeps the connection
/// caps (of the API and, if there is one, the metrics address) under it with room for
/// `max_pipelines` pipelines' files, so connections alone cannot make a pipeline fail to open a
/// file.
pub(crate) fn within_file_limit(
    max_connections: usize,
    metrics: bool,
    max_pipelines: usize,
) -> usize {
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
pub(crate) fn duration(option: &str, text: &str) -> anyhow::Result<std::time::Duration> {
    let ms = weir::time::parse_duration(text)
        .map_err(anyhow::Error::msg)
        .with_context(|| option.to_owned())?;
    Ok(std::time::Duration::from_millis(ms as u64))
}

/// `weir serve`.
pub(crate) fn serve(args: ServeArgs) -> anyhow::Result<()> {
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
        kafka,
        tls_cert,
        tls_key,
        auth,
    } = args;
    let tls = match (tls_cert, tls_key) {
        (Some(cert), Some(key)) => Some(std::sync::Arc::new(weir::api::Tls::load(&cert, &key)?)),
        _ => None,
    };
    auth.install()?;
    let nats = weir::serve::ExternalServers::parse(&nats)?.with_kafka(&kafka)?;
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
        tls,
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
