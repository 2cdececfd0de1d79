//! `weir bench serve`: served HTTP ingest end to end. A `weir serve` of this binary is started
//! on loopback with a data directory of its own; the count-sum is uploaded and a pipeline fed
//! over HTTP is created; clients post JSON Lines batches at once (a `429` is retried after a
//! moment, as a client should), and the run is timed until every batch is accepted (durable)
//! and until the pipeline has read every event. Prints events/s both ways and the latency of
//! a batch's acknowledgement.

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::p99;

const ADMIN: &str = "bench-serve-admin-token-0123456789";
const INGEST: &str = "bench-serve-ingest-token-0123456789";
const TIMEOUT: Duration = Duration::from_secs(120);

/// The shape of a run.
pub(crate) struct ServeShape {
    pub(crate) events: u64,
    pub(crate) keys: u64,
    pub(crate) batch: usize,
    pub(crate) clients: usize,
}

/// A `weir serve` child, killed and its directory removed when dropped.
struct Served {
    child: std::process::Child,
    dir: std::path::PathBuf,
    base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `weir bench serve`.
pub(crate) fn bench_serve(shape: &ServeShape, module: &Path) -> anyhow::Result<()> {
    let component = std::fs::read(module).with_context(|| {
        format!(
            "{}: build the examples first (make components)",
            module.display()
        )
    })?;
    let served = start_server()?;
    let call = |token: &str, method: &str, path: &str, body: Option<(&str, &[u8])>| {
        weir::client::call(&served.base, token, method, path, body, TIMEOUT)
    };
    let (status, text) = call(
        ADMIN,
        "POST",
        "/v1/operators/count-sum/1.0.0",
        Some(("application/wasm", &component)),
    )?;
    anyhow::ensure!(status == 201, "uploading the count-sum: {status} {text}");
    let spec = serde_json::json!({
        "name": "bench", "source": {"type": "http"},
        "event": {"key": "key", "timestamp": "ts"}, "watermark": {"bound": "2s"},
        "window": {"type": "tumbling", "size": "1m"},
        "operators": [{"name": "count-sum", "version": "1.0.0", "kind": "aggregate"}],
        "checkpoint_interval": "1s"
    })
    .to_string();
    let (status, text) = call(
        ADMIN,
        "POST",
        "/v1/pipelines",
        Some(("application/json", spec.as_bytes())),
    )?;
    anyhow::ensure!(status == 201, "creating the pipeline: {status} {text}");
    let (status, text) = call(ADMIN, "POST", "/v1/pipelines/bench/start", None)?;
    anyhow::ensure!(status == 200, "starting the pipeline: {status} {text}");

    let bodies = Arc::new(bodies(shape));
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let clients: Vec<_> = (0..shape.clients.max(1))
        .map(|_| {
            let (bodies, next, base) = (bodies.clone(), next.clone(), served.base.clone());
            std::thread::spawn(move || post_all(&base, &bodies, &next))
        })
        .collect();
    let mut acks = Vec::new();
    for client in clients {
        acks.extend(
            client
                .join()
                .map_err(|_| anyhow::anyhow!("a client panicked"))??,
        );
    }
    let accepted = started.elapsed();
    let read = wait_until_read(&served.base, shape.events)?;
    let processed = started.elapsed();
    let rate = |took: Duration| shape.events as f64 / took.as_secs_f64();
    println!(
        "served ingest: {} events in {} batches of {} from {} clients",
        shape.events,
        bodies.len(),
        shape.batch,
        shape.clients
    );
    println!(
        "  accepted (durable):  {:>10.0} events/s ({:.2} s)",
        rate(accepted),
        accepted.as_secs_f64()
    );
    println!(
        "  read by the pipeline: {:>9.0} events/s ({:.2} s; {read} events)",
        rate(processed),
        processed.as_secs_f64()
    );
    let mut sorted = acks.clone();
    sorted.sort_by(f64::total_cmp);
    println!(
        "  a batch's acknowledgement: median {:.1} ms, p99 {:.1} ms",
        sorted.get(sorted.len() / 2).copied().unwrap_or(0.0),
        p99(acks).unwrap_or(0.0)
    );
    Ok(())
}

/// Starts `weir serve` on a free loopback port with tokens of its own (killed, and its
/// directory removed, however this ends).
fn start_server() -> anyhow::Result<Served> {
    let dir = std::env::temp_dir().join(format!("weir-bench-serve-{}", std::process::id()));
    let child = Command::new(std::env::current_exe()?)
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(&dir)
        .env("WEIR_ADMIN_TOKEN", ADMIN)
        .env("WEIR_INGEST_TOKEN", INGEST)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting weir serve")?;
    let mut served = Served {
        child,
        dir,
        base: String::new(),
    };
    let stderr = served
        .child
        .stderr
        .take()
        .context("weir serve's standard error")?;
    let (tell, told) = std::sync::mpsc::channel();
    // Read (and drained) on a thread of its own, so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if let Some(address) = line.strip_prefix("weir: listening on ") {
                let _ = tell.send(address.trim().to_owned());
            }
        }
    });
    served.base = told
        .recv_timeout(Duration::from_secs(30))
        .context("weir serve did not listen within 30 s")?;
    Ok(served)
}

/// The events as JSON Lines bodies of `batch` events each.
fn bodies(shape: &ServeShape) -> Vec<Vec<u8>> {
    const BASE: i64 = 1_772_442_000_000;
    let batch = shape.batch.max(1) as u64;
    (0..shape.events.div_ceil(batch))
        .map(|b| {
            let mut body = Vec::with_capacity(batch as usize * 48);
            for i in b * batch..((b + 1) * batch).min(shape.events) {
                let key = i % shape.keys.max(1);
                let line = format!(
                    r#"{{"key":"k{key}","ts":{},"amount":{}}}"#,
                    BASE + i as i64 / 10,
                    i % 10
                );
                body.extend_from_slice(line.as_bytes());
                body.push(b'\n');
            }
            body
        })
        .collect()
}

/// Posts bodies (taken in turn with the other clients) until none is left; each accepted
/// batch's acknowledgement time, ms. A `429` is retried after 5 ms.
fn post_all(base: &str, bodies: &[Vec<u8>], next: &AtomicUsize) -> anyhow::Result<Vec<f64>> {
    let mut acks = Vec::new();
    while let Some(body) = bodies.get(next.fetch_add(1, Ordering::Relaxed)) {
        loop {
            let sent = Instant::now();
            let path = "/v1/pipelines/bench/events";
            let (status, text) = weir::client::call(
                base,
                INGEST,
                "POST",
                path,
                Some(("application/x-ndjson", body)),
                TIMEOUT,
            )?;
            match status {
                202 => {
                    acks.push(sent.elapsed().as_secs_f64() * 1e3);
                    break;
                }
                429 => std::thread::sleep(Duration::from_millis(5)),
                other => anyhow::bail!("sending events: {other} {text}"),
            }
        }
    }
    Ok(acks)
}

/// Waits until the pipeline on `base` has read `events` events; how many it says it read.
fn wait_until_read(base: &str, events: u64) -> anyhow::Result<u64> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let (_, text) =
            weir::client::call(base, ADMIN, "GET", "/v1/pipelines/bench", None, TIMEOUT)?;
        let status: serde_json::Value = serde_json::from_str(&text)?;
        let read = status["events_in"].as_u64().unwrap_or(0);
        if read >= events {
            return Ok(read);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the pipeline read {read} of {events} events: {status}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
