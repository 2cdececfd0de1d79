//! [`Managed`]: what the server keeps of one pipeline on disk: its spec as sent, resolved
//! against the registry and its own directory, and its desired state (running, rollout,
//! rollback reason). The running thread and its figures are the [`Slot`](super::Slot)'s.
//!
//! Files in `<data dir>/pipelines/<name>/`: `spec.json` (as sent), `desired.json` (running or
//! not, the rollout and any rollback reason), `ingest.jsonl` and its later segments
//! `ingest.jsonl.<offset>` (the durable ingest log an HTTP source reads), `data/` (state and
//! checkpoints), `out/` (results, late events, dead letters, shadow results).
//!
//! Depends on `fsutil`, `operator`, `rollout` and `spec`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{ExternalServers, RequestError, RolloutPlan};
use crate::operator::{ComponentKind, Registry};
use crate::rollout::{GateResult, Routing, StepOutcome, StepRecord};
use crate::spec::{OperatorCode, PipelineSpec, Served, SourceSpec};

/// The spec as sent.
pub const SPEC_FILE: &str = "spec.json";
const DESIRED_FILE: &str = "desired.json";
/// The ingest log.
pub const INGEST_FILE: &str = "ingest.jsonl";

/// Why a pipeline's directory does not hold a usable pipeline: the server keeps it as failed
/// until it is deleted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Damage {
    /// A file could not be read.
    #[error("{file}: {source}")]
    Unreadable {
        /// The file, in the pipeline's directory.
        file: &'static str,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file is not the JSON it should be.
    #[error("{file} is damaged: {source}")]
    NotJson {
        /// The file, in the pipeline's directory.
        file: &'static str,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// The stored spec is no longer accepted (an operator version gone from the registry, a
    /// NATS server no longer configured).
    #[error("{SPEC_FILE} is not usable: {source}")]
    Unusable {
        /// Why the spec is refused.
        source: RequestError,
    },
    /// The stored spec names another pipeline than its directory.
    #[error("{SPEC_FILE} names pipeline {named:?}, but its directory is {directory:?}")]
    Misnamed {
        /// The name in the spec.
        named: String,
        /// The directory's name.
        directory: String,
    },
}

/// What the user asked for, kept across restarts.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Desired {
    /// Whether the pipeline should run.
    pub running: bool,
    /// The rollout in progress, if any.
    pub rollout: Option<RolloutPlan>,
    /// Why the last rollout was rolled back.
    pub rolled_back: Option<String>,
    /// The operator the last rollout was for (an enricher's name; `None`: the aggregate): its
    /// routing is the one asked for once that rollout is promoted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routed: Option<String>,
    /// The name of the token that created the pipeline (counted against its quota).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The analysis of the last gated rollout promoted: its timeline stays to be seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_analysis: Option<crate::rollout::Analysis>,
}

/// One pipeline's spec and desired state.
#[derive(Debug, Clone)]
pub struct Managed {
    /// Its name.
    pub name: String,
    /// Its directory.
    pub dir: PathBuf,
    /// The spec as sent (with the live version updated by promotions).
    pub spec_json: serde_json::Value,
    /// The spec, resolved against the registry and the pipeline's directory.
    pub spec: PipelineSpec,
    /// The spec as sent with each NATS server's URL in place of its name: what the cluster's
    /// workers read of a pipeline placed on them.
    pub addressed: serde_json::Value,
    /// What the user asked for.
    pub desired: Desired,
}

fn write_json(path: &Path, value: &impl Serialize) -> Result<(), RequestError> {
    let bytes = serde_json::to_vec_pretty(value).expect("serialisable");
    crate::fsutil::write_atomic(path, &bytes).map_err(RequestError::from_io)
}

/// A new spec as it is stored: sink files relative to the pipeline's directory (`out/...`), as
/// `Served::Stored` reads them.
fn stored_form(mut json: serde_json::Value) -> serde_json::Value {
    if let Some(sinks) = json.get_mut("sinks").and_then(|s| s.as_object_mut()) {
        for value in sinks.values_mut() {
            if let Some(path) = value.as_str()
                && path != "discard"
            {
                *value = format!("out/{path}").into();
            }
        }
    }
    json
}

impl Managed {
    /// Checks a spec sent to the API and resolves it for pipeline directory `dir`: operators
    /// name registry versions (checked against their digests when loaded), state and output
    /// live in `dir`.
    pub fn resolve(
        json: &serde_json::Value,
        dir: &Path,
        (registry, nats): (&Registry, &ExternalServers),
        served: Served,
    ) -> Result<PipelineSpec, RequestError> {
        let text = nats.resolve(json)?.to_string();
        let mut spec = PipelineSpec::parse_served_with(&text, dir, served, &nats.urls())?;
        let kinds = spec
            .enrichers
            .iter_mut()
            .map(|op| (op, ComponentKind::Enrich))
            .chain(
                spec.aggregate
                    .iter_mut()
                    .chain(spec.stages.iter_mut().map(|stage| &mut stage.aggregate))
                    .map(|op| (op, ComponentKind::Aggregate)),
            );
        for (op, kind) in kinds {
            if op.code == OperatorCode::Registry {
                let info = registry.get(&op.name, &op.version).ok_or_else(|| {
                    RequestError::Invalid(format!("operator {}@{} is not in the registry: upload it first (POST /v1/operators/{}/{})", op.name, op.version, op.name, op.version))
                })?;
                if info.world != kind.world() {
                    return Err(RequestError::Invalid(format!(
                        "operator {}@{} is an {}, but the spec uses it as kind {:?}",
                        op.name, op.version, info.world, kind
                    )));
                }
                op.code = registry.code(&op.name, &op.version)?;
            }
        }
        if matches!(spec.placement, crate::spec::Placement::Workers { .. }) {
            crate::cluster::check_shareable(&spec)?;
        }
        debug_assert!(
            matches!(
                &spec.source,
                SourceSpec::Http(Some(log)) if *log == dir.join(INGEST_FILE)
            ) || matches!(spec.source, SourceSpec::Nats(_) | SourceSpec::Kafka(_))
        );
        Ok(spec)
    }

    /// A new pipeline from an API request, written to `dir`, owned by token `owner`.
    pub fn create(
        json: serde_json::Value,
        dir: &Path,
        resolving: (&Registry, &ExternalServers),
        owner: Option<String>,
    ) -> Result<Managed, RequestError> {
        let spec = Self::resolve(&json, dir, resolving, Served::New)?;
        let json = stored_form(json);
        let addressed = resolving.1.resolve(&json)?;
        std::fs::create_dir_all(dir).map_err(RequestError::from_io)?;
        write_json(&dir.join(SPEC_FILE), &json)?;
        let managed = Managed {
            name: spec.name.clone(),
            dir: dir.to_owned(),
            spec_json: json,
            spec,
            addressed,
            desired: Desired {
                owner,
                ..Desired::default()
            },
        };
        managed.save()?;
        Ok(managed)
    }

    /// A pipeline from its directory; `Err` says what is damaged.
    pub fn load(
        name: &str,
        dir: &Path,
        resolving: (&Registry, &ExternalServers),
    ) -> Result<Managed, Damage> {
        let read = |file: &'static str| {
            std::fs::read_to_string(dir.join(file))
                .map_err(|source| Damage::Unreadable { file, source })
        };
        let not_json = |file: &'static str| move |source| Damage::NotJson { file, source };
        let json: serde_json::Value =
            serde_json::from_str(&read(SPEC_FILE)?).map_err(not_json(SPEC_FILE))?;
        let desired: Desired = match read(DESIRED_FILE) {
            Ok(text) => serde_json::from_str(&text).map_err(not_json(DESIRED_FILE))?,
            Err(_) if !dir.join(DESIRED_FILE).exists() => Desired::default(),
            Err(e) => return Err(e),
        };
        let spec = Self::resolve(&json, dir, resolving, Served::Stored)
            .map_err(|source| Damage::Unusable { source })?;
        if spec.name != name {
            return Err(Damage::Misnamed {
                named: spec.name,
                directory: name.to_owned(),
            });
        }
        let addressed =
            (resolving.1.resolve(&json)).map_err(|source| Damage::Unusable { source })?;
        Ok(Managed {
            name: spec.name.clone(),
            dir: dir.to_owned(),
            spec_json: json,
            spec,
            addressed,
            desired,
        })
    }

    /// The data directory (state, checkpoints, savepoints), if the state is kept in redb.
    pub fn data_dir(&self) -> Option<PathBuf> {
        match &self.spec.state {
            crate::spec::StateSpec::Redb(dir) => Some(dir.clone()),
            crate::spec::StateSpec::Memory => None,
        }
    }

    /// Writes the desired state.
    pub fn save(&self) -> Result<(), RequestError> {
        write_json(&self.dir.join(DESIRED_FILE), &self.desired)
    }

    /// The operator a rollout names: the aggregate (`None`), or the enrichment operator or stage
    /// operator of that name, with the kind of component it is.
    fn operator(
        &self,
        name: Option<&str>,
    ) -> Result<(&crate::spec::OperatorSpec, ComponentKind), RequestError> {
        let Some(name) = name else {
            return (self.spec.aggregate.as_ref())
                .map(|op| (op, ComponentKind::Aggregate))
                .ok_or_else(|| RequestError::Invalid(
                    "the pipeline has no aggregate operator to roll out; name an enrichment or stage operator (\"operator\")".into(),
                ));
        };
        let enrichers = self.spec.enrichers.iter().filter(|op| op.name == name);
        let stages =
            (self.spec.stages.iter().map(|stage| &stage.aggregate)).filter(|op| op.name == name);
        let found: Vec<_> = (enrichers.map(|op| (op, ComponentKind::Enrich)))
            .chain(stages.map(|op| (op, ComponentKind::Aggregate)))
            .collect();
        match found.as_slice() {
            [one] => Ok(*one),
            [] => Err(RequestError::Invalid(format!(
                "the pipeline has no enrichment or stage operator {name:?}"
            ))),
            _ => Err(RequestError::Invalid(format!(
                "the pipeline has several operators named {name:?}: it cannot tell which to roll out"
            ))),
        }
    }

    /// The live version of the aggregate (`None`) or of the operator named.
    fn live_version(&self, operator: Option<&str>) -> Option<&str> {
        self.operator(operator)
            .ok()
            .map(|(op, _)| op.version.as_str())
    }

    /// The routing the desired state asks for: the rollout's operator's, or after a promotion
    /// that operator's with its new live version alone, or the aggregate's.
    pub fn routing(&self) -> Option<Routing> {
        let operator = match &self.desired.rollout {
            Some(plan) => plan.operator.clone(),
            None => self.desired.routed.clone(),
        };
        let live = self.live_version(operator.as_deref())?.to_owned();
        let single = Routing {
            operator: operator.clone(),
            ..Routing::single(&live)
        };
        Some(match (&self.desired.rollout, &self.desired.rolled_back) {
            (Some(plan), None) => {
                let gates = plan.analysis.as_ref().map(|analysis| &analysis.gates);
                Routing {
                    live,
                    candidate: Some(plan.version.clone()),
                    percent: plan.percent_now(),
                    shadow: plan.shadow,
                    operator,
                    // The shadow and state gates' evidence: the live version beside the
                    // candidate.
                    compare: gates.is_some_and(|g| {
                        g.max_shadow_diff_rate.is_some() || g.max_state_growth_ratio.is_some()
                    }),
                    tolerance: gates.map(|g| g.tolerance.clone()).unwrap_or_default(),
                }
            }
            _ => single,
        })
    }

    /// Checks a rollout against the pipeline and the registry, then records it. One operator
    /// is rolled out at a time: another's rollout must be promoted or rolled back first.
    pub fn rollout(&mut self, plan: RolloutPlan, registry: &Registry) -> Result<(), RequestError> {
        if let (Some(current), None) = (&self.desired.rollout, &self.desired.rolled_back)
            && current.operator != plan.operator
        {
            return Err(RequestError::Conflict(format!(
                "a rollout of {} is in progress: promote it or roll it back first",
                current.operator.as_deref().unwrap_or("the aggregate")
            )));
        }
        let (op, kind) = self.operator(plan.operator.as_deref())?;
        let info = registry.get(&op.name, &plan.version).ok_or_else(|| {
            RequestError::Invalid(format!(
                "operator {}@{} is not in the registry: upload it first",
                op.name, plan.version
            ))
        })?;
        if info.world != kind.world() {
            return Err(RequestError::Invalid(format!(
                "operator {}@{} is an {}, not an {}",
                op.name,
                plan.version,
                info.world,
                kind.world()
            )));
        }
        if plan.version == op.version {
            return Err(RequestError::Invalid(format!(
                "{} is the live version already",
                plan.version
            )));
        }
        let gates = plan.analysis.as_ref().map(|a| &a.gates);
        let compared =
            gates.and_then(
                |g| match (g.max_shadow_diff_rate, g.max_state_growth_ratio) {
                    (Some(_), _) => Some("max_shadow_diff_rate compares window results"),
                    (_, Some(_)) => Some("max_state_growth_ratio compares window states"),
                    _ => None,
                },
            );
        if let (Some(gate), ComponentKind::Enrich) = (compared, kind) {
            return Err(RequestError::Invalid(format!(
                "gates.{gate}: an enricher's rollout is gated on its traps, errors, dead letters \
                 and call time"
            )));
        }
        self.desired.routed = plan.operator.clone();
        self.desired.rollout = Some(plan);
        self.desired.rolled_back = None;
        self.save()
    }

    /// Records that the gated rollout's step in progress (its routing applied at `started_ms`)
    /// passed with `gates`: it moves to the next step, or past the last. Returns whether the
    /// rollout is now to be promoted (its last step passed and it promotes itself).
    pub fn pass_step(
        &mut self,
        started_ms: u64,
        gates: Vec<GateResult>,
    ) -> Result<bool, RequestError> {
        let Some(plan) = self.desired.rollout.as_mut() else {
            return Ok(false);
        };
        let percent = plan.percent_now();
        let steps = plan.steps.len();
        let Some(analysis) = plan.analysis.as_mut() else {
            return Ok(false);
        };
        analysis.timeline.push(StepRecord {
            percent,
            started_ms,
            ended_ms: Some(crate::time::wall_clock_ms()),
            outcome: StepOutcome::Passed,
            gates,
            example_keys: Vec::new(),
        });
        analysis.step += 1;
        let promote = analysis.step >= steps && analysis.promote;
        self.save()?;
        Ok(promote)
    }

    /// Records that a gate failed the gated rollout's step in progress, and rolls it back with
    /// `reason`.
    pub fn fail_step(
        &mut self,
        started_ms: u64,
        (gates, example_keys): (Vec<GateResult>, Vec<String>),
        reason: String,
    ) -> Result<(), RequestError> {
        if let Some(plan) = self.desired.rollout.as_mut() {
            let percent = plan.percent_now();
            if let Some(analysis) = plan.analysis.as_mut() {
                analysis.timeline.push(StepRecord {
                    percent,
                    started_ms,
                    ended_ms: Some(crate::time::wall_clock_ms()),
                    outcome: StepOutcome::Failed,
                    gates,
                    example_keys,
                });
            }
        }
        self.rollback(reason)
    }

    /// Sends every key back to the live version and records why.
    pub fn rollback(&mut self, reason: String) -> Result<(), RequestError> {
        if self.desired.rollout.is_none() {
            return Err(RequestError::Conflict(
                "there is no rollout to roll back".into(),
            ));
        }
        self.desired.rolled_back = Some(reason);
        self.save()
    }

    /// Makes the candidate the live version: the spec is rewritten to name it, the rollout
    /// ends, and the routing asks for the candidate alone (applied at the next barrier and
    /// recorded in that checkpoint). Returns the promoted version.
    pub fn promote(
        &mut self,
        resolving: (&Registry, &ExternalServers),
    ) -> Result<String, RequestError> {
        let plan = match (&self.desired.rollout, &self.desired.rolled_back) {
            (Some(plan), None) => plan.clone(),
            (Some(_), Some(reason)) => {
                return Err(RequestError::Conflict(format!(
                    "the rollout was rolled back ({reason}); start a new rollout to promote"
                )));
            }
            (None, _) => {
                return Err(RequestError::Conflict(
                    "there is no rollout to promote".into(),
                ));
            }
        };
        let mut json = self.spec_json.clone();
        let operators = json
            .get_mut("operators")
            .and_then(|ops| ops.as_array_mut())
            .ok_or_else(|| RequestError::Internal("spec.json has no operators".into()))?;
        for op in operators {
            let kind = op.get("kind").and_then(|k| k.as_str());
            let name = op.get("name").and_then(|n| n.as_str());
            let promoted = match &plan.operator {
                None => kind == Some("aggregate"),
                Some(enricher) => kind == Some("enrich") && name == Some(enricher),
            };
            if promoted {
                op["version"] = plan.version.clone().into();
            }
        }
        if let Some(stage_operator) = &plan.operator {
            let stages = json.get_mut("stages").and_then(|s| s.as_array_mut());
            for stage in stages.into_iter().flatten() {
                let op = &mut stage["operator"];
                if op.get("name").and_then(|n| n.as_str()) == Some(stage_operator) {
                    op["version"] = plan.version.clone().into();
                }
            }
        }
        let spec = Self::resolve(&json, &self.dir, resolving, Served::Stored)?;
        let addressed = resolving.1.resolve(&json)?;
        write_json(&self.dir.join(SPEC_FILE), &json)?;
        self.spec_json = json;
        self.spec = spec;
        self.addressed = addressed;
        self.desired.last_analysis = plan.analysis;
        self.desired.rollout = None;
        self.desired.rolled_back = None;
        self.save()?;
        Ok(plan.version)
    }

    /// Every operator version the pipeline runs, as `(name, version)`: its chain's, then a
    /// rollout's candidate.
    pub(super) fn operator_versions(&self) -> impl Iterator<Item = (&str, &str)> {
        let live = (self.spec.operators()).map(|op| (op.name.as_str(), op.version.as_str()));
        let candidate = self.desired.rollout.as_ref().and_then(|plan| {
            let operator = match &plan.operator {
                None => self.spec.aggregate.as_ref().map(|op| op.name.as_str()),
                Some(enricher) => Some(enricher.as_str()),
            };
            operator.map(|name| (name, plan.version.as_str()))
        });
        live.chain(candidate)
    }

    /// Whether the pipeline uses operator `name@version` (live or candidate).
    pub fn uses(&self, name: &str, version: &str) -> bool {
        self.operator_versions().any(|used| used == (name, version))
    }

    /// The status fields that come from the spec and the desired state.
    pub fn describe(&self, applied: Option<&Routing>) -> serde_json::Value {
        let op = self.spec.aggregate.as_ref().or(self.spec.enrichers.last());
        let rollout = self.desired.rollout.as_ref().map(|plan| {
            serde_json::json!({
                "operator": plan.operator.as_deref().or(self.spec.aggregate.as_ref().map(|op| op.name.as_str())),
                "candidate": plan.version,
                "percent": if self.desired.rolled_back.is_some() { 0 } else { plan.percent_now() },
                "applied_percent": applied.filter(|r| r.candidate.as_deref() == Some(&plan.version)).map_or(0, |r| r.percent),
                "shadow": plan.shadow,
                "steps": plan.steps,
                "every_ms": plan.every_ms,
                "policy": plan.policy,
                "analysis": plan.analysis,
                "rolled_back": self.desired.rolled_back,
            })
        });
        // Every operator version the pipeline runs, a candidate included (the console's "used
        // by": what deleting the version would refuse).
        let uses: Vec<String> = (self.operator_versions())
            .map(|(name, version)| format!("{name}@{version}"))
            .collect();
        // Where the events come from: its ingest log, or the NATS stream (by the server's name,
        // as the spec gives it: never the address).
        let source = match &self.spec.source {
            SourceSpec::Nats(nats) => serde_json::json!({
                "type": "nats",
                "server": self.spec_json["source"]["server"],
                "stream": nats.stream,
                "subjects": nats.subjects,
            }),
            SourceSpec::Kafka(kafka) => serde_json::json!({
                "type": "kafka",
                "server": self.spec_json["source"]["server"],
                "topic": kafka.topic,
            }),
            _ => serde_json::json!({"type": "http"}),
        };
        serde_json::json!({
            "source": source,
            "operator": op.map(|o| serde_json::json!({"name": o.name, "version": o.version})),
            "uses": uses,
            "rollout": rollout,
            "rolled_back": self.desired.rolled_back,
            "last_analysis": self.desired.last_analysis,
        })
    }
}
