//! `/v1/pipelines/{name}/savepoints`, `/replay` and `/repro`: take, list and delete a
//! pipeline's savepoints, create a new pipeline from one, replay its recorded input through two
//! versions, and make a repro bundle of one window. Request and response shapes live here; what they do is `serve`'s. Depends on
//! `checkpoint`, `names` and `serve`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;

use super::ApiError;
use super::pipelines::{Pipeline, blocking};
use crate::checkpoint::SavepointInfo;
use crate::serve::{
    Caller, RedriveRequest, ReplayRequest, ReproRequest, RequestError, Server, Slot,
};

/// `{name}/savepoints/{savepoint}`: the pipeline, looked up, and the savepoint's name, both
/// checked against the name rule after percent-decoding.
pub(super) struct SavepointPath {
    slot: Arc<Slot>,
    savepoint: String,
}

impl axum::extract::FromRequestParts<Arc<Server>> for SavepointPath {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        server: &Arc<Server>,
    ) -> Result<Self, Self::Rejection> {
        let axum::extract::Path((name, savepoint)) =
            axum::extract::Path::<(String, String)>::from_request_parts(parts, server)
                .await
                .map_err(|e| ApiError::bad_request(e.body_text()))?;
        crate::names::check("savepoint name", &savepoint).map_err(RequestError::from)?;
        Ok(SavepointPath {
            slot: server.pipeline(&name)?,
            savepoint,
        })
    }
}

/// What a savepoint looks like in the API: of a pipeline on workers, its events summed over
/// the slices (a slice of key groups reads every event of the stream, so there they count
/// each event once per slice), its lowest watermark, and each slice's position under
/// `slices`.
fn describe(saved: &SavepointInfo) -> serde_json::Value {
    let mut described = describe_one(saved);
    if !saved.slices.is_empty() {
        let slices: Vec<_> = (saved.slices.iter().enumerate())
            .map(|(slice, manifest)| {
                let Some(m) = manifest else {
                    return serde_json::json!({"slice": slice, "empty": true});
                };
                serde_json::json!({
                    "slice": slice,
                    "checkpoint": m.id,
                    "input_offset": m.source.offset,
                    "events": m.events,
                    "watermark": (m.watermark != i64::MIN).then_some(m.watermark),
                })
            })
            .collect();
        described["slices"] = slices.into();
        described["input_offset"] = serde_json::Value::Null;
    }
    described
}

fn describe_one(saved: &SavepointInfo) -> serde_json::Value {
    let m = &saved.manifest;
    serde_json::json!({
        "name": saved.name,
        "checkpoint": m.id,
        "input_offset": m.source.offset,
        "events": m.events,
        "watermark": (m.watermark != i64::MIN).then_some(m.watermark),
        "committed_at_ms": m.committed_at_ms,
        "output": m.sinks,
        "bytes": saved.bytes,
        "routing": m.routing,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TakeRequest {
    name: String,
}

pub(super) async fn take(
    Pipeline(slot): Pipeline,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let request: TakeRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body is not a savepoint request {{\"name\": ...}}: {e}"
        ))
    })?;
    let saved = blocking(move || slot.savepoint(&request.name)).await?;
    Ok((StatusCode::CREATED, Json(describe(&saved))))
}

pub(super) async fn list(
    Pipeline(slot): Pipeline,
) -> Result<Json<Vec<serde_json::Value>>, ApiError> {
    let listing = blocking(move || slot.savepoints()).await?;
    let damaged = (listing.damaged.iter())
        .map(|(name, reason)| serde_json::json!({"name": name, "damaged": reason}));
    Ok(Json(
        listing.saved.iter().map(describe).chain(damaged).collect(),
    ))
}

pub(super) async fn delete(path: SavepointPath) -> Result<StatusCode, ApiError> {
    let SavepointPath { slot, savepoint } = path;
    blocking(move || slot.delete_savepoint(&savepoint)).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn fork(
    State(server): State<Arc<Server>>,
    caller: Option<axum::Extension<Caller>>,
    path: SavepointPath,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let SavepointPath { slot, savepoint } = path;
    let json: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a JSON pipeline spec: {e}")))?;
    let status = blocking(move || {
        Ok(server
            .fork(&slot, &savepoint, json, caller.as_deref())?
            .status())
    })
    .await?;
    Ok((StatusCode::CREATED, Json(status)))
}

/// `POST /v1/pipelines/{name}/quarantine/redrive`: the parked keys asked (or all) go through
/// the version now serving them.
pub(super) async fn redrive(
    Pipeline(slot): Pipeline,
    body: Bytes,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let request: RedriveRequest = match body.is_empty() {
        true => RedriveRequest::default(),
        false => serde_json::from_slice(&body).map_err(|e| {
            ApiError::bad_request(format!(
                "the body is not a re-drive request ({{\"keys\": [...]}}, or {{}} for every parked key): {e}"
            ))
        })?,
    };
    let answer = blocking(move || slot.redrive(&request)).await?;
    Ok((StatusCode::ACCEPTED, Json(answer)))
}

/// `POST /v1/pipelines/{name}/repro`: a repro bundle for a row the caller saw.
pub(super) async fn repro(
    State(server): State<Arc<Server>>,
    Pipeline(slot): Pipeline,
    body: Bytes,
) -> Result<Json<crate::repro::Bundle>, ApiError> {
    let request: ReproRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a repro request ({{\"row\": ..., \"versions\": [live, candidate]}}): {e}")))?;
    let bundle = blocking(move || slot.repro(&request, &server.registry)).await?;
    Ok(Json(bundle))
}

pub(super) async fn replay(
    State(server): State<Arc<Server>>,
    Pipeline(slot): Pipeline,
    body: Bytes,
) -> Result<Json<serde_json::Value>, ApiError> {
    let request: ReplayRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a replay request: {e}")))?;
    let answer = blocking(move || slot.replay(&request, &server.registry)).await?;
    Ok(Json(answer))
}
