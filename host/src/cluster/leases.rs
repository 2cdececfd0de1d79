//! Membership and slice leases in the `weir-leases` key-value bucket, whose entries expire
//! [`LEASE`](super::LEASE) after their last write: `members.<pipeline>.<worker>` says a worker
//! is alive, `slices.<pipeline>.<i>` which worker runs slice `i` (the value is the worker's
//! name and a token of this process: `name:pid:nonce`). A lease is taken with a create (only one
//! succeeds) and kept by updates that expect its last revision; a renewal that finds the lease
//! gone or anyone else's is `Lost`, never taken again in passing, so a worker that was presumed
//! dead stops the slice, and a restarted worker waits for its former leases to expire.
//!
//! Depends on nothing outside `cluster` (its connection).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv::{Operation, Store};
use tokio_stream::StreamExt;

use super::liveness::ANSWERS;
use super::{Connection, LEASE, LEASES_BUCKET, NatsFailure, Result, timed};

/// How long a listing of keys may wait for its next key.
const KEY_TIMEOUT: Duration = Duration::from_secs(5);

/// What renewing a lease found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Renewal {
    /// Still ours, at this revision.
    Held(u64),
    /// Gone (expired) or another's: the slice must stop.
    Lost,
    /// The server did not answer. Another worker that reaches it may take the lease once it
    /// expires: the renewer treats a lease unrenewed for a whole lease as lost.
    Unreachable,
}

/// One pipeline's leases, seen by one worker (or by nobody: `weir cluster status`).
pub(super) struct Leases {
    connection: Arc<Connection>,
    bucket: Store,
    pipeline: String,
    worker: Option<String>,
    /// What this process writes into its slice leases.
    token: String,
}

impl Leases {
    pub(super) fn open(
        connection: Arc<Connection>,
        pipeline: &str,
        worker: Option<&str>,
    ) -> Result<Leases> {
        let bucket = connection.bucket(LEASES_BUCKET, LEASE)?;
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let token = format!(
            "{}:{}:{nonce}",
            worker.unwrap_or_default(),
            std::process::id()
        );
        Ok(Leases {
            connection,
            bucket,
            pipeline: pipeline.to_owned(),
            worker: worker.map(str::to_owned),
            token,
        })
    }

    fn me(&self) -> &str {
        self.worker.as_deref().unwrap_or("")
    }

    fn slice_key(&self, slice: usize) -> String {
        format!("slices.{}.{slice}", self.pipeline)
    }

    /// Says this worker is alive.
    pub(super) fn beat(&self) -> Result<()> {
        if !self.connection.connected() {
            return Err(self
                .connection
                .error("membership", NatsFailure::NotConnected));
        }
        let key = format!("members.{}.{}", self.pipeline, self.me());
        let value = format!("{}:{ANSWERS}", self.me()).into_bytes().into();
        match self.connection.block_on(timed(self.bucket.put(key, value))) {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(self.connection.error("membership", NatsFailure::client(e))),
            Err(elapsed) => Err(self.connection.error("membership", elapsed)),
        }
    }

    /// Says this worker is gone (its slices were released before).
    pub(super) fn leave(&self) {
        let key = format!("members.{}.{}", self.pipeline, self.me());
        let _ = self.connection.block_on(timed(self.bucket.delete(key)));
    }

    /// The workers alive, sorted.
    pub(super) fn members(&self) -> Result<Vec<String>> {
        let prefix = format!("members.{}.", self.pipeline);
        let mut members: Vec<String> = self
            .keys()?
            .into_iter()
            .filter_map(|key| key.strip_prefix(&prefix).map(str::to_owned))
            // A worker's name has no dots: the rest is another pipeline's (`<this>.<more>`).
            .filter(|member| !member.contains('.'))
            .collect();
        // A listing made while a member renews may name it twice.
        members.sort();
        members.dedup();
        Ok(members)
    }

    /// Who holds each slice that is held.
    pub(super) fn owners(&self) -> Result<BTreeMap<usize, String>> {
        let prefix = format!("slices.{}.", self.pipeline);
        let mut owners = BTreeMap::new();
        for key in self.keys()? {
            let Some(slice) = key.strip_prefix(&prefix).and_then(|s| s.parse().ok()) else {
                continue;
            };
            if let Ok(Ok(Some(owner))) = self.connection.block_on(timed(self.bucket.get(&key))) {
                let owner = String::from_utf8_lossy(&owner);
                let name = owner.split(':').next().unwrap_or_default();
                owners.insert(slice, name.to_owned());
            }
        }
        Ok(owners)
    }

    /// What other members that answer probes hold, read before they are probed: by member,
    /// its membership's and its slice leases' keys with their revisions now (a member that
    /// renews meanwhile moves them, and [`evict`](Self::evict) then deletes nothing of it).
    pub(super) fn held_by_others(&self) -> Result<BTreeMap<String, Vec<(String, u64)>>> {
        let members = format!("members.{}.", self.pipeline);
        let slices = format!("slices.{}.", self.pipeline);
        let mut entries = Vec::new();
        let ours = |key: &String| {
            let member = key.strip_prefix(&members).is_some_and(|m| !m.contains('.'));
            let slice = key
                .strip_prefix(&slices)
                .is_some_and(|s| s.parse::<usize>().is_ok());
            member || slice
        };
        for key in self.keys()?.into_iter().filter(ours) {
            if let Ok(Ok(Some(entry))) = self.connection.block_on(timed(self.bucket.entry(&key)))
                && entry.operation == Operation::Put
            {
                entries.push((
                    key,
                    String::from_utf8_lossy(&entry.value).into_owned(),
                    entry.revision,
                ));
            }
        }
        let mut held: BTreeMap<String, Vec<(String, u64)>> = BTreeMap::new();
        for (key, value, revision) in &entries {
            let Some(member) = key.strip_prefix(&members).filter(|m| !m.contains('.')) else {
                continue;
            };
            if member != self.me() && value == &format!("{member}:{ANSWERS}") {
                held.entry(member.to_owned())
                    .or_default()
                    .push((key.clone(), *revision));
            }
        }
        for (key, value, revision) in entries {
            let owner = value.split(':').next().unwrap_or_default();
            let slice = key.strip_prefix(&slices).map(str::parse::<usize>);
            if matches!(slice, Some(Ok(_)))
                && let Some(keys) = held.get_mut(owner)
            {
                keys.push((key, revision));
            }
        }
        Ok(held)
    }

    /// Deletes what a member that is gone held (see [`held_by_others`](Self::held_by_others)),
    /// each key only at the revision it was read at.
    pub(super) fn evict(&self, held: &[(String, u64)]) {
        for (key, revision) in held {
            let _ = self.connection.block_on(timed(
                self.bucket.delete_expect_revision(key, Some(*revision)),
            ));
        }
    }

    fn keys(&self) -> Result<Vec<String>> {
        self.connection
            .block_on(async {
                let mut keys = self.bucket.keys().await.map_err(NatsFailure::client)?;
                let mut out = Vec::new();
                while let Some(key) = tokio::time::timeout(KEY_TIMEOUT, keys.next())
                    .await
                    .map_err(|_| NatsFailure::TimedOut(KEY_TIMEOUT))?
                {
                    out.push(key.map_err(NatsFailure::client)?);
                }
                Ok::<_, NatsFailure>(out)
            })
            .map_err(|e| self.connection.error("listing leases", e))
    }

    /// Takes slice `slice` if nobody holds it: the lease's revision, or `None`.
    pub(super) fn acquire(&self, slice: usize) -> Option<u64> {
        let key = self.slice_key(slice);
        let value = self.token.as_bytes().to_vec();
        match self
            .connection
            .block_on(timed(self.bucket.create(&key, value.into())))
        {
            Ok(Ok(revision)) => Some(revision),
            _ => None,
        }
    }

    /// Renews this process's lease of `slice`, last written at `revision`. Nothing is sent
    /// while the client is disconnected: each request would wait out its timeout in turn,
    /// under the renewer's lock, and be sent on reconnecting, when the lease may be another's.
    pub(super) fn renew(&self, slice: usize, revision: u64) -> Renewal {
        if !self.connection.connected() {
            return Renewal::Unreachable;
        }
        let key = self.slice_key(slice);
        let value: bytes::Bytes = self.token.as_bytes().to_vec().into();
        self.connection.block_on(async {
            match timed(self.bucket.update(&key, value.clone(), revision)).await {
                Ok(Ok(revision)) => return Renewal::Held(revision),
                Err(_) => return Renewal::Unreachable,
                Ok(Err(_)) => {}
            }
            // Our update may have landed with its answer lost; anything else is not ours.
            match timed(self.bucket.entry(&key)).await {
                Ok(Ok(Some(entry)))
                    if entry.operation == Operation::Put && entry.value == value =>
                {
                    Renewal::Held(entry.revision)
                }
                Ok(Ok(_)) => Renewal::Lost,
                _ => Renewal::Unreachable,
            }
        })
    }

    /// Whether the client is connected now.
    pub(super) fn connected(&self) -> bool {
        self.connection.connected()
    }

    /// Gives slice `slice` up (after its last checkpoint was uploaded). While disconnected,
    /// nothing is sent: the lease expires by itself.
    pub(super) fn release(&self, slice: usize, revision: u64) {
        if !self.connection.connected() {
            return;
        }
        let key = self.slice_key(slice);
        let _ = self.connection.block_on(timed(
            self.bucket.delete_expect_revision(key, Some(revision)),
        ));
    }
}
