//! `weir deploy`: uploads a built component to a running `weir serve` as one version of a
//! registry operator (`POST /v1/operators/{name}/{version}`), with an admin token; a component
//! that carries its project's examples is uploaded with `?verify=examples`, so the server runs
//! them before it accepts the version. Depends on `client`, `names` and the examples.

use std::path::Path;
use std::time::Duration;

use super::ProjectError;

/// How long an upload may take, compiling on the server included.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(300);

/// Uploads the component at `module` to `server` (`http://host:port`) as `name@version` and
/// returns the server's answer (the version's digest, size and time).
pub fn deploy(
    server: &str,
    token: &str,
    name: &str,
    version: &str,
    module: &Path,
) -> Result<serde_json::Value, ProjectError> {
    crate::names::check("operator name", name)?;
    crate::names::check("operator version", version)?;
    let failed = |message: String| ProjectError::Deploy {
        server: server.to_owned(),
        message,
    };
    crate::client::check_server(server).map_err(|source| ProjectError::Client { source })?;
    let bytes = std::fs::read(module).map_err(|e| {
        failed(format!(
            "cannot read the component {}: {e} (build it first with `weir build`)",
            module.display()
        ))
    })?;
    let verify = match super::examples::embedded(&bytes) {
        Ok(Some(_)) => "?verify=examples",
        _ => "",
    };
    let path = format!("/v1/operators/{name}/{version}{verify}");
    let (status, body) = crate::client::post(
        server,
        token,
        &path,
        "application/wasm",
        &bytes,
        UPLOAD_TIMEOUT,
    )
    .map_err(|source| ProjectError::Client { source })?;
    if status != 201 {
        return Err(failed(format!("the server answered {status}: {body}")));
    }
    serde_json::from_str(&body).map_err(|e| failed(format!("unreadable answer {body:?}: {e}")))
}
