//! Building a pipeline's parts before any input is read: loading operator code (components,
//! native operators, stored components checked by digest) and reference data, and building
//! each shard with its enrichers, its aggregate and, when resuming, its restored windows.
//!
//! Depends on `checkpoint`, `operator`, `rollout`, `spec`, `state`, `time`, `value` and
//! `window`, and of `pipeline` on `mod.rs` (its error, `shard_of`, `groups_of`), `control`,
//! `enrichment`, `interval_join`, `shard` and `stages`.

use std::path::Path;

use super::interval_join::IntervalJoin;
use super::stages::StageOperator;
use super::stages::Stages;
use super::{
    CandidateFactory, Enrichment, PipelineControl, PipelineError, REFERENCE_MAP, Result, Shard,
    groups_of, shard_of,
};
use crate::checkpoint::{CheckpointError, Manifest};
use crate::operator::combine::{Combine, Partial};
use crate::operator::{
    AggregateOperator, ComponentKind, EnrichOperator, Limits, Projection, VersionCode,
    WasmOperator, WasmRuntime, native,
};
use crate::rollout::{Routing, VersionedAggregate, VersionedEnrich};
use crate::spec::{OperatorCode, OperatorSpec, PipelineSpec, StageSpec};
use crate::state::{
    KEY_GROUPS, MemoryBackend, Namespace, RedbBackend, RedbStore, StateBackend, StateKey, key_group,
};
use crate::time::Millis;
use crate::value::Value;
use crate::window::WindowEngine;

/// Loaded operator code, shared by every shard.
pub(super) enum Code {
    Wasm(WasmOperator),
    /// A native operator of the right kind, by name.
    Native(String),
}

/// The process's runtime, set up on first use.
pub(super) fn shared(runtime: &mut Option<WasmRuntime>) -> Result<&WasmRuntime> {
    Ok(match runtime {
        Some(runtime) => runtime,
        None => runtime.insert(WasmRuntime::shared()?),
    })
}

pub(super) fn load(
    runtime: &mut Option<WasmRuntime>,
    spec: &OperatorSpec,
    kind: ComponentKind,
) -> Result<Code> {
    match &spec.code {
        OperatorCode::Component(path) => Ok(Code::Wasm(shared(runtime)?.load(path, kind)?)),
        OperatorCode::Stored { path, digest } => Ok(Code::Wasm(
            shared(runtime)?.load_checked(path, digest, kind)?,
        )),
        OperatorCode::Native(name) => {
            let known: &[&str] = match kind {
                ComponentKind::Aggregate => &native::AGGREGATES,
                ComponentKind::Enrich => &native::ENRICHERS,
            };
            if known.contains(&name.as_str()) {
                Ok(Code::Native(name.clone()))
            } else {
                Err(PipelineError::UnknownNative {
                    name: name.clone(),
                    kind: match kind {
                        ComponentKind::Aggregate => "aggregate",
                        ComponentKind::Enrich => "enrichment",
                    }
                    .into(),
                    known: known.join(", "),
                })
            }
        }
        OperatorCode::Registry => Err(PipelineError::Config(format!(
            "operator {}@{} names no `module`: operators from the registry run under `weir serve`; \
                 `weir run` needs `module = \"path/to/component.wasm\"`",
            spec.name, spec.version
        ))),
    }
}

pub(super) fn label(spec: &OperatorSpec) -> String {
    format!("{}@{}", spec.name, spec.version)
}

/// Reference rows: (key, fields) for an enrichment operator.
pub(super) type ReferenceRows = Vec<(String, Vec<(String, Value)>)>;

pub(super) fn load_reference(path: &Path, key_field: &str) -> Result<ReferenceRows> {
    let fail = |message: String| PipelineError::Reference {
        path: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|source| PipelineError::ReferenceRead {
        path: path.display().to_string(),
        source,
    })?;
    let mut rows = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let json: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| fail(format!("line {}: not JSON ({e})", i + 1)))?;
        let serde_json::Value::Object(object) = json else {
            return Err(fail(format!("line {}: not a JSON object", i + 1)));
        };
        let key = match object.get(key_field) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
            _ => {
                return Err(fail(format!(
                    "line {}: no text or integer key field `{key_field}`",
                    i + 1
                )));
            }
        };
        rows.push((
            key,
            object
                .iter()
                .map(|(k, v)| (k.clone(), Value::from_json(v)))
                .collect(),
        ));
    }
    Ok(rows)
}

/// Everything loaded before the shards are built: operator code and reference data.
pub(super) struct Loaded {
    enrichers: Vec<Code>,
    aggregate: Option<Code>,
    stages: Vec<Code>,
    references: Vec<Option<ReferenceRows>>,
}

impl Loaded {
    /// Loads every operator and reference file of `spec`: everything that can be refused is
    /// refused here, before any input is read.
    pub(super) fn load(spec: &PipelineSpec) -> Result<Loaded> {
        let mut runtime = None;
        let enrichers = spec
            .enrichers
            .iter()
            .map(|op| load(&mut runtime, op, ComponentKind::Enrich))
            .collect::<Result<Vec<_>>>()?;
        let aggregate = spec
            .aggregate
            .as_ref()
            .map(|op| load(&mut runtime, op, ComponentKind::Aggregate))
            .transpose()?;
        let stages = spec
            .stages
            .iter()
            .map(|stage| load(&mut runtime, &stage.aggregate, ComponentKind::Aggregate))
            .collect::<Result<Vec<_>>>()?;
        let references = spec
            .enrichers
            .iter()
            .map(|op| {
                op.reference
                    .as_ref()
                    .map(|r| load_reference(&r.path, &r.key))
                    .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Loaded {
            enrichers,
            aggregate,
            stages,
            references,
        })
    }
}

/// What a run resumes from: the store (with its data directory), the checkpoint, the routing
/// between operator versions and the code of the routing's candidate.
pub(super) struct Resume<'a> {
    pub(super) store: Option<&'a (RedbStore, std::path::PathBuf)>,
    pub(super) manifest: Option<&'a Manifest>,
    pub(super) watermark: Millis,
    pub(super) routing: Option<&'a Routing>,
    pub(super) candidate: Option<&'a VersionCode>,
}

impl<'a> Resume<'a> {
    /// Resuming from `manifest` (if any) in `store`, at its watermark, with its routing and
    /// the candidate's code.
    pub(super) fn of(
        store: Option<&'a (RedbStore, std::path::PathBuf)>,
        manifest: Option<&'a Manifest>,
        (routing, candidate): (Option<&'a Routing>, Option<&'a VersionCode>),
    ) -> Resume<'a> {
        Resume {
            store,
            manifest,
            watermark: manifest.map_or(crate::time::MINUS_INFINITY, |m| m.watermark),
            routing,
            candidate,
        }
    }
}

/// Builds shard `index` of `shards`.
pub(super) fn build_shard(
    spec: &PipelineSpec,
    loaded: &Loaded,
    resume: &Resume<'_>,
    control: &PipelineControl,
    index: usize,
    shards: usize,
) -> Result<Shard> {
    let checkpoints = checkpoints(spec, resume);
    let mut state = state_backend(resume, spec.memory_budget, checkpoints);
    let limits = sandbox_limits(spec, control);
    let mut enrichers = Vec::new();
    for (position, (op, code)) in spec.enrichers.iter().zip(&loaded.enrichers).enumerate() {
        let projection = op
            .fields
            .as_deref()
            .map_or(Projection::All, Projection::only);
        let operator: Box<dyn EnrichOperator> = match code {
            Code::Wasm(wasm) => Box::new(wasm.enrich(limits.clone(), projection.clone())?),
            Code::Native(name) => native::enrich(name).expect("load checked the name"),
        };
        let operator = VersionedEnrich::new(&op.name, &op.version, operator, &control.counters);
        // Reference data is part of the state from the first checkpoint on.
        if resume.manifest.is_none() {
            let rows = loaded.references[position].iter().flatten();
            load_reference_rows(&mut *state, rows, position as u16, index, shards)?;
        }
        enrichers.push(Enrichment::new(
            label(op),
            position as u16,
            operator,
            op.state_ttl,
            (limits.clone(), projection),
        ));
    }
    let aggregate = build_aggregate(spec, loaded, limits, control, checkpoints, shards)?;
    let join = (spec.join.as_ref())
        .and_then(|join| join.interval)
        .map(IntervalJoin::new);
    let mut shard = Shard::new(join, enrichers, aggregate, state);
    if let Some(routing) = resume.routing
        && routing.candidate.is_some()
    {
        shard.route(
            routing.clone(),
            resume.candidate,
            &control.counters,
            control.shadow_log.clone(),
        )?;
    }
    if let (Some((store, dir)), Some(_)) = (resume.store, resume.manifest) {
        restore_shard(
            spec,
            store,
            dir,
            resume.watermark,
            &mut shard,
            index,
            shards,
        )?;
        // The keys parked in the quarantine show in the status from the start.
        super::shard::note_quarantine(control, &mut shard.parked_keys());
    }
    Ok(shard)
}

/// A shard's (or its stages') state: in redb if the pipeline has a store, keeping changes for
/// checkpoints only if it takes them.
fn state_backend(resume: &Resume<'_>, budget: usize, checkpoints: bool) -> Box<dyn StateBackend> {
    match resume.store {
        Some((store, _)) => {
            let backend = RedbBackend::new(store.clone(), budget);
            match checkpoints {
                true => Box::new(backend),
                false => Box::new(backend.without_checkpoints()),
            }
        }
        None => Box::new(MemoryBackend::default()),
    }
}

/// The fields the aggregate `op` of `spec` receives: those its spec names, or all but the key
/// and the time. The operator has the key as its scope's key and the time as the event's, so
/// those fields are not sent again; a global aggregate's scope key is a bucket and a join's is
/// its side's field, so they are sent the key field.
fn aggregate_projection(spec: &PipelineSpec, op: &OperatorSpec) -> Projection {
    let all_but_key_and_time = if spec.global || spec.pre_aggregate || spec.join.is_some() {
        Projection::except(&[&spec.timestamp_field])
    } else {
        Projection::except(&[&spec.key_field, &spec.timestamp_field])
    };
    (op.fields.as_deref()).map_or(all_but_key_and_time, Projection::only)
}

/// What the router takes of each event for the aggregate's calls ([`crate::event::Crossing`]):
/// the aggregate's projection, if its events go from the router straight to an aggregate that
/// reads crossings (a Wasm component's calls carrying many windows, or the native count-sum,
/// its twin). Not with enrichers or an interval join (whose events are new ones, made on the
/// shard), a global or pre-aggregated aggregate (whose calls go one window each), or another
/// native one (which reads its events' fields itself); see [`crossings_for`].
pub(super) fn router_crossings(spec: &PipelineSpec, loaded: &Loaded) -> Option<Projection> {
    crossings_for_code(spec, loaded.aggregate.as_ref())
}

/// [`router_crossings`] for an aggregate of `code`. A native aggregate reads the crossings of
/// one field only (the count-sum's `amount`): none are taken for it if its projection leaves
/// it another field to cross.
fn crossings_for_code(spec: &PipelineSpec, code: Option<&Code>) -> Option<Projection> {
    match code? {
        Code::Wasm(wasm) => crossings_for(spec, wasm.carries_windows()),
        Code::Native(name) => {
            let field = crate::operator::native::crossing_field(name)?;
            crossings_for(spec, true).filter(|projection| projection.may_cross(field))
        }
    }
}

/// [`router_crossings`] for `spec`, whose aggregate reads crossings if `reads`. Only where
/// an event can have one crossing field: not if the aggregate names several fields (or none),
/// nor for a window join unless it names one (a joined event has two fields or more besides
/// the time: the join's field and `side`).
fn crossings_for(spec: &PipelineSpec, reads: bool) -> Option<Projection> {
    let interval_join = (spec.join.as_ref()).is_some_and(|join| join.interval.is_some());
    let made_on_shard = !spec.enrichers.is_empty() || interval_join;
    if !reads || made_on_shard || spec.global || spec.pre_aggregate {
        return None;
    }
    let projection = aggregate_projection(spec, spec.aggregate.as_ref()?);
    let can_be_one_field = match &projection {
        Projection::Only(names) => names.len() == 1,
        Projection::Except(_) | Projection::All => spec.join.is_none(),
    };
    can_be_one_field.then_some(projection)
}

/// Whether the pipeline checkpoints: it keeps its state in redb and has an interval (without
/// one, as in a replay sandbox or with `checkpoint_interval = "off"`, not even at the end).
fn checkpoints(spec: &PipelineSpec, resume: &Resume<'_>) -> bool {
    resume.store.is_some() && spec.checkpoint_interval.is_some()
}

/// A shard's aggregate, if the pipeline has one: its window engine (keeping a change log if the
/// pipeline `checkpoints`), the live version (and the room for a candidate), and how
/// candidates are made.
fn build_aggregate(
    spec: &PipelineSpec,
    loaded: &Loaded,
    limits: Limits,
    control: &PipelineControl,
    checkpoints: bool,
    shards: usize,
) -> Result<Option<(WindowEngine, VersionedAggregate, CandidateFactory)>> {
    Ok(match (&spec.aggregate, &loaded.aggregate, &spec.window) {
        (Some(op), Some(code), Some(window)) => {
            let projection = aggregate_projection(spec, op);
            let operator: Box<dyn AggregateOperator> = match code {
                Code::Wasm(wasm) => Box::new(wasm.aggregate(limits.clone(), projection.clone())?),
                Code::Native(name) => native::aggregate(name).expect("load checked the name"),
            };
            // A global or pre-aggregated aggregate's shards end their windows with partial
            // states.
            let operator: Box<dyn AggregateOperator> = if spec.global || spec.pre_aggregate {
                Box::new(Partial(operator))
            } else {
                operator
            };
            let factory = CandidateFactory { limits, projection };
            let mut engine = WindowEngine::new(
                *window,
                spec.allowed_lateness,
                spec.enrichers.len() as u16,
                label(op),
            )
            .with_early_results(spec.emit.early_every)
            .with_quarantine(spec.quarantine, shards);
            if !checkpoints {
                engine.without_checkpoints();
            }
            Some((
                engine,
                VersionedAggregate::new(&op.version, operator, &control.counters),
                factory,
            ))
        }
        _ => None,
    })
}

/// Puts an enrichment operator's reference rows into the state of the keys this shard owns.
fn load_reference_rows<'r>(
    state: &mut dyn StateBackend,
    rows: impl Iterator<Item = &'r (String, Vec<(String, Value)>)>,
    operator: u16,
    index: usize,
    shards: usize,
) -> Result<()> {
    for (key, fields) in rows {
        let group = key_group(key);
        if shard_of(group, shards) != index {
            continue;
        }
        let state_key = StateKey {
            group,
            operator,
            namespace: Namespace::Global,
            key: key.as_str().into(),
        };
        let mut scope = state.take(&state_key)?;
        for (name, value) in fields {
            scope.map_put(REFERENCE_MAP, name, value.clone());
        }
        state.put(state_key, scope)?;
    }
    Ok(())
}

/// Restores a shard's open windows (and, for enrichers with a TTL, their state) from the
/// checkpoint in `store`.
fn restore_shard(
    spec: &PipelineSpec,
    store: &RedbStore,
    dir: &Path,
    watermark: Millis,
    shard: &mut Shard,
    index: usize,
    shards: usize,
) -> Result<()> {
    let (first, end) = groups_of(index, shards);
    let start = StateKey::group_start(first);
    let end = if end >= u32::from(KEY_GROUPS) {
        vec![0xff; 3]
    } else {
        StateKey::group_start(end as u16)
    };
    let operator = spec.enrichers.len() as u16;
    let windows: Vec<_> = store
        .scan(true, &start, &end)?
        .into_iter()
        .filter(|row| StateKey::decode(&row.key).is_some_and(|k| k.operator == operator))
        .collect();
    // Only TTLs and an interval join's expiries need the state itself at restore; everything
    // else is read on demand.
    let interval_join = spec
        .join
        .as_ref()
        .is_some_and(|join| join.interval.is_some());
    let state = if interval_join || spec.enrichers.iter().any(|op| op.state_ttl.is_some()) {
        store.scan(false, &start, &end)?
    } else {
        Vec::new()
    };
    shard
        .restore(watermark, &windows, &state)
        .map_err(|source| {
            PipelineError::from(CheckpointError::Row {
                dir: dir.to_owned(),
                what: "",
                source,
            })
        })
}

/// The limits of every operator instance of the run: the spec's sandbox, with the run's CPU
/// budget, memory pool and state quota shared by all of them.
fn sandbox_limits(spec: &PipelineSpec, control: &PipelineControl) -> Limits {
    Limits {
        cpu: control.cpu_quota(spec.sandbox.cpu_millicores),
        memory_pool: control.memory_pool(spec.sandbox.total_memory),
        state_quota: control.state_quota(spec.state_quota),
        ..Limits::from(&spec.sandbox)
    }
}

/// The stages after the aggregate, if the pipeline has any, with their state (in the store,
/// when there is one) and, when resuming, their open windows.
pub(super) fn build_stages(
    spec: &PipelineSpec,
    loaded: &Loaded,
    resume: &Resume<'_>,
    control: &PipelineControl,
) -> Result<Option<Stages>> {
    let combine = combine_stage(spec, loaded);
    let stage_specs: Vec<StageSpec> = combine
        .iter()
        .map(|(stage, _)| stage.clone())
        .chain(spec.stages.iter().cloned())
        .collect();
    if stage_specs.is_empty() {
        return Ok(None);
    }
    let limits = sandbox_limits(spec, control);
    let codes = combine.iter().map(|(_, code)| *code).chain(&loaded.stages);
    let operators = stage_operators(&stage_specs, codes, combine.is_some(), &limits, control)?;
    let checkpoints = checkpoints(spec, resume);
    let state = state_backend(resume, spec.memory_budget, checkpoints);
    // The chain's operators are 0..enrichers, the aggregate is next, the stages follow.
    let first = spec.enrichers.len() as u16 + 1;
    let mut stages = Stages::new(
        &stage_specs,
        operators,
        first,
        spec.allowed_lateness,
        spec.pre_aggregate,
        state,
    );
    if !checkpoints {
        stages.without_checkpoints();
    }
    if let Some(routing) = resume.routing.filter(|r| r.candidate.is_some()) {
        stages.route(
            routing,
            resume.candidate,
            &control.counters,
            control.shadow_log.clone(),
        )?;
    }
    if let (Some((store, dir)), Some(_)) = (resume.store, resume.manifest) {
        let windows = store.scan(true, &[], &[0xff; 3])?;
        stages
            .restore(resume.watermark, &windows)
            .map_err(|source| {
                PipelineError::from(CheckpointError::Row {
                    dir: dir.to_owned(),
                    what: "the stages' windows: ",
                    source,
                })
            })?;
    }
    Ok(Some(stages))
}

/// A global (or pre-aggregated) aggregate's combine, a stage of its own: the partials of each
/// window, under one key (or each under its key), merged by the same operator.
fn combine_stage<'a>(spec: &PipelineSpec, loaded: &'a Loaded) -> Option<(StageSpec, &'a Code)> {
    match (
        spec.global || spec.pre_aggregate,
        &spec.aggregate,
        &spec.window,
        &loaded.aggregate,
    ) {
        (true, Some(aggregate), Some(window), Some(code)) => Some((
            StageSpec {
                key_field: None,
                window: *window,
                aggregate: aggregate.clone(),
            },
            code,
        )),
        _ => None,
    }
}

/// The operators of `stage_specs`, each made from its code in `codes` within `limits`: with a
/// `combine`, the first is the aggregate's combine, fixed; the others are versioned.
fn stage_operators<'a>(
    stage_specs: &[StageSpec],
    codes: impl Iterator<Item = &'a Code>,
    combine: bool,
    limits: &Limits,
    control: &PipelineControl,
) -> Result<Vec<StageOperator>> {
    stage_specs
        .iter()
        .zip(codes)
        .enumerate()
        .map(|(i, (stage, code))| {
            let projection = stage
                .aggregate
                .fields
                .as_deref()
                .map_or(Projection::All, Projection::only);
            let operator: Box<dyn AggregateOperator> = match code {
                Code::Wasm(wasm) => Box::new(wasm.aggregate(limits.clone(), projection.clone())?),
                Code::Native(name) => native::aggregate(name).expect("load checked the name"),
            };
            let op = &stage.aggregate;
            Ok(if combine && i == 0 {
                StageOperator::Fixed(Box::new(Combine(operator)))
            } else {
                StageOperator::Versioned(Box::new((
                    VersionedAggregate::named(&op.name, &op.version, operator, &control.counters),
                    limits.clone(),
                    projection,
                )))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    //! Shards as a spec builds them.

    use super::*;
    use crate::event::{Event, Staged};
    use crate::time::MINUS_INFINITY;
    use crate::value::Value;
    use crate::window::Timeline;

    /// A native count-sum over 1 s tumbling windows, with `state`.
    fn spec(state: &str) -> PipelineSpec {
        let text = format!(
            r#"
            name = "p"
            [source]
            type = "file"
            path = "in.jsonl"
            [event]
            key = "user"
            timestamp = "ts"
            [window]
            type = "tumbling"
            size = "1s"
            [[operators]]
            name = "count-sum"
            kind = "aggregate"
            native = "count-sum"
            {state}
            "#
        );
        PipelineSpec::parse(&text, false, Path::new("/specs")).expect("a valid spec")
    }

    /// The changes (state and window metadata) a shard of `spec` hands to a checkpoint after a
    /// thousand windows opened and closed (on a redb store in a temporary directory if `redb`).
    fn window_changes_kept(spec: &PipelineSpec, redb: bool) -> usize {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = redb.then(|| {
            let store = crate::state::RedbStore::open(dir.path()).expect("a store");
            (store, dir.path().to_path_buf())
        });
        let loaded = Loaded::load(spec).expect("native operators load");
        let resume = Resume {
            store: store.as_ref(),
            manifest: None,
            watermark: MINUS_INFINITY,
            routing: None,
            candidate: None,
        };
        let control = super::super::standalone_control("p");
        let mut shard = build_shard(spec, &loaded, &resume, &control, 0, 1).expect("a shard");
        let events: Vec<Staged> = (0..1_000u64)
            .map(|i| Staged {
                seq: i,
                event: Event {
                    line: i + 1,
                    key: format!("user-{i}").into(),
                    timestamp: i as i64 * 1_000,
                    fields: vec![("amount".into(), Value::Int(1))],
                },
                origin: None,
                made_by: None,
            })
            .collect();
        let advances: Vec<(u64, Millis)> = (0..1_000u64).map(|i| (i, i as i64 * 1_000)).collect();
        let timeline = Timeline {
            advances: &advances,
            early: &[],
            redrives: &[],
            end_of_input: false,
        };
        let out = shard
            .process(events.into(), &timeline, false)
            .expect("the shard runs");
        assert_eq!(out.engine.emissions.len(), 999);
        let snapshot = shard.checkpoint().expect("a snapshot");
        snapshot.state.len() + snapshot.windows.len()
    }

    #[test]
    fn a_pipeline_that_never_checkpoints_keeps_no_window_changes_for_it() {
        // Memory state, and redb state without an interval (a replay sandbox's, or "off"):
        // nothing ever takes the changes, which grew with every window closed.
        assert_eq!(window_changes_kept(&spec(""), false), 0);
        let redb = spec("[state]\nbackend = \"redb\"\ndir = \"data\"");
        let no_interval = PipelineSpec {
            checkpoint_interval: None,
            ..redb.clone()
        };
        assert_eq!(window_changes_kept(&no_interval, true), 0);
        // A checkpointing pipeline keeps them for its next checkpoint: the window still open,
        // its state and its metadata (the 999 closed ones opened since the last checkpoint, so
        // none of them is stored).
        assert_eq!(window_changes_kept(&redb, true), 2);
    }

    /// The router takes crossings for an aggregate that reads them (a Wasm one carrying
    /// windows, or the native count-sum) and gets its events straight from it, with the
    /// aggregate's projection; not for another native one, nor where the events are made
    /// again on the shard (enrichers, an interval join), the calls go a window each (a global
    /// or pre-aggregated aggregate), or no event can have one field to cross (a window join,
    /// unless the aggregate names one; an aggregate that names several fields, or none).
    #[test]
    fn the_router_takes_crossings_only_for_events_straight_to_an_aggregate_reading_them() {
        let plain = spec("");
        let all_but_key_and_time = Some(Projection::except(&["user", "ts"]));
        assert_eq!(crossings_for(&plain, true), all_but_key_and_time);
        assert_eq!(crossings_for(&plain, false), None);
        let mut named = plain.clone();
        named.aggregate.as_mut().unwrap().fields = Some(vec!["amount".into()]);
        assert_eq!(
            crossings_for(&named, true),
            Some(Projection::only(&["amount"]))
        );
        // Native: the count-sum (`amount` only: not when it names another field), no other.
        let native = |name: &str| Code::Native(name.into());
        let count_sum = native(crate::operator::native::COUNT_SUM);
        assert_eq!(
            crossings_for_code(&plain, Some(&count_sum)),
            all_but_key_and_time
        );
        assert_eq!(
            crossings_for_code(&named, Some(&count_sum)),
            Some(Projection::only(&["amount"]))
        );
        let mut price = plain.clone();
        price.aggregate.as_mut().unwrap().fields = Some(vec!["price".into()]);
        assert_eq!(crossings_for_code(&price, Some(&count_sum)), None);
        let mut amount_skipped = plain.clone();
        amount_skipped.timestamp_field = "amount".into();
        assert_eq!(crossings_for_code(&amount_skipped, Some(&count_sum)), None);
        assert_eq!(crossings_for_code(&plain, Some(&native("top-keys"))), None);
        assert_eq!(crossings_for_code(&plain, None), None);
        let mut enriched = plain.clone();
        enriched.enrichers.push(plain.aggregate.clone().unwrap());
        let mut interval_join = plain.clone();
        let side = |value: &str| crate::spec::JoinSide {
            value: value.into(),
            key: "user".into(),
        };
        interval_join.join = Some(crate::spec::JoinSpec {
            field: "kind".into(),
            left: side("l"),
            right: side("r"),
            interval: Some(crate::spec::IntervalBounds { lower: 0, upper: 1 }),
        });
        let mut window_join = interval_join.clone();
        window_join.join.as_mut().unwrap().interval = None;
        let mut one_field_joined = window_join.clone();
        one_field_joined.aggregate = named.aggregate.clone();
        let only_amount = Some(Projection::only(&["amount"]));
        assert_eq!(crossings_for(&one_field_joined, true), only_amount);
        let (mut two_fields, mut no_field) = (plain.clone(), plain.clone());
        two_fields.aggregate.as_mut().unwrap().fields = Some(vec!["a".into(), "b".into()]);
        no_field.aggregate.as_mut().unwrap().fields = Some(vec![]);
        let (mut global, mut pre_aggregated) = (plain.clone(), plain.clone());
        (global.global, pre_aggregated.pre_aggregate) = (true, true);
        let never = [enriched, interval_join, window_join, global, pre_aggregated];
        for spec in never.into_iter().chain([two_fields, no_field]) {
            assert_eq!(crossings_for(&spec, true), None, "{spec:?}");
        }
    }
}
