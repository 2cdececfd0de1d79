//! Scale-out that scales (issue 40): a NATS stream cut into partitions by key (the server's
//! subject mapping `{{partition(6, 1)}}` on the key's token), shared by `weir worker`s that
//! each read only the partitions of their slices, so every event is read and decoded once
//! however many workers there are, with one watermark for the pipeline (each slice publishes
//! its partition's, and each takes the lowest of the others' as a floor). One worker and three
//! give the same results, ids and values, as an independent model; a SIGKILLed worker's
//! slices are taken over with nothing lost or repeated, as they are through a 2 -> 3 -> 2
//! rescale under input and a NATS server away 3 s; garbage and an event on another partition
//! than its key's are dead letters; workers on skewed clocks change nothing; a changed
//! partition count is refused.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::nats::{BASE, Client, NatsServer, assert_exactly_once, windows};

const PIPELINE: &str = "partitioned-clicks";
const PARTITIONS: usize = 6;

/// A NATS server mapping `clicks.<key>` to `part.<partition>.<key>`, with the `CLICKS`
/// (`part.>`), `RESULTS` and `DEAD` streams, and the pipeline deployed.
struct Partitioned {
    server: NatsServer,
    client: Client,
    dir: tempfile::TempDir,
    /// The aggregate's component, and what its table says besides (`global = true`).
    module: PathBuf,
    aggregate_more: &'static str,
    /// Every worker started, killed when the test ends however it ends.
    started: crate::support::Reaper,
}

fn weir(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weir"));
    command.args(args);
    command
}

/// The spec, with `more` at its end (a `[watermark]` table, say) and `aggregate_more` at the end
/// of its aggregate's table (`global = true`).
fn spec_text_of(
    url: &str,
    count: usize,
    more: &str,
    module: &Path,
    aggregate_more: &str,
) -> String {
    format!(
        r#"name = "{PIPELINE}"
checkpoint_interval = "200ms"
[source]
type = "nats"
url = "{url}"
stream = "CLICKS"
partitions = {{ count = {count}, subject = "part.{{partition}}.*" }}
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
{aggregate_more}[sinks]
results = {{ nats = "{url}", subject = "results" }}
dead_letters = {{ nats = "{url}", subject = "dead" }}
{more}
"#
    )
}

impl Partitioned {
    fn start() -> Partitioned {
        Self::start_with("")
    }

    /// The cluster, its pipeline's spec ending with `more`.
    fn start_with(more: &str) -> Partitioned {
        Self::start_with_module(more, crate::server::count_sum_v1())
    }

    /// The cluster, its pipeline's spec ending with `more` and aggregating with `module`.
    fn start_with_module(more: &str, module: PathBuf) -> Partitioned {
        Self::start_of(more, module, "")
    }

    /// The cluster, its pipeline's spec ending with `more`, aggregating with `module`, its
    /// aggregate's table ending with `aggregate_more`.
    fn start_of(more: &str, module: PathBuf, aggregate_more: &'static str) -> Partitioned {
        let dir = tempfile::tempdir().unwrap();
        let server = mapped_server(dir.path(), PARTITIONS);
        let client = Client::connect(&server.url);
        client.stream("CLICKS", &["part.>"]);
        client.stream("RESULTS", &["results"]);
        client.stream("DEAD", &["dead"]);
        let cluster = Partitioned {
            server,
            client,
            dir,
            module,
            aggregate_more,
            started: Default::default(),
        };
        let deployed = cluster.deploy_with(PARTITIONS, more);
        assert!(deployed.status.success(), "{deployed:?}");
        cluster
    }

    fn deploy(&self, count: usize) -> std::process::Output {
        self.deploy_with(count, "")
    }

    fn deploy_with(&self, count: usize, more: &str) -> std::process::Output {
        let spec = self.dir.path().join("pipeline.toml");
        let (url, module) = (&self.server.url, &self.module);
        let text = spec_text_of(url, count, more, module, self.aggregate_more);
        std::fs::write(&spec, text).unwrap();
        weir(&["cluster", "deploy", "--nats", &self.server.url])
            .arg(&spec)
            .output()
            .unwrap()
    }

    fn worker(&self, id: &str, metrics: bool) -> Child {
        let dir = self.dir.path().join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let mut command = weir(&[
            "worker",
            "--nats",
            &self.server.url,
            "--pipeline",
            PIPELINE,
            "--id",
            id,
        ]);
        command.arg("--dir").arg(&dir);
        if metrics {
            command.args(["--metrics-listen", "127.0.0.1:0"]);
            command.stderr(Stdio::piped());
        } else {
            command.stderr(std::fs::File::create(self.log(id)).unwrap());
        }
        self.started
            .track(command.stdout(Stdio::null()).spawn().unwrap())
    }

    /// Worker `id` whose wall clock is `skew` (`+1h`, `-1h`) off: libfaketime preloaded into
    /// the worker itself (its `faketime` wrapper would stand between the test and the worker's
    /// pid), its monotonic clock left alone.
    fn skewed_worker(&self, id: &str, skew: &str) -> Child {
        let library = ["/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"]
            .into_iter()
            .chain(["/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1"])
            .find(|path| Path::new(path).exists())
            .expect("libfaketime is installed (make setup installs faketime)");
        let dir = self.dir.path().join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let worker = weir(&["worker", "--nats", &self.server.url])
            .args(["--pipeline", PIPELINE, "--id", id])
            .arg("--dir")
            .arg(&dir)
            .env("LD_PRELOAD", library)
            .env("FAKETIME", skew)
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .env("RUST_LOG", "info")
            .stderr(std::fs::File::create(self.log(id)).unwrap())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        self.started.track(worker)
    }

    fn log(&self, id: &str) -> PathBuf {
        self.dir.path().join(format!("{id}.log"))
    }

    fn logs(&self, ids: &[&str]) -> String {
        (ids.iter())
            .map(|id| {
                let text = std::fs::read_to_string(self.log(id)).unwrap_or_default();
                format!("--- {id}\n{text}")
            })
            .collect()
    }

    /// `weir cluster status` of the pipeline (null if it failed).
    fn status(&self) -> Value {
        let output = weir(&["cluster", "status", "--nats", &self.server.url, PIPELINE])
            .output()
            .unwrap();
        serde_json::from_slice(&output.stdout).unwrap_or_default()
    }

    /// Waits (at most 60 s) until the status is `what`: that status.
    fn wait_for_status(&self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status = self.status();
            if done(&status) {
                return status;
            }
            assert!(Instant::now() < deadline, "never {what}: {status}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until every slice (and the stage slice, if the pipeline has one) is run by one of
    /// `ids`, as evenly as they go.
    fn wait_for_owners(&self, ids: &[&str]) {
        let started = Instant::now();
        loop {
            let status = self.status();
            let owners: BTreeMap<String, String> =
                serde_json::from_value(status["owners"].clone()).unwrap_or_default();
            let total = PARTITIONS + usize::from(!status["stage_slice"].is_null());
            let even = ids.iter().all(|id| {
                let count = owners.values().filter(|o| o == id).count();
                count == total / ids.len() || count == total.div_ceil(ids.len())
            });
            if owners.len() == total && even {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "slices never settled on {ids:?}: {status}\n{}",
                self.logs(ids)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Worker `w1`, serving its metrics, once it runs every slice: it and the address of its
    /// metrics.
    fn measured_worker(&self) -> (Child, String) {
        let mut worker = self.worker("w1", true);
        let mut stderr = std::io::BufReader::new(worker.stderr.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
        let address = (line.trim())
            .strip_prefix("weir: metrics on http://")
            .and_then(|rest| rest.strip_suffix("/metrics"))
            .unwrap_or_else(|| panic!("{line}"))
            .to_owned();
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        self.wait_for_owners(&["w1"]);
        (worker, address)
    }

    /// Publishes each event to `clicks.<its user>`, as a producer would.
    fn publish(&self, events: &[Value]) {
        publish_to(&self.client, events);
    }

    /// Closes every window and waits for the results of `events`' windows: them, without the
    /// closing events' own.
    fn results_of(&self, events: &[Value]) -> Vec<(String, Value)> {
        self.publish(&closing());
        (results(&self.client, windows(events).len()).into_iter())
            .filter(|(_, r)| !r["key"].as_str().unwrap().starts_with("zz"))
            .collect()
    }
}

/// A producer publishing in-order clicks from another thread, a hundred every 50 ms, until
/// told to stop.
struct Producer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Value>>,
}

impl Producer {
    fn start(url: &str) -> Producer {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let url = url.to_owned();
        let thread = std::thread::spawn(move || {
            let client = Client::connect(&url);
            let mut sent = Vec::new();
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                let batch = clicks(sent.len(), 100);
                publish_to(&client, &batch);
                sent.extend(batch);
                std::thread::sleep(Duration::from_millis(50));
            }
            sent
        });
        Producer { stop, thread }
    }

    /// Stops it: every event it published.
    fn stop(self) -> Vec<Value> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// A `nats-server -js` whose configuration (written in `dir`) maps `clicks.<key>` onto
/// `part.<partition>.<key>` among `count` partitions.
pub(crate) fn mapped_server(dir: &Path, count: usize) -> NatsServer {
    let config = dir.join("nats.conf");
    std::fs::write(
        &config,
        format!(
            "mappings = {{ \"clicks.*\": \"part.{{{{partition({count},1)}}}}.{{{{wildcard(1)}}}}\" }}\n"
        ),
    )
    .unwrap();
    NatsServer::start_with(&["-c", &config.display().to_string()])
}

/// Publishes each event to `clicks.<its user>`, as a producer would.
fn publish_to(client: &Client, events: &[Value]) {
    let payloads: Vec<(String, String)> = (events.iter())
        .map(|e| (e["user"].as_str().unwrap().to_owned(), e.to_string()))
        .collect();
    publish_raw(client, &payloads);
}

/// Publishes each payload as it is to `clicks.<user>`, waiting for every acknowledgement (a
/// thousand at a time: the client lets at most 5,000 wait).
fn publish_raw(client: &Client, payloads: &[(String, String)]) {
    client.runtime.block_on(async {
        for chunk in payloads.chunks(1_000) {
            let mut acks = Vec::with_capacity(chunk.len());
            for (user, payload) in chunk {
                let ack = (client.jetstream)
                    .publish(format!("clicks.{user}"), payload.clone().into())
                    .await
                    .unwrap();
                acks.push(ack);
            }
            for ack in acks {
                ack.await.unwrap();
            }
        }
    });
}

/// In-order clicks of 40 users, `n` of them from index `from`, 7 ms apart.
fn clicks(from: usize, n: usize) -> Vec<Value> {
    (from..from + n)
        .map(|i| json!({"user": format!("u{}", i % 40), "ts": BASE + i as i64 * 7, "amount": i % 10}))
        .collect()
}

/// Events far ahead, one on every partition, which close every earlier window.
fn closing() -> Vec<Value> {
    let mut by_partition = BTreeMap::new();
    for n in 0.. {
        let user = format!("zz{n}");
        by_partition
            .entry(weir::source::partition_of_key(&user, PARTITIONS))
            .or_insert(user);
        if by_partition.len() == PARTITIONS {
            break;
        }
    }
    (by_partition.into_values())
        .map(|user| json!({"user": user, "ts": BASE + 100_000_000, "amount": 0}))
        .collect()
}

/// Waits for `n` results on the results stream and returns them.
fn results(client: &Client, n: usize) -> Vec<(String, Value)> {
    crate::nats::wait_for_results(client, n)
}

/// The `weir_events_in_total` of every slice, summed, from a worker's metrics at `address`.
fn events_read(address: &str) -> u64 {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    std::io::Write::write_all(&mut stream, b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut stream, &mut text).unwrap();
    (text.lines())
        .filter(|line| {
            line.starts_with(&format!(
                "weir_events_in_total{{pipeline=\"{PIPELINE}/slice-"
            ))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Waits until the slices of the worker with metrics at `address` have read `n` events in all.
fn wait_for_read(address: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while events_read(address) < n as u64 {
        assert!(
            Instant::now() < deadline,
            "{} of {n} read",
            events_read(address)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn kill(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs the input through `workers` workers: the results by id.
fn run_with_workers(workers: &[&str]) -> BTreeMap<String, Value> {
    let cluster = Partitioned::start();
    let events = clicks(0, 3_000);
    let children: Vec<Child> = workers.iter().map(|id| cluster.worker(id, false)).collect();
    cluster.wait_for_owners(workers);
    cluster.publish(&events);
    let results = cluster.results_of(&events);
    children.into_iter().for_each(kill);
    assert_exactly_once(&results, &events, &cluster.logs(workers));
    results.into_iter().collect()
}

#[test]
fn one_worker_and_three_on_a_partitioned_stream_give_the_same_results_as_the_model() {
    let one = run_with_workers(&["w1"]);
    let three = run_with_workers(&["w1", "w2", "w3"]);
    assert_eq!(one, three, "the same results, ids and values");
}

/// A global aggregate over a partitioned stream: every slice has partials of the same buckets
/// (each reads its own keys), which the stage slice tells apart by slice and combines, one
/// result per window over every key, the same for one worker and three.
#[test]
fn a_global_aggregate_over_partitions_gives_the_model_s_one_result_per_window() {
    let events = clicks(0, 3_000);
    let global: Vec<Value> = (events.iter())
        .map(|event| {
            let mut event = event.clone();
            event["user"] = "*".into();
            event
        })
        .collect();
    let run = |workers: &[&str]| {
        let module = crate::server::count_sum_v1();
        let cluster = Partitioned::start_of("", module, "global = true\n");
        let children: Vec<Child> = workers.iter().map(|id| cluster.worker(id, false)).collect();
        cluster.wait_for_owners(workers);
        cluster.publish(&events);
        cluster.publish(&closing());
        let results = results(&cluster.client, windows(&global).len());
        children.into_iter().for_each(kill);
        assert_exactly_once(&results, &global, &cluster.logs(workers));
        results.into_iter().collect::<BTreeMap<String, Value>>()
    };
    assert_eq!(run(&["w1"]), run(&["w1", "w2", "w3"]), "ids and values");
}

#[test]
fn each_event_of_a_partitioned_stream_is_read_once_on_its_keys_partition() {
    let cluster = Partitioned::start();
    let (worker, address) = cluster.measured_worker();
    let events = clicks(0, 1_200);
    cluster.publish(&events);
    // The server's mapping put each key on the partition Weir computes for it.
    let stored = cluster.client.read_all_subjects("CLICKS");
    assert_eq!(stored.len(), events.len());
    for (subject, event) in &stored {
        let user = event["user"].as_str().unwrap();
        let p = weir::source::partition_of_key(user, PARTITIONS);
        assert_eq!(subject, &format!("part.{p}.{user}"));
    }
    // Six slices, each reading its partition: 1,200 events read in all, not 7,200.
    wait_for_read(&address, events.len());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(events_read(&address), events.len() as u64);

    // An event on another partition than its key's (published past the mapping) is a dead
    // letter, and the rest go on.
    let user = "u1";
    let wrong = (weir::source::partition_of_key(user, PARTITIONS) + 1) % PARTITIONS;
    let stray = json!({"user": user, "ts": BASE + 9_000, "amount": 5});
    cluster.client.runtime.block_on(async {
        let ack = (cluster.client.jetstream)
            .publish(format!("part.{wrong}.{user}"), stray.to_string().into())
            .await
            .unwrap();
        ack.await.unwrap();
    });
    let dead = crate::nats::wait_for_stream(&cluster.client, "DEAD", 1);
    assert!(
        dead[0].1["reason"]
            .as_str()
            .unwrap()
            .contains("belongs to partition"),
        "{:?}",
        dead[0]
    );
    kill(worker);

    // A partition count changed at a redeploy is refused, saying why.
    let redeployed = cluster.deploy(8);
    let stderr = String::from_utf8_lossy(&redeployed.stderr);
    assert!(
        !redeployed.status.success() && stderr.contains("partition"),
        "{stderr}"
    );
}

#[test]
fn a_sigkilled_worker_of_a_partitioned_stream_is_taken_over_with_nothing_lost_or_repeated() {
    let cluster = Partitioned::start();
    let mut workers: BTreeMap<&str, Child> = ["w1", "w2", "w3"]
        .map(|id| (id, cluster.worker(id, false)))
        .into();
    cluster.wait_for_owners(&["w1", "w2", "w3"]);
    let events = clicks(0, 3_000);
    cluster.publish(&events[..1_500]);
    assert!(!results(&cluster.client, 1).is_empty());
    kill(workers.remove("w2").unwrap());
    cluster.publish(&events[1_500..]);
    cluster.wait_for_owners(&["w1", "w3"]);
    let results = cluster.results_of(&events);
    workers.into_values().for_each(kill);
    assert_exactly_once(&results, &events, &cluster.logs(&["w1", "w2", "w3"]));
}

#[test]
fn one_watermark_for_the_pipeline_holds_a_partition_that_ran_ahead_back() {
    let cluster = Partitioned::start();
    // One worker runs every slice: each reads its partition alone all the same, and the
    // worker's metrics say when every event has been read.
    let (worker, address) = cluster.measured_worker();
    // Every partition at 1 s, then one key's partition runs on to 10 s.
    let at = |user: &str, ms: i64| json!({"user": user, "ts": BASE + ms, "amount": 1});
    let early: Vec<Value> = (closing().into_iter())
        .map(|e| at(e["user"].as_str().unwrap(), 1_000))
        .collect();
    cluster.publish(&early);
    let ahead: Vec<Value> = (0..10).map(|s| at("fast", 1_000 + s * 1_000)).collect();
    cluster.publish(&ahead);
    // Its own partition is at 10 s, the pipeline's watermark at 1 s: an event of 2.5 s is on
    // time, as in one process reading every partition.
    let behind = at("fast", 2_500);
    cluster.publish(std::slice::from_ref(&behind));
    wait_for_read(&address, early.len() + ahead.len() + 1);
    cluster.publish(&closing());
    let mut all = early.clone();
    all.extend(ahead);
    all.push(behind);
    let results = results(&cluster.client, windows(&all).len());
    kill(worker);
    let window = (results.iter())
        .find(|(_, r)| r["key"] == "fast" && r["window_start"] == BASE + 2_000)
        .map(|(_, r)| r["value"]["count"].clone());
    assert_eq!(window, Some(json!(2)), "{results:?}");
}

#[test]
fn a_partition_that_never_sends_goes_idle_by_the_others_clock() {
    let cluster = Partitioned::start_with("[watermark]\nidle_timeout = \"300ms\"");
    let workers = ["w1", "w2"].map(|id| cluster.worker(id, false));
    cluster.wait_for_owners(&["w1", "w2"]);
    // No key of the input, and no closing event, is on the last partition: it reads nothing,
    // so no clock of its own, and goes idle by the clock the others publish.
    let silent = PARTITIONS - 1;
    let on_others = |events: Vec<Value>| -> Vec<Value> {
        (events.into_iter())
            .filter(|e| {
                weir::source::partition_of_key(e["user"].as_str().unwrap(), PARTITIONS) != silent
            })
            .collect()
    };
    let events = on_others(clicks(0, 2_000));
    cluster.publish(&events);
    std::thread::sleep(Duration::from_millis(600)); // a clock past the idle timeout
    cluster.publish(&on_others(closing()));
    let results: Vec<(String, Value)> = (results(&cluster.client, windows(&events).len())
        .into_iter())
    .filter(|(_, r)| !r["key"].as_str().unwrap().starts_with("zz"))
    .collect();
    workers.into_iter().for_each(kill);
    assert_exactly_once(&results, &events, &cluster.logs(&["w1", "w2"]));
}

#[test]
fn a_partitioned_stream_rescaled_two_three_two_under_input_loses_and_repeats_nothing() {
    let cluster = Partitioned::start();
    let w1 = cluster.worker("w1", false);
    let w2 = cluster.worker("w2", false);
    cluster.wait_for_owners(&["w1", "w2"]);
    let producer = Producer::start(&cluster.server.url);
    // 2 -> 3 while events arrive: the newcomer takes two partitions with their state.
    let w3 = cluster.worker("w3", false);
    cluster.wait_for_owners(&["w1", "w2", "w3"]);
    // 3 -> 2: one leaves cleanly; its partitions go on elsewhere from its final checkpoint.
    crate::cluster::terminate(w2);
    cluster.wait_for_owners(&["w1", "w3"]);
    let events = producer.stop();
    let results = cluster.results_of(&events);
    kill(w1);
    kill(w3);
    let logs = cluster.logs(&["w1", "w2", "w3"]);
    assert!(logs.contains("gave slice"), "{logs}");
    // w2's partitions went on from its uploaded final checkpoint, not from the stream's start.
    let resumed = logs.lines().any(|line| {
        line.split_once("(from checkpoint ")
            .is_some_and(|(_, rest)| rest.starts_with(|c: char| c.is_ascii_digit()))
    });
    assert!(
        resumed,
        "a handed-over slice resumed from a checkpoint: {logs}"
    );
    assert!(events.len() >= 1_000, "input all along: {}", events.len());
    assert_exactly_once(&results, &events, &logs);
}

#[test]
fn partitioned_workers_wait_for_a_nats_server_away_three_seconds_and_lose_nothing() {
    let mut cluster = Partitioned::start();
    let workers = ["w1", "w2", "w3"].map(|id| cluster.worker(id, false));
    cluster.wait_for_owners(&["w1", "w2", "w3"]);
    let events = clicks(0, 3_000);
    cluster.publish(&events[..1_500]);
    cluster.server.restart(Duration::from_secs(3));
    cluster.client = Client::connect(&cluster.server.url);
    cluster.publish(&events[1_500..]);
    let results = cluster.results_of(&events);
    workers.into_iter().for_each(kill);
    assert_exactly_once(&results, &events, &cluster.logs(&["w1", "w2", "w3"]));
}

/// Garbage on a partition's subject (not JSON, no timestamp, a bad line inside a message of
/// several events) is a dead letter with its reason; every good event around it counts.
#[test]
fn garbage_on_a_partition_is_a_dead_letter_and_the_rest_counts() {
    let cluster = Partitioned::start();
    let workers = ["w1", "w2"].map(|id| cluster.worker(id, false));
    cluster.wait_for_owners(&["w1", "w2"]);
    let events = clicks(0, 400);
    let (before, after) = events.split_at(200);
    cluster.publish(before);
    let (last, next) = (&before[199], &after[0]);
    let user = |e: &Value| e["user"].as_str().unwrap().to_owned();
    // A second event of the first key at the same time, which a batching producer sent with it.
    let twin = json!({"user": user(next), "ts": next["ts"], "amount": 3});
    let garbage = [
        (user(last), "{not json".to_owned()),
        (
            user(last),
            json!({"user": user(last), "amount": 1}).to_string(),
        ),
        (user(last), "\u{0}\u{1}binary".to_owned()),
        // One message of three lines: an event, garbage, an event.
        (user(next), format!("{next}\nnot an event\n{twin}")),
    ];
    publish_raw(&cluster.client, &garbage);
    cluster.publish(&after[1..]);
    let mut events = events.clone();
    events.push(twin);
    let dead = crate::nats::wait_for_stream(&cluster.client, "DEAD", 4);
    let results = cluster.results_of(&events);
    workers.into_iter().for_each(kill);
    let logs = cluster.logs(&["w1", "w2"]);
    assert_exactly_once(&results, &events, &logs);
    assert_eq!(dead.len(), 4, "{dead:?}");
    for (_, letter) in &dead {
        assert!(
            letter["reason"].as_str().is_some_and(|r| !r.is_empty()),
            "{letter}"
        );
    }
}

/// Workers judge time by the server's clock (publication times, leases that expire on the
/// server), never their own: two workers whose clocks are an hour ahead and an hour behind
/// give the model's results, ids unique.
#[test]
fn workers_with_skewed_clocks_give_the_model_s_results() {
    let cluster = Partitioned::start_with("[watermark]\nidle_timeout = \"2s\"");
    let workers = [("w1", "+1h"), ("w2", "-1h")].map(|(id, skew)| cluster.skewed_worker(id, skew));
    cluster.wait_for_owners(&["w1", "w2"]);
    let events = clicks(0, 2_000);
    cluster.publish(&events);
    let results = cluster.results_of(&events);
    workers.into_iter().for_each(kill);
    let logs = cluster.logs(&["w1", "w2"]);
    // The skew took: each worker's log is stamped with its own clock, an hour off.
    for id in ["w1", "w2"] {
        let log = std::fs::read_to_string(cluster.log(id)).unwrap();
        let stamped = (log.lines())
            .filter(|line| line.starts_with("20"))
            .find_map(minute_of_day);
        let now = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH))
            .unwrap()
            .as_secs()
            / 60
            % 1_440;
        let off = stamped.map(|m| (m + 1_440 - now) % 1_440);
        assert!(
            off.is_some_and(|off| (30..=1_410).contains(&off)),
            "{id} runs on a skewed clock ({off:?} minutes off):\n{log}"
        );
    }
    assert_exactly_once(&results, &events, &logs);
}

/// The minute of the day of a log line stamped `YYYY-MM-DDTHH:MM:...` (UTC).
fn minute_of_day(line: &str) -> Option<u64> {
    let hour: u64 = line.get(11..13)?.parse().ok()?;
    let minute: u64 = line.get(14..16)?.parse().ok()?;
    Some(hour * 60 + minute)
}

/// `weir cluster status` says, per slice, who runs it, how far it has read, how many stream
/// sequences it is behind the last message of its partition and its events per second, and
/// per worker its slices and rate: a hung worker's slices fall behind while the other's keep
/// up, and catch up once it goes on.
#[test]
fn cluster_status_shows_each_slice_s_lag_and_each_worker_s_rate() {
    let cluster = Partitioned::start();
    let [w1, w2] = ["w1", "w2"].map(|id| cluster.worker(id, false));
    cluster.wait_for_owners(&["w1", "w2"]);
    // While a producer publishes, each worker reads some events every second.
    let producer = Producer::start(&cluster.server.url);
    let busy = cluster.wait_for_status("both workers reading", |status| {
        ["w1", "w2"].iter().all(|w| {
            status["workers"][w]["events_per_second"]
                .as_f64()
                .is_some_and(|rate| rate > 0.0)
        })
    });
    let mut events = producer.stop();
    let owned = |status: &Value, worker: &str| -> Vec<String> {
        (status["workers"][worker]["slices"]
            .as_array()
            .unwrap()
            .iter())
        .map(|slice| slice.to_string())
        .collect()
    };
    assert_eq!(owned(&busy, "w1").len(), PARTITIONS / 2, "{busy}");
    // w1 hangs (SIGSTOP): its slices fall behind, w2's do not.
    signal(&w1, "-STOP");
    let more = clicks(events.len(), 600);
    cluster.publish(&more);
    events.extend(more);
    let lag = |status: &Value, slice: &str| status["progress"][slice]["lag"].as_u64();
    let behind = cluster.wait_for_status("w1's slices behind, w2's not", |status| {
        owned(status, "w1").iter().all(|s| lag(status, s) > Some(0))
            && owned(status, "w2")
                .iter()
                .all(|s| lag(status, s) == Some(0))
    });
    // It goes on: every slice catches up, having read every event once.
    signal(&w1, "-CONT");
    let done = cluster.wait_for_status("every slice caught up", |status| {
        let progress = status["progress"].as_object().unwrap();
        let read: u64 = progress
            .values()
            .map(|p| p["events"].as_u64().unwrap())
            .sum();
        progress.len() == PARTITIONS
            && progress.values().all(|p| p["lag"] == 0)
            && read == events.len() as u64
    });
    [w1, w2].into_iter().for_each(kill);
    for (slice, p) in done["progress"].as_object().unwrap() {
        assert_eq!(p["worker"], done["owners"][slice], "{done}");
        assert!(p["read"].as_u64().unwrap() > 0, "{done}");
    }
    assert!(behind["progress"].as_object().unwrap().len() == PARTITIONS);
}

fn signal(child: &Child, signal: &str) {
    let pid = child.id().to_string();
    let sent = Command::new("kill").args([signal, &pid]).status().unwrap();
    assert!(sent.success());
}
