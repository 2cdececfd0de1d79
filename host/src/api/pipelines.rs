//! `/v1/pipelines`: create, start, stop, delete, status, ingest, results, rollout, rollback,
//! promote. Request and response shapes live here; what they do is `serve`'s. Depends on `names`
//! and `serve`.

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
    Caller, RequestError, ResultLine, RolloutPlan, RolloutRequest, Server, Slot, StopOutcome,
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
pub(super) struct Pipeline(pub(super) Arc<Slot>);

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

/// `GET /v1/pipelines`: every pipeline's status; a token narrowed to pipelines sees its own.
pub(super) async fn list(
    State(server): State<Arc<Server>>,
    caller: Option<axum::Extension<Caller>>,
) -> Result<Json<Vec<serde_json::Value>>, ApiError> {
    let sees = move |name: &str| caller.as_ref().is_none_or(|c| c.sees(name));
    blocking(move || {
        let slots = server.slots();
        let seen = slots.iter().filter(|slot| sees(&slot.name));
        Ok(Json(seen.map(|slot| slot.status()).collect()))
    })
    .await
}

pub(super) async fn create(
    State(server): State<Arc<Server>>,
    caller: Option<axum::Extension<Caller>>,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let json: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a JSON pipeline spec: {e}")))?;
    // The status of a pipeline on workers asks the cluster: not on the runtime's threads.
    let status = blocking(move || Ok(server.create(json, caller.as_deref())?.status())).await?;
    Ok((StatusCode::CREATED, Json(status)))
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

/// The most events one ingest request may carry.
pub const MAX_EVENTS_PER_REQUEST: usize = 100_000;

fn too_many() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("a request may carry at most {MAX_EVENTS_PER_REQUEST} events; split the batch"),
    )
}

/// The elements of a JSON array, as raw JSON text borrowed from the body, at most
/// [`MAX_EVENTS_PER_REQUEST`] of them (refused before any more is parsed).
struct ArrayOfRaw<'a>(Vec<&'a serde_json::value::RawValue>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for ArrayOfRaw<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visitor<'a> {
            type Value = ArrayOfRaw<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON array of events")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut events = Vec::new();
                while let Some(event) = seq.next_element::<&'de serde_json::value::RawValue>()? {
                    if events.len() == MAX_EVENTS_PER_REQUEST {
                        return Err(serde::de::Error::custom("too many events"));
                    }
                    events.push(event);
                }
                Ok(ArrayOfRaw(events))
            }
        }
        deserializer.deserialize_seq(Visitor(std::marker::PhantomData))
    }
}

/// Splits an ingest body into event lines borrowed from it: a JSON array of objects, or JSON
/// Lines. Nothing is copied per event; an element of an array that spans lines is the one
/// exception (it is re-serialised onto one line).
fn event_lines(body: &[u8]) -> Result<Vec<std::borrow::Cow<'_, str>>, ApiError> {
    let text = std::str::from_utf8(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not UTF-8: {e}")))?;
    if text.trim_start().starts_with('[') {
        let ArrayOfRaw(events) = serde_json::from_str(text).map_err(|e| {
            if e.to_string().starts_with("too many events") {
                too_many()
            } else {
                ApiError::bad_request(format!(
                    "the body starts like a JSON array but is not one: {e}"
                ))
            }
        })?;
        return Ok(events
            .into_iter()
            .map(|raw| {
                let json = raw.get();
                if json.contains('\n') || json.contains('\r') {
                    let value: serde_json::Value =
                        serde_json::from_str(json).expect("an element the parser accepted");
                    std::borrow::Cow::Owned(value.to_string())
                } else {
                    std::borrow::Cow::Borrowed(json)
                }
            })
            .collect());
    }
    // Lines are checked by the pipeline: a malformed one becomes a dead letter with its reason.
    let mut lines = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if lines.len() == MAX_EVENTS_PER_REQUEST {
            return Err(too_many());
        }
        lines.push(std::borrow::Cow::Borrowed(line));
    }
    Ok(lines)
}

/// The header naming the watermark partition of an ingest request's events.
pub const PARTITION_HEADER: &str = "weir-partition";

pub(super) async fn ingest(
    Pipeline(slot): Pipeline,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let partition = match headers.get(PARTITION_HEADER) {
        None => None,
        Some(value) => {
            let name = value.to_str().unwrap_or("\u{fffd}").to_owned();
            crate::names::check("partition", &name)
                .map_err(|e| ApiError::bad_request(format!("Weir-Partition: {e}")))?;
            Some(name)
        }
    };
    let turn = slot.ingest_turn()?;
    // Parsing a large body and the synced append are both off the async threads.
    let accepted = tokio::task::spawn_blocking(move || -> Result<usize, ApiError> {
        let _turn = turn;
        let lines = event_lines(&body)?;
        let lines: Vec<&str> = lines.iter().map(AsRef::as_ref).collect();
        Ok(slot.ingest(&lines, partition.as_deref())?)
    })
    .await
    .map_err(ApiError::internal)??;
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::json!({ "accepted": accepted })),
    ))
}

/// About how many bytes of the results file a resumed stream reads at a time (it holds at most
/// two such chunks while its client is slow to take them).
const BACKLOG_CHUNK: u64 = 16 << 10;

/// The result records of the results file after byte `after`, up to its last complete line,
/// as many as about [`BACKLOG_CHUNK`] bytes hold (at least one): with the offset where each
/// ends.
fn read_backlog_chunk(path: &std::path::Path, after: u64) -> std::io::Result<Vec<ResultLine>> {
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    if after >= file.metadata()?.len() {
        return Ok(Vec::new());
    }
    file.seek(std::io::SeekFrom::Start(after))?;
    let mut reader = std::io::BufReader::new(file);
    let (mut offset, mut lines, mut line) = (after, Vec::new(), String::new());
    while offset - after < BACKLOG_CHUNK {
        line.clear();
        let n = reader.read_line(&mut line)?;
        if n == 0 || !line.ends_with('\n') {
            break;
        }
        offset += n as u64;
        lines.push((offset, line.trim_end().into()));
    }
    Ok(lines)
}

/// Whether `after` may resume a stream of the results file: the end of a record (or the start),
/// or past the file's end (records a restart will write again, byte for byte). An offset inside
/// a record would send a torn one.
fn check_resume_point(path: &std::path::Path, after: u64) -> Result<(), RequestError> {
    use std::io::Read;
    if after == 0 {
        return Ok(());
    }
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(RequestError::from_io(e)),
    };
    if after > file.metadata().map_err(RequestError::from_io)?.len() {
        return Ok(());
    }
    let mut last = [0u8; 1];
    file.seek(std::io::SeekFrom::Start(after - 1))
        .and_then(|_| file.read_exact(&mut last))
        .map_err(RequestError::from_io)?;
    if last[0] != b'\n' {
        return Err(RequestError::Invalid(format!(
            "Last-Event-ID {after} is not the end of a record: resume from an id this stream sent"
        )));
    }
    Ok(())
}

/// Reads the backlog of a resumed stream into `out` a chunk at a time, as its client takes
/// them, recording in `seen` the offset where the last record sent ends. Holds no thread while
/// the client is slow (the reads are short blocking tasks); ends when the client goes away.
async fn send_backlog(
    path: std::path::PathBuf,
    mut after: u64,
    seen: Arc<std::sync::atomic::AtomicU64>,
    out: tokio::sync::mpsc::Sender<ResultLine>,
) {
    loop {
        let read = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || read_backlog_chunk(&path, after)).await
        };
        let lines = match read {
            Ok(Ok(lines)) if !lines.is_empty() => lines,
            Ok(Ok(_)) => return,
            Ok(Err(error)) => {
                tracing::warn!(%error, "reading the results file for a resumed stream failed");
                return;
            }
            Err(_) => return,
        };
        for line in lines {
            after = line.0;
            seen.store(after, std::sync::atomic::Ordering::Release);
            if out.send(line).await.is_err() {
                return; // the client went away
            }
        }
    }
}

fn result_event((offset, line): ResultLine) -> Event {
    Event::default().id(offset.to_string()).data(&*line)
}

pub(super) async fn results(
    State(server): State<Arc<Server>>,
    Pipeline(slot): Pipeline,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let token = super::bearer(&headers).unwrap_or_default().to_owned();
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
    let seen = Arc::new(std::sync::atomic::AtomicU64::new(after.unwrap_or(0)));
    let (backlog, earlier) = tokio::sync::mpsc::channel::<ResultLine>(64);
    if let Some(after) = after {
        let path = slot.results_file()?.ok_or_else(|| {
            ApiError::from(RequestError::Conflict(
                "the pipeline's results do not go to a file, so a stream cannot resume".into(),
            ))
        })?;
        let checked = path.clone();
        blocking(move || check_resume_point(&checked, after)).await?;
        tokio::spawn(send_backlog(path, after, seen.clone(), backlog));
    }
    drop(slot);
    let live = BroadcastStream::new(receiver)
        .map_while(|item| match item {
            Ok(line) => Some(Some(line)),
            // Too slow: end the stream; the client resumes from its last id without loss.
            Err(BroadcastStreamRecvError::Lagged(_)) => None,
        })
        .filter_map(move |line| {
            let seen = seen.load(std::sync::atomic::Ordering::Acquire);
            line.filter(|(offset, _)| *offset > seen)
        })
        .map(|line| Ok::<_, Infallible>(result_event(line)));
    let earlier = tokio_stream::wrappers::ReceiverStream::new(earlier)
        .map(|line| Ok::<_, Infallible>(result_event(line)));
    // A tick a second, so that an idle stream's token is checked too; the stream still ends
    // when its records end (a reader too far behind, a pipeline deleted).
    let ticks = tokio_stream::wrappers::IntervalStream::new(tokio::time::interval(
        std::time::Duration::from_secs(1),
    ))
    .map(|_| Streamed::Tick);
    let records =
        (earlier.chain(live).map(Streamed::Record)).chain(tokio_stream::once(Streamed::End));
    let stream = records
        .merge(ticks)
        .map_while(while_accepted(server, token))
        .filter_map(|item| item);
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// What a result stream's merged input carries.
enum Streamed<T> {
    Record(T),
    /// A second has passed.
    Tick,
    /// The records have ended.
    End,
}

/// Lets a stream's records through while the token that opened it is still accepted, checked
/// at every tick and at most once a second between them: a stream whose token is revoked or
/// expires sends what falls due within that second at most, then ends; it ends with its
/// records too.
fn while_accepted<T>(
    server: Arc<Server>,
    token: String,
) -> impl FnMut(Streamed<T>) -> Option<Option<T>> {
    let mut checked = std::time::Instant::now();
    move |item| {
        let tick = matches!(item, Streamed::Tick);
        if tick || checked.elapsed() >= std::time::Duration::from_secs(1) {
            checked = std::time::Instant::now();
            let (verdict, _) = server.tokens.judge(&token, crate::serve::Scope::Read);
            if verdict != crate::serve::Verdict::Allowed {
                return None;
            }
        }
        match item {
            Streamed::Record(record) => Some(Some(record)),
            Streamed::Tick => Some(None),
            Streamed::End => None,
        }
    }
}

pub(super) async fn rollout(
    State(server): State<Arc<Server>>,
    Pipeline(slot): Pipeline,
    body: Bytes,
) -> Result<Json<serde_json::Value>, ApiError> {
    let request: RolloutRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a rollout request: {e}")))?;
    let plan = RolloutPlan::from_request(request).map_err(RequestError::from)?;
    blocking(move || {
        slot.rollout(plan, &server.registry)?;
        Ok(Json(slot.status()))
    })
    .await
}

pub(super) async fn rollback(
    State(server): State<Arc<Server>>,
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
        slot.rollback(
            format!(
                "manual: {}",
                reason.as_deref().unwrap_or("rolled back by hand")
            ),
            &server.registry,
        )?;
        Ok(Json(slot.status()))
    })
    .await
}

pub(super) async fn promote(
    State(server): State<Arc<Server>>,
    Pipeline(slot): Pipeline,
) -> Result<Json<serde_json::Value>, ApiError> {
    blocking(move || {
        slot.promote(server.resolving())?;
        Ok(Json(slot.status()))
    })
    .await
}

pub(super) async fn spec(Pipeline(slot): Pipeline) -> Result<Json<serde_json::Value>, ApiError> {
    blocking(move || slot.spec_json().map(Json)).await
}

/// `?limit=N` of the dead-letters route.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Recent {
    limit: Option<usize>,
}

/// The most dead letters one request returns.
const MAX_RECENT: usize = 100;

pub(super) async fn dead_letters(
    Pipeline(slot): Pipeline,
    query: Result<axum::extract::Query<Recent>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<serde_json::Value>>, ApiError> {
    let axum::extract::Query(recent) =
        query.map_err(|e| ApiError::bad_request(format!("{e}: use ?limit=N")))?;
    let limit = recent.limit.unwrap_or(20);
    if !(1..=MAX_RECENT).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit {limit}: from 1 to {MAX_RECENT}"
        )));
    }
    blocking(move || match slot.recent_dead_letters(limit)? {
        Some(letters) => Ok(Json(letters)),
        None => Err(RequestError::Conflict(
            "the dead letters do not go to a file".into(),
        )),
    })
    .await
}
