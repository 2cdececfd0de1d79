//! NATS JetStream as source and sink (issue 14), against a real `nats-server -js` on loopback:
//! `weir run` reads a stream (a watermark partition per subject) and publishes its results with
//! their ids as `Nats-Msg-Id`; SIGKILLed mid-stream and restarted, it resumes from the
//! checkpointed stream sequence, and the results stream holds every window's result exactly
//! once (the re-published ones dropped by JetStream's de-duplication); a NATS server that stops
//! and comes back is waited for, with nothing lost or repeated; results whose acknowledgements
//! a cut network drops are published again after one acknowledgement timeout, not one per
//! result; SIGTERM stops a run after a final checkpoint and the next goes on from there; a
//! quiet subject stops holding the watermark back after `idle_timeout` by the server's
//! publication clock. Bad NATS specs are refused before anything connects, and a served
//! pipeline may not name a NATS sink.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use serde_json::Value;
use tokio_stream::StreamExt;

/// A `nats-server -js` on a free loopback port, with its store in a temporary directory.
pub(crate) struct NatsServer {
    child: Child,
    pub(crate) url: String,
    _store: tempfile::TempDir,
    /// Options beyond JetStream, the address and the store.
    extra: Vec<String>,
}

impl NatsServer {
    pub(crate) fn start() -> NatsServer {
        NatsServer::start_with(&[])
    }

    /// A server started with `extra` options as well (e.g. a user and password).
    pub(crate) fn start_with(extra: &[&str]) -> NatsServer {
        let store = tempfile::tempdir().unwrap();
        let extra: Vec<String> = extra.iter().map(|option| option.to_string()).collect();
        // The free port is found by binding and releasing it, so another test may take it
        // before the server binds it; the server then exits and another port is tried.
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            if let Some(child) = Self::spawn(port, store.path(), &extra) {
                return NatsServer {
                    child,
                    url: format!("nats://127.0.0.1:{port}"),
                    _store: store,
                    extra,
                };
            }
        }
        panic!("nats-server did not start on any of five free ports");
    }

    /// Starts the server on `port` and waits until it greets a client as a NATS server does
    /// (an accepted connection alone may be another test's listener); `None` when it exited.
    fn spawn(port: u16, store: &std::path::Path, extra: &[String]) -> Option<Child> {
        // Debian puts it in /usr/sbin, which a user's PATH may leave out.
        let program = ["/usr/sbin/nats-server", "/usr/local/bin/nats-server"]
            .into_iter()
            .find(|path| std::path::Path::new(path).exists())
            .unwrap_or("nats-server");
        let mut child = Command::new(program)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(store)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server is installed (make setup installs it)");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if child.try_wait().unwrap().is_some() {
                return None;
            }
            if greets_as_nats(port) {
                return Some(child);
            }
            assert!(Instant::now() < deadline, "nats-server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server gracefully (its streams are kept on disk), waits `away`, and starts it
    /// again on the same port and store.
    pub(crate) fn restart(&mut self, away: Duration) {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        self.child.wait().unwrap();
        std::thread::sleep(away);
        let port: u16 = self.url.rsplit(':').next().unwrap().parse().unwrap();
        self.child = Self::spawn(port, self._store.path(), &self.extra)
            .expect("nats-server starts again on its port");
    }
}

/// Whether what listens on `port` sends a NATS server's `INFO` greeting.
fn greets_as_nats(port: u16) -> bool {
    use std::io::Read;
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut greeting = [0u8; 5];
    stream.read_exact(&mut greeting).is_ok() && &greeting == b"INFO "
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP relay on loopback in front of a NATS server, which the test can cut: while cut, the
/// bytes sent either way are read and thrown away, as a network that drops packets does, and
/// mending it closes the connections it spoiled, so their clients connect again.
pub(crate) struct Relay {
    pub(crate) url: String,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    connections: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Relay {
    pub(crate) fn to(server: &NatsServer) -> Relay {
        let upstream = server.url.trim_start_matches("nats://").to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("nats://{}", listener.local_addr().unwrap());
        let relay = Relay {
            url,
            cut: Default::default(),
            connections: Default::default(),
        };
        let (cut, connections) = (relay.cut.clone(), relay.connections.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let (Ok(client), Ok(server)) = (client, std::net::TcpStream::connect(&upstream))
                else {
                    continue;
                };
                let mut held = connections.lock().unwrap();
                held.push(client.try_clone().unwrap());
                held.push(server.try_clone().unwrap());
                for (from, to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let cut = cut.clone();
                    std::thread::spawn(move || relay_bytes(from, to, &cut));
                }
            }
        });
        relay
    }

    /// From now on, nothing gets through.
    pub(crate) fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Closes every connection made so far and lets new ones through.
    pub(crate) fn mend(&self) {
        // Under the lock no connection is added, so none is let through half spoiled.
        let mut connections = self.connections.lock().unwrap();
        for connection in connections.drain(..) {
            let _ = connection.shutdown(std::net::Shutdown::Both);
        }
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

fn relay_bytes(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    cut: &std::sync::atomic::AtomicBool,
) {
    use std::io::{Read, Write};
    let mut buffer = [0u8; 16 * 1024];
    while let Ok(n @ 1..) = from.read(&mut buffer) {
        if !cut.load(std::sync::atomic::Ordering::SeqCst) && to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}

/// A JetStream client for the test's own publishing and reading.
pub(crate) struct Client {
    pub(crate) runtime: tokio::runtime::Runtime,
    pub(crate) jetstream: jetstream::Context,
}

impl Client {
    pub(crate) fn connect(url: &str) -> Client {
        Self::connect_with(url, async_nats::ConnectOptions::new())
    }

    /// Connects with `options` (credentials, a certificate authority).
    pub(crate) fn connect_with(url: &str, options: async_nats::ConnectOptions) -> Client {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        // A server busy starting (the whole suite starts at once) may miss the client's first
        // connection timeout: try again for half a minute.
        let deadline = Instant::now() + Duration::from_secs(30);
        let client = loop {
            match runtime.block_on(options.clone().connect(url)) {
                Ok(client) => break client,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("connecting to {url} again after: {e}");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("cannot connect to {url}: {e}"),
            }
        };
        let _inside = runtime.enter();
        Client {
            runtime,
            jetstream: jetstream::new(client),
        }
    }

    pub(crate) fn stream(&self, name: &str, subjects: &[&str]) {
        let config = jetstream::stream::Config {
            name: name.into(),
            subjects: subjects.iter().map(|s| s.to_string()).collect(),
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        };
        self.runtime
            .block_on(self.jetstream.create_stream(config))
            .unwrap();
    }

    pub(crate) fn publish(&self, subject: &str, events: &[Value]) {
        self.runtime.block_on(async {
            for event in events {
                let ack = self
                    .jetstream
                    .publish(subject.to_owned(), event.to_string().into())
                    .await
                    .unwrap();
                ack.await.unwrap();
            }
        });
    }

    /// Every message of `stream`: its subject and payload.
    pub(crate) fn read_all_subjects(&self, stream: &str) -> Vec<(String, Value)> {
        self.read_messages(stream, |message| message.subject.to_string())
    }

    /// Every message of `stream`: its `Nats-Msg-Id` and payload.
    pub(crate) fn read_all(&self, stream: &str) -> Vec<(String, Value)> {
        self.read_messages(stream, |message| {
            (message.headers.as_ref())
                .and_then(|h| h.get("Nats-Msg-Id"))
                .map(|v| v.to_string())
                .unwrap_or_default()
        })
    }

    /// Every message of `stream`: what `label` says of it, and its payload.
    fn read_messages(
        &self,
        stream: &str,
        label: impl Fn(&async_nats::jetstream::Message) -> String,
    ) -> Vec<(String, Value)> {
        self.runtime.block_on(async {
            let mut stream = self.jetstream.get_stream(stream).await.unwrap();
            // Every message the stream holds now, however slowly a loaded machine delivers
            // them (a short gap alone ended the read, and results there seemed missing).
            let held = stream.info().await.unwrap().state.messages as usize;
            let consumer = stream
                .create_consumer(jetstream::consumer::pull::OrderedConfig::default())
                .await
                .unwrap();
            let mut messages = consumer.messages().await.unwrap();
            let mut out = Vec::new();
            let wait = |out: &Vec<(String, Value)>| match out.len() < held {
                true => Duration::from_secs(10),
                false => Duration::from_millis(500),
            };
            while let Ok(Some(Ok(message))) =
                tokio::time::timeout(wait(&out), messages.next()).await
            {
                out.push((
                    label(&message),
                    serde_json::from_slice(&message.payload).unwrap(),
                ));
            }
            out
        })
    }
}

pub(crate) const BASE: i64 = 1_772_442_000_000;

/// In-order clicks of 20 users, `n` of them from index `from`, 7 ms apart.
pub(crate) fn clicks(from: usize, n: usize) -> Vec<Value> {
    (from..from + n)
        .map(|i| serde_json::json!({"user": format!("u{}", i % 20), "ts": BASE + i as i64 * 7, "amount": i % 10}))
        .collect()
}

/// The count and sum of every 1 s window of every user in `events`, by `(user, start)`.
pub(crate) fn windows(events: &[Value]) -> BTreeMap<(String, i64), (i64, i64)> {
    let mut out = BTreeMap::new();
    for e in events {
        let start = e["ts"].as_i64().unwrap().div_euclid(1000) * 1000;
        let entry = out
            .entry((e["user"].as_str().unwrap().to_owned(), start))
            .or_insert((0, 0));
        entry.0 += 1;
        entry.1 += e["amount"].as_i64().unwrap();
    }
    out
}

fn spec(dir: &std::path::Path, url: &str) -> std::path::PathBuf {
    let module = crate::server::count_sum_v1();
    let text = format!(
        r#"name = "from-nats"
checkpoint_interval = "100ms"
shards = 2
[source]
type = "nats"
url = "{url}"
stream = "CLICKS"
[event]
key = "user"
timestamp = "ts"
[window]
type = "tumbling"
size = "1s"
[[operators]]
name = "count-sum"
version = "1.0.0"
kind = "aggregate"
module = {module:?}
[state]
dir = "data"
[sinks]
results = {{ nats = "{url}", subject = "results" }}
late = "late.jsonl"
dead_letters = "dead.jsonl"
"#
    );
    let path = dir.join("pipeline.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn run(spec: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("run")
        .arg(spec)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

pub(crate) fn wait_for_results(client: &Client, n: usize) -> Vec<(String, Value)> {
    wait_for_stream(client, "RESULTS", n)
}

/// Waits (up to two minutes) for `n` messages on `stream`: every message it then holds, by
/// `Nats-Msg-Id`.
pub(crate) fn wait_for_stream(client: &Client, stream: &str, n: usize) -> Vec<(String, Value)> {
    // Long enough for a loaded machine: a server's outage costs the cluster a lease or two.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let results = client.read_all(stream);
        if results.len() >= n || Instant::now() > deadline {
            return results;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// A NATS server with the events (`CLICKS`, subjects `clicks.>`) and results (`RESULTS`)
/// streams, a client, and the test pipeline's spec in a temporary directory.
fn setup() -> (NatsServer, Client, tempfile::TempDir, std::path::PathBuf) {
    let server = NatsServer::start();
    let client = Client::connect(&server.url);
    client.stream("CLICKS", &["clicks.>"]);
    client.stream("RESULTS", &["results"]);
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path(), &server.url);
    (server, client, dir, spec)
}

/// Kills `weir run` and returns what it printed to stderr.
fn stop(mut weir: Child) -> String {
    weir.kill().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut weir.stderr.take().unwrap(), &mut stderr).unwrap();
    weir.wait().unwrap();
    stderr
}

#[test]
fn a_nats_stream_in_and_out_survives_a_sigkill_with_every_result_once() {
    let (_server, client, dir, spec) = setup();

    // Two subjects, two watermark partitions; the first half of each, then a SIGKILL.
    let (eu, us) = (clicks(0, 1_500), clicks(100_000, 1_500));
    client.publish("clicks.eu", &eu[..700]);
    client.publish("clicks.us", &us[..700]);
    let mut weir = run(&spec);
    let first = wait_for_results(&client, 1);
    assert!(!first.is_empty(), "results before the kill");
    std::thread::sleep(Duration::from_millis(400));
    weir.kill().unwrap();
    weir.wait().unwrap();

    // The rest arrives while it is down; the restart resumes from its checkpoint.
    client.publish("clicks.eu", &eu[700..]);
    client.publish("clicks.us", &us[700..]);
    let far = |subject_base: i64| {
        vec![serde_json::json!({"user": "zz", "ts": subject_base + 10_000_000, "amount": 0})]
    };
    client.publish("clicks.eu", &far(BASE));
    client.publish("clicks.us", &far(BASE + 700_000));
    let weir = run(&spec);
    let all: Vec<Value> = eu.iter().chain(&us).cloned().collect();
    let results = wait_for_results(&client, windows(&all).len());
    let stderr = stop(weir);

    assert!(
        results.iter().all(|(id, record)| record["id"] == *id),
        "Nats-Msg-Id is the result id"
    );
    assert_exactly_once(&results, &all, &stderr);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("dead.jsonl")).unwrap_or_default(),
        ""
    );
}

/// Checks that `results` hold every window of `events` exactly once.
pub(crate) fn assert_exactly_once(results: &[(String, Value)], events: &[Value], context: &str) {
    let ids: std::collections::BTreeSet<&str> = results.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids.len(), results.len(), "result ids are unique");
    let got: BTreeMap<(String, i64), (i64, i64)> = results
        .iter()
        .map(|(_, r)| {
            let key = (
                r["key"].as_str().unwrap().to_owned(),
                r["window_start"].as_i64().unwrap(),
            );
            (
                key,
                (
                    r["value"]["count"].as_i64().unwrap(),
                    r["value"]["sum"].as_i64().unwrap(),
                ),
            )
        })
        .collect();
    let want = windows(events);
    let wrong: Vec<_> = (want.keys().chain(got.keys()))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|key| got.get(*key) != want.get(*key))
        .map(|key| (key, got.get(key), want.get(key)))
        .take(20)
        .collect();
    if !wrong.is_empty() {
        // The context (workers' logs) first: a long output is shown by its end.
        eprintln!("{context}");
    }
    assert!(
        wrong.is_empty(),
        "every window's result, exactly once, among {} results: (window, got, want) {wrong:?}",
        results.len()
    );
}

#[test]
fn a_nats_server_that_stops_and_comes_back_is_waited_for_with_nothing_lost() {
    let (mut server, client, _dir, spec) = setup();
    let events = clicks(0, 2_000);
    client.publish("clicks.all", &events[..1_000]);
    let mut weir = run(&spec);
    assert!(!wait_for_results(&client, 1).is_empty());
    drop(client);
    // Away for 3 s while weir runs; it keeps waiting, and goes on when the server is back.
    server.restart(Duration::from_secs(3));
    let client = Client::connect(&server.url);
    client.publish("clicks.all", &events[1_000..]);
    client.publish(
        "clicks.all",
        &[serde_json::json!({"user": "zz", "ts": BASE + 10_000_000, "amount": 0})],
    );
    let expected = windows(&events).len();
    let results = wait_for_results(&client, expected);
    let still_running = weir.try_wait().unwrap().is_none();
    let stderr = stop(weir);
    assert!(still_running, "weir run waited for the server: {stderr}");
    assert_exactly_once(&results, &events, &stderr);
}

#[test]
fn acknowledgements_lost_in_the_network_cost_one_timeout_not_one_per_result() {
    let (server, client, dir, spec) = setup();
    // The results go through a relay; the input comes straight from the server.
    let relay = Relay::to(&server);
    let text = std::fs::read_to_string(&spec).unwrap();
    let sink = format!("results = {{ nats = \"{}\"", server.url);
    assert!(text.contains(&sink));
    let relayed = format!("results = {{ nats = \"{}\"", relay.url);
    std::fs::write(&spec, text.replace(&sink, &relayed)).unwrap();
    std::fs::create_dir_all(dir.path()).unwrap();
    let events = clicks(0, 3_000);
    client.publish("clicks.all", &events[..500]);
    let weir = run(&spec);
    assert!(!wait_for_results(&client, 1).is_empty());
    // The other windows close while nothing gets through: their results go into the void
    // until the next checkpoint's flush waits for acknowledgements, and none comes back.
    relay.cut();
    client.publish("clicks.all", &events[500..]);
    client.publish(
        "clicks.all",
        &[serde_json::json!({"user": "zz", "ts": BASE + 10_000_000, "amount": 0})],
    );
    std::thread::sleep(Duration::from_secs(3));
    let expected = windows(&events).len();
    relay.mend();
    let mended = Instant::now();
    let results = wait_for_results(&client, expected);
    let waited = mended.elapsed();
    let stderr = stop(weir);
    assert_exactly_once(&results, &events, &stderr);
    // Enough went into the cut for waiting 5 s for each in turn to take longer than the bound.
    let lost = (stderr.lines())
        .filter(|line| line.contains("publishing them again"))
        .filter_map(|line| {
            line.split("records=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .max()
        .unwrap_or(0);
    assert!(lost >= 10, "{lost} results went into the cut: {stderr}");
    // One acknowledgement timeout (5 s), then the unacknowledged records go out again: about
    // 7-10 s. A timeout per result (the failure this guards against) would take 5 s for each
    // of the `lost`, past the bound (at least 45 s, room for a loaded machine).
    let bound = (Duration::from_secs(5) * (lost as u32 - 1)).min(Duration::from_secs(90));
    assert!(
        waited < bound,
        "results came {waited:?} after the network was mended ({lost} lost; bound {bound:?})"
    );
}

#[test]
fn sigterm_stops_an_endless_nats_run_after_a_final_checkpoint_and_it_goes_on_from_there() {
    let (_server, client, _dir, spec) = setup();
    let events = clicks(0, 1_000);
    client.publish("clicks.all", &events[..600]);
    let mut weir = run(&spec);
    assert!(!wait_for_results(&client, 1).is_empty());
    let pid = weir.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = weir.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "weir run did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut weir.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "a clean stop: {status} {stderr}");
    assert!(
        stderr.contains("stopping after a final checkpoint"),
        "{stderr}"
    );
    // The final checkpoint holds all 600 events read: the next run starts after them.
    client.publish("clicks.all", &events[600..]);
    client.publish(
        "clicks.all",
        &[serde_json::json!({"user": "zz", "ts": BASE + 10_000_000, "amount": 0})],
    );
    let mut weir = run(&spec);
    let results = wait_for_results(&client, windows(&events).len());
    weir.kill().unwrap();
    weir.wait().unwrap();
    assert_exactly_once(&results, &events, "after a SIGTERM and a restart");
}

#[test]
fn a_stream_deleted_and_made_again_under_a_checkpoint_is_refused_not_skipped() {
    let (_server, client, _dir, spec) = setup();
    let events = clicks(0, 300);
    client.publish("clicks.all", &events);
    let weir = run(&spec);
    assert!(!wait_for_results(&client, 1).is_empty());
    // Let a checkpoint cover all 300 events, then stop it.
    std::thread::sleep(Duration::from_millis(1500));
    stop(weir);
    // Made again with 100 new events: reading on from sequence 301 would skip all of them.
    client
        .runtime
        .block_on(client.jetstream.delete_stream("CLICKS"))
        .unwrap();
    client.stream("CLICKS", &["clicks.>"]);
    client.publish("clicks.all", &clicks(300, 100));
    let mut weir = run(&spec);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = weir.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "weir run went on past a remade stream"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut weir.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success());
    assert!(
        stderr.contains("deleted and made again") && stderr.contains("start the pipeline afresh"),
        "{stderr}"
    );
}

#[test]
fn a_quiet_subject_stops_holding_the_watermark_back_by_the_servers_clock() {
    let (_server, client, _dir, path) = setup();
    let text = std::fs::read_to_string(&path).unwrap();
    let idle = text.replacen("[event]", "[watermark]\nidle_timeout = \"1s\"\n[event]", 1);
    std::fs::write(&path, idle).unwrap();
    // The quiet subject's events end at 2 s; the busy one's go on to 30 s, published 1.5 s
    // later by the server's clock: the quiet one is idle by then, so the windows up to the busy
    // subject's watermark close (without idleness they would wait for the quiet subject).
    let quiet: Vec<Value> = clicks(0, 200)
        .into_iter()
        .filter(|e| e["ts"].as_i64().unwrap() < BASE + 2_000)
        .collect();
    client.publish("clicks.quiet", &quiet);
    let early: Vec<Value> = clicks(0, 280);
    client.publish("clicks.busy", &early);
    let mut weir = run(&path);
    std::thread::sleep(Duration::from_millis(1_500));
    let late: Vec<Value> = clicks(280, 4_000);
    client.publish("clicks.busy", &late);
    let closed = |results: &[(String, Value)]| {
        results
            .iter()
            .map(|(_, r)| r["window_end"].as_i64().unwrap())
            .max()
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let results = loop {
        let results = client.read_all("RESULTS");
        if closed(&results) >= BASE + 20_000 || Instant::now() > deadline {
            break results;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    weir.kill().unwrap();
    weir.wait().unwrap();
    assert!(
        closed(&results) >= BASE + 20_000,
        "windows past the quiet subject's last event closed: last closed window ends at {}",
        closed(&results) - BASE
    );
}

/// A NATS server that cannot be reached is named for what is wrong, after the first
/// connection's wait, not taken for a stream or bucket to create: an address where none
/// answers (`weir run`'s source and `weir worker`), a server that refuses the client (it wants
/// a password); and a server that answers without the stream is told apart from both.
#[test]
fn nats_servers_that_cannot_be_reached_are_named_for_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let nobody = "nats://127.0.0.1:1";
    let no_server = run(&spec(dir.path(), nobody));
    let worker = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["worker", "--nats", nobody, "--pipeline", "shared", "--dir"])
        .arg(dir.path().join("worker"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let locked = NatsServer::start_with(&["--user", "weir", "--pass", "secret"]);
    let locked_dir = dir.path().join("locked");
    std::fs::create_dir(&locked_dir).unwrap();
    let refused = run(&spec(&locked_dir, &locked.url));
    let children = vec![
        ("weir run", no_server),
        ("weir worker", worker),
        ("refused", refused),
    ];
    for (what, stderr) in finished(children) {
        let named = match what {
            "refused" => {
                stderr.contains(&locked.url)
                    && stderr.contains("refused the connection")
                    && stderr.contains("authorization violation")
            }
            _ => stderr.contains(nobody) && stderr.contains("no server answered within 10 s"),
        };
        assert!(named, "{what}: {stderr}");
        assert!(!stderr.contains("create it first"), "{what}: {stderr}");
    }
    let server = NatsServer::start();
    let text = std::fs::read_to_string(spec(dir.path(), &server.url)).unwrap();
    let missing = dir.path().join("missing.toml");
    let text = text.replace("stream = \"CLICKS\"", "stream = \"MISSING\"");
    std::fs::write(&missing, text).unwrap();
    for (_, stderr) in finished(vec![("missing stream", run(&missing))]) {
        let named = stderr.contains("stream MISSING") && stderr.contains("create it first");
        assert!(named, "{stderr}");
        assert!(!stderr.contains("no server answered"), "{stderr}");
    }
}

/// What each of `children` printed to stderr, once all have failed, within 60 s (the first
/// connection's wait is 10 s; a loaded machine may take seconds to start a run).
fn finished(mut children: Vec<(&'static str, Child)>) -> Vec<(&'static str, String)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Some(at) =
        (children.iter_mut()).position(|(_, child)| child.try_wait().unwrap().is_none())
    {
        if Instant::now() > deadline {
            let what = children[at].0;
            children
                .iter_mut()
                .for_each(|(_, child)| drop(child.kill()));
            panic!("{what} waited past 60 s for a server it cannot reach");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (children.into_iter())
        .map(|(what, child)| {
            let output = child.wait_with_output().unwrap();
            assert!(!output.status.success(), "{what} succeeded");
            (what, String::from_utf8_lossy(&output.stderr).into_owned())
        })
        .collect()
}

#[test]
fn bad_nats_specs_are_refused_before_anything_connects() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(spec(dir.path(), "nats://127.0.0.1:1")).unwrap();
    for (from, to, why) in [
        (
            "url = \"nats://127.0.0.1:1\"",
            "url = \"http://127.0.0.1:1\"",
            "nats://host:port",
        ),
        ("stream = \"CLICKS\"", "stream = \"../x\"", "source.stream"),
        ("stream = \"CLICKS\"", "stream = \"A.B\"", "without dots"),
        (
            "subject = \"results\"",
            "subject = \"results.>\"",
            "without wildcards",
        ),
        (
            "subject = \"results\"",
            "subject = \"a..b\"",
            "not a NATS subject",
        ),
        (
            "subject = \"results\"",
            "subject = \"has space\"",
            "not a NATS subject",
        ),
    ] {
        assert!(good.contains(from), "{from}");
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, good.replacen(from, to, 1)).unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("run")
            .arg(&path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() && stderr.contains(why),
            "{to}: {stderr}"
        );
    }
    // A caller of the API may not make the server connect where it likes.
    let data = tempfile::tempdir().unwrap();
    let server = crate::server::Server::start(data.path());
    let mut spec = crate::server::spec();
    spec["sinks"] =
        serde_json::json!({"results": {"nats": "nats://10.0.0.1:4222", "subject": "x"}});
    let error = server.expect_error(
        "a served pipeline with a NATS sink",
        server.post_json("/v1/pipelines", Some(crate::server::ADMIN), &spec),
        400,
    );
    assert!(error.contains("not an address"), "{error}");
}
