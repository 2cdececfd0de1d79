//! `weir bench nats --takeover`: how long a shared pipeline's slices go without an owner when
//! a worker is SIGKILLed (from the kill until the survivor holds every slice), and how long a
//! joining worker waits for its share (from its first membership until it holds its slices:
//! the former owner's final checkpoint, upload and release, then its own lease). Owners are
//! read from the cluster's status every 50 ms, so each figure is within that of the truth; a
//! slice runs once its new owner has restored it, a little after it is held. A measurement,
//! not a test. Depends on `cluster` and the cluster benchmark's set-up.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use super::SetupError;
use super::cluster::{Workers, pipeline_text, spawn_worker};
use crate::cluster::Cluster;
use crate::pipeline::PipelineError;

/// How often the owners are read.
const POLL: Duration = Duration::from_millis(50);
/// How long a step may take before the benchmark gives up.
const LIMIT: Duration = Duration::from_secs(60);
/// The pipeline's slices (the default count).
const SLICES: usize = crate::cluster::DEFAULT_SLICES;

/// What one takeover run measured.
#[derive(Debug, Clone)]
pub struct TakeoverReport {
    /// From the SIGKILL of one of two workers until the other holds every slice.
    pub takeover: Duration,
    /// From a third worker's first membership until it holds its share.
    pub join: Duration,
}

/// Runs two workers of a count-sum over a small stream of the server at `url`, kills one,
/// then starts another (see the module documentation).
pub fn takeover(url: &str, module: &Path) -> Result<TakeoverReport, PipelineError> {
    let fail = |e: SetupError| PipelineError::Config(format!("takeover benchmark at {url}: {e}"));
    let nonce = format!("t{}{}", std::process::id(), crate::time::wall_clock_ms());
    let (stream, results) = (
        format!("WEIR_BENCH_{nonce}"),
        format!("WEIR_BENCH_OUT_{nonce}"),
    );
    let (runtime, jetstream) = super::jetstream_client(url).map_err(fail)?;
    let lines = super::event_lines(10_000, 100);
    let names = (stream.as_str(), results.as_str(), nonce.as_str());
    runtime
        .block_on(super::publish_all(&jetstream, names, &lines, 100))
        .map_err(fail)?;
    let dir = super::tempfile_dir().map_err(|e| fail(e.into()))?;
    let name = format!("bench-{nonce}");
    let spec = dir.join("pipeline.toml");
    let text = pipeline_text(&name, url, (&stream, &nonce), module, None).map_err(fail)?;
    std::fs::write(&spec, text).map_err(|e| fail(e.into()))?;
    crate::cluster::deploy(url, &spec, None).map_err(|e| fail(e.into()))?;
    let cluster = Cluster::connect(url).map_err(|e| fail(e.into()))?;
    let measured = measure(&cluster, url, (&name, &dir)).map_err(fail);
    let _ = cluster.withdraw(&name, Duration::from_secs(10));
    runtime.block_on(async {
        let _ = jetstream.delete_stream(&stream).await;
        let _ = jetstream.delete_stream(&results).await;
    });
    let _ = std::fs::remove_dir_all(&dir);
    measured
}

fn measure(
    cluster: &Cluster,
    url: &str,
    (name, dir): (&str, &Path),
) -> Result<TakeoverReport, SetupError> {
    let exe = std::env::current_exe()?;
    let spawn = |id: &str| spawn_worker(&exe, None, url, (name, dir), id);
    let mut workers = Workers(vec![spawn("w0")?, spawn("w1")?]);
    until(cluster, name, |status| {
        owners(status) == ["w0", "w1"].into()
    })?;
    let mut killed = workers.0.remove(1);
    let started = Instant::now();
    let sent = killed.kill();
    let _ = killed.wait();
    sent?;
    until(cluster, name, |status| owners(status) == ["w0"].into())?;
    let takeover = started.elapsed();
    workers.0.push(spawn("w2")?);
    until(cluster, name, |status| members(status).contains("w2"))?;
    let joined = Instant::now();
    until(cluster, name, |status| {
        owners(status) == ["w0", "w2"].into()
    })?;
    Ok(TakeoverReport {
        takeover,
        join: joined.elapsed(),
    })
}

/// Waits (at most [`LIMIT`]) until the pipeline's status satisfies `done`.
fn until(
    cluster: &Cluster,
    name: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> Result<(), SetupError> {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Ok(status) = cluster.status(name)
            && done(&status)
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(SetupError::Io(std::io::Error::other(format!(
                "the workers did not reach the next step within {} s",
                LIMIT.as_secs()
            ))));
        }
        std::thread::sleep(POLL);
    }
}

/// The workers holding slices, if every slice is held.
fn owners(status: &serde_json::Value) -> BTreeSet<&str> {
    let owners = status["owners"].as_object();
    match owners {
        Some(owners) if owners.len() == SLICES => {
            owners.values().filter_map(|o| o.as_str()).collect()
        }
        _ => BTreeSet::new(),
    }
}

/// The live workers.
fn members(status: &serde_json::Value) -> BTreeSet<&str> {
    (status["members"].as_array().into_iter().flatten())
        .filter_map(|m| m.as_str())
        .collect()
}
