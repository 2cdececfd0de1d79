//! `weir deploy`: uploads a built component to a running `weir serve` as one version of a
//! registry operator (`POST /v1/operators/{name}/{version}`), with an admin token.

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
    if !server.starts_with("http://") {
        return Err(failed(
            "the server must be an http:// address (weir has no TLS client built in: reach a TLS front end through a tunnel)".into(),
        ));
    }
    let bytes = std::fs::read(module).map_err(|e| {
        failed(format!(
            "cannot read the component {}: {e} (build it first with `weir build`)",
            module.display()
        ))
    })?;
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(UPLOAD_TIMEOUT))
        .build()
        .into();
    let url = format!(
        "{}/v1/operators/{name}/{version}",
        server.trim_end_matches('/')
    );
    let mut response = agent
        .post(&url)
        .header("Authorization", format!("Bearer {token}"))
        .header("Content-Type", "application/wasm")
        .send(&bytes[..])
        .map_err(|e| failed(e.to_string()))?;
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .read_to_string()
        .map_err(|e| failed(e.to_string()))?;
    if status != 201 {
        return Err(failed(format!("the server answered {status}: {body}")));
    }
    serde_json::from_str(&body).map_err(|e| failed(format!("unreadable answer {body:?}: {e}")))
}
