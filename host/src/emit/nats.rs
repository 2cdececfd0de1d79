//! [`NatsPublisher`]: the NATS sink's client. Each record is published to the subject with its
//! `id` as `Nats-Msg-Id`; acknowledgements are collected, and [`flush`](NatsPublisher::flush)
//! (before every checkpoint) waits for all of them at once, publishing again (same id: the
//! stream drops the duplicate) whatever was not acknowledged, while the server is away, for up
//! to [`GIVE_UP`]. Nothing is sent while the client is not connected.
//!
//! Used by the sinks (`emit::sink`); depends on `spec` and `nats_client`.

use std::time::{Duration, Instant};

use async_nats::jetstream::context::PublishAckFuture;

use crate::spec::NatsSinkSpec;

/// Records published but not yet acknowledged before a publish waits for the oldest.
const MAX_IN_FLIGHT: usize = 4_096;
/// How long a flush keeps publishing again before the sink fails.
const GIVE_UP: Duration = Duration::from_secs(300);

/// A record on its way: what to publish again if its acknowledgement does not come.
struct InFlight {
    id: Option<String>,
    payload: bytes::Bytes,
    ack: Option<PublishAckFuture>,
}

/// Publishes to one subject of a JetStream stream.
pub struct NatsPublisher {
    runtime: tokio::runtime::Runtime,
    jetstream: async_nats::jetstream::Context,
    subject: String,
    in_flight: Vec<InFlight>,
    /// Why the client's last attempt to connect failed, for the error when records go
    /// unacknowledged.
    watch: crate::nats_client::ClientWatch,
    /// A send failed (its queue full, the link down): records wait for the next round of a
    /// flush instead of each waiting out a send's timeout in turn.
    held_back: bool,
}

impl Drop for NatsPublisher {
    fn drop(&mut self) {
        // The client's parts may spawn as they go: drop what can be dropped in its runtime.
        let _inside = self.runtime.enter();
        self.in_flight.clear();
    }
}

/// Why results could not be published.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The client could not start.
    #[error(transparent)]
    Client(#[from] crate::nats_client::NatsClientError),
    /// The server's address was refused by the client.
    #[error("cannot connect: {0}")]
    Connect(#[source] async_nats::ConnectError),
    /// Records still unacknowledged when the time to publish them ran out.
    #[error(
        "{records} records were not acknowledged within {} s{}",
        GIVE_UP.as_secs(),
        .last_failure.as_deref().map(|reason| format!(" (the client's last attempt to connect: {reason})")).unwrap_or_default()
    )]
    Unacknowledged {
        /// How many.
        records: usize,
        /// Why the client's last attempt to connect failed, if one did.
        last_failure: Option<String>,
    },
}

impl NatsPublisher {
    /// Connects to the server of `spec` (waiting for it if it is not up yet).
    pub fn connect(spec: &NatsSinkSpec) -> Result<NatsPublisher, PublishError> {
        let runtime = crate::nats_client::client_runtime()?;
        let url = spec.nats.clone();
        let watch = crate::nats_client::ClientWatch::default();
        let options = crate::nats_client::connect_options(&watch);
        let client = runtime
            .block_on(async move { options.connect(&url).await })
            .map_err(PublishError::Connect)?;
        let jetstream = {
            let _inside = runtime.enter();
            async_nats::jetstream::new(client)
        };
        Ok(NatsPublisher {
            runtime,
            jetstream,
            subject: spec.subject.clone(),
            in_flight: Vec::new(),
            watch,
            held_back: false,
        })
    }

    /// Publishes one record (its JSON line), de-duplicated by `id` when it has one.
    pub fn publish(&mut self, id: Option<&str>, line: &[u8]) -> Result<(), PublishError> {
        if self.in_flight.len() >= MAX_IN_FLIGHT {
            self.flush()?;
        }
        let mut record = InFlight {
            id: id.map(str::to_owned),
            payload: bytes::Bytes::copy_from_slice(line),
            ack: None,
        };
        if self.connected() && !self.held_back {
            record.ack = self.send(&record);
        }
        self.in_flight.push(record);
        Ok(())
    }

    /// Whether the client is connected. While it is not, records are not sent: the client
    /// would queue them (each again on every round of a flush) and, its queue full, make each
    /// send wait out a timeout.
    fn connected(&self) -> bool {
        crate::nats_client::is_connected(&self.jetstream.client())
    }

    /// Sends `record`: its acknowledgement to wait for, or `None` (and later records held
    /// back) if it could not be sent.
    fn send(&mut self, record: &InFlight) -> Option<PublishAckFuture> {
        let mut headers = async_nats::HeaderMap::new();
        if let Some(id) = &record.id {
            headers.insert("Nats-Msg-Id", id.as_str());
        }
        let (jetstream, subject, payload) = (
            &self.jetstream,
            self.subject.clone(),
            record.payload.clone(),
        );
        let sent = self
            .runtime
            .block_on(jetstream.publish_with_headers(subject, headers, payload));
        if let Err(error) = &sent {
            tracing::debug!(subject = %self.subject, %error, "not sent: later records held back");
            self.held_back = true;
        }
        sent.ok()
    }

    /// Waits until the server has acknowledged every record published so far.
    pub fn flush(&mut self) -> Result<(), PublishError> {
        let started = Instant::now();
        let mut pending = std::mem::take(&mut self.in_flight);
        while !pending.is_empty() {
            let mut failed = self.unacknowledged(pending);
            if failed.is_empty() {
                break;
            }
            if started.elapsed() > GIVE_UP {
                return Err(PublishError::Unacknowledged {
                    records: failed.len(),
                    last_failure: self.watch.last_failure(),
                });
            }
            std::thread::sleep(Duration::from_millis(200));
            if self.connected() {
                tracing::warn!(subject = %self.subject, records = failed.len(), "records not acknowledged: publishing them again");
                self.held_back = false;
                for record in &mut failed {
                    if self.held_back {
                        break;
                    }
                    record.ack = self.send(record);
                }
            }
            pending = failed;
        }
        Ok(())
    }

    /// Waits for every record's acknowledgement at once and returns those not acknowledged,
    /// in publishing order. Each wait times out after the client's timeout from when it
    /// starts, so waiting one after another would cost that timeout per lost acknowledgement:
    /// minutes for a few hundred results published into a network that dropped them.
    fn unacknowledged(&self, mut pending: Vec<InFlight>) -> Vec<InFlight> {
        let acked = self.runtime.block_on(async {
            let mut waits = tokio::task::JoinSet::new();
            for (at, record) in pending.iter_mut().enumerate() {
                if let Some(ack) = record.ack.take() {
                    waits.spawn(async move { (at, ack.await) });
                }
            }
            let mut acked = vec![false; pending.len()];
            while let Some(waited) = waits.join_next().await {
                match waited {
                    Ok((at, Ok(_))) => acked[at] = true,
                    Ok((_, Err(error))) => {
                        tracing::debug!(subject = %self.subject, %error, "publishing again");
                    }
                    Err(_) => {} // the wait panicked: the record goes out again
                }
            }
            acked
        });
        (pending.into_iter().zip(acked))
            .filter(|(_, acked)| !acked)
            .map(|(record, _)| record)
            .collect()
    }
}
