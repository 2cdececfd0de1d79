//! `weir bench nats --workers W`: the count-sum shared by `W` `weir worker` processes through
//! the NATS server (see `cluster`), from the moment the workers start until every window's
//! result is in the results stream. A measurement, not a test. Depends on `cluster`, `pipeline`,
//! `source` and `time`.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::SetupError;
use crate::pipeline::PipelineError;

/// What one cluster run measured.
#[derive(Debug, Clone)]
pub struct ClusterReport {
    /// Worker processes.
    pub workers: usize,
    /// Events read by the pipeline.
    pub events: u64,
    /// From starting the workers to the last result's arrival.
    pub elapsed: Duration,
    /// Results expected (and counted).
    pub results: usize,
    /// CPU time the workers used, summed.
    pub workers_cpu: Duration,
    /// CPU time the machine's `nats-server` processes used meanwhile.
    pub nats_cpu: Duration,
}

/// How a cluster run is set up.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClusterShape {
    /// Worker processes.
    pub workers: usize,
    /// Cut the stream into this many partitions (slices), each read by its slice's worker
    /// alone; `None`: six slices, each reading the whole stream.
    pub partitions: Option<usize>,
    /// Events per message.
    pub per_message: usize,
    /// Pin worker `i` to core `i` (modulo the machine's cores).
    pub pin: bool,
    /// The aggregate is global: one result per window over every key, its partials combined
    /// on the stage slice.
    pub global: bool,
}

/// The CPU time (user and system) of process `pid` so far, from `/proc`.
fn cpu_of(pid: u32) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    let after_name = stat.rsplit(')').next().unwrap_or_default();
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i)?.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10) // USER_HZ is 100 on Linux
}

/// The CPU time of every `nats-server` process of the machine so far.
fn nats_server_cpu() -> Duration {
    let entries = std::fs::read_dir("/proc").into_iter().flatten().flatten();
    entries
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == "nats-server")
        })
        .map(cpu_of)
        .sum()
}

impl ClusterReport {
    /// Events per second, start-up included.
    pub fn rate(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64()
    }
}

/// Publishes `events` events (`keys` keys, one per ms) to a fresh stream of the server at
/// `url`, deploys a count-sum over them as `shape` says and times its worker processes (this
/// executable) until every 1-minute window's result is published.
pub fn cluster(
    url: &str,
    module: &Path,
    (events, keys): (u64, u64),
    shape: ClusterShape,
) -> Result<ClusterReport, PipelineError> {
    let fail = |e: SetupError| PipelineError::Config(format!("cluster benchmark at {url}: {e}"));
    let (lines, expected, closing) = bench_input((events, keys), shape.partitions);
    let expected = match shape.global {
        true => (expected.iter().map(|(_, minute)| (0, *minute))).collect(),
        false => expected,
    };

    let nonce = format!("c{}{}", std::process::id(), crate::time::wall_clock_ms());
    let (stream, results) = (
        format!("WEIR_BENCH_{nonce}"),
        format!("WEIR_BENCH_OUT_{nonce}"),
    );
    let (runtime, jetstream) = super::jetstream_client(url).map_err(fail)?;
    let names = (stream.as_str(), results.as_str(), nonce.as_str());
    match shape.partitions {
        None => runtime.block_on(super::publish_all(
            &jetstream,
            names,
            &lines,
            shape.per_message,
        )),
        Some(count) => runtime.block_on(publish_partitioned(
            &jetstream,
            names,
            &lines,
            (count, shape.per_message),
        )),
    }
    .map_err(fail)?;

    let dir = super::tempfile_dir().map_err(|e| fail(e.into()))?;
    let name = format!("bench-{nonce}");
    let spec = dir.join("pipeline.toml");
    let text =
        pipeline_text(&name, url, (&stream, &nonce), module, shape.partitions).map_err(fail)?;
    let text = match shape.global {
        true => text.replace(
            "kind = \"aggregate\"\n",
            "kind = \"aggregate\"\nglobal = true\n",
        ),
        false => text,
    };
    std::fs::write(&spec, text).map_err(|e| fail(e.into()))?;
    crate::cluster::deploy(url, &spec, None).map_err(|e| fail(e.into()))?;

    let exe = std::env::current_exe().map_err(|e| fail(e.into()))?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let nats_before = nats_server_cpu();
    let started = Instant::now();
    let children = spawn_workers((&exe, cores), url, (&name, &dir), shape).map_err(fail)?;
    let outcome = runtime.block_on(await_results(&jetstream, &results, expected.len(), started));
    let workers_cpu = children.0.iter().map(|child| cpu_of(child.id())).sum();
    let nats_cpu = nats_server_cpu().saturating_sub(nats_before);
    drop(children);
    runtime.block_on(async {
        let _ = jetstream.delete_stream(&stream).await;
        let _ = jetstream.delete_stream(&results).await;
    });
    let _ = std::fs::remove_dir_all(&dir);
    let elapsed = outcome.map_err(fail)?;
    Ok(ClusterReport {
        workers: shape.workers,
        events,
        elapsed,
        results: expected.len() + closing.len(),
        workers_cpu,
        nats_cpu,
    })
}

/// The run's input: `events` event lines over `keys` keys, then an event far ahead on each of
/// the `partitions` (one when unpartitioned) that closes every window; with the windows whose
/// results are expected (key, minute) and the closing events' keys.
fn bench_input(
    (events, keys): (u64, u64),
    partitions: Option<usize>,
) -> (Vec<String>, BTreeSet<(u64, i64)>, Vec<String>) {
    let base = super::EVENTS_FROM_MS;
    let mut lines = super::event_lines(events, keys);
    let expected: BTreeSet<(u64, i64)> = (0..events)
        .map(|i| (i % keys, (base + i as i64) / 60_000))
        .collect();
    // Events far ahead close every window: one on each partition.
    let far = base + 10_000_000_000;
    let closing = closing_keys(partitions.unwrap_or(1));
    for key in &closing {
        lines.push(format!("{{\"key\":\"{key}\",\"ts\":{far},\"amount\":0}}"));
    }
    (lines, expected, closing)
}

/// The spec of the run's pipeline `name`: the count-sum of `module` over `stream` of the server
/// at `url` (in `partitions` when given), its results published to `bench-results.<nonce>`.
pub(super) fn pipeline_text(
    name: &str,
    url: &str,
    (stream, nonce): (&str, &str),
    module: &Path,
    partitions: Option<usize>,
) -> Result<String, SetupError> {
    Ok(format!(
        r#"name = "{name}"
checkpoint_interval = "1s"
[source]
type = "nats"
url = "{url}"
stream = "{stream}"
{partitioned}
[event]
key = "key"
timestamp = "ts"
[window]
type = "tumbling"
size = "1m"
[[operators]]
name = "count-sum"
version = "bench"
kind = "aggregate"
module = {module:?}
[sinks]
results = {{ nats = "{url}", subject = "bench-results.{nonce}" }}
"#,
        module = std::fs::canonicalize(module).map_err(|source| SetupError::File {
            path: module.to_owned(),
            source,
        })?,
        partitioned = match partitions {
            Some(count) => format!(
                "partitions = {{ count = {count}, subject = \"bench.{nonce}.{{partition}}.*\" }}"
            ),
            None => String::new(),
        }
    ))
}

/// Starts `shape.workers` worker processes (`exe`, this executable) of pipeline `name` on the
/// server at `url`, each with a directory of its own under `dir`, pinned to one of the `cores`
/// if `shape` says so. The ones started are killed if a later one cannot be.
fn spawn_workers(
    (exe, cores): (&Path, usize),
    url: &str,
    (name, dir): (&str, &Path),
    shape: ClusterShape,
) -> Result<Workers, SetupError> {
    let mut children = Workers(Vec::new());
    for index in 0..shape.workers {
        let core = shape.pin.then_some(index % cores);
        children.0.push(spawn_worker(
            exe,
            core,
            url,
            (name, dir),
            &format!("w{index}"),
        )?);
    }
    Ok(children)
}

/// Starts worker `id` (`exe`, this executable) of pipeline `name` on the server at `url`, in
/// directory `dir/<id>`, pinned to `core` if given.
pub(super) fn spawn_worker(
    exe: &Path,
    core: Option<usize>,
    url: &str,
    (name, dir): (&str, &Path),
    id: &str,
) -> std::io::Result<Child> {
    let mut command = match core {
        Some(core) => {
            let mut taskset = Command::new("taskset");
            taskset.args(["-c", &core.to_string()]).arg(exe);
            taskset
        }
        None => Command::new(exe),
    };
    command
        .args(["worker", "--nats", url, "--pipeline", name, "--id", id])
        .arg("--dir")
        .arg(dir.join(id))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

/// Waits until the `results` stream holds `expected` messages: the time since `started`, or
/// `Incomplete` after 15 minutes.
async fn await_results(
    jetstream: &async_nats::jetstream::Context,
    results: &str,
    expected: usize,
    started: Instant,
) -> Result<Duration, SetupError> {
    let mut stream = jetstream
        .get_stream(results)
        .await
        .map_err(SetupError::nats)?;
    loop {
        let count = stream
            .info()
            .await
            .map_err(SetupError::nats)?
            .state
            .messages;
        if count as usize >= expected {
            return Ok(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(900) {
            return Err(SetupError::Incomplete {
                got: count,
                want: expected,
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A key on each of `count` partitions, for the events that close the windows.
fn closing_keys(count: usize) -> Vec<String> {
    let mut by_partition = std::collections::BTreeMap::new();
    for n in 0.. {
        let key = format!("end{n}");
        by_partition
            .entry(crate::source::partition_of_key(&key, count))
            .or_insert(key);
        if by_partition.len() == count {
            break;
        }
    }
    by_partition.into_values().collect()
}

/// Creates the events and results streams and publishes `lines` to their keys' partitions'
/// subjects, `bench.<nonce>.<partition>.<key>`, `per_message` of one partition to a message,
/// as a server's subject mapping would place them.
async fn publish_partitioned(
    jetstream: &async_nats::jetstream::Context,
    (events, results, nonce): (&str, &str, &str),
    lines: &[String],
    (count, per_message): (usize, usize),
) -> Result<(), SetupError> {
    let streams = [
        (events, format!("bench.{nonce}.>")),
        (results, format!("bench-results.{nonce}")),
    ];
    super::create_streams(jetstream, streams).await?;
    let key_of = |line: &str| -> String {
        let value: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
        value["key"].as_str().unwrap_or_default().to_owned()
    };
    let mut by_partition: Vec<Vec<&String>> = vec![Vec::new(); count];
    for line in lines {
        by_partition[crate::source::partition_of_key(&key_of(line), count)].push(line);
    }
    let mut acks = Vec::new();
    for (partition, lines) in by_partition.iter().enumerate() {
        for message in lines.chunks(per_message.max(1)) {
            let subject = format!("bench.{nonce}.{partition}.{}", key_of(message[0]));
            let payload: Vec<&str> = message.iter().map(|line| line.as_str()).collect();
            let ack = jetstream
                .publish(subject, payload.join("\n").into())
                .await
                .map_err(SetupError::nats)?;
            acks.push(ack);
            if acks.len() >= 2_000 {
                for ack in acks.drain(..) {
                    ack.await.map_err(SetupError::nats)?;
                }
            }
        }
    }
    for ack in acks {
        ack.await.map_err(SetupError::nats)?;
    }
    Ok(())
}

/// The worker processes of a run, killed however the run ends (a failed spawn included).
pub(super) struct Workers(pub(super) Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
