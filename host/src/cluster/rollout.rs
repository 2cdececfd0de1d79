//! Rollouts of a shared pipeline: `weir cluster rollout` uploads a candidate version's
//! component, adds it to the pipeline's record and stores the routing (`rollouts.<pipeline>`
//! in the pipelines bucket); every worker follows that key and hands the routing to each of
//! its slice runs, which switch at their next checkpoint barrier. A key lives in exactly one
//! slice, so it moves to the new version (or back) once, at a barrier of its slice: no result
//! is counted twice or lost, though slices switch at slightly different points of the input.
//!
//! Depends on `names`, `operator`, `pipeline`, `rollout`, `spec` and the cluster's connection.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::deploy::{fetch_record, upload_file};
use super::{ClusterError, Connection, NatsFailure, PIPELINES_BUCKET, Result};
use crate::operator::{ComponentKind, VersionCode, WasmRuntime};
use crate::pipeline::{ResolveError, Resolver};
use crate::rollout::Routing;
use crate::spec::PipelineSpec;

/// The bucket key of a pipeline's routing.
pub(super) fn routing_key(pipeline: &str) -> String {
    format!("rollouts.{pipeline}")
}

/// Routes `percent` of the keys of `operator` (default: the aggregate) of the shared
/// `pipeline` to `version` (in shadow: none, only compared), uploading `module` as that
/// version's code unless an earlier rollout did.
pub fn rollout(
    url: &str,
    pipeline: &str,
    operator: Option<&str>,
    version: &str,
    module: Option<&Path>,
    percent: u8,
    shadow: bool,
) -> Result<Routing> {
    crate::names::check("version", version)?;
    if percent > 100 {
        return Err(ClusterError::BadName(format!(
            "--percent {percent}: from 0 to 100"
        )));
    }
    let connection = Connection::open(url)?;
    let mut record = fetch_record(&connection, pipeline)?;
    let (name, live) = live_version(&record.spec, record.json, operator)?;
    if version == live {
        return Err(ClusterError::BadName(format!(
            "{name}@{version} is the live version already"
        )));
    }
    let label = format!("{name}@{version}");
    if let Some(module) = module {
        let digest = upload_file(&connection, module)?;
        record.code.insert(label.clone(), digest);
        super::deploy::store_record(&connection, &record)?;
    } else if !record.code.contains_key(&label) {
        return Err(ClusterError::Unknown(format!(
            "{label} (give its component with --module)"
        )));
    }
    let routing = Routing {
        live,
        candidate: Some(version.to_owned()),
        percent,
        shadow,
        operator: operator.map(str::to_owned),
        ..Routing::single("")
    };
    store_routing(&connection, pipeline, &routing)?;
    Ok(routing)
}

/// Sends every key of `operator` (default: the aggregate) back to its live version.
pub fn rollback(url: &str, pipeline: &str, operator: Option<&str>) -> Result<Routing> {
    let connection = Connection::open(url)?;
    let record = fetch_record(&connection, pipeline)?;
    let (_, live) = live_version(&record.spec, record.json, operator)?;
    let routing = Routing {
        operator: operator.map(str::to_owned),
        ..Routing::single(&live)
    };
    store_routing(&connection, pipeline, &routing)?;
    Ok(routing)
}

/// Routes the shared `pipeline`'s keys as `routing` says, sharing first each component of
/// `components` (by `operator@version`) the pipeline's record does not have: a control plane's
/// rollout, rollback or promotion (`weir serve`), which decides the routing itself.
pub(super) fn route(
    connection: &Connection,
    pipeline: &str,
    routing: &Routing,
    components: &BTreeMap<String, PathBuf>,
) -> Result<()> {
    let mut record = fetch_record(connection, pipeline)?;
    let missing: Vec<_> = (components.iter())
        .filter(|(label, _)| !record.code.contains_key(*label))
        .collect();
    for (label, file) in &missing {
        let digest = upload_file(connection, file)?;
        record.code.insert((*label).clone(), digest);
    }
    if !missing.is_empty() {
        super::deploy::store_record(connection, &record)?;
    }
    store_routing(connection, pipeline, routing)
}

fn store_routing(connection: &Connection, pipeline: &str, routing: &Routing) -> Result<()> {
    let bucket = connection.bucket(PIPELINES_BUCKET, std::time::Duration::ZERO)?;
    let bytes = serde_json::to_vec(routing).expect("a routing serialises");
    connection
        .block_on(bucket.put(routing_key(pipeline), bytes.into()))
        .map(drop)
        .map_err(|e| connection.error("storing the routing", NatsFailure::client(e)))
}

/// The operator's name and live version in the spec: the aggregate, or the enricher or
/// stage operator named.
fn live_version(text: &str, json: bool, operator: Option<&str>) -> Result<(String, String)> {
    let spec = PipelineSpec::parse(text, json, Path::new("."))?;
    let stages = || spec.stages.iter().map(|stage| &stage.aggregate);
    let found = match operator {
        None => spec.aggregate.as_ref(),
        Some(name) => (spec.enrichers.iter().chain(stages())).find(|op| op.name == name),
    };
    found
        .map(|op| (op.name.clone(), op.version.clone()))
        .ok_or_else(|| {
            ClusterError::Unknown(format!(
                "operator {} of pipeline {}",
                operator.unwrap_or("(the aggregate)"),
                spec.name
            ))
        })
}

/// The pipeline's routing and its revision in the bucket, if one was stored.
pub(super) fn read_routing(
    connection: &Connection,
    pipeline: &str,
) -> Result<Option<(u64, Routing)>> {
    let bucket = connection.bucket(PIPELINES_BUCKET, std::time::Duration::ZERO)?;
    let entry = connection
        .block_on(bucket.entry(routing_key(pipeline)))
        .map_err(|e| connection.error("reading the routing", NatsFailure::client(e)))?;
    let Some(entry) = entry else {
        return Ok(None);
    };
    let routing: Routing = serde_json::from_slice(&entry.value)
        .map_err(|e| ClusterError::Damaged(format!("routing of {pipeline}: {e}")))?;
    let names_ok = std::iter::once(&routing.live)
        .chain(&routing.candidate)
        .chain(&routing.operator)
        .all(|name| crate::names::check("version", name).is_ok());
    if routing.percent > 100 || !names_ok {
        return Err(ClusterError::Damaged(format!(
            "routing of {pipeline}: {routing:?}"
        )));
    }
    Ok(Some((entry.revision, routing)))
}

/// The components a worker has fetched, by `operator@version`: path and digest.
pub(super) type FetchedCode = Arc<Mutex<BTreeMap<String, (PathBuf, String)>>>;

/// Finds a rollout's candidate among the fetched components (checked against its digest as it
/// is loaded).
pub(super) fn resolver(spec: &PipelineSpec, code: FetchedCode) -> Resolver {
    let aggregate = spec.aggregate.as_ref().map(|op| op.name.clone());
    let enrichers: Vec<String> = spec.enrichers.iter().map(|op| op.name.clone()).collect();
    let stages: Vec<String> = (spec.stages.iter())
        .map(|stage| stage.aggregate.name.clone())
        .collect();
    Box::new(move |named: Option<&str>, version: &str| {
        let (name, kind) = match (named, &aggregate) {
            (Some(name), _) if enrichers.iter().any(|e| e == name) => (name, ComponentKind::Enrich),
            (Some(name), _) if stages.iter().any(|s| s == name) => (name, ComponentKind::Aggregate),
            (None, Some(name)) => (name.as_str(), ComponentKind::Aggregate),
            _ => {
                return Err(ResolveError::Unknown(format!(
                    "no operator {} to roll out",
                    named.unwrap_or("(aggregate)")
                )));
            }
        };
        let label = format!("{name}@{version}");
        let (path, digest) = (code.lock().expect("code lock").get(&label).cloned())
            .ok_or_else(|| ResolveError::Unknown(format!("{label} was not fetched")))?;
        let loaded = WasmRuntime::shared()
            .and_then(|runtime| runtime.load_checked(&path, &digest, kind))
            .map_err(|e| ResolveError::Failed(format!("{label}: {e}")))?;
        Ok(match kind {
            ComponentKind::Aggregate => VersionCode::Aggregate(Arc::new(loaded)),
            ComponentKind::Enrich => VersionCode::Enrich(Arc::new(loaded)),
        })
    })
}
