//! The harness the end-to-end tests of `weir serve` share: a [`Server`] (the real binary on its
//! own data directory and a free port, killed when dropped), an HTTP [`Client`] that answers
//! with status and body, the tokens, the example components, the events and specs the tests
//! send, and the checks against the reference model. Used by `serve.rs` and the other files
//! that drive a server (hostile_server, concurrency, console, replay, savepoints, ...).

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::reference::{Emission, Ev, ModelSpec, WindowKind, run_model};
use crate::support::{component, emissions};

pub const ADMIN: &str = "admin-secret";
pub const INGEST: &str = "ingest-secret";
pub const PIPELINE: &str = "clicks";
/// Event time of the first test event (2026-03-02).
pub const BASE_TS: i64 = 1_772_442_000_000;
/// What the pipeline spec of [`spec`] computes, for the reference model.
pub const MODEL: ModelSpec = ModelSpec {
    window: WindowKind::Tumbling { size: 1000 },
    bound: 0,
    lateness: 0,
};
/// How long to wait for anything the server does in the background.
pub const PATIENCE: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------
// Fixture: a `weir serve` process and an HTTP client for it.
// ---------------------------------------------------------------------------------------------

/// An HTTP client for one server. Cheap to clone, so that threads can send requests too.
#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
    base: String,
    stderr: Arc<Mutex<String>>,
}

type Answer = Result<ureq::http::Response<ureq::Body>, ureq::Error>;

impl Client {
    /// The full URL of a path (`/v1/...`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Everything the server has printed to stderr so far, for failure messages.
    pub fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr log").clone()
    }

    /// The server's stderr, framed for the end of an assertion message.
    pub fn diag(&self) -> String {
        format!("\n--- weir serve stderr ---\n{}--- end ---", self.stderr())
    }

    /// `GET path`, with `Authorization: Bearer token` when a token is given.
    pub fn get(&self, path: &str, token: Option<&str>) -> (u16, String) {
        let mut request = self.agent.get(self.url(path));
        if let Some(token) = token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        self.answer(&format!("GET {path}"), request.call())
    }

    /// `GET path` with a token and extra headers.
    pub fn get_with(&self, path: &str, token: &str, headers: &[(&str, &str)]) -> (u16, String) {
        let mut request = self
            .agent
            .get(self.url(path))
            .header("Authorization", format!("Bearer {token}"));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.answer(&format!("GET {path}"), request.call())
    }

    /// `DELETE path`.
    pub fn delete(&self, path: &str, token: Option<&str>) -> (u16, String) {
        let mut request = self.agent.delete(self.url(path));
        if let Some(token) = token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        self.answer(&format!("DELETE {path}"), request.call())
    }

    /// `PUT path` with a JSON value.
    pub fn put_json(&self, path: &str, token: Option<&str>, body: &Value) -> (u16, String) {
        let mut request = self.agent.put(self.url(path));
        if let Some(token) = token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        request = request.header("Content-Type", "application/json");
        self.answer(&format!("PUT {path}"), request.send(body.to_string()))
    }

    /// `POST path` with a JSON body (`Content-Type: application/json`), or with no body and no
    /// content type when `body` is empty.
    pub fn post(&self, path: &str, token: Option<&str>, body: &[u8]) -> (u16, String) {
        let content_type = (!body.is_empty()).then_some("application/json");
        self.post_as(path, token, content_type, body, false)
    }

    /// `POST path` with a JSON value.
    pub fn post_json(&self, path: &str, token: Option<&str>, body: &Value) -> (u16, String) {
        self.post(path, token, body.to_string().as_bytes())
    }

    /// `POST path` with any body. With `expect_continue`, the request carries
    /// `Expect: 100-continue`, so a server that refuses it from its headers alone (no token, too
    /// large) answers without having to read (or drop) a body of megabytes first.
    pub fn post_as(
        &self,
        path: &str,
        token: Option<&str>,
        content_type: Option<&str>,
        body: &[u8],
        expect_continue: bool,
    ) -> (u16, String) {
        let mut request = self.agent.post(self.url(path));
        if let Some(token) = token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        if let Some(content_type) = content_type {
            request = request.header("Content-Type", content_type);
        }
        if expect_continue {
            request = request.header("Expect", "100-continue");
        }
        self.answer(&format!("POST {path}"), request.send(body))
    }

    fn answer(&self, what: &str, answer: Answer) -> (u16, String) {
        let mut response =
            answer.unwrap_or_else(|e| panic!("{what}: no HTTP answer: {e}{}", self.diag()));
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .read_to_string()
            .unwrap_or_else(|e| panic!("{what}: reading the answer's body: {e}{}", self.diag()));
        (status, body)
    }

    /// Parses a JSON answer body.
    pub fn json(&self, what: &str, body: &str) -> Value {
        serde_json::from_str(body).unwrap_or_else(|e| {
            panic!(
                "{what}: the answer is not JSON ({e}): {body:?}{}",
                self.diag()
            )
        })
    }

    /// Asserts an answer's status, and returns its body as JSON (`Null` for an empty body).
    pub fn expect(&self, what: &str, (status, body): (u16, String), expected: u16) -> Value {
        assert_eq!(
            status,
            expected,
            "{what}: answered {status} {body}{}",
            self.diag()
        );
        if body.trim().is_empty() {
            Value::Null
        } else {
            self.json(what, &body)
        }
    }

    /// Asserts an error answer: this status, and a JSON body `{"error": "..."}`.
    pub fn expect_error(&self, what: &str, answer: (u16, String), expected: u16) -> String {
        let body = answer.1.clone();
        let error = self.expect(what, answer, expected);
        match error["error"].as_str() {
            Some(message) if !message.is_empty() => message.to_owned(),
            _ => panic!("{what}: an error body must be {{\"error\": \"...\"}}, got {body:?}"),
        }
    }

    /// Uploads a component to the registry as `name/version`.
    pub fn upload(
        &self,
        name: &str,
        version: &str,
        bytes: &[u8],
        token: Option<&str>,
    ) -> (u16, String) {
        let path = format!("/v1/operators/{name}/{version}");
        self.post_as(&path, token, Some("application/wasm"), bytes, true)
    }

    /// Uploads a component file with the admin token, asserting `201`.
    pub fn upload_ok(&self, name: &str, version: &str, file: &Path) -> Value {
        let bytes = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let answer = self.upload(name, version, &bytes, Some(ADMIN));
        self.expect(&format!("uploading {name}/{version}"), answer, 201)
    }

    /// `GET /v1/pipelines/{name}` with the admin token, asserting `200`.
    pub fn status(&self, pipeline: &str) -> Value {
        let path = format!("/v1/pipelines/{pipeline}");
        self.expect(&format!("GET {path}"), self.get(&path, Some(ADMIN)), 200)
    }

    /// Sends events as JSON Lines with the ingest token; `Err` unless answered
    /// `202 {"accepted": n}` with `n` the number of events.
    pub fn try_ingest(&self, pipeline: &str, events: &[Ev]) -> Result<(), String> {
        let path = format!("/v1/pipelines/{pipeline}/events");
        let (status, body) = self.post_as(
            &path,
            Some(INGEST),
            Some("application/x-ndjson"),
            jsonl(events).as_bytes(),
            false,
        );
        let accepted = serde_json::from_str::<Value>(&body)
            .ok()
            .map(|b| b["accepted"].clone());
        if status == 202 && accepted == Some(json!(events.len())) {
            Ok(())
        } else {
            Err(format!(
                "sending {} events: expected 202 {{\"accepted\": {}}}, got {status} {body}",
                events.len(),
                events.len()
            ))
        }
    }

    /// Sends events as JSON Lines with the ingest token: the status, the body and the
    /// `Retry-After` header.
    pub fn send_events(&self, pipeline: &str, events: &[Ev]) -> (u16, String, Option<String>) {
        self.send_partition(pipeline, events, None)
    }

    /// [`send_events`](Self::send_events), naming the events' watermark partition in the
    /// `Weir-Partition` header.
    pub fn send_partition(
        &self,
        pipeline: &str,
        events: &[Ev],
        partition: Option<&str>,
    ) -> (u16, String, Option<String>) {
        let path = format!("/v1/pipelines/{pipeline}/events");
        let mut request = self
            .agent
            .post(self.url(&path))
            .header("Authorization", format!("Bearer {INGEST}"))
            .header("Content-Type", "application/x-ndjson");
        if let Some(partition) = partition {
            request = request.header("Weir-Partition", partition);
        }
        let mut response = request
            .send(jsonl(events).as_bytes())
            .unwrap_or_else(|e| panic!("POST {path}: no HTTP answer: {e}{}", self.diag()));
        let retry_after = (response.headers().get("retry-after"))
            .map(|value| value.to_str().unwrap_or("not text").to_owned());
        let body = response.body_mut().read_to_string().unwrap_or_default();
        (response.status().as_u16(), body, retry_after)
    }

    /// Sends events as JSON Lines, asserting `202 {"accepted": n}`.
    pub fn ingest(&self, pipeline: &str, events: &[Ev]) {
        if let Err(e) = self.try_ingest(pipeline, events) {
            panic!("{e}{}", self.diag());
        }
    }

    /// Polls `check` every 50 ms until it gives `Ok`, for up to `timeout`; `Err` describes what
    /// it saw instead, for the failure message.
    pub fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut() -> Result<T, String>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            match check() {
                Ok(value) => return value,
                Err(seen) if Instant::now() >= deadline => {
                    panic!(
                        "timed out after {timeout:?} waiting for {what}; last seen: {seen}{}",
                        self.diag()
                    )
                }
                Err(_) => thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Polls the pipeline's status until the routing applied at a checkpoint passes `check`.
    pub fn wait_for_routing(&self, pipeline: &str, what: &str, check: impl Fn(&Value) -> bool) {
        self.wait_for(what, PATIENCE, || {
            let applied = self.status(pipeline)["applied_routing"].clone();
            if check(&applied) {
                Ok(())
            } else {
                Err(applied.to_string())
            }
        });
    }

    /// Polls the pipeline's status until its last checkpoint covers `n` events.
    pub fn wait_for_checkpoint_of(&self, pipeline: &str, n: usize) {
        self.wait_for(&format!("a checkpoint of {n} events"), PATIENCE, || {
            let status = self.status(pipeline);
            if status["last_checkpoint"]["events"] == json!(n) {
                Ok(())
            } else {
                Err(status.to_string())
            }
        });
    }

    /// Polls the pipeline's status until `events_in` is `n`, and returns that status.
    pub fn wait_for_events_in(&self, pipeline: &str, n: usize) -> Value {
        self.wait_for(&format!("events_in = {n}"), PATIENCE, || {
            let status = self.status(pipeline);
            if status["events_in"] == json!(n) {
                Ok(status)
            } else {
                Err(status.to_string())
            }
        })
    }

    /// Subscribes to a server-sent event stream; a thread collects its `data:` lines.
    pub fn subscribe(&self, path: &str, token: &str) -> Subscription {
        self.subscribe_after(path, token, None)
    }

    /// Like [`subscribe`](Self::subscribe), resuming after the event id `last_event_id`.
    pub fn subscribe_after(
        &self,
        path: &str,
        token: &str,
        last_event_id: Option<&str>,
    ) -> Subscription {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut request = agent
            .get(self.url(path))
            .header("Authorization", format!("Bearer {token}"))
            .header("Accept", "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        let lines = Arc::new(Mutex::new((Vec::new(), Vec::new())));
        let sink = Arc::clone(&lines);
        let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ending = Arc::clone(&ended);
        let (connected, on_connect) = mpsc::channel();
        thread::spawn(move || {
            let response = match request.call() {
                Ok(response) => response,
                Err(e) => {
                    let _ = connected.send(Err(e.to_string()));
                    return;
                }
            };
            let content_type = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let _ = connected.send(Ok((response.status().as_u16(), content_type)));
            let mut reader = BufReader::new(response.into_body().into_reader());
            let mut line = Vec::new();
            let mut last_id: Option<String> = None;
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => {
                        // The server ended the stream, or went away.
                        ending.store(true, std::sync::atomic::Ordering::Release);
                        break;
                    }
                    Ok(_) => {}
                }
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end_matches(['\r', '\n']);
                if let Some(id) = text.strip_prefix("id:") {
                    last_id = Some(id.strip_prefix(' ').unwrap_or(id).to_owned());
                }
                if let Some(data) = text.strip_prefix("data:") {
                    let data = data.strip_prefix(' ').unwrap_or(data);
                    let mut sink = sink.lock().expect("SSE lines");
                    sink.0.push(data.to_owned());
                    sink.1.push(last_id.take());
                }
            }
        });
        // The answer's headers say the subscription is in place. A server may hold them back
        // until the first event, though: then go on after a while, and judge by the lines.
        match on_connect.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok((status, content_type))) => {
                assert_eq!(
                    status,
                    200,
                    "GET {path} (SSE) answered {status}{}",
                    self.diag()
                );
                assert!(
                    content_type.starts_with("text/event-stream"),
                    "GET {path} (SSE): content type {content_type:?}, expected text/event-stream"
                );
            }
            Ok(Err(e)) => panic!("GET {path} (SSE): {e}{}", self.diag()),
            Err(_) => eprintln!("GET {path} (SSE): no headers after 10 s, going on"),
        }
        Subscription { lines, ended }
    }
}

/// The `data:` lines of a server-sent event stream, as they arrive, with their ids.
pub struct Subscription {
    lines: Arc<Mutex<Received>>,
    ended: Arc<std::sync::atomic::AtomicBool>,
}

/// The `data:` payloads of a stream and the `id:` of each.
type Received = (Vec<String>, Vec<Option<String>>);

impl Subscription {
    /// Whether the stream has ended (the server closed it).
    pub fn ended(&self) -> bool {
        self.ended.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The `data:` payloads received so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("SSE lines").0.clone()
    }

    /// The events received so far: each one's `id:` (if it had one) and `data:`.
    pub fn events(&self) -> Vec<(Option<String>, String)> {
        let lines = self.lines.lock().expect("SSE lines");
        lines
            .1
            .iter()
            .cloned()
            .zip(lines.0.iter().cloned())
            .collect()
    }
}

/// A `weir serve` process on a free port of 127.0.0.1, with the tokens [`ADMIN`] (env
/// `WEIR_ADMIN_TOKEN`) and [`INGEST`] (env `WEIR_INGEST_TOKEN`). Killed (SIGKILL) when dropped.
/// Dereferences to its [`Client`].
pub struct Server {
    child: Child,
    killed: bool,
    data: PathBuf,
    client: Client,
}

impl Server {
    /// Starts `weir serve --data <data_dir> --listen 127.0.0.1:0` and waits (up to 30 s) until
    /// it prints `listening on http://127.0.0.1:<port>` on stderr.
    pub fn start(data_dir: &Path) -> Server {
        Self::start_with(data_dir, &[])
    }

    /// Like [`start`](Self::start), with extra arguments (`--max-upload 1000`).
    pub fn start_with(data_dir: &Path, args: &[&str]) -> Server {
        Self::start_env(data_dir, args, &[])
    }

    /// Like [`start_with`](Self::start_with), with extra environment variables.
    pub fn start_env(data_dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("serve")
            .arg("--data")
            .arg(data_dir)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env("WEIR_ADMIN_TOKEN", ADMIN)
            .env("WEIR_INGEST_TOKEN", INGEST)
            .env("NO_COLOR", "1")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting `weir serve`");

        // Drain stderr for the whole life of the process into a shared log, and hand each line
        // to this thread until the server says where it listens.
        let stderr = Arc::new(Mutex::new(String::new()));
        let (lines, new_lines) = mpsc::channel::<String>();
        let mut pipe = BufReader::new(child.stderr.take().expect("piped stderr"));
        let log = Arc::clone(&stderr);
        thread::spawn(move || {
            let mut raw = Vec::new();
            loop {
                raw.clear();
                match pipe.read_until(b'\n', &mut raw) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let line = String::from_utf8_lossy(&raw).into_owned();
                log.lock().expect("stderr log").push_str(&line);
                let _ = lines.send(line);
            }
        });

        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        let mut server = Server {
            child,
            killed: false,
            data: data_dir.to_owned(),
            client: Client {
                agent,
                base: String::new(),
                stderr,
            },
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let address = loop {
            match new_lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => {
                    if let Some(address) = listening_address(&line) {
                        break address;
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!(
                    "`weir serve` printed no `listening on http://...` within 30 s{}",
                    server.diag()
                ),
                Err(RecvTimeoutError::Disconnected) => {
                    let exit = server.child.wait();
                    server.killed = true;
                    panic!(
                        "`weir serve` exited ({exit:?}) before listening{}",
                        server.diag()
                    )
                }
            }
        };
        server.client.base = format!("http://{address}");
        server
    }

    /// A client for this server, to use from another thread.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Kills the server with SIGKILL (no chance to clean up) and waits for it.
    pub fn kill(&mut self) {
        if !self.killed {
            let _ = self.child.kill();
            let _ = self.child.wait();
            self.killed = true;
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The data directory.
    pub fn data(&self) -> &Path {
        &self.data
    }

    /// Sends a signal (`"TERM"`, `"INT"`) to the server.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("running kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Waits up to `timeout` for the server to exit; its exit status if it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("waiting for weir serve") {
                self.killed = true;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// A file of the pipeline's output directory (`<data>/pipelines/<name>/out/<file>`), one
    /// JSON value per complete line (a line still being written is left out).
    pub fn output(&self, pipeline: &str, file: &str) -> Vec<Value> {
        let path = self
            .data
            .join("pipelines")
            .join(pipeline)
            .join("out")
            .join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        complete
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| {
                serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("{}: bad JSON line {line:?}: {e}", path.display()))
            })
            .collect()
    }

    /// Waits until the pipeline's `dead-letters.jsonl` holds at least `n` dead letters, then
    /// returns them all.
    pub fn wait_for_dead_letters(&self, pipeline: &str, n: usize) -> Vec<Value> {
        self.wait_for(&format!("{n} dead letters"), PATIENCE, || {
            let dead = self.output(pipeline, "dead-letters.jsonl");
            match dead.len() >= n {
                true => Ok(dead),
                false => Err(format!("{} so far: {dead:?}", dead.len())),
            }
        })
    }

    /// The pipeline's `results.jsonl`.
    pub fn results(&self, pipeline: &str) -> Vec<Value> {
        self.output(pipeline, "results.jsonl")
    }

    /// Waits until `results.jsonl` holds at least as many records as `expected` has emissions
    /// (and for a moment more, so that records that should not be there get the chance to
    /// show), then returns them.
    pub fn wait_for_results(&self, pipeline: &str, expected: &[Emission]) -> Vec<Value> {
        self.wait_for(
            &format!("{} result records", expected.len()),
            PATIENCE,
            || {
                let n = self.results(pipeline).len();
                if n >= expected.len() {
                    Ok(())
                } else {
                    Err(format!("{n} records"))
                }
            },
        );
        thread::sleep(Duration::from_millis(300));
        self.results(pipeline)
    }
}

impl Deref for Server {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `host:port` from a line containing `listening on http://host:port` (or `https://`, whatever
/// surrounds it).
pub fn listening_address(line: &str) -> Option<String> {
    let (at, mark) = ["listening on http://", "listening on https://"]
        .into_iter()
        .find_map(|mark| Some((line.find(mark)?, mark)))?;
    let rest = &line[at + mark.len()..];
    let colon = rest.find(':')?;
    let port: String = rest[colon + 1..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    (!port.is_empty()).then(|| format!("{}:{port}", &rest[..colon]))
}

// ---------------------------------------------------------------------------------------------
// Components, specs and events.
// ---------------------------------------------------------------------------------------------

/// count-sum v1: output `count` and `sum`.
pub fn count_sum_v1() -> PathBuf {
    component("tumbling-count-sum")
}

/// count-sum v2: output `count`, `sum` and `avg`, same state as v1.
pub fn count_sum_v2() -> PathBuf {
    component("count-sum-v2")
}

/// count-sum that traps for keys starting with `boom`.
pub fn trap_on_key() -> PathBuf {
    crate::support::guest("trap-on-key")
}

/// The test pipeline: count-sum 1.0.0 per `user` over tumbling 1 s windows of `ts`, watermark
/// bound 0, no allowed lateness, events from HTTP, a checkpoint every 50 ms.
pub fn spec() -> Value {
    json!({
        "name": PIPELINE,
        "source": {"type": "http"},
        "event": {"key": "user", "timestamp": "ts"},
        "watermark": {"bound": 0},
        "window": {"type": "tumbling", "size": 1000},
        "operators": [{"name": "count-sum", "version": "1.0.0", "kind": "aggregate"}],
        "checkpoint_interval": "50ms"
    })
}

/// Creates the test pipeline (`201`) and starts it (`200`, running).
pub fn create_and_start(server: &Server) {
    let created = server.expect(
        "creating the pipeline",
        server.post_json("/v1/pipelines", Some(ADMIN), &spec()),
        201,
    );
    assert_eq!(
        created["name"], PIPELINE,
        "the status of a new pipeline: {created}"
    );
    let started = server.expect(
        "starting the pipeline",
        server.post(&format!("/v1/pipelines/{PIPELINE}/start"), Some(ADMIN), b""),
        200,
    );
    assert_eq!(
        started["state"], "running",
        "the status of a started pipeline: {started}"
    );
}

pub fn ev(key: &str, ts: i64, amount: i64) -> Ev {
    Ev {
        key: key.to_owned(),
        ts,
        amount,
    }
}

pub fn event_json(e: &Ev) -> Value {
    json!({"user": e.key, "ts": e.ts, "amount": e.amount})
}

/// Events as JSON Lines, in the spec's fields (`user`, `ts`, `amount`).
pub fn jsonl(events: &[Ev]) -> String {
    events
        .iter()
        .map(|e| format!("{}\n", event_json(e)))
        .collect()
}

/// Events as one JSON array.
pub fn json_array(events: &[Ev]) -> String {
    Value::Array(events.iter().map(event_json).collect()).to_string()
}

/// `n` clicks of `keys` users, 37 ms apart, every ninth up to 60 ms behind (some of them late).
pub fn clicks(n: usize, keys: usize) -> Vec<Ev> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..n)
        .map(|i| {
            let behind = if i % 9 == 0 { (next() % 60) as i64 } else { 0 };
            let key = format!("user-{}", next() % keys as u64);
            ev(
                &key,
                BASE_TS + i as i64 * 37 - behind,
                (next() % 100) as i64,
            )
        })
        .collect()
}

/// An event far after `events`: the watermark passes every window they touched, so all of them
/// fire. Its own window never does, since a live pipeline never reaches the end of its input.
pub fn far_future(events: &[Ev]) -> Ev {
    let last = events.iter().map(|e| e.ts).max().unwrap_or(BASE_TS);
    ev("zz-final", last + 1_000_000, 1)
}

/// The reference model's emissions over `events`, in order, without those that only the end of
/// the input would fire: a live pipeline's watermark stops at the last event's.
pub fn live_model(events: &[Ev]) -> Vec<Emission> {
    let watermark = events.iter().map(|e| e.ts).max().expect("events") - MODEL.bound;
    run_model(&MODEL, events)
        .emissions
        .into_iter()
        .filter(|e| e.end <= watermark)
        .collect()
}

/// Asserts that results are exactly the model's emissions, in order, naming the first
/// difference.
pub fn assert_same_emissions(server: &Server, results: &[Value], expected: &[Emission]) {
    let got = emissions(results);
    if got == expected {
        return;
    }
    let first = got
        .iter()
        .zip(expected)
        .position(|(g, e)| g != e)
        .unwrap_or(got.len().min(expected.len()));
    panic!(
        "results.jsonl differs from the reference model: {} records, {} expected; first difference \
         at {first}: got {:?}, expected {:?}{}",
        got.len(),
        expected.len(),
        got.get(first),
        expected.get(first),
        server.diag()
    );
}

/// Asserts that no two records share an `id`.
pub fn assert_unique_ids(results: &[Value]) {
    let mut seen = HashSet::new();
    for record in results {
        let id = record["id"]
            .as_str()
            .unwrap_or_else(|| panic!("a record without an id: {record}"));
        assert!(seen.insert(id), "two records with the id {id:?}");
    }
}

/// The entry of `status["versions"]` for `version`.
pub fn version_entry(status: &Value, version: &str) -> Value {
    status["versions"]
        .as_array()
        .and_then(|versions| versions.iter().find(|v| v["version"] == version))
        .cloned()
        .unwrap_or(Value::Null)
}

pub fn events_path(pipeline: &str) -> String {
    format!("/v1/pipelines/{pipeline}/events")
}

/// Creates the pipeline `spec` names, as the admin, and starts it.
pub fn create_and_start_spec(server: &Server, spec: &Value) {
    let name = spec["name"].as_str().expect("a name").to_owned();
    server.expect(
        &format!("creating {name}"),
        server.post_json("/v1/pipelines", Some(ADMIN), spec),
        201,
    );
    server.expect(
        &format!("starting {name}"),
        server.post(&format!("/v1/pipelines/{name}/start"), Some(ADMIN), b""),
        200,
    );
}

/// Sends chunks from a thread, stopping before each of its gates (chunk indices) until the
/// test opens it: each step of a rollout then sees traffic before and after it, however fast
/// or slow the machine. (Sleeps between the steps did not: the sender could finish before the
/// last step, or the steps before the first chunks.)
pub struct GatedSender {
    gates: Vec<usize>,
    sent: Arc<AtomicUsize>,
    opened: Arc<AtomicUsize>,
    thread: thread::JoinHandle<()>,
}

impl GatedSender {
    pub fn start<T: Send + 'static>(
        chunks: Vec<T>,
        gates: &[usize],
        send: impl Fn(&T) + Send + 'static,
    ) -> GatedSender {
        let (sent, opened) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let thread = {
            let (sent, opened, gates) = (Arc::clone(&sent), Arc::clone(&opened), gates.to_vec());
            thread::spawn(move || {
                for (i, chunk) in chunks.iter().enumerate() {
                    let needed = gates.iter().filter(|&&gate| gate <= i).count();
                    // The test may take several waits of its own before it opens a gate.
                    let deadline = Instant::now() + 4 * PATIENCE;
                    while opened.load(Ordering::SeqCst) < needed {
                        assert!(Instant::now() < deadline, "gate {needed} never opened");
                        thread::sleep(Duration::from_millis(5));
                    }
                    send(chunk);
                    sent.fetch_add(1, Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(15));
                }
            })
        };
        GatedSender {
            gates: gates.to_vec(),
            sent,
            opened,
            thread,
        }
    }

    /// Waits until the sender stands at its gate `n` (counted from 0), every chunk before it
    /// sent.
    pub fn wait_at_gate(&self, server: &Server, n: usize) {
        let gate = self.gates[n];
        server.wait_for(
            &format!("the sender at chunk {gate}"),
            PATIENCE,
            || match self.sent.load(Ordering::SeqCst) {
                sent if sent >= gate => Ok(()),
                // A sender that died (a refused chunk) says why when it is joined.
                _ if self.thread.is_finished() => panic!("the sender stopped before chunk {gate}"),
                sent => Err(format!("{sent} chunks sent")),
            },
        );
    }

    /// Lets the sender through its next gate.
    pub fn open(&self) {
        self.opened.fetch_add(1, Ordering::SeqCst);
    }

    pub fn join(self) {
        self.opened.store(usize::MAX, Ordering::SeqCst);
        self.thread.join().unwrap();
    }
}
