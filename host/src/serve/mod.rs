//! `weir serve`: the operator registry and any number of live pipelines, as a domain the HTTP
//! layer (`api`) drives. Nothing here knows HTTP: requests fail with a typed [`RequestError`]
//! that `api` maps to a status in one place.
//!
//! Pipelines live in `<data dir>/pipelines/<name>/` and are restored, from their last
//! checkpoints, when the server restarts. The data directory is locked while a server uses it.
//! Each pipeline has its own lock ([`Slot`]); the table of pipelines is locked only to look a
//! name up, and no lock is held while waiting for a pipeline thread, so one busy pipeline never
//! blocks another's calls.
//!
//! Depends on `checkpoint`, `cluster` (pipelines placed on workers: `on_workers.rs`), `fsutil`,
//! `names`, `operator`, `pipeline`, `rollout`, `source`, `spec`, `state` and `time`; `api`
//! depends on it, never the reverse.

mod audit;
mod error;
mod external;
mod managed;
mod on_workers;
mod rate;
mod rollout;
mod slot;
mod tenants;
mod token_store;
mod tokens;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing::{info, warn};

pub use audit::{AuditLog, AuditRecord, MAX_READ as AUDIT_MAX_READ};
pub use error::{RequestError, ServeError};
pub use external::{DEFAULT_SERVER, ExternalServers, NatsArgumentError};
pub use managed::{Damage, Desired, Managed};
pub use rollout::{RolloutPlan, RolloutRequest};
pub use slot::{
    RedriveRequest, ReplayRequest, ReproRequest, ResultLine, Slot, SlotHealth, StopOutcome,
    examples_dry_run,
};
pub use tenants::{
    TenantQuota, TenantStore, check_holds as check_tenant_holds, holds as tenant_holds,
    label_metrics,
};
pub use token_store::{Issued, MAX_TOKENS, NewToken, TokenRecord, unknown as unknown_token};
pub use tokens::{Caller, Reach, Scope, TokenQuota, Tokens, Verdict};

use crate::operator::{Registry, WasmRuntime};

/// Where a deleted pipeline's directory goes before it is removed (not a valid name, so never
/// taken for a pipeline).
const TRASH_PREFIX: &str = ".deleted-";
/// Where a new pipeline's directory is made before it is renamed into place whole (not a valid
/// name either): a crash while it is made leaves this, which the next start removes, never a
/// half-made pipeline.
const CREATING_PREFIX: &str = ".creating-";

/// How the server treats its pipelines.
#[derive(Debug, Clone, Copy)]
pub struct PipelineLimits {
    /// How long a stop request waits for the pipeline before answering "stopping".
    pub stop_wait: Duration,
    /// A running pipeline silent this long is reported by `/healthz` as not responding.
    pub stall_after: Duration,
    /// The most pipelines the server holds.
    pub max_pipelines: usize,
}

impl Default for PipelineLimits {
    fn default() -> Self {
        PipelineLimits {
            stop_wait: Duration::from_secs(10),
            stall_after: Duration::from_secs(30),
            max_pipelines: 1_000,
        }
    }
}

/// The server's domain state, shared by the API handlers.
pub struct Server {
    /// The data directory.
    pub data: PathBuf,
    /// Uploaded operators.
    pub registry: Arc<Registry>,
    /// The NATS servers pipelines may read from and publish to (`--nats`).
    pub nats: ExternalServers,
    pipelines: RwLock<BTreeMap<String, Arc<Slot>>>,
    /// Names whose directories are being created or removed, outside the table's lock.
    busy_names: Mutex<BTreeSet<String>>,
    /// Who may call the API.
    pub tokens: Tokens,
    /// The tenants' quotas.
    pub tenants: TenantStore,
    /// The largest request body.
    pub max_upload: usize,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
    /// How pipelines are treated.
    pub limits: PipelineLimits,
    /// Held while a pipeline is created, so two creations by one token cannot both pass its
    /// quota.
    owning: Mutex<()>,
    /// Says paths inside the data directory relative to it, in messages to callers.
    redactor: Redactor,
    /// Who changed what: every state-changing call, durably.
    pub audit: AuditLog,
    /// Held for the server's life: no second server uses the same data directory.
    _lock: File,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("data", &self.data).finish()
    }
}

/// The tenants kept in `data`, with those of the tokens (set at start, or made before tenants
/// were kept) made now: binding a token to a tenant at start hands it the names already in its
/// form.
fn open_tenants(data: &std::path::Path, tokens: &Tokens) -> Result<TenantStore, ServeError> {
    let tenants = TenantStore::open(data)?;
    for tenant in tokens.tenants() {
        if !tenants.contains(&tenant) {
            let keep = tenants.set(&tenant, TenantQuota::default());
            keep.map_err(|e| ServeError::Tenants(format!("{tenant}: {e}")))?;
        }
    }
    Ok(tenants)
}

/// The answer for a pipeline that does not exist, or that the caller may not see.
pub fn unknown_pipeline(name: &str) -> RequestError {
    RequestError::NotFound(format!(
        "there is no pipeline {name:?}; GET /v1/pipelines lists them"
    ))
}

/// The process's Prometheus recorder, installed on first use.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: std::sync::OnceLock<PrometheusHandle> = std::sync::OnceLock::new();
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

/// Says the paths inside a data directory relative to it, for messages to callers (who need
/// to know which file, never where the server keeps its data).
#[derive(Debug, Clone)]
pub struct Redactor {
    /// The data directory as absolute paths (as given, and with links resolved).
    dirs: Vec<String>,
}

impl Redactor {
    /// For data directory `data`.
    pub fn new(data: &std::path::Path) -> Redactor {
        let absolute = std::path::absolute(data).ok();
        let canonical = std::fs::canonicalize(data).ok();
        let mut dirs: Vec<String> = [absolute, canonical]
            .into_iter()
            .flatten()
            .map(|dir| dir.display().to_string().trim_end_matches('/').to_owned())
            .filter(|dir| !dir.is_empty())
            .collect();
        dirs.dedup();
        Redactor { dirs }
    }

    /// `text` with `<data>/x` said `x`, and `<data>` itself `.` (a longer name that only
    /// begins the same, `<data>-old`, is left as it is).
    pub fn apply(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for dir in &self.dirs {
            text = text.replace(&format!("{dir}/"), "");
            let mut out = String::with_capacity(text.len());
            let mut rest = text.as_str();
            while let Some(at) = rest.find(dir.as_str()) {
                let after = &rest[at + dir.len()..];
                let whole = !after.starts_with(|c: char| {
                    c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')
                });
                out.push_str(&rest[..at]);
                out.push_str(if whole { "." } else { dir });
                rest = after;
            }
            out.push_str(rest);
            text = out;
        }
        text
    }
}

/// Locks the data directory for this process, or says who holds it.
fn lock_data_dir(data: &std::path::Path) -> Result<File, ServeError> {
    let io = |e: std::io::Error| ServeError::Io {
        path: data.to_owned(),
        message: e.to_string(),
    };
    std::fs::create_dir_all(data).map_err(io)?;
    let path = data.join("weir.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io)?;
    match file.try_lock() {
        Ok(()) => {
            let _ = file.set_len(0);
            let _ =
                std::io::Write::write_all(&mut &file, std::process::id().to_string().as_bytes());
            Ok(file)
        }
        Err(std::fs::TryLockError::WouldBlock) => Err(ServeError::Locked(data.to_owned())),
        Err(std::fs::TryLockError::Error(e)) => Err(io(e)),
    }
}

/// A pipeline name reserved while its directory is created or removed; released when dropped.
struct Reservation<'a> {
    server: &'a Server,
    name: String,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.server
            .busy_names
            .lock()
            .expect("busy names lock")
            .remove(&self.name);
    }
}

/// What `/healthz` reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Health {
    /// `ok`, or `degraded` when a pipeline stopped responding or failed while it should run.
    pub status: &'static str,
    /// Running pipelines that showed no sign of life for longer than allowed.
    pub stalled: Vec<String>,
    /// Pipelines that should run but whose run failed (one that failed on a full disk is
    /// started again once there is room).
    pub failed: Vec<String>,
    /// Pipelines whose files are damaged (they are `failed`; the others run).
    pub damaged_pipelines: Vec<String>,
    /// Registry entries that could not be read.
    pub damaged_operators: Vec<String>,
}

impl Server {
    /// Opens the data directory (locking it): the registry and every pipeline, starting those
    /// that were running. A damaged pipeline is kept as `failed` with the reason.
    pub fn open(
        data: PathBuf,
        mut tokens: Tokens,
        max_upload: usize,
        limits: PipelineLimits,
        nats: ExternalServers,
    ) -> Result<Arc<Server>, ServeError> {
        let lock = lock_data_dir(&data)?;
        tokens.open_store(&data)?;
        let tenants = open_tenants(&data, &tokens)?;
        let runtime = WasmRuntime::shared()?;
        let registry = Arc::new(Registry::open(&data, runtime)?);
        let audit = AuditLog::open(&data).map_err(|e| ServeError::Io {
            path: data.join("audit.jsonl"),
            message: e.to_string(),
        })?;
        let server = Arc::new(Server {
            audit,
            redactor: Redactor::new(&data),
            data,
            registry,
            nats,
            pipelines: RwLock::new(BTreeMap::new()),
            busy_names: Mutex::new(BTreeSet::new()),
            tokens,
            tenants,
            max_upload,
            metrics: metrics_handle(),
            limits,
            owning: Mutex::new(()),
            _lock: lock,
        });
        let dir = server.pipelines_dir();
        let io = |e: std::io::Error| ServeError::Io {
            path: dir.clone(),
            message: e.to_string(),
        };
        std::fs::create_dir_all(&dir).map_err(io)?;
        for entry in std::fs::read_dir(&dir).map_err(io)?.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let leftover = [TRASH_PREFIX, CREATING_PREFIX, slot::SANDBOX_PREFIX];
            if leftover.iter().any(|prefix| name.starts_with(prefix)) {
                match std::fs::remove_dir_all(entry.path()) {
                    Ok(()) => {
                        info!(path = %entry.path().display(), "removed what a crash left of a pipeline being deleted or created, or of a replay")
                    }
                    Err(e) => {
                        warn!(path = %entry.path().display(), error = %e, "could not remove what a crash left")
                    }
                }
                continue;
            }
            if crate::names::check("pipeline name", &name).is_err() || !entry.path().is_dir() {
                warn!(path = %entry.path().display(), "not a pipeline directory; left alone");
                continue;
            }
            let resolving = (&*server.registry, &server.nats);
            let slot = Arc::new(Slot::load(&name, &entry.path(), resolving));
            if let Err(e) = slot.restart_if_desired(&server.registry) {
                warn!(pipeline = %name, error = %e, "pipeline could not be restarted");
            }
            server
                .pipelines
                .write()
                .expect("pipelines lock")
                .insert(name, slot);
        }
        server.publish_ownership();
        Ok(server)
    }

    /// Whether tenant `name` exists. A tenant is made (and kept, with its quotas, in
    /// `tenants.json`) when a server admin sets its quotas or a token is first bound to it,
    /// and stays: revoking its tokens does not hand its names to no one.
    pub fn is_tenant(&self, name: &str) -> bool {
        self.tenants.contains(name)
    }

    /// The tenant a pipeline or operator name belongs to: the one its prefix names, if that
    /// tenant exists (`team-a.clicks` is team-a's once team-a exists; `orders.v2` is no one's
    /// while there is no tenant `orders`).
    pub fn tenant_of(&self, name: &str) -> Option<String> {
        tenants::of(name)
            .filter(|tenant| self.is_tenant(tenant))
            .map(str::to_owned)
    }

    /// The tenant whose rules a new pipeline or operator `name` made by `caller` follows: the
    /// caller's, or, for a server token, the tenant the name belongs to (so a name in a
    /// tenant is held to that tenant's rules and quotas whoever makes it).
    pub fn tenant_for(&self, caller: Option<&Caller>, name: &str) -> Option<String> {
        (caller.and_then(|c| c.tenant.clone())).or_else(|| self.tenant_of(name))
    }

    /// Makes tenant `tenant` with `quota` (or, with `None`, makes it with the default quotas if
    /// it does not exist yet). A tenant is not made while pipelines or operators made outside
    /// any tenant carry its prefix: they would become its own unchecked. Under the lock that
    /// creates take, so no pipeline of its prefix is made outside it meanwhile.
    pub fn make_tenant(
        &self,
        tenant: &str,
        quota: Option<TenantQuota>,
    ) -> Result<(), RequestError> {
        tenants::check_name(tenant)?;
        let _owning = self.owning.lock().expect("owning lock");
        if !self.is_tenant(tenant) {
            let pipelines = self.slots().into_iter().map(|slot| slot.name.clone());
            let operators = self.registry.list().into_iter().map(|info| info.name);
            let busy = self.busy_names.lock().expect("busy names lock").clone();
            let mut names = pipelines.chain(operators).chain(busy);
            if let Some(taken) = names.find(|n| tenants::holds(tenant, n)) {
                return Err(RequestError::Conflict(format!(
                    "{taken:?} was made outside any tenant with tenant {tenant:?}'s prefix: \
                     rename or delete what is named \"{tenant}.*\" before making the tenant"
                )));
            }
        } else if quota.is_none() {
            return Ok(());
        }
        self.tenants.set(tenant, quota.unwrap_or_default())
    }

    /// How many pipelines token `owner` created (that still exist).
    fn owned_by(&self, owner: &str) -> usize {
        let owns = |slot: &Arc<Slot>| {
            slot.with_managed(|m| Ok(m.desired.owner.as_deref() == Some(owner)))
                .unwrap_or(false)
        };
        self.slots().iter().filter(|slot| owns(slot)).count()
    }

    /// Refuses a new pipeline of a token that owns as many as its quota allows; the guard
    /// returned is held until the pipeline is in the table.
    fn within_quota(
        &self,
        caller: Option<&Caller>,
        name: &str,
    ) -> Result<MutexGuard<'_, ()>, RequestError> {
        let owning = self.owning.lock().expect("owning lock");
        if let Some(tenant) = self.tenant_for(caller, name).as_deref() {
            let limit = self.tenants.quota(tenant).max_pipelines;
            let held = (self.slots().iter())
                .filter(|slot| tenants::holds(tenant, &slot.name))
                .count();
            if held >= limit {
                return Err(RequestError::Conflict(format!(
                    "tenant {tenant:?} has {limit} pipelines, its quota (max_pipelines): delete \
                     one of them first, or ask a server admin for more"
                )));
            }
        }
        if let Some(Caller { name, quota, .. }) = caller
            && let Some(limit) = quota.max_pipelines
            && self.owned_by(name) >= limit
        {
            return Err(RequestError::Conflict(format!(
                "token {name:?} owns {limit} pipelines, its quota (max_pipelines): delete one of \
                 them first"
            )));
        }
        Ok(owning)
    }

    /// Sets `weir_token_pipelines` and `weir_token_operators` for every token with a quota.
    pub fn publish_ownership(&self) {
        for (token, quota) in self.tokens.with_quotas() {
            let label = [("token", token.clone())];
            metrics::gauge!("weir_token_pipelines", &label).set(self.owned_by(&token) as f64);
            metrics::gauge!("weir_token_operators", &label)
                .set(self.registry.owned_by(&token) as f64);
            if let Some(limit) = quota.max_pipelines {
                metrics::gauge!("weir_token_max_pipelines", &label).set(limit as f64);
            }
            if let Some(limit) = quota.max_operators {
                metrics::gauge!("weir_token_max_operators", &label).set(limit as f64);
            }
        }
    }

    /// `text` with every path inside the data directory said relative to it (see [`Redactor`]).
    pub fn redact(&self, text: &str) -> String {
        self.redactor.apply(text)
    }

    /// What specs are resolved against: the registry and the NATS servers.
    pub fn resolving(&self) -> (&Registry, &ExternalServers) {
        (&self.registry, &self.nats)
    }

    /// `<data dir>/pipelines`.
    pub fn pipelines_dir(&self) -> PathBuf {
        self.data.join("pipelines")
    }

    /// The pipeline `name` (a name that breaks the rule is refused before any look-up).
    pub fn pipeline(&self, name: &str) -> Result<Arc<Slot>, RequestError> {
        crate::names::check("pipeline name", name)?;
        self.pipelines
            .read()
            .expect("pipelines lock")
            .get(name)
            .cloned()
            .ok_or_else(|| unknown_pipeline(name))
    }

    /// Every pipeline, by name.
    pub fn slots(&self) -> Vec<Arc<Slot>> {
        self.pipelines
            .read()
            .expect("pipelines lock")
            .values()
            .cloned()
            .collect()
    }

    /// Creates a pipeline from a JSON spec. Nothing is written unless the spec is valid; a
    /// leftover directory of the same name (one that is not a pipeline) is removed first, so a
    /// new pipeline never inherits state it did not create. No lock is held while files are
    /// written: the name is reserved instead.
    pub fn create(
        &self,
        json: serde_json::Value,
        caller: Option<&Caller>,
    ) -> Result<Arc<Slot>, RequestError> {
        let mut json = json;
        let (name, dir) = self.named_dir(&json)?;
        let tenant = self.hold_to_tenant(caller, &name, &mut json, &dir)?;
        Managed::resolve(&json, &dir, self.resolving(), crate::spec::Served::New)?;
        self.install(&name, &dir, json, caller, tenant.as_deref(), |_| Ok(()))
    }

    /// Creates a pipeline from savepoint `savepoint` of pipeline `from`, with the spec `json`
    /// (its own name; the same key, timestamp, watermark, windows and chain as the savepoint's,
    /// any operator versions): its state is the savepoint's, its ingest log the original's from
    /// the savepoint on, its output starts empty. Created stopped.
    pub fn fork(
        &self,
        from: &Slot,
        savepoint: &str,
        json: serde_json::Value,
        caller: Option<&Caller>,
    ) -> Result<Arc<Slot>, RequestError> {
        crate::names::check("savepoint name", savepoint)?;
        let mut json = json;
        let (name, dir) = self.named_dir(&json)?;
        let tenant = self.hold_to_tenant(caller, &name, &mut json, &dir)?;
        let spec = Managed::resolve(&json, &dir, self.resolving(), crate::spec::Served::New)?;
        let saved = from.find_savepoint(savepoint)?;
        let fingerprint = crate::checkpoint::fingerprint(&spec);
        if saved.manifest.fingerprint != fingerprint {
            return Err(RequestError::Invalid(format!(
                "savepoint {savepoint:?} was taken with a different key, timestamp, watermark, \
                 window or operator chain ({}); this spec has {fingerprint}. Only operator \
                 versions may change",
                saved.manifest.fingerprint
            )));
        }
        on_workers::check_fork_placement(&spec, savepoint, &saved)?;
        let sliced = !saved.slices.is_empty();
        let same_input = match (&spec.source, from.nats_source()) {
            // Slices cut by partition or by key group, over the same subjects, as saved.
            (crate::spec::SourceSpec::Nats(to), Some(from)) if sliced => {
                (&to.url, &to.stream, &to.subjects, &to.partitions)
                    == (&from.url, &from.stream, &from.subjects, &from.partitions)
            }
            (crate::spec::SourceSpec::Nats(to), Some(from)) => {
                (&to.url, &to.stream) == (&from.url, &from.stream)
            }
            (crate::spec::SourceSpec::Kafka(to), None) => from
                .kafka_source()
                .is_some_and(|from| (&to.brokers, &to.topic) == (&from.brokers, &from.topic)),
            (crate::spec::SourceSpec::Http(_), None) => from.reads_ingest_log(),
            _ => false,
        };
        if !same_input {
            return Err(RequestError::Invalid(format!(
                "a pipeline made from a savepoint reads the input of pipeline {:?} (its ingest \
                 log, or the same NATS stream or Kafka topic; of a pipeline on workers, the \
                 same subjects and partitions) from where the savepoint was taken",
                from.name
            )));
        }
        if !sliced && !matches!(spec.state, crate::spec::StateSpec::Redb(_)) {
            return Err(RequestError::Invalid(
                "a pipeline made from a savepoint keeps its state in redb ([state] backend)".into(),
            ));
        }
        let slot = self.install(&name, &dir, json, caller, tenant.as_deref(), |made| {
            if sliced {
                let seed = made.dir.join(on_workers::SEED_DIR);
                return from.fork_slices_into(savepoint, &name, &seed).map(drop);
            }
            let data = made.data_dir().expect("checked above: redb state");
            from.fork_into(savepoint, &name, &data, &made.dir).map(drop)
        })?;
        info!(pipeline = %name, from = %from.name, %savepoint, "pipeline created from a savepoint");
        Ok(slot)
    }

    /// For a pipeline of a tenant (the caller's, or the one its name belongs to): refuses a
    /// pipeline, operator, NATS subject or Kafka topic outside the tenant, and holds the spec
    /// `json` to the tenant's quota (limits it leaves out are written in); the tenant decided
    /// (install checks it still is). Operator names are read from the spec as sent, before anything is
    /// looked up in the registry, so no answer depends on what another tenant has.
    fn hold_to_tenant(
        &self,
        caller: Option<&Caller>,
        name: &str,
        json: &mut serde_json::Value,
        dir: &std::path::Path,
    ) -> Result<Option<String>, RequestError> {
        let Some(owner) = self.tenant_for(caller, name) else {
            return Ok(None);
        };
        let tenant = owner.as_str();
        tenants::check_holds(tenant, "pipeline", name)?;
        tenants::check_operator_names(tenant, json)?;
        let spec = Managed::resolve(json, dir, self.resolving(), crate::spec::Served::New)?;
        tenants::check_external_names(tenant, &spec)?;
        tenants::bound_spec(json, &spec, tenant, &self.tenants.quota(tenant))?;
        Ok(Some(owner))
    }

    /// The name a spec gives and the directory that name makes (checked against the name rule).
    fn named_dir(&self, json: &serde_json::Value) -> Result<(String, PathBuf), RequestError> {
        let name = json
            .get("name")
            .and_then(|n| n.as_str())
            .ok_or_else(|| RequestError::Invalid("the spec needs a \"name\"".into()))?
            .to_owned();
        let dir = crate::names::child("pipeline name", &self.pipelines_dir(), &name)?;
        Ok((name, dir))
    }

    /// Writes a new pipeline (a spec already checked) owned by `caller`, runs `seed` on its
    /// files, and adds it: the name reserved and the caller's quota held meanwhile. Everything
    /// is made in a directory of its own, synced, and renamed to `dir` last, so a crash leaves
    /// the whole pipeline or none of it; the directory is removed if anything fails.
    fn install(
        &self,
        name: &str,
        dir: &std::path::Path,
        json: serde_json::Value,
        caller: Option<&Caller>,
        tenant: Option<&str>,
        seed: impl FnOnce(&Managed) -> Result<(), RequestError>,
    ) -> Result<Arc<Slot>, RequestError> {
        let _reserved = self.reserve(name, true)?;
        let owning = self.within_quota(caller, name)?;
        if self.tenant_for(caller, name).as_deref() != tenant {
            return Err(RequestError::Conflict(format!(
                "pipeline {name:?}: its tenant was made meanwhile; send it again"
            )));
        }
        if dir.exists() {
            warn!(path = %dir.display(), "removing a leftover directory before creating the pipeline");
            std::fs::remove_dir_all(dir).map_err(RequestError::from_io)?;
        }
        let staging = self.pipelines_dir().join(format!(
            "{CREATING_PREFIX}{name}-{}",
            crate::time::wall_clock_ms()
        ));
        let owner = caller.map(|c| c.name.clone());
        let made = Managed::create(json, &staging, self.resolving(), owner)
            .and_then(|managed| seed(&managed))
            .and_then(|()| {
                crate::fsutil::crash_point("pipeline-seeded");
                crate::fsutil::sync_tree(&staging).map_err(RequestError::from_io)
            })
            .and_then(|()| {
                crate::fsutil::rename_durably(&staging, dir).map_err(RequestError::from_io)
            })
            .and_then(|()| {
                Managed::load(name, dir, self.resolving()).map_err(|reason| {
                    RequestError::Internal(format!(
                        "the pipeline just made is unreadable: {reason}"
                    ))
                })
            });
        let managed = match made {
            Ok(managed) => managed,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&staging);
                let _ = std::fs::remove_dir_all(dir);
                return Err(e);
            }
        };
        let slot = Arc::new(Slot::new(name, dir, managed));
        self.pipelines
            .write()
            .expect("pipelines lock")
            .insert(name.to_owned(), slot.clone());
        drop(owning);
        self.publish_ownership();
        Ok(slot)
    }

    /// Reserves `name` while its directory is created (`creating`) or removed; refuses a name
    /// that exists (when creating), is busy, or would pass the pipeline limit.
    fn reserve(&self, name: &str, creating: bool) -> Result<Reservation<'_>, RequestError> {
        let pipelines = self.pipelines.read().expect("pipelines lock");
        let mut busy = self.busy_names.lock().expect("busy names lock");
        if busy.contains(name) {
            return Err(RequestError::Conflict(format!(
                "pipeline {name:?} is being created or deleted; try again shortly"
            )));
        }
        if creating && pipelines.contains_key(name) {
            return Err(RequestError::Conflict(format!(
                "pipeline {name:?} exists; DELETE it first or choose another name"
            )));
        }
        let being_created = busy.iter().filter(|n| !pipelines.contains_key(*n)).count();
        if creating && pipelines.len() + being_created >= self.limits.max_pipelines {
            return Err(RequestError::Conflict(format!(
                "the server holds its limit of {} pipelines; delete one first",
                self.limits.max_pipelines
            )));
        }
        busy.insert(name.to_owned());
        Ok(Reservation {
            server: self,
            name: name.to_owned(),
        })
    }

    /// Stops and deletes a pipeline with all its files.
    pub fn delete(&self, name: &str) -> Result<(), RequestError> {
        let slot = self.pipeline(name)?;
        let _reserved = self.reserve(name, false)?;
        slot.mark_deleting();
        // Not a user's stop: nothing is saved (the directory goes), so a full disk cannot keep
        // the pipeline from stopping.
        match slot.stop(self.limits.stop_wait, false)? {
            StopOutcome::Stopped => {}
            StopOutcome::Stopping => {
                return Err(RequestError::Conflict(format!(
                    "pipeline {name:?} is busy and still stopping; it is being deleted: DELETE \
                     it again shortly"
                )));
            }
        }
        // Its workers give it up and the cluster forgets it before its files go (a NATS server
        // that is away: 503, and the pipeline stays until a DELETE gets through).
        slot.withdraw_from_workers()?;
        {
            let mut pipelines = self.pipelines.write().expect("pipelines lock");
            match pipelines.get(name) {
                Some(current) if Arc::ptr_eq(current, &slot) => {
                    pipelines.remove(name);
                }
                _ => return Ok(()), // deleted by a concurrent call
            }
        }
        if !crate::names::is_inside(&self.pipelines_dir(), &slot.dir) {
            return Err(RequestError::Internal(format!(
                "refusing to remove {}: it is not inside the pipelines directory",
                slot.dir.display()
            )));
        }
        slot.close();
        // Out of sight first (a crash mid-removal must not leave a half pipeline behind), then
        // removed; a restarted server removes what a crash left.
        let trash = self.pipelines_dir().join(format!(
            "{TRASH_PREFIX}{name}-{}",
            crate::time::wall_clock_ms()
        ));
        std::fs::rename(&slot.dir, &trash).map_err(RequestError::from_io)?;
        crate::fsutil::crash_point("pipeline-in-trash");
        self.publish_ownership();
        std::fs::remove_dir_all(&trash).map_err(RequestError::from_io)
    }

    /// Whether an operator version is used by a pipeline (live or candidate); its name if so.
    pub fn user_of(&self, name: &str, version: &str) -> Option<String> {
        self.slots()
            .into_iter()
            .find(|slot| slot.uses(name, version))
            .map(|slot| slot.name.clone())
    }

    /// Health: pipelines that stopped responding, and damaged files.
    pub fn health(&self) -> Health {
        let (mut stalled, mut failed, mut damaged_pipelines) = (Vec::new(), Vec::new(), Vec::new());
        // A slot busy with a file write is skipped: health never waits on a disk.
        for slot in self.slots() {
            let Some(health) = slot.health() else {
                continue;
            };
            if health.silent > Some(self.limits.stall_after) {
                stalled.push(slot.name.clone());
            }
            if health.failed {
                failed.push(slot.name.clone());
            }
            if health.damaged {
                damaged_pipelines.push(slot.name.clone());
            }
        }
        // One tenant's failing pipeline is its own business, not the server's.
        let server_wide = |names: &[String]| names.iter().any(|n| self.tenant_of(n).is_none());
        let healthy = !server_wide(&stalled) && !server_wide(&failed);
        Health {
            status: if healthy { "ok" } else { "degraded" },
            stalled,
            failed,
            damaged_pipelines,
            damaged_operators: self.registry.damaged().to_vec(),
        }
    }

    /// Idle advances, log truncation, rollout schedules, automatic rollbacks and restarts after
    /// a full disk, evaluated every tick.
    pub fn tick(&self) {
        for slot in self.slots() {
            slot.append_timers();
            slot.truncate_log();
            slot.tick(self.resolving());
            if slot.take_sync_due() {
                let (slot, registry) = (slot.clone(), self.registry.clone());
                std::thread::spawn(move || slot.sync_workers(&registry));
            }
            slot.restart_if_due(&self.registry);
        }
    }

    /// Stops every pipeline (each takes a final checkpoint), all at once, waiting at most
    /// `timeout`; returns the pipelines that had not stopped by then.
    pub fn shutdown(&self, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let slots = self.slots();
        for slot in &slots {
            slot.begin_halt();
        }
        let mut late = Vec::new();
        for slot in &slots {
            let left = deadline.saturating_duration_since(Instant::now());
            if !slot.wait_ended(left) {
                late.push(slot.name.clone());
            }
        }
        if late.is_empty() {
            info!("every pipeline stopped");
        }
        late
    }
}

#[cfg(test)]
mod tests {
    use super::Redactor;

    #[test]
    fn paths_inside_the_data_directory_are_said_relative_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let data = std::fs::canonicalize(dir.path()).unwrap();
        let shown = data.display().to_string();
        let redactor = Redactor::new(&data);
        let said = |text: String| redactor.apply(&text);
        assert_eq!(
            said(format!(
                "state store {shown}/pipelines/a/data/state.redb: full"
            )),
            "state store pipelines/a/data/state.redb: full"
        );
        assert_eq!(
            said(format!("data directory {shown} is in use")),
            "data directory . is in use"
        );
        assert_eq!(
            said(format!("{shown}-old/x and {shown}")),
            format!("{shown}-old/x and .")
        );
        assert_eq!(said("nothing to hide".into()), "nothing to hide");
    }
}
