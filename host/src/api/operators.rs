//! `/v1/operators`: the registry. Depends on `names`, `operator` and `serve`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;

use super::ApiError;
use super::pipelines::blocking;
use crate::names;
use crate::operator::VersionInfo;
use crate::serve::{Caller, RequestError, Server};

/// `{name}/{version}` of an operator route, checked against the name rule after
/// percent-decoding.
pub(super) struct OperatorPath {
    name: String,
    version: String,
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for OperatorPath {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        let axum::extract::Path((name, version)) =
            axum::extract::Path::<(String, String)>::from_request_parts(parts, state)
                .await
                .map_err(|e| ApiError::bad_request(e.body_text()))?;
        names::check("operator name", &name).map_err(RequestError::from)?;
        names::check("operator version", &version).map_err(RequestError::from)?;
        Ok(OperatorPath { name, version })
    }
}

/// `GET /v1/operators`: every version the caller's tenant holds (a server token sees all).
pub(super) async fn list(
    State(server): State<Arc<Server>>,
    caller: Option<Extension<Caller>>,
) -> Json<Vec<VersionInfo>> {
    let mut versions = server.registry.list();
    if let Some(caller) = caller {
        versions.retain(|info| caller.sees_name(&info.name));
    }
    Json(versions)
}

pub(super) async fn get(
    State(server): State<Arc<Server>>,
    OperatorPath { name, version }: OperatorPath,
) -> Result<Json<VersionInfo>, ApiError> {
    server
        .registry
        .get(&name, &version)
        .map(Json)
        .ok_or_else(|| {
            RequestError::from(crate::operator::RegistryError::Unknown { name, version }).into()
        })
}

/// An upload's query: `?verify=<pipeline>:<savepoint>` runs the candidate's `migrate` over that
/// savepoint's state first, and refuses the version with the first state it cannot convert;
/// `?verify=examples` runs the examples the component carries (`weir build` embeds a
/// project's) and refuses it with the first that does not hold.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UploadQuery {
    verify: Option<String>,
}

pub(super) async fn upload(
    State(server): State<Arc<Server>>,
    caller: Option<Extension<Caller>>,
    OperatorPath { name, version }: OperatorPath,
    query: Result<Query<UploadQuery>, axum::extract::rejection::QueryRejection>,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let verify = match query.verify.as_deref().map(|v| (v, v.split_once(':'))) {
        None => None,
        Some(("examples", _)) => Some(Verify::Examples),
        Some((_, Some((pipeline, savepoint)))) => {
            Some(Verify::Migration(pipeline.to_owned(), savepoint.to_owned()))
        }
        Some((_, None)) => {
            return Err(ApiError::bad_request(
                "verify: give <pipeline>:<savepoint>, the savepoint whose state the version's \
                 migrate must convert, or `examples` to run the examples the component carries",
            ));
        }
    };
    let limit = server.max_upload;
    let tenant = server.tenant_for(caller.as_deref(), &name);
    if let Some(tenant) = &tenant {
        crate::serve::check_tenant_holds(tenant, "operator", &name)?;
        if let Some(Verify::Migration(pipeline, _)) = &verify
            && !crate::serve::tenant_holds(tenant, pipeline)
        {
            return Err(crate::serve::unknown_pipeline(pipeline).into());
        }
    }
    // Compiling takes a while: off the async threads.
    let (info, verified) = blocking(move || {
        let verified =
            match &verify {
                Some(Verify::Migration(pipeline, savepoint)) if body.len() <= limit => Some(
                    dry_run(&server, (&name, &version), &body, (pipeline, savepoint))?,
                ),
                Some(Verify::Examples) if body.len() <= limit => {
                    // Compiled first: what is not a Weir component is refused as ever.
                    server.registry.compile_upload(&name, &version, &body)?;
                    Some(crate::serve::examples_dry_run(
                        &server.pipelines_dir(),
                        &body,
                    )?)
                }
                _ => None,
            };
        let owner = caller
            .as_ref()
            .map(|c| (c.name.as_str(), c.quota.max_operators));
        let prefix = tenant.as_ref().map(|t| format!("{t}."));
        let group =
            (prefix.as_deref()).map(|p| (p, server.tenants.quota(&p[..p.len() - 1]).max_operators));
        let info = server
            .registry
            .upload(&name, &version, &body, limit, owner, group)?;
        if tenant.is_none() && server.tenant_of(&name).is_some() {
            // Its tenant was made while it was uploaded: it was not held to the tenant's rules.
            server.registry.delete(&name, &version)?;
            return Err(RequestError::Conflict(format!(
                "operator {name:?}: its tenant was made meanwhile; send it again"
            )));
        }
        server.publish_ownership();
        Ok((info, verified))
    })
    .await?;
    metrics::counter!("weir_operator_uploads_total").increment(1);
    let mut answer = serde_json::to_value(info).expect("a version serialises");
    if let Some(verified) = verified {
        answer["verified"] = verified;
    }
    Ok((StatusCode::CREATED, Json(answer)))
}

/// What an upload asks to be checked before it is accepted.
enum Verify {
    /// A migration dry run over `<pipeline>:<savepoint>`.
    Migration(String, String),
    /// The examples the component carries.
    Examples,
}

/// The migration dry run of an upload (see `serve::Slot::migration_dry_run`).
fn dry_run(
    server: &Server,
    (name, version): (&str, &str),
    body: &[u8],
    (pipeline, savepoint): (&str, &str),
) -> Result<serde_json::Value, RequestError> {
    let slot = server.pipeline(pipeline)?;
    let (candidate, kind) = server.registry.compile_upload(name, version, body)?;
    if kind != crate::operator::ComponentKind::Aggregate {
        return Err(RequestError::Invalid(format!(
            "verify: {name}@{version} is an enricher; a migration is checked for aggregates"
        )));
    }
    slot.migration_dry_run(savepoint, (name, version), &candidate)
}

pub(super) async fn delete(
    State(server): State<Arc<Server>>,
    caller: Option<Extension<Caller>>,
    OperatorPath { name, version }: OperatorPath,
) -> Result<StatusCode, ApiError> {
    blocking(move || {
        if let Some(user) = server.user_of(&name, &version) {
            // A user outside the caller's tenant is not named.
            let seen = caller.as_ref().is_none_or(|c| c.sees_name(&user));
            let user = if seen { user } else { "of another tenant".to_owned() };
            return Err(RequestError::Conflict(format!(
                "operator {name}@{version} is used by pipeline {user}: stop using it (promote or roll out another version, or delete the pipeline) first"
            )));
        }
        server.registry.delete(&name, &version)?;
        server.publish_ownership();
        Ok(StatusCode::NO_CONTENT)
    })
    .await
}
