//! Slice checkpoints in the `weir-checkpoints` object store: each slice's last uploaded
//! checkpoint is one object, `<pipeline>/slice-<i>`, a copy of the slice's state file as
//! committed (replaced whole by the next upload, so a reader sees the old one or the new one).
//! [`Uploader`] uploads a running slice's checkpoints in the background, newest first;
//! [`Snapshots::restore`] puts the last one into a data directory for the slice's next run.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::object_store::{GetErrorKind, ObjectStore};
use tracing::{info, warn};

use super::{CHECKPOINTS_BUCKET, ClusterError, Connection, Result};
use crate::pipeline::CommitListener;
use crate::state::{RedbStore, STATE_FILE};

/// The object store of slice checkpoints.
pub(super) struct Snapshots {
    connection: Arc<Connection>,
    store: ObjectStore,
}

fn object_name(pipeline: &str, slice: usize) -> String {
    format!("{pipeline}/slice-{slice}")
}

impl Snapshots {
    pub(super) fn open(connection: Arc<Connection>) -> Result<Snapshots> {
        let store = connection.objects(CHECKPOINTS_BUCKET)?;
        Ok(Snapshots { connection, store })
    }

    /// Uploads the state file `file` as slice `slice`'s checkpoint.
    fn upload(&self, pipeline: &str, slice: usize, file: &Path) -> Result<()> {
        let name = object_name(pipeline, slice);
        self.connection
            .block_on(async {
                let mut reader = tokio::fs::File::open(file)
                    .await
                    .map_err(|e| e.to_string())?;
                self.store
                    .put(name.as_str(), &mut reader)
                    .await
                    .map_err(|e| e.to_string())
            })
            .map(drop)
            .map_err(|e| self.connection.error(&format!("uploading {name}"), e))
    }

    /// Replaces `data_dir` with slice `slice`'s last uploaded checkpoint: the id of that
    /// checkpoint, or `None` (and an empty directory) if the slice has none yet.
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
        let name = object_name(pipeline, slice);
        let partial = data_dir.join("download.partial");
        let found = self
            .connection
            .block_on(async {
                let mut object = match self.store.get(&name).await {
                    Ok(object) => object,
                    Err(e) if e.kind() == GetErrorKind::NotFound => return Ok(false),
                    Err(e) => return Err(e.to_string()),
                };
                let mut file = tokio::fs::File::create(&partial)
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::io::copy(&mut object, &mut file)
                    .await
                    .map_err(|e| e.to_string())?;
                file.sync_all().await.map_err(|e| e.to_string())?;
                Ok(true)
            })
            .map_err(|e| self.connection.error(&format!("downloading {name}"), e))?;
        if !found {
            return Ok(None);
        }
        let state = data_dir.join(STATE_FILE);
        std::fs::rename(&partial, &state).map_err(io(&state))?;
        let id = {
            let store = RedbStore::open(data_dir)
                .map_err(|e| ClusterError::Damaged(format!("checkpoint {name}: {e}")))?;
            let manifest = store
                .manifest()
                .map_err(|e| ClusterError::Damaged(format!("checkpoint {name}: {e}")))?
                .ok_or_else(|| ClusterError::Damaged(format!("checkpoint {name}: no manifest")))?;
            serde_json::from_slice::<crate::checkpoint::Manifest>(&manifest)
                .map_err(|e| ClusterError::Damaged(format!("checkpoint {name}: {e}")))?
                .id
        };
        crate::checkpoint::write_marker(data_dir, id)
            .map_err(|e| ClusterError::Damaged(format!("checkpoint {name}: {e}")))?;
        Ok(Some(id))
    }
}

/// What the uploader has to do.
#[derive(Default)]
struct Pending {
    /// The running slice's store and its last committed checkpoint.
    store: Option<RedbStore>,
    committed: u64,
    /// The last checkpoint uploaded (or a later one: a copy holds the newest commit).
    uploaded: u64,
    /// No more checkpoints will come: upload the last and stop.
    closed: bool,
}

struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
    /// The slice's lease was lost: upload nothing more (the new owner's checkpoints count).
    fenced: AtomicBool,
}

/// Uploads one running slice's checkpoints in the background, coalescing: while one upload
/// runs, only the newest checkpoint committed meanwhile is uploaded next.
pub(super) struct Uploader {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Uploader {
    /// Starts uploading slice `slice` of `pipeline`, copying through `scratch` (a file path).
    pub(super) fn start(
        snapshots: Arc<Snapshots>,
        pipeline: &str,
        slice: usize,
        scratch: PathBuf,
    ) -> std::io::Result<Uploader> {
        let shared = Arc::new(Shared {
            pending: Mutex::default(),
            wake: Condvar::new(),
            fenced: AtomicBool::new(false),
        });
        let pipeline = pipeline.to_owned();
        let thread = std::thread::Builder::new()
            .name(format!("weir-upload-{slice}"))
            .spawn({
                let shared = shared.clone();
                move || upload_loop(&shared, &snapshots, &pipeline, slice, &scratch)
            })?;
        Ok(Uploader {
            shared,
            thread: Some(thread),
        })
    }

    /// What the slice's run calls after each checkpoint.
    pub(super) fn listener(&self) -> CommitListener {
        let shared = self.shared.clone();
        Arc::new(move |store: &RedbStore, id: u64| {
            let mut pending = shared.pending.lock().expect("upload lock");
            pending.store = Some(store.clone());
            pending.committed = id;
            shared.wake.notify_one();
        })
    }

    /// The lease is lost: nothing more is uploaded.
    pub(super) fn fence(&self) {
        self.shared.fenced.store(true, Ordering::SeqCst);
        self.shared.wake.notify_one();
    }

    /// Uploads the last checkpoint (unless fenced) and stops: the last uploaded checkpoint.
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

fn upload_loop(
    shared: &Shared,
    snapshots: &Snapshots,
    pipeline: &str,
    slice: usize,
    scratch: &Path,
) {
    let mut failures = 0;
    loop {
        let (store, id) = {
            let mut pending = shared.pending.lock().expect("upload lock");
            while !pending.closed
                && pending.committed <= pending.uploaded
                && !shared.fenced.load(Ordering::SeqCst)
            {
                pending = shared.wake.wait(pending).expect("upload lock");
            }
            let due = pending.committed > pending.uploaded;
            match (&pending.store, due) {
                (Some(store), true) if !shared.fenced.load(Ordering::SeqCst) => {
                    (store.clone(), pending.committed)
                }
                _ => return,
            }
        };
        let started = Instant::now();
        let _ = std::fs::remove_file(scratch);
        let uploaded = store
            .copy_to(scratch)
            .map_err(|e| e.to_string())
            .and_then(|()| {
                if shared.fenced.load(Ordering::SeqCst) {
                    return Err("the lease was lost".into());
                }
                snapshots
                    .upload(pipeline, slice, scratch)
                    .map_err(|e| e.to_string())
            });
        let _ = std::fs::remove_file(scratch);
        match uploaded {
            Ok(()) => {
                failures = 0;
                let mut pending = shared.pending.lock().expect("upload lock");
                pending.uploaded = pending.uploaded.max(id);
                metrics::counter!("weir_slice_uploads_total", "pipeline" => pipeline.to_owned())
                    .increment(1);
                metrics::histogram!("weir_slice_upload_seconds", "pipeline" => pipeline.to_owned())
                    .record(started.elapsed().as_secs_f64());
                if pending.closed {
                    info!(pipeline, slice, checkpoint = id, "last checkpoint uploaded");
                }
            }
            Err(e) => {
                failures += 1;
                warn!(pipeline, slice, checkpoint = id, error = %e, "checkpoint upload failed");
                let closed = shared.pending.lock().expect("upload lock").closed;
                if closed && failures >= FINAL_ATTEMPTS {
                    return;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
}
