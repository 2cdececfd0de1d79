//! Slice checkpoints in object stores, one per slice (`weir-checkpoints-<pipeline>-<i>`: a listing
//! then reads only its own slice's objects, which no other slice's uploads can keep going),
//! incremental like the local ones: under `<pipeline>/slice-<i>/`, a **base** (`base-<epoch>-<id>`:
//! a copy of the slice's state file as of checkpoint `id`) and the **deltas** after it
//! (`delta-<epoch>-<id>`: the changes of the checkpoints up to `id`, each naming the one it
//! follows, `delta.rs`). The epoch is the revision of the lease under which they were written: a
//! new owner starts its own epoch with a base, so whatever a worker that lost its lease still
//! writes (a lower epoch) is never mixed into the chain. A new base is written when the deltas
//! since the last one outgrow it; older objects are deleted then. [`Uploader`] uploads a running
//! slice's checkpoints in the background; [`Snapshots::restore`] rebuilds the last one into a data
//! directory for the slice's next run.
//!
//! Depends on `checkpoint`, `pipeline`, `state`, `time` and the cluster's connection.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::object_store::{GetErrorKind, ObjectStore};
use tokio::io::AsyncReadExt;
use tokio_stream::StreamExt;
use tracing::{info, warn};

use super::delta;
use super::{CHECKPOINTS_BUCKET, ClusterError, Connection, NatsFailure, Result};

/// How long one listing of a slice's objects may take in all.
const LISTING_TIMEOUT: Duration = Duration::from_secs(20);
use crate::pipeline::CommitListener;
use crate::state::{RedbStore, STATE_FILE, StoredCheckpoint};

/// The largest delta object read back (a bigger one is damaged or hostile): twice the most
/// that is ever queued for one upload.
const MAX_DELTA_BYTES: u64 = 2 * MAX_QUEUED_BYTES as u64;
/// How long one object's download may take before it is given up (the server may have purged
/// its chunks, or gone away).
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(300);
/// Deltas may add up to this (or twice the base, if more) before a new base is written.
const MIN_CHAIN_BYTES: u64 = 8 << 20;
/// Deltas after one base at most.
const MAX_CHAIN: usize = 256;
/// Checkpoints queued for upload at most (bytes); beyond, the queue is dropped and the next
/// upload is a base.
const MAX_QUEUED_BYTES: usize = 64 << 20;

/// Why a slice's state has no readable checkpoint manifest.
#[derive(Debug, thiserror::Error)]
enum ManifestError {
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    #[error("no manifest")]
    Missing,
    #[error("the manifest is damaged: {0}")]
    Damaged(#[from] serde_json::Error),
}

/// Why an upload failed (it is tried again).
#[derive(Debug, thiserror::Error)]
enum UploadError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("copying the state: {0}")]
    State(#[from] crate::state::StateError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("the lease was lost")]
    LeaseLost,
    #[error(transparent)]
    Store(#[from] ClusterError),
}

/// One object of a slice's chain.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Link {
    epoch: u64,
    id: u64,
    base: bool,
    name: String,
}

/// The pipelines bucket's key saying how far a slice's uploaded checkpoints reach.
pub(super) fn uploaded_key(pipeline: &str, slice: usize) -> String {
    format!("uploaded.{pipeline}.{slice}")
}

/// The epoch of an `uploaded.<pipeline>.<slice>` record (0 if it has none it can read).
fn recorded_epoch(value: &[u8]) -> u64 {
    serde_json::from_slice::<serde_json::Value>(value)
        .ok()
        .and_then(|v| v.get("epoch")?.as_u64())
        .unwrap_or(0)
}

/// The object store of slice `slice` of `pipeline` (see [`super::dotless_name`]).
fn bucket(pipeline: &str, slice: usize) -> String {
    format!(
        "{}-{slice}",
        super::dotless_name(CHECKPOINTS_BUCKET, pipeline)
    )
}

/// Deletes slice `slice`'s object store of `pipeline`, if there is one (the pipeline is
/// withdrawn: a pipeline shared later under its name must not restore its checkpoints).
pub(super) fn forget(connection: &Connection, pipeline: &str, slice: usize) -> Result<()> {
    let name = bucket(pipeline, slice);
    let fail = |e: NatsFailure| connection.error(&format!("deleting object store {name}"), e);
    let jetstream = &connection.jetstream;
    let there = connection.block_on(super::timed(jetstream.get_object_store(&name)));
    match there {
        Ok(Ok(_)) => {}
        // The server answered that there is none.
        Ok(Err(e)) if e.to_string().contains("not found") => return Ok(()),
        Ok(Err(e)) => return Err(fail(NatsFailure::client(e))),
        Err(elapsed) => return Err(fail(elapsed.into())),
    }
    connection
        .block_on(super::timed(jetstream.delete_object_store(&name)))
        .map_err(|e| fail(e.into()))?
        .map_err(|e| fail(NatsFailure::client(e)))
}

fn prefix(pipeline: &str, slice: usize) -> String {
    format!("{pipeline}/slice-{slice}/")
}

fn link_name(pipeline: &str, slice: usize, base: bool, epoch: u64, id: u64) -> String {
    let kind = if base { "base" } else { "delta" };
    format!("{}{kind}-{epoch:020}-{id:020}", prefix(pipeline, slice))
}

fn parse_link(prefix: &str, name: &str) -> Option<Link> {
    let rest = name.strip_prefix(prefix)?;
    let (kind, numbers) = rest.split_once('-')?;
    let (epoch, id) = numbers.split_once('-')?;
    Some(Link {
        epoch: epoch.parse().ok()?,
        id: id.parse().ok()?,
        base: match kind {
            "base" => true,
            "delta" => false,
            _ => return None,
        },
        name: name.to_owned(),
    })
}

/// How long an upload of `bytes` bytes may take before it is given up and tried again: a
/// minute, and a second more per 8 MiB.
fn upload_limit(bytes: u64) -> Duration {
    Duration::from_secs(60 + bytes / (8 << 20))
}

/// The object stores of slice checkpoints.
pub(super) struct Snapshots {
    connection: Arc<Connection>,
    /// Each slice's store, once opened (or created).
    stores: Mutex<HashMap<(String, usize), ObjectStore>>,
}

impl Snapshots {
    pub(super) fn open(connection: Arc<Connection>) -> Result<Snapshots> {
        Ok(Snapshots {
            connection,
            stores: Mutex::default(),
        })
    }

    /// Slice `slice`'s object store, created if missing.
    fn store(&self, pipeline: &str, slice: usize) -> Result<ObjectStore> {
        let key = (pipeline.to_owned(), slice);
        if let Some(store) = self.stores.lock().expect("stores lock").get(&key) {
            return Ok(store.clone());
        }
        let store = self.connection.objects(&bucket(pipeline, slice))?;
        (self.stores.lock().expect("stores lock")).insert(key, store.clone());
        Ok(store)
    }

    /// Uploads `bytes` bytes from `reader` as object `name`, giving up after
    /// [`upload_limit`] (the upload is then tried again: a put that waits for ever would hold
    /// the slice's every later upload, and its hand-over, with it).
    fn put(
        &self,
        store: &ObjectStore,
        name: &str,
        reader: &mut (impl tokio::io::AsyncRead + Unpin),
        bytes: u64,
    ) -> Result<()> {
        let limit = upload_limit(bytes);
        // The timer is made inside the runtime: made outside, it panics (no reactor).
        let put = async { tokio::time::timeout(limit, store.put(name, reader)).await };
        let failure = match self.connection.block_on(put) {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => NatsFailure::client(e),
            Err(_) => NatsFailure::TimedOut(limit),
        };
        Err(self.connection.error(&format!("uploading {name}"), failure))
    }

    /// The links of a slice's chain in the store, sorted.
    fn links(&self, pipeline: &str, slice: usize) -> Result<Vec<Link>> {
        let prefix = prefix(pipeline, slice);
        let store = self.store(pipeline, slice)?;
        // A listing can wait for ever for an entry that was replaced meanwhile: each entry
        // waits at most a second, the whole listing 20 s, and the listing is made again.
        let list_once = || async {
            let mut list = super::timed(store.list())
                .await?
                .map_err(NatsFailure::client)?;
            let mut links = Vec::new();
            loop {
                let next = tokio::time::timeout(Duration::from_secs(1), list.next())
                    .await
                    .map_err(|_| NatsFailure::ListingStalled)?;
                let Some(info) = next else {
                    return Ok::<_, NatsFailure>(links);
                };
                let info = info.map_err(NatsFailure::client)?;
                links.extend(parse_link(&prefix, &info.name).filter(|_| !info.deleted));
            }
        };
        let mut last_error = NatsFailure::ListingStalled;
        for _ in 0..5 {
            let listing = async { tokio::time::timeout(LISTING_TIMEOUT, list_once()).await };
            let outcome =
                (self.connection.block_on(listing)).unwrap_or(Err(NatsFailure::ListingStalled));
            match outcome {
                Ok(mut links) => {
                    links.sort();
                    return Ok(links);
                }
                Err(e) => last_error = e,
            }
        }
        Err(self.connection.error("listing checkpoints", last_error))
    }

    /// Says, in the pipelines bucket (`uploaded.<pipeline>.<slice>`), how far a slice's
    /// uploaded checkpoints reach: what a takeover would resume from (`weir cluster status`).
    fn record_uploaded(&self, chain: &Chain) {
        self.record_reached(
            &chain.pipeline,
            chain.slice,
            chain.epoch,
            (chain.head, chain.head_sequence),
        );
    }

    /// Records that slice `slice`'s chain of epoch `epoch` reaches `checkpoint` at input
    /// sequence `sequence`, unless a later epoch's owner has recorded since (a worker that
    /// lost the slice without knowing it yet never overwrites its taker's record): the write
    /// is conditional on the revision read, and tried again if another came between.
    fn record_reached(
        &self,
        pipeline: &str,
        slice: usize,
        epoch: u64,
        (checkpoint, sequence): (u64, u64),
    ) {
        let key = uploaded_key(pipeline, slice);
        let value: bytes::Bytes = serde_json::json!({
            "checkpoint": checkpoint,
            "sequence": sequence,
            "epoch": epoch,
            "at_ms": crate::time::wall_clock_ms(),
        })
        .to_string()
        .into();
        let Ok(bucket) = (self.connection).bucket(super::PIPELINES_BUCKET, Duration::ZERO) else {
            return;
        };
        for _ in 0..3 {
            let recorded = (self.connection).block_on(super::timed(bucket.entry(key.clone())));
            let Ok(Ok(recorded)) = recorded else {
                return;
            };
            let live =
                recorded.filter(|e| e.operation == async_nats::jetstream::kv::Operation::Put);
            let written = match live {
                Some(entry) if recorded_epoch(&entry.value) > epoch => return,
                Some(entry) => (self.connection)
                    .block_on(super::timed(bucket.update(
                        &key,
                        value.clone(),
                        entry.revision,
                    )))
                    .map(|r| r.is_ok()),
                None => (self.connection)
                    .block_on(super::timed(bucket.create(&key, value.clone())))
                    .map(|r| r.is_ok()),
            };
            if !matches!(written, Ok(false)) {
                return;
            }
        }
    }

    /// What `record_uploaded` last recorded for a slice, if anything.
    fn uploaded(&self, pipeline: &str, slice: usize) -> Option<serde_json::Value> {
        let bucket = self
            .connection
            .bucket(super::PIPELINES_BUCKET, Duration::ZERO)
            .ok()?;
        let bytes = (self.connection)
            .block_on(super::timed(bucket.get(uploaded_key(pipeline, slice))))
            .ok()?
            .ok()??;
        serde_json::from_slice(&bytes).ok()
    }

    /// The input sequence slice `slice`'s uploaded checkpoints last reached, as recorded
    /// (`None`: none recorded, or the record could not be read now).
    pub(super) fn uploaded_sequence(&self, pipeline: &str, slice: usize) -> Option<u64> {
        self.uploaded(pipeline, slice)?.get("sequence")?.as_u64()
    }

    /// Seeds slice `slice` of `pipeline`, not shared yet, with the checkpoint in data directory
    /// `data` (a savepoint's slice, made this pipeline's): whatever its store still holds (of
    /// an earlier pipeline of the name, or a fenced worker's late upload) is deleted, then the
    /// checkpoint is uploaded as a base of epoch 0, which the slice's first owner restores and
    /// follows with its own epoch's, and recorded as what the slice's uploads reach.
    pub(super) fn seed(&self, pipeline: &str, slice: usize, data: &Path) -> Result<()> {
        let (id, sequence) = self.seed_id(slice, data)?;
        let objects = self.store(pipeline, slice)?;
        for link in self.links(pipeline, slice)? {
            self.delete(&objects, &link.name);
        }
        if !self.links(pipeline, slice)?.is_empty() {
            return Err(ClusterError::NotSaved(format!(
                "slice {slice}'s object store {} still holds checkpoints that could not be \
                 deleted; start the pipeline again",
                bucket(pipeline, slice)
            )));
        }
        let file = data.join(STATE_FILE);
        let io = |source| ClusterError::Io {
            path: file.clone(),
            source,
        };
        let bytes = std::fs::metadata(&file).map_err(io)?.len();
        let objects = self.store(pipeline, slice)?;
        let name = link_name(pipeline, slice, true, 0, id);
        let mut reader = (self.connection)
            .block_on(tokio::fs::File::open(&file))
            .map_err(io)?;
        self.put(&objects, &name, &mut reader, bytes)?;
        // Of an earlier pipeline of the name, a record of any epoch is forgotten first.
        let key = uploaded_key(pipeline, slice);
        (self.connection).purge(super::PIPELINES_BUCKET, Duration::ZERO, &[key])?;
        self.record_reached(pipeline, slice, 0, (id, sequence));
        Ok(())
    }

    /// Whether slice `slice` of `pipeline` was seeded from `data` (its epoch-0 base is there).
    pub(super) fn seeded(&self, pipeline: &str, slice: usize, data: &Path) -> Result<bool> {
        let (id, _) = self.seed_id(slice, data)?;
        let links = self.links(pipeline, slice)?;
        Ok(links
            .iter()
            .any(|link| link.base && link.epoch == 0 && link.id == id))
    }

    /// The checkpoint id and input sequence of a savepoint's slice in `data`.
    fn seed_id(&self, slice: usize, data: &Path) -> Result<(u64, u64)> {
        let damaged = |e: &dyn std::fmt::Display| {
            ClusterError::Damaged(format!("the savepoint's slice {slice}: {e}"))
        };
        let store = RedbStore::open(data).map_err(|e| damaged(&e))?;
        manifest_id(&store).map_err(|e| damaged(&e))
    }

    /// The input sequence the checkpoint restored into `data_dir` reached.
    pub(super) fn restored_sequence(data_dir: &Path) -> Result<u64> {
        let store = RedbStore::open(data_dir)
            .map_err(|e| ClusterError::Damaged(format!("a restored checkpoint: {e}")))?;
        let (_, sequence) = manifest_id(&store)
            .map_err(|e| ClusterError::Damaged(format!("a restored checkpoint: {e}")))?;
        Ok(sequence)
    }

    fn delete(&self, store: &ObjectStore, name: &str) {
        let _ = self.connection.block_on(super::timed(store.delete(name)));
    }

    /// Replaces `data_dir` with slice `slice`'s last uploaded checkpoint (the newest epoch's
    /// base, then its deltas as long as they chain): that checkpoint's id, or `None` (and an
    /// empty directory) if the slice has none yet.
    pub(super) fn restore(
        &self,
        pipeline: &str,
        slice: usize,
        data_dir: &Path,
    ) -> Result<Option<u64>> {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| ClusterError::Io { path, source }
        };
        if data_dir.exists() {
            std::fs::remove_dir_all(data_dir).map_err(io(data_dir))?;
        }
        std::fs::create_dir_all(data_dir).map_err(io(data_dir))?;
        let links = self.links(pipeline, slice)?;
        let Some(base) = links
            .iter()
            .filter(|link| link.base)
            .max_by_key(|l| (l.epoch, l.id))
        else {
            // No checkpoint: a new slice, unless uploads were recorded (then the store lost
            // them, and starting empty would silently skip input the stream may no longer
            // hold).
            if let Some(uploaded) = self.uploaded(pipeline, slice) {
                return Err(ClusterError::Damaged(format!(
                    "slice {slice} of {pipeline} has no checkpoint in the object store, though {uploaded} was uploaded; restore the bucket {}, or delete the key {} in {} to start the slice empty",
                    bucket(pipeline, slice),
                    uploaded_key(pipeline, slice),
                    super::PIPELINES_BUCKET
                )));
            }
            return Ok(None);
        };
        let damaged = |e: &dyn std::fmt::Display| {
            ClusterError::Damaged(format!("checkpoint {}: {e}", base.name))
        };
        let partial = data_dir.join("download.partial");
        let objects = self.store(pipeline, slice)?;
        self.download(&objects, &base.name, &partial)?;
        let state = data_dir.join(STATE_FILE);
        std::fs::rename(&partial, &state).map_err(io(&state))?;
        let store = RedbStore::open(data_dir).map_err(|e| damaged(&e))?;
        let (mut head, _) = manifest_id(&store).map_err(|e| damaged(&e))?;
        let first = head;
        let deltas = links
            .iter()
            .filter(|link| !link.base && link.epoch == base.epoch && link.id > first);
        for link in deltas {
            let Some(bytes) = self.read(&objects, &link.name)? else {
                warn!(pipeline, slice, link = %link.name, "checkpoint chain broken (a delta is gone): restoring up to its break");
                break;
            };
            let delta = delta::decode(&bytes)
                .map_err(|e| ClusterError::Damaged(format!("checkpoint {}: {e}", link.name)))?;
            if delta.after != head {
                warn!(
                    pipeline,
                    slice,
                    after = delta.after,
                    head,
                    "checkpoint chain broken: restoring up to its break"
                );
                break;
            }
            for checkpoint in &delta.checkpoints {
                store.commit(checkpoint).map_err(|e| damaged(&e))?;
                head = checkpoint.id;
            }
        }
        drop(store);
        crate::checkpoint::write_marker(data_dir, head).map_err(|e| damaged(&e))?;
        Ok(Some(head))
    }

    fn download(&self, store: &ObjectStore, name: &str, to: &Path) -> Result<()> {
        let (store, owned, to) = (store.clone(), name.to_owned(), to.to_owned());
        self.bounded(name, async move {
            let mut object = store.get(&owned).await.map_err(NatsFailure::client)?;
            let mut file = tokio::fs::File::create(&to).await?;
            tokio::io::copy(&mut object, &mut file).await?;
            Ok(file.sync_all().await?)
        })
    }

    /// Runs a download as a task of its own, bounded in time: one that stalls (its chunks
    /// purged meanwhile) or whose client panics is an error, not a stuck or dead worker.
    fn bounded<T: Send + 'static>(
        &self,
        name: &str,
        work: impl std::future::Future<Output = std::result::Result<T, NatsFailure>> + Send + 'static,
    ) -> Result<T> {
        let task = self.connection.runtime.spawn(work);
        self.connection
            .block_on(async { tokio::time::timeout(DOWNLOAD_TIMEOUT, task).await })
            .map_err(|_| NatsFailure::TimedOut(DOWNLOAD_TIMEOUT))
            .and_then(|joined| joined.map_err(NatsFailure::from))
            .and_then(|result| result)
            .map_err(|e| self.connection.error(&format!("downloading {name}"), e))
    }

    /// A delta's bytes (`None`: it is gone, which breaks the chain there).
    fn read(&self, store: &ObjectStore, name: &str) -> Result<Option<Vec<u8>>> {
        let (store, owned) = (store.clone(), name.to_owned());
        self.bounded(name, async move {
            let object = match store.get(&owned).await {
                Ok(object) => object,
                Err(e) if e.kind() == GetErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(NatsFailure::client(e)),
            };
            if object.info.size as u64 > MAX_DELTA_BYTES {
                return Err(NatsFailure::TooLarge(object.info.size as u64));
            }
            let mut bytes = Vec::new();
            object.take(MAX_DELTA_BYTES).read_to_end(&mut bytes).await?;
            Ok(Some(bytes))
        })
    }
}

/// The id of the store's last checkpoint and the input sequence it reached.
fn manifest_id(store: &RedbStore) -> std::result::Result<(u64, u64), ManifestError> {
    let manifest = store.manifest()?.ok_or(ManifestError::Missing)?;
    let manifest = serde_json::from_slice::<crate::checkpoint::Manifest>(&manifest)?;
    Ok((manifest.id, manifest.source.offset))
}

/// What the uploader has to do.
#[derive(Default)]
struct Pending {
    /// The running slice's store.
    store: Option<RedbStore>,
    /// Checkpoints committed and not yet uploaded.
    queue: VecDeque<Queued>,
    queued_bytes: usize,
    /// The queue overflowed (or an upload failed): the next upload is a base.
    rebase: bool,
    /// The last checkpoint uploaded (the chain's head).
    uploaded: u64,
    /// The input sequence it reached, once this uploader uploaded one.
    uploaded_sequence: Option<u64>,
    /// No more checkpoints will come: upload what is queued and stop.
    closed: bool,
}

struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
    /// The slice's lease was lost: upload nothing more (the new owner's checkpoints count).
    fenced: AtomicBool,
}

/// A checkpoint waiting for upload: its id, the input sequence it reached, its record.
struct Queued {
    id: u64,
    sequence: u64,
    record: Vec<u8>,
}

/// Where one slice's chain is: what the uploader needs besides the queue.
struct Chain {
    pipeline: String,
    slice: usize,
    epoch: u64,
    /// Whether this epoch's base is uploaded.
    based: bool,
    head: u64,
    /// The input sequence the head reached.
    head_sequence: u64,
    base_bytes: u64,
    chain_bytes: u64,
    chain_len: usize,
    scratch: PathBuf,
}

/// Uploads one running slice's checkpoints in the background: a base first (this owner's
/// epoch), then each checkpoint's changes as a delta (those committed during one upload go
/// together into the next), and a new base when the deltas outgrow the last.
pub(super) struct Uploader {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Uploader {
    /// Starts uploading slice `slice` of `pipeline` under lease revision `epoch`, copying
    /// bases through the directory `scratch`.
    pub(super) fn start(
        snapshots: Arc<Snapshots>,
        pipeline: &str,
        slice: usize,
        epoch: u64,
        scratch: PathBuf,
    ) -> std::io::Result<Uploader> {
        let shared = Arc::new(Shared {
            pending: Mutex::default(),
            wake: Condvar::new(),
            fenced: AtomicBool::new(false),
        });
        let chain = Chain {
            pipeline: pipeline.to_owned(),
            slice,
            epoch,
            based: false,
            head: 0,
            head_sequence: 0,
            base_bytes: 0,
            chain_bytes: 0,
            chain_len: 0,
            scratch,
        };
        let thread = std::thread::Builder::new()
            .name(format!("weir-upload-{slice}"))
            .spawn({
                let shared = shared.clone();
                move || upload_loop(&shared, &snapshots, chain)
            })?;
        Ok(Uploader {
            shared,
            thread: Some(thread),
        })
    }

    /// What the slice's run calls after each checkpoint.
    pub(super) fn listener(&self) -> CommitListener {
        let shared = self.shared.clone();
        Arc::new(move |store: &RedbStore, checkpoint: &StoredCheckpoint| {
            let record = delta::encode_checkpoint(checkpoint);
            let sequence =
                serde_json::from_slice::<crate::checkpoint::Manifest>(&checkpoint.manifest)
                    .map_or(0, |m| m.source.offset);
            let mut pending = shared.pending.lock().expect("upload lock");
            pending.store = Some(store.clone());
            pending.queued_bytes += record.len();
            pending.queue.push_back(Queued {
                id: checkpoint.id,
                sequence,
                record,
            });
            if pending.queued_bytes > MAX_QUEUED_BYTES {
                pending.queue.clear();
                pending.queued_bytes = 0;
                pending.rebase = true;
            }
            shared.wake.notify_one();
        })
    }

    /// What fences this uploader, for another thread to call.
    pub(super) fn fencer(&self) -> impl Fn() + Send + Sync + 'static {
        let shared = self.shared.clone();
        move || {
            shared.fenced.store(true, Ordering::SeqCst);
            shared.wake.notify_one();
        }
    }

    /// The lease is lost: nothing more is uploaded.
    pub(super) fn fence(&self) {
        self.fencer()();
    }

    /// Whether the upload thread ended without being asked to (it panicked): the slice's
    /// checkpoints would no longer leave this worker, so its run must stop and start again.
    pub(super) fn died(&self) -> bool {
        self.thread
            .as_ref()
            .is_some_and(|thread| thread.is_finished())
    }

    /// The input sequence the checkpoint this uploader uploaded last reached (what a takeover
    /// would resume from, while this worker holds the slice), if it uploaded one.
    pub(super) fn uploaded_sequence(&self) -> Option<u64> {
        (self.shared.pending.lock().expect("upload lock")).uploaded_sequence
    }

    /// Uploads what is queued (unless fenced) and stops: the last uploaded checkpoint.
    pub(super) fn finish(mut self) -> u64 {
        self.shared.pending.lock().expect("upload lock").closed = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.shared.pending.lock().expect("upload lock").uploaded
    }
}

impl Drop for Uploader {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.fence();
            self.shared.pending.lock().expect("upload lock").closed = true;
            self.shared.wake.notify_one();
        }
    }
}

/// How often an upload is tried again once the slice stopped (the server may be away).
const FINAL_ATTEMPTS: u32 = 10;

/// What to upload next: the store (for a base) and the queued checkpoints.
type Work = (RedbStore, Vec<Queued>, bool);

fn next_work(shared: &Shared) -> Option<Work> {
    let mut pending = shared.pending.lock().expect("upload lock");
    while !pending.closed && pending.queue.is_empty() && !shared.fenced.load(Ordering::SeqCst) {
        pending = shared.wake.wait(pending).expect("upload lock");
    }
    if shared.fenced.load(Ordering::SeqCst) || (pending.queue.is_empty() && !pending.rebase) {
        return None;
    }
    let store = pending.store.clone()?;
    let queued = pending.queue.drain(..).collect();
    pending.queued_bytes = 0;
    let rebase = std::mem::take(&mut pending.rebase);
    Some((store, queued, rebase))
}

fn upload_loop(shared: &Shared, snapshots: &Snapshots, mut chain: Chain) {
    let mut failures = 0;
    while let Some((store, queued, rebase)) = next_work(shared) {
        let started = Instant::now();
        let last = queued.last().map_or(chain.head, |queued| queued.id);
        let outcome = if !chain.based
            || rebase
            || chain.chain_len >= MAX_CHAIN
            || chain.chain_bytes > MIN_CHAIN_BYTES.max(2 * chain.base_bytes)
        {
            upload_base(snapshots, &mut chain, &store, &shared.fenced)
        } else {
            upload_delta(snapshots, &mut chain, &queued)
        };
        match outcome {
            Ok(()) => {
                failures = 0;
                let mut pending = shared.pending.lock().expect("upload lock");
                pending.uploaded = chain.head;
                if !shared.fenced.load(Ordering::SeqCst) {
                    pending.uploaded_sequence = Some(chain.head_sequence);
                }
                // A base copies the newest commit: the checkpoints queued meanwhile that it
                // holds are done.
                while pending.queue.front().is_some_and(|q| q.id <= chain.head) {
                    let done = pending.queue.pop_front().expect("checked");
                    pending.queued_bytes -= done.record.len();
                }
                if !shared.fenced.load(Ordering::SeqCst) {
                    snapshots.record_uploaded(&chain);
                }
                let labels = [("pipeline", chain.pipeline.clone())];
                metrics::counter!("weir_slice_uploads_total", &labels).increment(1);
                metrics::histogram!("weir_slice_upload_seconds", &labels)
                    .record(started.elapsed().as_secs_f64());
                if pending.closed && pending.queue.is_empty() {
                    info!(pipeline = %chain.pipeline, slice = chain.slice, checkpoint = chain.head, "last checkpoint uploaded");
                }
            }
            Err(e) => {
                failures += 1;
                warn!(pipeline = %chain.pipeline, slice = chain.slice, checkpoint = last, error = %e, "checkpoint upload failed");
                let mut pending = shared.pending.lock().expect("upload lock");
                // What was taken is lost to the queue: a base covers it.
                pending.rebase = true;
                if pending.closed && failures >= FINAL_ATTEMPTS {
                    return;
                }
                drop(pending);
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
}

/// Uploads a copy of the store's last commit as this epoch's base, then deletes what it
/// replaces: the earlier epochs' objects and this epoch's older ones.
fn upload_base(
    snapshots: &Snapshots,
    chain: &mut Chain,
    store: &RedbStore,
    fenced: &AtomicBool,
) -> std::result::Result<(), UploadError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| UploadError::Io { path, source }
    };
    let _ = std::fs::remove_dir_all(&chain.scratch);
    std::fs::create_dir_all(&chain.scratch).map_err(io(&chain.scratch))?;
    let file = chain.scratch.join(STATE_FILE);
    store.copy_to(&file)?;
    let (id, sequence) = manifest_id(&RedbStore::open(&chain.scratch)?)?;
    if fenced.load(Ordering::SeqCst) {
        return Err(UploadError::LeaseLost);
    }
    let bytes = std::fs::metadata(&file).map_err(io(&file))?.len();
    let name = link_name(&chain.pipeline, chain.slice, true, chain.epoch, id);
    let objects = snapshots.store(&chain.pipeline, chain.slice)?;
    // Streamed from the file: the state may be larger than memory.
    let uploaded = snapshots
        .connection
        .block_on(tokio::fs::File::open(&file))
        .map_err(io(&file))
        .and_then(|mut reader| Ok(snapshots.put(&objects, &name, &mut reader, bytes)?));
    let _ = std::fs::remove_dir_all(&chain.scratch);
    uploaded?;
    (chain.based, chain.head, chain.base_bytes) = (true, id, bytes);
    chain.head_sequence = sequence;
    (chain.chain_bytes, chain.chain_len) = (0, 0);
    if let Ok(links) = snapshots.links(&chain.pipeline, chain.slice) {
        let replaced = links
            .iter()
            .filter(|link| link.epoch < chain.epoch || (link.epoch == chain.epoch && link.id < id));
        for link in replaced {
            snapshots.delete(&objects, &link.name);
        }
    }
    Ok(())
}

/// Uploads the queued checkpoints after the chain's head as one delta.
fn upload_delta(
    snapshots: &Snapshots,
    chain: &mut Chain,
    queued: &[Queued],
) -> std::result::Result<(), UploadError> {
    let records: Vec<Vec<u8>> = (queued.iter())
        .filter(|q| q.id > chain.head)
        .map(|q| q.record.clone())
        .collect();
    let Some(last) = queued.last().filter(|q| q.id > chain.head) else {
        return Ok(());
    };
    let (last, sequence) = (last.id, last.sequence);
    let bytes = delta::join(chain.head, &records);
    let name = link_name(&chain.pipeline, chain.slice, false, chain.epoch, last);
    let objects = snapshots.store(&chain.pipeline, chain.slice)?;
    snapshots.put(&objects, &name, &mut bytes.as_slice(), bytes.len() as u64)?;
    chain.head = last;
    chain.head_sequence = sequence;
    chain.chain_bytes += bytes.len() as u64;
    chain.chain_len += 1;
    Ok(())
}
