//! [`Periodic`]: a thread that does one round of work every period until it is dropped (the
//! watermark exchange, the progress report).
//!
//! Depends on nothing in the crate.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A named thread running a round every period; dropping it stops the thread and waits for
/// the round under way.
pub(super) struct Periodic {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Periodic {
    /// Starts `round`, then every `every` again.
    pub(super) fn start(
        name: &str,
        every: Duration,
        mut round: impl FnMut() + Send + 'static,
    ) -> std::io::Result<Periodic> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new().name(name.into()).spawn({
            let stop = stop.clone();
            move || {
                while !stop.load(Ordering::Relaxed) {
                    round();
                    std::thread::sleep(every);
                }
            }
        })?;
        Ok(Periodic {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Periodic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
