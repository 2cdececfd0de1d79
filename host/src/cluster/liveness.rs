//! Whether a fellow worker's process is still there, asked at once instead of waited for: each
//! worker answers requests on `weir.alive.<pipeline>.<worker>` for as long as its connection
//! lives. The NATS server drops a closed connection's subscriptions at once, so a request there
//! after a worker died (a SIGKILL, a crash) is answered "no responders" straight away, and its
//! peers free its leases instead of waiting for them to expire (`worker.rs`). A worker that
//! stalls but keeps its connection still answers from its client's task, and a server that is
//! away answers nothing: both are left to the leases' expiry, as before.
//!
//! Depends on nothing outside `cluster` (its connection).

use std::time::Duration;

use async_nats::RequestErrorKind;
use tokio_stream::StreamExt;

use super::{Connection, NatsFailure, Result};

/// How long a probe waits for its answer (a live worker answers from its client's task, within
/// a round trip).
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// What a member's membership entry says once it answers probes (older workers wrote their
/// bare name, and are never evicted by a probe).
pub(super) const ANSWERS: &str = "answers-probes";

fn subject(pipeline: &str, worker: &str) -> String {
    format!("weir.alive.{pipeline}.{worker}")
}

/// Answers probes for this worker until dropped.
pub(super) struct Responder {
    task: tokio::task::JoinHandle<()>,
}

impl Responder {
    /// Subscribes (the client subscribes again by itself after a reconnect) and answers.
    pub(super) fn start(
        connection: &Connection,
        pipeline: &str,
        worker: &str,
    ) -> Result<Responder> {
        let client = connection.jetstream.client();
        let mut probes = connection
            .block_on(client.subscribe(subject(pipeline, worker)))
            .map_err(|e| connection.error("answering probes", NatsFailure::client(e)))?;
        let task = connection.runtime.spawn(async move {
            while let Some(probe) = probes.next().await {
                if let Some(reply) = probe.reply {
                    let _ = client.publish(reply, bytes::Bytes::new()).await;
                }
            }
        });
        Ok(Responder { task })
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Which of `workers` of `pipeline` are gone, probed at once (a frozen one costs the others
/// no more than one timeout): `true` only when the server says nobody listens on its subject
/// (a timeout, a server away or any other failure is not proof).
pub(super) fn gone(connection: &Connection, pipeline: &str, workers: &[&str]) -> Vec<bool> {
    let probes: Vec<_> = (workers.iter())
        .map(|worker| {
            let (client, subject) = (connection.jetstream.client(), subject(pipeline, worker));
            connection.runtime.spawn(async move {
                let request = client.request(subject, bytes::Bytes::new());
                match tokio::time::timeout(PROBE_TIMEOUT, request).await {
                    Ok(Err(e)) => e.kind() == RequestErrorKind::NoResponders,
                    _ => false,
                }
            })
        })
        .collect();
    connection.block_on(async {
        let mut gone = Vec::with_capacity(probes.len());
        for probe in probes {
            gone.push(probe.await.unwrap_or(false));
        }
        gone
    })
}
