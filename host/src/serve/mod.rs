//! `weir serve`: the operator registry, any number of live pipelines, and the HTTP API (see
//! `api`) in one process. Pipelines and their rollouts are kept in `<data dir>/pipelines/` and
//! restored, from their last checkpoints, when the server restarts.

mod managed;
mod tokens;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing::{info, warn};

pub use managed::{Desired, Managed, RolloutPlan, RolloutRequest};
pub use tokens::{Scope, Tokens};

use crate::operator::{Registry, RegistryError, WasmRuntime};

/// Server failures (at start-up; requests fail with `api::ApiError`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The registry could not be opened.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The engine could not be set up.
    #[error(transparent)]
    Load(#[from] crate::operator::LoadError),
    /// A file of the data directory could not be read or written.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The tokens file is unusable.
    #[error("tokens: {0}")]
    Tokens(String),
}

/// How to serve.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The data directory.
    pub data: PathBuf,
    /// Where to listen.
    pub listen: SocketAddr,
    /// Who may call the API.
    pub tokens: Tokens,
    /// The largest request body (uploads, ingest), in bytes.
    pub max_upload: usize,
}

/// The default request body limit: 32 MiB.
pub const DEFAULT_MAX_UPLOAD: usize = 32 << 20;

/// The server's state, shared by the API handlers.
pub struct Server {
    /// The data directory.
    pub data: PathBuf,
    /// Uploaded operators.
    pub registry: Arc<Registry>,
    /// Pipelines by name.
    pub pipelines: Mutex<BTreeMap<String, Managed>>,
    /// Who may call the API.
    pub tokens: Tokens,
    /// The largest request body.
    pub max_upload: usize,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("data", &self.data).finish()
    }
}

fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                warn!("a metrics recorder was already installed; /metrics shows only what reaches this one");
            }
            handle
        })
        .clone()
}

impl Server {
    /// Opens the data directory: the registry and every pipeline, starting those that were
    /// running.
    pub fn open(options: &ServeOptions) -> Result<Arc<Server>, ServeError> {
        let runtime = WasmRuntime::shared()?;
        let registry = Arc::new(Registry::open(&options.data, runtime)?);
        let server = Arc::new(Server {
            data: options.data.clone(),
            registry,
            pipelines: Mutex::new(BTreeMap::new()),
            tokens: options.tokens.clone(),
            max_upload: options.max_upload,
            metrics: metrics_handle(),
        });
        let dir = server.pipelines_dir();
        std::fs::create_dir_all(&dir).map_err(|e| ServeError::Io {
            path: dir.clone(),
            message: e.to_string(),
        })?;
        let entries = std::fs::read_dir(&dir).map_err(|e| ServeError::Io {
            path: dir.clone(),
            message: e.to_string(),
        })?;
        for entry in entries.flatten() {
            let path = entry.path();
            if !path.join(managed::SPEC_FILE).exists() {
                continue;
            }
            match Managed::load(&path, &server.registry) {
                Ok(mut pipeline) => {
                    if pipeline.desired.running {
                        match pipeline.start(&server.registry) {
                            Ok(()) => info!(pipeline = %pipeline.name, "pipeline restored"),
                            Err(e) => {
                                warn!(pipeline = %pipeline.name, error = %e, "pipeline could not be restarted")
                            }
                        }
                    }
                    server
                        .pipelines
                        .lock()
                        .expect("pipelines lock")
                        .insert(pipeline.name.clone(), pipeline);
                }
                Err(e) => warn!(path = %path.display(), error = %e, "pipeline skipped"),
            }
        }
        Ok(server)
    }

    /// `<data dir>/pipelines`.
    pub fn pipelines_dir(&self) -> PathBuf {
        self.data.join("pipelines")
    }

    /// The directory of pipeline `name`.
    pub fn pipeline_dir(&self, name: &str) -> PathBuf {
        self.pipelines_dir().join(name)
    }

    /// Rollout schedules and automatic rollbacks, evaluated every tick.
    pub fn tick(&self) {
        let mut pipelines = self.pipelines.lock().expect("pipelines lock");
        for pipeline in pipelines.values_mut() {
            pipeline.tick();
        }
    }

    /// Stops every pipeline (each takes a final checkpoint).
    pub fn shutdown(&self) {
        let mut pipelines = self.pipelines.lock().expect("pipelines lock");
        for pipeline in pipelines.values_mut() {
            // Stopping on shutdown is not a user's stop: the pipeline restarts with the server.
            pipeline.halt();
        }
    }
}

/// Runs the server until SIGINT or SIGTERM, then stops the pipelines cleanly.
pub async fn serve(options: ServeOptions) -> Result<(), ServeError> {
    let server = Server::open(&options)?;
    let app = crate::api::router(server.clone());
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|e| ServeError::Io {
            path: Path::new(&options.listen.to_string()).to_owned(),
            message: e.to_string(),
        })?;
    let address = listener.local_addr().map_err(|e| ServeError::Io {
        path: PathBuf::from("listener"),
        message: e.to_string(),
    })?;
    eprintln!("weir: listening on http://{address}");
    info!(%address, data = %options.data.display(), "serving");
    let ticker = server.clone();
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(Duration::from_millis(200));
        loop {
            interval.tick().await;
            let server = ticker.clone();
            let _ = tokio::task::spawn_blocking(move || server.tick()).await;
        }
    });
    let shutdown = async {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match terminate.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
        }
    };
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
    let stopping = server.clone();
    let _ = tokio::task::spawn_blocking(move || stopping.shutdown()).await;
    served.map_err(|e| ServeError::Io {
        path: PathBuf::from("server"),
        message: e.to_string(),
    })
}
