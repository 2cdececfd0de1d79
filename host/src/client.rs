//! A small client of a running `weir serve` for the CLI: one authorised request, its status and
//! body (`weir deploy` uploads with it, `weir replay` asks for a replay, `weir savepoint
//! --server` manages a served pipeline's savepoints), and the replay's answer rendered as a
//! table. Depends on nothing else of the crate; the CLI and `project` use it.

use std::time::Duration;

/// Why a call to the server failed.
#[derive(Debug, thiserror::Error)]
#[error("{server}: {problem}")]
pub struct ClientError {
    /// The server's address.
    pub server: String,
    /// What went wrong.
    #[source]
    pub problem: ClientProblem,
}

/// What went wrong with a call to the server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientProblem {
    /// The address is not `http://` or `https://`.
    #[error("the server must be an http:// or https:// address")]
    NotHttp,
    /// A method (and body) this client is not made to send.
    #[error("{method} with this body is not a call weir makes")]
    Unsupported {
        /// The method asked for.
        method: String,
    },
    /// The request could not be sent, or its answer not read.
    #[error(transparent)]
    Transport(#[from] ureq::Error),
}

/// Refuses a server address this client cannot reach: only `http://` and `https://`.
pub fn check_server(server: &str) -> Result<(), ClientError> {
    if server.starts_with("http://") || server.starts_with("https://") {
        return Ok(());
    }
    Err(ClientError {
        server: server.to_owned(),
        problem: ClientProblem::NotHttp,
    })
}

/// Sends `body` (of `content_type`) to `path` of `server` (`http://host:port`) with the bearer
/// `token`, waiting at most `timeout`; returns the status and the body of the answer.
pub fn post(
    server: &str,
    token: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<(u16, String), ClientError> {
    call(
        server,
        token,
        "POST",
        path,
        Some((content_type, body)),
        timeout,
    )
}

/// Calls `method` (`GET`, `POST` or `DELETE`) on `path` of `server` with the bearer `token` and
/// an optional body with its content type; returns the status and the body of the answer.
pub fn call(
    server: &str,
    token: &str,
    method: &str,
    path: &str,
    body: Option<(&str, &[u8])>,
    timeout: Duration,
) -> Result<(u16, String), ClientError> {
    let failed = |problem: ClientProblem| ClientError {
        server: server.to_owned(),
        problem,
    };
    check_server(server)?;
    // TLS set up even for http://: a proxy may redirect to https://.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .tls_config(tls_config())
        .build()
        .into();
    let url = format!("{}{path}", server.trim_end_matches('/'));
    let bearer = format!("Bearer {token}");
    let answer = match (method, body) {
        ("GET", None) => agent.get(&url).header("Authorization", &bearer).call(),
        ("DELETE", None) => agent.delete(&url).header("Authorization", &bearer).call(),
        ("POST", body) => {
            let (content_type, bytes) = body.unwrap_or(("application/json", b""));
            (agent.post(&url))
                .header("Authorization", &bearer)
                .header("Content-Type", content_type)
                .send(bytes)
        }
        _ => {
            let method = method.to_owned();
            return Err(failed(ClientProblem::Unsupported { method }));
        }
    };
    let mut response = answer.map_err(|e| failed(e.into()))?;
    let status = response.status().as_u16();
    let text = response
        .body_mut()
        .read_to_string()
        .map_err(|e| failed(e.into()))?;
    Ok((status, text))
}

/// A replay's answer as a table: one line per window, both versions' results side by side, the
/// differing ones marked `*`, then a count.
pub fn render_replay(answer: &serde_json::Value) -> String {
    let versions = &answer["versions"];
    let mut out = format!(
        "  {:<24} {:<28} {:<36} {}\n",
        "key", "window", versions[0], versions[1]
    );
    for row in answer["rows"].as_array().into_iter().flatten() {
        let mark = if row["same"] == true { ' ' } else { '*' };
        let window = format!("[{}, {})", row["window_start"], row["window_end"]);
        let key = row["key"].as_str().unwrap_or_default();
        out.push_str(&format!(
            "{mark} {key:<24} {window:<28} {:<36} {}\n",
            row["a"].to_string(),
            row["b"]
        ));
    }
    out.push_str(&format!(
        "{} of {} windows differ{}\n",
        answer["differing"],
        answer["windows"],
        if answer["truncated"] == true {
            " (only the first rows are shown)"
        } else {
            ""
        }
    ));
    out
}

/// HTTPS with rustls (ring), trusting the system's certificate authorities (and the file
/// `SSL_CERT_FILE` names, or the directory `SSL_CERT_DIR` does, as other tools do).
fn tls_config() -> ureq::tls::TlsConfig {
    use ureq::tls::{Certificate, RootCerts, TlsConfig, TlsProvider};
    let found = rustls_native_certs::load_native_certs();
    let roots: Vec<Certificate<'static>> = (found.certs.iter())
        .map(|der| Certificate::from_der(der.as_ref()).to_owned())
        .collect();
    TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .root_certs(RootCerts::Specific(std::sync::Arc::new(roots)))
        .unversioned_rustls_crypto_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .build()
}
