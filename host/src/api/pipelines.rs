//! `/v1/pipelines`: create, start, stop, delete, status, ingest, results, rollout, rollback,
//! promote. Request and response shapes live here; what they do is `serve`'s.

use std::convert::Infallible;
use std::io::{BufRead, Seek};
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

use super::ApiError;
use crate::serve::{
    RequestError, ResultLine, RolloutPlan, RolloutRequest, Server, Slot, StopOutcome,
};

/// Runs `f` off the async threads (file writes, fsyncs, joins) and maps its error.
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, RequestError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::from)
}

/// The pipeline named by the route's `{name}`, checked against the name rule after
/// percent-decoding, and looked up.
pub(super) struct Pipeline(Arc<Slot>);

impl axum::extract::FromRequestParts<Arc<Server>> for Pipeline {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        server: &Arc<Server>,
    ) -> Result<Self, Self::Rejection> {
        let axum::extract::Path(name) =
            axum::extract::Path::<String>::from_request_parts(parts, server)
                .await
                .map_err(|e| ApiError::bad_request(e.body_text()))?;
        Ok(Pipeline(server.pipeline(&name)?))
    }
}

pub(super) async fn list(
    State(server): State<Arc<Server>>,
) -> Result<Json<Vec<serde_json::Value>>, ApiError> {
    blocking(move || Ok(Json(server.slots().iter().map(|s| s.status()).collect()))).await
}

pub(super) async fn create(
    State(server): State<Arc<Server>>,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let json: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a JSON pipeline spec: {e}")))?;
    let slot = blocking(move || server.create(json)).await?;
    Ok((StatusCode::CREATED, Json(slot.status())))
}

pub(super) async fn status(Pipeline(slot): Pipeline) -> Result<Json<serde_json::Value>, ApiError> {
    blocking(move || Ok(Json(slot.status()))).await
}

pub(super) async fn start(
    State(server): State<Arc<Server>>,
    Pipeline(slot): Pipeline,
) -> Result<Json<serde_json::Value>, ApiError> {
    blocking(move || {
        slot.start(&server.registry)?;
        Ok(Json(slot.status()))
    })
    .await
}

pub(super) async fn stop(
    State(server): State<Arc<Server>>,
    Pipeline(slot): Pipeline,
) -> Result<impl IntoResponse, ApiError> {
    let wait = server.limits.stop_wait;
    blocking(move || {
        let code = match slot.stop(wait, true)? {
            StopOutcome::Stopped => StatusCode::OK,
            StopOutcome::Stopping => StatusCode::ACCEPTED,
        };
        Ok((code, Json(slot.status())))
    })
    .await
}

pub(super) async fn delete(
    State(server): State<Arc<Server>>,
    Pipeline(slot): Pipeline,
) -> Result<StatusCode, ApiError> {
    blocking(move || {
        server.delete(&slot.name)?;
        Ok(StatusCode::NO_CONTENT)
    })
    .await
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
    Pipeline(slot): Pipeline,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let lines = event_lines(&body)?;
    let accepted = blocking(move || slot.ingest(&lines)).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::json!({ "accepted": accepted })),
    ))
}

/// The most a resumed result stream reads back from the results file in one request.
const MAX_BACKLOG: u64 = 64 << 20;

/// Result records already in the results file after byte `after`, up to its last complete line.
fn backlog(path: &std::path::Path, after: u64) -> Result<Vec<ResultLine>, RequestError> {
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(RequestError::from_io(e)),
    };
    let length = file.metadata().map_err(RequestError::from_io)?.len();
    if length.saturating_sub(after) > MAX_BACKLOG {
        return Err(RequestError::Invalid(format!(
            "Last-Event-ID {after} is more than {MAX_BACKLOG} bytes behind; read the results \
             file, then resume from a later id"
        )));
    }
    if after >= length {
        return Ok(Vec::new());
    }
    file.seek(std::io::SeekFrom::Start(after))
        .map_err(RequestError::from_io)?;
    let mut reader = std::io::BufReader::new(file);
    let mut offset = after;
    let mut lines = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).map_err(RequestError::from_io)?;
        if n == 0 || !line.ends_with('\n') {
            break;
        }
        offset += n as u64;
        lines.push((offset, line.trim_end().into()));
    }
    Ok(lines)
}

fn result_event((offset, line): ResultLine) -> Event {
    Event::default().id(offset.to_string()).data(&*line)
}

pub(super) async fn results(
    Pipeline(slot): Pipeline,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let after = match headers.get("last-event-id") {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    ApiError::bad_request("Last-Event-ID must be an id this stream sent (a number)")
                })?,
        ),
    };
    // Subscribe first, then read the file: a record is sent only once it is in the file, so
    // together they miss nothing; the overlap is skipped by offset.
    let receiver = slot.subscribe();
    let (earlier, seen) = match after {
        None => (Vec::new(), 0),
        Some(after) => {
            let slot = slot.clone();
            blocking(move || {
                let path = slot.results_file()?.ok_or_else(|| {
                    RequestError::Conflict(
                        "the pipeline's results do not go to a file, so a stream cannot resume"
                            .into(),
                    )
                })?;
                let lines = backlog(&path, after)?;
                let seen = lines.last().map_or(after, |(offset, _)| *offset);
                Ok((lines, seen))
            })
            .await?
        }
    };
    drop(slot);
    let live = BroadcastStream::new(receiver)
        .map_while(|item| match item {
            Ok(line) => Some(Some(line)),
            // Too slow: end the stream; the client resumes from its last id without loss.
            Err(BroadcastStreamRecvError::Lagged(_)) => None,
        })
        .filter_map(move |line| line.filter(|(offset, _)| *offset > seen))
        .map(|line| Ok::<_, Infallible>(result_event(line)));
    let earlier = tokio_stream::iter(earlier.into_iter().map(|l| Ok(result_event(l))));
    Ok(Sse::new(earlier.chain(live)).keep_alive(KeepAlive::default()))
}

pub(super) async fn rollout(
    State(server): State<Arc<Server>>,
    Pipeline(slot): Pipeline,
    body: Bytes,
) -> Result<Json<serde_json::Value>, ApiError> {
    let request: RolloutRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a rollout request: {e}")))?;
    let plan = RolloutPlan::from_request(request).map_err(ApiError::bad_request)?;
    blocking(move || {
        slot.rollout(plan, &server.registry)?;
        Ok(Json(slot.status()))
    })
    .await
}

pub(super) async fn rollback(
    Pipeline(slot): Pipeline,
    body: Bytes,
) -> Result<Json<serde_json::Value>, ApiError> {
    let reason = match body.is_empty() {
        true => None,
        false => serde_json::from_slice::<serde_json::Value>(&body)
            .map_err(|e| ApiError::bad_request(format!("the body is not JSON: {e}")))?
            .get("reason")
            .and_then(|r| r.as_str())
            .map(|r| r.chars().take(1_000).collect::<String>()),
    };
    blocking(move || {
        slot.rollback(format!(
            "manual: {}",
            reason.as_deref().unwrap_or("rolled back by hand")
        ))?;
        Ok(Json(slot.status()))
    })
    .await
}

pub(super) async fn promote(
    State(server): State<Arc<Server>>,
    Pipeline(slot): Pipeline,
) -> Result<Json<serde_json::Value>, ApiError> {
    blocking(move || {
        slot.promote(&server.registry)?;
        Ok(Json(slot.status()))
    })
    .await
}
