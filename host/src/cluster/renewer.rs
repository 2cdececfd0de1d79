//! [`Renewer`]: a worker's leases kept alive by a thread of their own, every [`BEAT`], whatever
//! the worker's loop is busy with (a final upload, a sink waiting for an absent server). A slice
//! whose lease is lost, or went unrenewed for a whole lease (the server unreachable from here),
//! is fenced and told to stop from this thread at once; the worker's loop then reaps it.
//!
//! Depends on nothing outside `cluster` (`leases.rs`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::warn;

use super::leases::{Leases, Renewal};
use super::{BEAT, LEASE};

/// What to do when a held slice's lease is lost: fence its uploads and stop its run.
pub(super) type OnLoss = Box<dyn Fn() + Send + Sync>;

/// A slice lease this worker holds.
struct Held {
    revision: u64,
    renewed: Instant,
    lost: bool,
    on_loss: OnLoss,
}

struct Shared {
    leases: Leases,
    held: Mutex<BTreeMap<usize, Held>>,
    reachable: AtomicBool,
    stop: AtomicBool,
}

/// The renewing thread and the leases it keeps.
pub(super) struct Renewer {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Renewer {
    pub(super) fn start(leases: Leases) -> std::io::Result<Renewer> {
        let shared = Arc::new(Shared {
            leases,
            held: Mutex::default(),
            reachable: AtomicBool::new(true),
            stop: AtomicBool::new(false),
        });
        let thread = std::thread::Builder::new()
            .name("weir-leases".into())
            .spawn({
                let shared = shared.clone();
                move || renew_loop(&shared)
            })?;
        Ok(Renewer {
            shared,
            thread: Some(thread),
        })
    }

    /// The leases, for taking slices and reading the membership.
    pub(super) fn leases(&self) -> &Leases {
        &self.shared.leases
    }

    /// Keeps slice `slice`'s lease (taken at `revision`) alive from now on.
    pub(super) fn hold(&self, slice: usize, revision: u64, on_loss: OnLoss) {
        let held = Held {
            revision,
            renewed: Instant::now(),
            lost: false,
            on_loss,
        };
        self.lock().insert(slice, held);
    }

    /// Gives slice `slice`'s lease up (the slice was stopped and its checkpoint uploaded).
    pub(super) fn release(&self, slice: usize) {
        let mut held = self.lock();
        if let Some(lease) = held.remove(&slice)
            && !lease.lost
        {
            // Under the lock: no renewal can move the revision in between.
            self.shared.leases.release(slice, lease.revision);
        }
    }

    /// Forgets a lost slice's lease (it is not ours to release).
    pub(super) fn forget(&self, slice: usize) {
        self.lock().remove(&slice);
    }

    /// Renews slice `slice`'s lease now: whether this process holds it still (then nobody
    /// else has taken the slice, nor can before the lease runs out). A lease found lost is left
    /// to the renewing thread, which stops the slice.
    pub(super) fn confirm(&self, slice: usize) -> bool {
        let mut held = self.lock();
        let Some(lease) = held.get_mut(&slice).filter(|lease| !lease.lost) else {
            return false;
        };
        match self.shared.leases.renew(slice, lease.revision) {
            Renewal::Held(revision) => {
                (lease.revision, lease.renewed) = (revision, Instant::now());
                true
            }
            Renewal::Lost | Renewal::Unreachable => false,
        }
    }

    /// The held slices whose lease was lost.
    pub(super) fn lost(&self) -> Vec<usize> {
        (self.lock().iter())
            .filter(|(_, lease)| lease.lost)
            .map(|(slice, _)| *slice)
            .collect()
    }

    /// Whether the last round of renewals reached the server.
    pub(super) fn reachable(&self) -> bool {
        self.shared.reachable.load(Ordering::SeqCst)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, Held>> {
        self.shared.held.lock().expect("lease lock")
    }
}

impl Drop for Renewer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn renew_loop(shared: &Shared) {
    while !shared.stop.load(Ordering::SeqCst) {
        let started = Instant::now();
        if let Err(e) = shared.leases.beat() {
            warn!(error = %e, "membership not renewed");
        }
        let slices: Vec<usize> = shared
            .held
            .lock()
            .expect("lease lock")
            .keys()
            .copied()
            .collect();
        let mut reachable = true;
        for slice in slices {
            // One slice at a time under the lock, so a release never races a renewal.
            let mut held = shared.held.lock().expect("lease lock");
            let Some(lease) = held.get_mut(&slice).filter(|lease| !lease.lost) else {
                continue;
            };
            let lost = match shared.leases.renew(slice, lease.revision) {
                Renewal::Held(revision) => {
                    (lease.revision, lease.renewed) = (revision, Instant::now());
                    false
                }
                Renewal::Lost => true,
                Renewal::Unreachable => {
                    reachable = false;
                    lease.renewed.elapsed() > LEASE
                }
            };
            if lost {
                warn!(
                    slice,
                    "slice lease lost (taken, expired, or unrenewable for a whole lease): stopping it"
                );
                lease.lost = true;
                (lease.on_loss)();
            }
        }
        shared.reachable.store(reachable, Ordering::SeqCst);
        let until = started + BEAT;
        let away = !shared.leases.connected();
        while Instant::now() < until && !shared.stop.load(Ordering::SeqCst) {
            // Back from an outage: renew at once, the leases are older than ever.
            if away && shared.leases.connected() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
