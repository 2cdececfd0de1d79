//! `/v1/pipelines`: create, start, stop, delete, status, ingest, results, rollout, rollback.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::BroadcastStream;

use super::ApiError;
use crate::serve::{Managed, RolloutPlan, RolloutRequest, Server};

/// Runs `f` on pipeline `name` under the lock, off the async threads (starting and stopping
/// block).
async fn with_pipeline<T: Send + 'static>(
    server: &Arc<Server>,
    name: String,
    f: impl FnOnce(&Server, &mut Managed) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let server = server.clone();
    tokio::task::spawn_blocking(move || {
        let mut pipelines = server.pipelines.lock().expect("pipelines lock");
        let pipeline = pipelines.get_mut(&name).ok_or_else(|| {
            ApiError::not_found(format!(
                "there is no pipeline {name:?}; GET /v1/pipelines lists them"
            ))
        })?;
        f(&server, pipeline)
    })
    .await
    .map_err(ApiError::internal)?
}

pub(super) async fn list(
    State(server): State<Arc<Server>>,
) -> Result<Json<Vec<serde_json::Value>>, ApiError> {
    let server = server.clone();
    tokio::task::spawn_blocking(move || {
        let mut pipelines = server.pipelines.lock().expect("pipelines lock");
        Json(pipelines.values_mut().map(Managed::status).collect())
    })
    .await
    .map_err(ApiError::internal)
}

pub(super) async fn create(
    State(server): State<Arc<Server>>,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let json: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a JSON pipeline spec: {e}")))?;
    let name = json
        .get("name")
        .and_then(|n| n.as_str())
        .ok_or_else(|| ApiError::bad_request("the spec needs a \"name\""))?
        .to_owned();
    let server = server.clone();
    tokio::task::spawn_blocking(move || {
        let mut pipelines = server.pipelines.lock().expect("pipelines lock");
        if pipelines.contains_key(&name) {
            return Err(ApiError::conflict(format!(
                "pipeline {name:?} exists; DELETE it first or choose another name"
            )));
        }
        let dir = server.pipeline_dir(&name);
        // Check before anything is written: a refused spec leaves nothing behind.
        Managed::resolve(&json, &dir, &server.registry).map_err(ApiError::bad_request)?;
        let mut pipeline =
            Managed::create(json, &dir, &server.registry).map_err(ApiError::internal)?;
        let status = pipeline.status();
        pipelines.insert(name, pipeline);
        Ok((StatusCode::CREATED, Json(status)))
    })
    .await
    .map_err(ApiError::internal)?
}

pub(super) async fn status(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    with_pipeline(&server, name, |_, pipeline| Ok(Json(pipeline.status()))).await
}

pub(super) async fn start(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    with_pipeline(&server, name, |server, pipeline| {
        pipeline.desired.running = true;
        pipeline.save().map_err(ApiError::internal)?;
        pipeline
            .start(&server.registry)
            .map_err(ApiError::internal)?;
        Ok(Json(pipeline.status()))
    })
    .await
}

pub(super) async fn stop(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    with_pipeline(&server, name, |_, pipeline| {
        pipeline.desired.running = false;
        pipeline.save().map_err(ApiError::internal)?;
        pipeline.halt();
        Ok(Json(pipeline.status()))
    })
    .await
}

pub(super) async fn delete(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let server = server.clone();
    tokio::task::spawn_blocking(move || {
        let mut pipelines = server.pipelines.lock().expect("pipelines lock");
        let mut pipeline = pipelines
            .remove(&name)
            .ok_or_else(|| ApiError::not_found(format!("there is no pipeline {name:?}")))?;
        pipeline.halt();
        std::fs::remove_dir_all(&pipeline.dir).map_err(ApiError::internal)?;
        Ok(StatusCode::NO_CONTENT)
    })
    .await
    .map_err(ApiError::internal)?
}

/// Splits an ingest body into event lines: a JSON array of objects, or JSON Lines.
fn event_lines(body: &[u8]) -> Result<Vec<String>, ApiError> {
    let text = std::str::from_utf8(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not UTF-8: {e}")))?;
    if text.trim_start().starts_with('[') {
        let events: Vec<serde_json::Value> = serde_json::from_str(text).map_err(|e| {
            ApiError::bad_request(format!(
                "the body starts like a JSON array but is not one: {e}"
            ))
        })?;
        return Ok(events.iter().map(|e| e.to_string()).collect());
    }
    // Lines are checked by the pipeline: a malformed one becomes a dead letter with its reason.
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect())
}

pub(super) async fn ingest(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let lines = event_lines(&body)?;
    let accepted = with_pipeline(&server, name, move |_, pipeline| {
        pipeline.ingest(&lines).map_err(ApiError::conflict)
    })
    .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::json!({ "accepted": accepted })),
    ))
}

pub(super) async fn results(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let receiver = with_pipeline(&server, name, |_, pipeline| {
        pipeline
            .running
            .as_ref()
            .map(|running| running.control.results.subscribe())
            .ok_or_else(|| {
                ApiError::conflict(format!(
                    "pipeline {} is not running: start it first",
                    pipeline.name
                ))
            })
    })
    .await?;
    let stream = BroadcastStream::new(receiver).filter_map(|line| {
        line.ok()
            .map(|line| Ok::<_, Infallible>(Event::default().data(&*line)))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

pub(super) async fn rollout(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<serde_json::Value>, ApiError> {
    let request: RolloutRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a rollout request: {e}")))?;
    let plan = RolloutPlan::from_request(request).map_err(ApiError::bad_request)?;
    with_pipeline(&server, name, move |server, pipeline| {
        let Some(op) = &pipeline.spec.aggregate else {
            return Err(ApiError::bad_request(
                "the pipeline has no aggregate operator to roll out",
            ));
        };
        let info = server
            .registry
            .get(&op.name, &plan.version)
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "operator {}@{} is not in the registry: upload it first",
                    op.name, plan.version
                ))
            })?;
        if info.world != "aggregator" {
            return Err(ApiError::bad_request(format!(
                "operator {}@{} is an {}, not an aggregator",
                op.name, plan.version, info.world
            )));
        }
        if plan.version == op.version {
            return Err(ApiError::bad_request(format!(
                "{} is the live version already",
                plan.version
            )));
        }
        pipeline.rollout(plan).map_err(ApiError::internal)?;
        Ok(Json(pipeline.status()))
    })
    .await
}

pub(super) async fn rollback(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<serde_json::Value>, ApiError> {
    let reason = match body.is_empty() {
        true => None,
        false => serde_json::from_slice::<serde_json::Value>(&body)
            .map_err(|e| ApiError::bad_request(format!("the body is not JSON: {e}")))?
            .get("reason")
            .and_then(|r| r.as_str())
            .map(str::to_owned),
    };
    with_pipeline(&server, name, move |_, pipeline| {
        if pipeline.desired.rollout.is_none() {
            return Err(ApiError::conflict("there is no rollout to roll back"));
        }
        pipeline
            .rollback(format!(
                "manual: {}",
                reason.as_deref().unwrap_or("rolled back by hand")
            ))
            .map_err(ApiError::internal)?;
        Ok(Json(pipeline.status()))
    })
    .await
}
