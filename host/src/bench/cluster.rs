//! `weir bench nats --workers W`: the count-sum shared by `W` `weir worker` processes through
//! the NATS server (see `cluster`), from the moment the workers start until every window's
//! result is in the results stream. A measurement, not a test.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
}

impl ClusterReport {
    /// Events per second, start-up included.
    pub fn rate(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64()
    }
}

/// Publishes `events` events (`keys` keys, one per ms) to a fresh stream of the server at
/// `url`, deploys a count-sum over them in six slices and times `workers` worker processes
/// (this executable) until every 1-minute window's result is published.
pub fn cluster(
    url: &str,
    module: &Path,
    events: u64,
    keys: u64,
    workers: usize,
) -> Result<ClusterReport, PipelineError> {
    let fail = |e: String| PipelineError::Config(format!("cluster benchmark at {url}: {e}"));
    let base = super::EVENTS_FROM_MS;
    let mut lines = super::event_lines(events, keys);
    let expected: BTreeSet<(u64, i64)> = (0..events)
        .map(|i| (i % keys, (base + i as i64) / 60_000))
        .collect();
    // One event far ahead closes every window.
    lines.push(format!(
        "{{\"key\":\"end\",\"ts\":{},\"amount\":0}}",
        base + 10_000_000_000
    ));

    let nonce = format!("c{}{}", std::process::id(), crate::time::wall_clock_ms());
    let (stream, results) = (
        format!("WEIR_BENCH_{nonce}"),
        format!("WEIR_BENCH_OUT_{nonce}"),
    );
    let (runtime, jetstream) = super::jetstream_client(url).map_err(fail)?;
    runtime
        .block_on(super::publish_all(
            &jetstream,
            (&stream, &results, &nonce),
            &lines,
            1,
        ))
        .map_err(fail)?;

    let dir = super::tempfile_dir().map_err(|e| fail(e.to_string()))?;
    let name = format!("bench-{nonce}");
    let spec = dir.join("pipeline.toml");
    let text = format!(
        r#"name = "{name}"
checkpoint_interval = "1s"
[source]
type = "nats"
url = "{url}"
stream = "{stream}"
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
        module = std::fs::canonicalize(module)
            .map_err(|e| fail(format!("{}: {e}", module.display())))?
    );
    std::fs::write(&spec, text).map_err(|e| fail(e.to_string()))?;
    crate::cluster::deploy(url, &spec, None).map_err(|e| fail(e.to_string()))?;

    let exe = std::env::current_exe().map_err(|e| fail(e.to_string()))?;
    let started = Instant::now();
    let mut children = Workers(Vec::new());
    for index in 0..workers {
        let child = Command::new(&exe)
            .args(["worker", "--nats", url, "--pipeline", &name, "--id"])
            .arg(format!("w{index}"))
            .arg("--dir")
            .arg(dir.join(format!("w{index}")))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| fail(e.to_string()))?;
        children.0.push(child);
    }
    let outcome = runtime.block_on(async {
        let mut stream = jetstream
            .get_stream(&results)
            .await
            .map_err(|e| e.to_string())?;
        loop {
            let count = stream
                .info()
                .await
                .map_err(|e| e.to_string())?
                .state
                .messages;
            if count as usize >= expected.len() {
                return Ok(started.elapsed());
            }
            if started.elapsed() > Duration::from_secs(900) {
                return Err(format!(
                    "{count} of {} results after 15 minutes",
                    expected.len()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    drop(children);
    runtime.block_on(async {
        let _ = jetstream.delete_stream(&stream).await;
        let _ = jetstream.delete_stream(&results).await;
    });
    let _ = std::fs::remove_dir_all(&dir);
    let elapsed = outcome.map_err(fail)?;
    Ok(ClusterReport {
        workers,
        events,
        elapsed,
        results: expected.len(),
    })
}

/// The worker processes of a run, killed however the run ends (a failed spawn included).
struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
