//! `/v1/operators`: the registry.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;

use super::ApiError;
use crate::operator::{RegistryError, VersionInfo};
use crate::serve::Server;

fn registry_error(e: RegistryError) -> ApiError {
    match e {
        RegistryError::Exists { .. } => ApiError::conflict(e.to_string()),
        RegistryError::Unknown { .. } => ApiError::not_found(e.to_string()),
        RegistryError::TooLarge { .. } => {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, e.to_string())
        }
        RegistryError::Io { .. } => ApiError::internal(e),
        _ => ApiError::bad_request(e.to_string()),
    }
}

pub(super) async fn list(State(server): State<Arc<Server>>) -> Json<Vec<VersionInfo>> {
    Json(server.registry.list())
}

pub(super) async fn get(
    State(server): State<Arc<Server>>,
    Path((name, version)): Path<(String, String)>,
) -> Result<Json<VersionInfo>, ApiError> {
    server
        .registry
        .get(&name, &version)
        .map(Json)
        .ok_or_else(|| registry_error(RegistryError::Unknown { name, version }))
}

pub(super) async fn upload(
    State(server): State<Arc<Server>>,
    Path((name, version)): Path<(String, String)>,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let registry = server.registry.clone();
    let limit = server.max_upload;
    // Compiling takes a while: off the async threads.
    let info = tokio::task::spawn_blocking(move || registry.upload(&name, &version, &body, limit))
        .await
        .map_err(ApiError::internal)?
        .map_err(registry_error)?;
    metrics::counter!("weir_operator_uploads_total").increment(1);
    Ok((StatusCode::CREATED, Json(info)))
}

pub(super) async fn delete(
    State(server): State<Arc<Server>>,
    Path((name, version)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let pipelines = server.pipelines.lock().expect("pipelines lock");
    if let Some(user) = pipelines.values().find(|p| p.uses(&name, &version)) {
        return Err(ApiError::conflict(format!(
            "operator {name}@{version} is used by pipeline {}: stop using it (roll out another version, or delete the pipeline) first",
            user.name
        )));
    }
    server
        .registry
        .delete(&name, &version)
        .map_err(registry_error)?;
    Ok(StatusCode::NO_CONTENT)
}
