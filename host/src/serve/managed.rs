//! [`Managed`]: one pipeline of `weir serve`: its spec, its desired state (running, rollout),
//! the thread running it, its ingest log and its status.
//!
//! Files in `<data dir>/pipelines/<name>/`: `spec.json` (as sent), `desired.json` (running or
//! not, the rollout and any rollback reason), `ingest.jsonl` (the durable ingest log an HTTP
//! source reads), `data/` (state and checkpoints), `out/` (results, late events, dead letters,
//! shadow results).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::operator::{ComponentKind, Registry};
use crate::pipeline::{PipelineControl, PipelineError, RunOptions, Summary};
use crate::rollout::{Policy, RateWatch, Routing, ShadowLog};
use crate::spec::{OperatorCode, PipelineSpec, Sink, SourceSpec, StateSpec};

/// The spec as sent.
pub const SPEC_FILE: &str = "spec.json";
const DESIRED_FILE: &str = "desired.json";
const INGEST_FILE: &str = "ingest.jsonl";

/// What the user asked for, kept across restarts.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Desired {
    /// Whether the pipeline should run.
    pub running: bool,
    /// The rollout in progress, if any.
    pub rollout: Option<RolloutPlan>,
    /// Why the last rollout was rolled back.
    pub rolled_back: Option<String>,
}

/// A rollout request as the API receives it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutRequest {
    /// The candidate version (of the pipeline's aggregate operator).
    pub version: String,
    /// The candidate's share of key buckets, 0-100.
    pub percent: Option<u8>,
    /// A schedule of shares, one step every `every`.
    #[serde(default)]
    pub steps: Vec<u8>,
    /// Time between steps (`"5m"`, or ms).
    pub every: Option<serde_json::Value>,
    /// Run the candidate in shadow instead of serving traffic.
    #[serde(default)]
    pub shadow: bool,
    /// Automatic rollback policy.
    pub policy: Option<PolicyRequest>,
}

/// The automatic rollback policy as the API receives it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyRequest {
    max_trap_rate: Option<f64>,
    max_error_rate: Option<f64>,
    window: Option<serde_json::Value>,
    min_calls: Option<u64>,
}

/// A rollout in progress.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RolloutPlan {
    /// The candidate version.
    pub version: String,
    /// The share when there is no schedule.
    pub percent: u8,
    /// Shadow mode.
    pub shadow: bool,
    /// Scheduled shares.
    pub steps: Vec<u8>,
    /// Time between steps.
    pub every_ms: Option<u64>,
    /// When the rollout started (ms since the epoch), for the schedule.
    pub started_ms: u64,
    /// Automatic rollback.
    pub policy: Policy,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn duration_ms(value: &serde_json::Value, field: &str) -> Result<u64, String> {
    match value {
        serde_json::Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| format!("{field} must be a whole number of ms")),
        serde_json::Value::String(s) => crate::time::parse_duration(s)
            .map(|ms| ms as u64)
            .map_err(|e| format!("{field}: {e}")),
        _ => Err(format!("{field} must be milliseconds or text like \"5m\"")),
    }
}

impl RolloutPlan {
    /// Checks a request.
    pub fn from_request(request: RolloutRequest) -> Result<RolloutPlan, String> {
        if request
            .steps
            .iter()
            .chain(request.percent.iter())
            .any(|p| *p > 100)
        {
            return Err("percentages must be between 0 and 100".into());
        }
        if !request.steps.is_empty() && request.every.is_none() {
            return Err("`steps` needs `every`, the time between steps".into());
        }
        if request.steps.windows(2).any(|w| w[0] > w[1]) {
            return Err(
                "`steps` must not decrease: keys only move forward during a rollout".into(),
            );
        }
        let every_ms = request
            .every
            .as_ref()
            .map(|v| duration_ms(v, "every"))
            .transpose()?;
        let mut policy = Policy::default();
        if let Some(p) = request.policy {
            policy.max_trap_rate = p.max_trap_rate.unwrap_or(policy.max_trap_rate);
            policy.max_error_rate = p.max_error_rate.unwrap_or(policy.max_error_rate);
            policy.min_calls = p.min_calls.unwrap_or(policy.min_calls);
            if let Some(window) = &p.window {
                policy.window_ms = duration_ms(window, "policy.window")?;
            }
        }
        Ok(RolloutPlan {
            version: request.version,
            percent: request
                .percent
                .or(request.steps.first().copied())
                .unwrap_or(0),
            shadow: request.shadow,
            steps: request.steps,
            every_ms,
            started_ms: now_ms(),
            policy,
        })
    }

    /// The share now, following the schedule if there is one.
    pub fn percent_now(&self) -> u8 {
        match (self.steps.is_empty(), self.every_ms) {
            (false, Some(every)) => {
                let step = (now_ms().saturating_sub(self.started_ms) / every.max(1)) as usize;
                self.steps[step.min(self.steps.len() - 1)]
            }
            _ => self.percent,
        }
    }
}

/// A running pipeline.
pub struct Running {
    /// Its control.
    pub control: Arc<PipelineControl>,
    thread: Option<JoinHandle<Result<Summary, PipelineError>>>,
    ingest: Option<Mutex<File>>,
    watch: RateWatch,
    requested: Option<Routing>,
}

/// One pipeline of the server.
pub struct Managed {
    /// Its name.
    pub name: String,
    /// Its directory.
    pub dir: PathBuf,
    /// The spec as sent.
    pub spec_json: serde_json::Value,
    /// The spec, resolved against the registry and the pipeline's directory.
    pub spec: PipelineSpec,
    /// What the user asked for.
    pub desired: Desired,
    /// The run, while running.
    pub running: Option<Running>,
    /// Why the last run failed.
    pub failure: Option<String>,
    /// The control of the last run, for the figures of a stopped pipeline.
    last: Option<Arc<PipelineControl>>,
}

impl std::fmt::Debug for Managed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Managed")
            .field("name", &self.name)
            .field("desired", &self.desired)
            .finish()
    }
}

/// Waits for a pipeline thread and says why it failed, if it did.
fn failure(thread: JoinHandle<Result<Summary, PipelineError>>) -> Option<String> {
    match thread.join() {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some("the pipeline thread panicked".into()),
    }
}

fn write_json(path: &Path, value: &impl Serialize) -> Result<(), String> {
    let partial = path.with_extension("json.partial");
    std::fs::write(
        &partial,
        serde_json::to_vec_pretty(value).expect("serialisable"),
    )
    .and_then(|()| std::fs::rename(&partial, path))
    .map_err(|e| format!("{}: {e}", path.display()))
}

impl Managed {
    /// Checks a spec sent to the API and resolves it for pipeline directory `dir`: operators
    /// name registry versions, state and output live in `dir`.
    pub fn resolve(
        json: &serde_json::Value,
        dir: &Path,
        registry: &Registry,
    ) -> Result<PipelineSpec, String> {
        let text = json.to_string();
        let mut spec = PipelineSpec::parse(&text, true, dir).map_err(|e| e.to_string())?;
        let kinds = spec
            .enrichers
            .iter_mut()
            .map(|op| (op, ComponentKind::Enrich))
            .chain(
                spec.aggregate
                    .iter_mut()
                    .map(|op| (op, ComponentKind::Aggregate)),
            );
        for (op, kind) in kinds {
            if op.code == OperatorCode::Registry {
                let info = registry.get(&op.name, &op.version).ok_or_else(|| {
                    format!("operator {}@{} is not in the registry: upload it first (POST /v1/operators/{}/{})", op.name, op.version, op.name, op.version)
                })?;
                if info.world != kind.world() {
                    return Err(format!(
                        "operator {}@{} is an {}, but the spec uses it as kind {:?}",
                        op.name, op.version, info.world, kind
                    ));
                }
                op.code = OperatorCode::Component(
                    registry
                        .path(&op.name, &op.version)
                        .map_err(|e| e.to_string())?,
                );
            }
        }
        if spec.source == SourceSpec::Http(None) {
            spec.source = SourceSpec::Http(Some(dir.join(INGEST_FILE)));
        }
        if spec.state != StateSpec::Memory {
            spec.state = StateSpec::Redb(dir.join("data"));
        }
        let sinks = json.get("sinks");
        let given = |field: &str| sinks.and_then(|s| s.get(field)).is_some();
        let out = dir.join("out");
        if !given("results") {
            spec.sinks.results = Sink::File(out.join("results.jsonl"));
        }
        if !given("late") {
            spec.sinks.late = Sink::File(out.join("late.jsonl"));
        }
        if !given("dead_letters") {
            spec.sinks.dead_letters = Sink::File(out.join("dead-letters.jsonl"));
        }
        Ok(spec)
    }

    /// A new pipeline from an API request, written to `dir`.
    pub fn create(
        json: serde_json::Value,
        dir: &Path,
        registry: &Registry,
    ) -> Result<Managed, String> {
        let spec = Self::resolve(&json, dir, registry)?;
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        write_json(&dir.join(SPEC_FILE), &json)?;
        let managed = Managed {
            name: spec.name.clone(),
            dir: dir.to_owned(),
            spec_json: json,
            spec,
            desired: Desired::default(),
            running: None,
            failure: None,
            last: None,
        };
        managed.save()?;
        Ok(managed)
    }

    /// A pipeline from its directory.
    pub fn load(dir: &Path, registry: &Registry) -> Result<Managed, String> {
        let read = |file: &str| {
            std::fs::read_to_string(dir.join(file))
                .map_err(|e| format!("{}: {e}", dir.join(file).display()))
        };
        let json: serde_json::Value =
            serde_json::from_str(&read(SPEC_FILE)?).map_err(|e| e.to_string())?;
        let desired: Desired = match read(DESIRED_FILE) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| e.to_string())?,
            Err(_) => Desired::default(),
        };
        let spec = Self::resolve(&json, dir, registry)?;
        Ok(Managed {
            name: spec.name.clone(),
            dir: dir.to_owned(),
            spec_json: json,
            spec,
            desired,
            running: None,
            failure: None,
            last: None,
        })
    }

    /// Writes the desired state.
    pub fn save(&self) -> Result<(), String> {
        write_json(&self.dir.join(DESIRED_FILE), &self.desired)
    }

    /// Whether the pipeline's thread is alive.
    pub fn is_running(&self) -> bool {
        self.running
            .as_ref()
            .is_some_and(|r| r.thread.as_ref().is_some_and(|t| !t.is_finished()))
    }

    /// The routing the desired state asks for.
    fn routing(&self) -> Option<Routing> {
        let live = &self.spec.aggregate.as_ref()?.version;
        Some(match (&self.desired.rollout, &self.desired.rolled_back) {
            (Some(plan), None) => Routing {
                live: live.clone(),
                candidate: Some(plan.version.clone()),
                percent: plan.percent_now(),
                shadow: plan.shadow,
            },
            _ => Routing::single(live),
        })
    }

    /// Starts the pipeline (resuming from its last checkpoint).
    pub fn start(&mut self, registry: &Arc<Registry>) -> Result<(), String> {
        if self.is_running() {
            return Ok(());
        }
        self.reap();
        let operator = self.spec.aggregate.as_ref().map(|op| op.name.clone());
        let lookup = registry.clone();
        let resolve = Box::new(move |version: &str| match &operator {
            Some(name) => lookup
                .load(name, version, ComponentKind::Aggregate)
                .map_err(|e| e.to_string()),
            None => Err("the pipeline has no aggregate to roll out".into()),
        });
        let out = self.dir.join("out");
        std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
        let shadow_path = out.join("shadow.jsonl");
        let shadow_file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&shadow_path)
            .map_err(|e| format!("{}: {e}", shadow_path.display()))?;
        let shadow_log: ShadowLog =
            Arc::new(Mutex::new(Box::new(std::io::BufWriter::new(shadow_file))));
        let control = Arc::new(PipelineControl::new(resolve, Some(shadow_log)));
        let requested = self.routing();
        if let Some(routing) = &requested {
            control.request(routing.clone());
        }
        let ingest = match &self.spec.source {
            SourceSpec::Http(Some(log)) => Some(Mutex::new(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(log)
                    .map_err(|e| format!("{}: {e}", log.display()))?,
            )),
            _ => None,
        };
        let spec = self.spec.clone();
        let thread_control = control.clone();
        let name = self.name.clone();
        let thread = std::thread::Builder::new()
            .name(format!("weir-pipeline-{name}"))
            .spawn(move || {
                let result = crate::pipeline::run_controlled(
                    &spec,
                    RunOptions::default(),
                    Some(thread_control),
                );
                match &result {
                    Ok(summary) => info!(pipeline = %name, %summary, "pipeline ended"),
                    Err(e) => warn!(pipeline = %name, error = %e, "pipeline failed"),
                }
                result
            })
            .map_err(|e| e.to_string())?;
        self.running = Some(Running {
            control,
            thread: Some(thread),
            ingest,
            watch: RateWatch::default(),
            requested,
        });
        self.failure = None;
        Ok(())
    }

    /// Collects the result of a thread that ended by itself.
    fn reap(&mut self) {
        if let Some(running) = &mut self.running
            && running.thread.as_ref().is_some_and(|t| t.is_finished())
            && let Some(thread) = running.thread.take()
        {
            self.failure = failure(thread);
            self.last = self.running.take().map(|r| r.control);
        }
    }

    /// Stops the run (a final checkpoint; windows stay open) without changing the desired
    /// state.
    pub fn halt(&mut self) {
        if let Some(mut running) = self.running.take() {
            running.control.stop();
            self.last = Some(running.control.clone());
            if let Some(thread) = running.thread.take() {
                self.failure = failure(thread);
            }
        }
    }

    /// Appends events to the ingest log. Returns how many lines were accepted.
    pub fn ingest(&mut self, lines: &[String]) -> Result<usize, String> {
        self.reap();
        let running = self
            .running
            .as_ref()
            .ok_or_else(|| format!("pipeline {} is not running: start it first", self.name))?;
        let log = running.ingest.as_ref().ok_or_else(|| format!("pipeline {} does not read events over HTTP (its source is not {{\"type\": \"http\"}})", self.name))?;
        let mut text = String::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
        for line in lines {
            text.push_str(line);
            text.push('\n');
        }
        let mut file = log.lock().expect("ingest lock");
        file.write_all(text.as_bytes())
            .and_then(|()| file.flush())
            .map_err(|e| format!("ingest log: {e}"))?;
        metrics::counter!("weir_ingested_events_total", "pipeline" => self.name.clone())
            .increment(lines.len() as u64);
        Ok(lines.len())
    }

    /// Starts, changes or replaces the rollout.
    pub fn rollout(&mut self, plan: RolloutPlan) -> Result<(), String> {
        self.desired.rollout = Some(plan);
        self.desired.rolled_back = None;
        self.save()?;
        if let Some(running) = &mut self.running {
            running.watch = RateWatch::default();
        }
        self.push_routing();
        Ok(())
    }

    /// Sends every key back to the live version and records why.
    pub fn rollback(&mut self, reason: String) -> Result<(), String> {
        warn!(pipeline = %self.name, reason = %reason, "rollback");
        self.desired.rolled_back = Some(reason);
        self.save()?;
        self.push_routing();
        Ok(())
    }

    fn push_routing(&mut self) {
        let routing = self.routing();
        if let (Some(running), Some(routing)) = (&mut self.running, routing)
            && running.requested.as_ref() != Some(&routing)
        {
            running.control.request(routing.clone());
            running.requested = Some(routing);
        }
    }

    /// Follows the rollout schedule and the automatic rollback policy.
    pub fn tick(&mut self) {
        self.reap();
        if self.running.is_none() || self.desired.rolled_back.is_some() {
            return;
        }
        let Some(plan) = self.desired.rollout.clone() else {
            return;
        };
        self.push_routing();
        let Some(running) = &mut self.running else {
            return;
        };
        let counters = running.control.counters.of(&plan.version).snapshot();
        if let Some(reason) = running.watch.check(&plan.policy, Instant::now(), counters)
            && let Err(e) = self.rollback(reason)
        {
            warn!(pipeline = %self.name, error = %e, "could not record the rollback");
        }
    }

    /// Whether the pipeline uses operator `name@version` (live or candidate).
    pub fn uses(&self, name: &str, version: &str) -> bool {
        let live = self
            .spec
            .enrichers
            .iter()
            .chain(self.spec.aggregate.iter())
            .any(|op| op.name == name && op.version == version);
        let candidate = self
            .spec
            .aggregate
            .as_ref()
            .is_some_and(|op| op.name == name)
            && self
                .desired
                .rollout
                .as_ref()
                .is_some_and(|plan| plan.version == version);
        live || candidate
    }

    /// The status document of the API.
    pub fn status(&mut self) -> serde_json::Value {
        self.reap();
        let state = if self.is_running() {
            "running"
        } else if self.failure.is_some() {
            "failed"
        } else {
            "stopped"
        };
        let control = self
            .running
            .as_ref()
            .map(|r| &r.control)
            .or(self.last.as_ref());
        let (figures, versions, applied) = match control {
            Some(control) => {
                let stats = &control.stats;
                let watermark = stats.watermark.load(Ordering::Relaxed);
                let last = stats.last_checkpoint.lock().expect("stats lock").clone();
                let figures = serde_json::json!({
                    "events_in": stats.events_in.load(Ordering::Relaxed),
                    "results_out": stats.results_out.load(Ordering::Relaxed),
                    "late": stats.late.load(Ordering::Relaxed),
                    "dead_letters": stats.dead_letters.load(Ordering::Relaxed),
                    "watermark": (watermark != i64::MIN).then_some(watermark),
                    "lag_ms": (watermark != i64::MIN).then(|| now_ms() as i64 - watermark),
                    "state_keys": stats.state_keys.load(Ordering::Relaxed),
                    "last_checkpoint": last,
                });
                let versions: Vec<serde_json::Value> = control
                    .counters
                    .snapshot()
                    .into_iter()
                    .map(|(version, c)| {
                        let mut v = serde_json::to_value(c).expect("counters serialise");
                        v["version"] = version.into();
                        v
                    })
                    .collect();
                (figures, versions, control.applied())
            }
            None => (serde_json::json!({}), Vec::new(), None),
        };
        let op = self.spec.aggregate.as_ref().or(self.spec.enrichers.last());
        let rollout = self.desired.rollout.as_ref().map(|plan| {
            serde_json::json!({
                "candidate": plan.version,
                "percent": if self.desired.rolled_back.is_some() { 0 } else { plan.percent_now() },
                "applied_percent": applied.as_ref().filter(|r| r.candidate.as_deref() == Some(&plan.version)).map_or(0, |r| r.percent),
                "shadow": plan.shadow,
                "steps": plan.steps,
                "every_ms": plan.every_ms,
                "policy": plan.policy,
                "rolled_back": self.desired.rolled_back,
            })
        });
        let mut status = serde_json::json!({
            "name": self.name,
            "state": state,
            "error": self.failure,
            "operator": op.map(|o| serde_json::json!({"name": o.name, "version": o.version})),
            "rollout": rollout,
            "rolled_back": self.desired.rolled_back,
            "versions": versions,
        });
        if let (serde_json::Value::Object(status), serde_json::Value::Object(figures)) =
            (&mut status, figures)
        {
            status.extend(figures);
        }
        status
    }
}
