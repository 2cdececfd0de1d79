//! A served pipeline's ingest: its ingest log (opened on first use), appending events to it
//! under the pipeline's rate limit and how far behind it may fall, the lines the server's timers
//! append (idle advances and early lines), and truncating the log behind the last checkpoint and
//! the savepoints, which pin it.
//!
//! Depends on `serve` (its request errors and the rate limit), `source`, `spec` and `time`, and
//! on its parent `slot` (the ingest file's name) and its sibling `savepoints` (the pin).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tracing::warn;

use super::INGEST_FILE;
use super::Slot;
use super::damaged;
use crate::serve::RequestError;
use crate::source::IngestLog;

/// The most ingest requests one pipeline handles at once; more get `429`. Appends to one log
/// take turns anyway; the bound keeps one pipeline's flood from taking every blocking thread.
pub const MAX_CONCURRENT_INGESTS: usize = 8;

impl Slot {
    /// The pipeline's ingest log, opened on first use (refused for a pipeline that reads NATS).
    pub(super) fn ingest_log(&self) -> Result<Arc<IngestLog>, RequestError> {
        if let Some(nats) = self.nats_source() {
            return Err(RequestError::Conflict(format!(
                "pipeline {:?} reads NATS stream {:?}: publish its events there",
                self.name, nats.stream
            )));
        }
        if let Some(kafka) = self.kafka_source() {
            return Err(RequestError::Conflict(format!(
                "pipeline {:?} reads Kafka topic {:?}: produce its events there",
                self.name, kafka.topic
            )));
        }
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(RequestError::Conflict(format!(
                "pipeline {:?} was deleted",
                self.name
            )));
        }
        let mut ingest = self.ingest.lock().expect("ingest lock");
        if let Some(log) = &*ingest {
            return Ok(log.clone());
        }
        let segment_size = match &self.lock().managed {
            Ok(managed) => managed.spec.segment_size,
            Err(_) => crate::spec::DEFAULT_SEGMENT_SIZE,
        };
        let log = Arc::new(IngestLog::open(&self.dir.join(INGEST_FILE), segment_size)?);
        *ingest = Some(log.clone());
        Ok(log)
    }

    /// Appends events to the ingest log, whole and durably, while the pipeline runs and is not
    /// behind by more than its `max_behind` (then `Busy`: 429 with `Retry-After`). Returns how
    /// many lines were accepted. `partition` is the watermark partition the producer named.
    pub fn ingest(&self, lines: &[&str], partition: Option<&str>) -> Result<usize, RequestError> {
        let (control, max_behind, max_rate) = {
            let mut inner = self.lock();
            Self::reap(&mut inner);
            if let Err(reason) = &inner.managed {
                return Err(damaged(reason));
            }
            self.check_not_deleting(&inner)?;
            if !Self::is_running(&inner) || inner.stopping {
                return Err(RequestError::Conflict(format!(
                    "pipeline {} is not running: start it first",
                    self.name
                )));
            }
            let (max_behind, max_rate) = (inner.managed.as_ref())
                .map_or((0, None), |m| (m.spec.max_behind, m.spec.max_rate));
            (inner.control.clone(), max_behind, max_rate)
        };
        if let Some(rate) = max_rate {
            let now = Instant::now();
            let mut limit = self.rate.lock().expect("rate lock");
            let limit = match &mut *limit {
                Some(limit) if limit.rate() == rate => limit,
                other => other.insert(crate::serve::rate::RateLimit::new(rate, now)),
            };
            if let Err(wait) = limit.take(lines.len() as u64, now) {
                let labels = [
                    ("pipeline", self.name.clone()),
                    ("reason", "rate".to_owned()),
                ];
                metrics::counter!("weir_ingest_throttled_total", &labels).increment(1);
                return Err(RequestError::Busy(format!(
                    "pipeline {:?} takes at most {rate} events per second \
                     (source.max_events_per_second); room for these in {} ms: nothing of this \
                     request was kept, retry after the Retry-After delay",
                    self.name,
                    wait.as_millis()
                )));
            }
        }
        let log = self.ingest_log()?;
        if let Some(control) = control {
            let read = control.stats.input_offset.load(Ordering::Relaxed);
            let behind = log.gate().committed().saturating_sub(read);
            if behind > max_behind {
                let labels = [
                    ("pipeline", self.name.clone()),
                    ("reason", "behind".to_owned()),
                ];
                metrics::counter!("weir_ingest_throttled_total", &labels).increment(1);
                return Err(RequestError::Busy(format!(
                    "pipeline {:?} is behind: {behind} bytes of accepted events are still to be \
                     read, more than its source.max_behind of {max_behind}; nothing of this \
                     request was kept: retry after the Retry-After delay",
                    self.name
                )));
            }
        }
        log.append(crate::time::wall_clock_ms() as i64, partition, lines)?;
        metrics::counter!("weir_ingested_events_total", "pipeline" => self.name.clone())
            .increment(lines.len() as u64);
        Ok(lines.len())
    }

    /// A turn to ingest, or `Busy` when this pipeline already handles as many ingests as allowed.
    pub fn ingest_turn(&self) -> Result<tokio::sync::OwnedSemaphorePermit, RequestError> {
        self.ingesting.clone().try_acquire_owned().map_err(|_| {
            RequestError::Busy(format!(
                "pipeline {:?} is handling {MAX_CONCURRENT_INGESTS} ingest requests already; retry shortly",
                self.name
            ))
        })
    }

    /// For a running pipeline with `[watermark] advance_when_idle` whose input has been quiet
    /// that long: appends an advance to its ingest log (the pipeline moves its watermark on by
    /// the quiet time when it reads it); with `[emit] early_interval`, an early line once that
    /// interval has passed and events came. Both are input, so a replay repeats them where they
    /// were.
    pub fn append_timers(&self) {
        let (idle, early) = {
            let Ok(mut inner) = self.inner.try_lock() else {
                return; // busy: the next tick comes soon
            };
            Self::reap(&mut inner);
            if !Self::is_running(&inner) || inner.stopping {
                return;
            }
            match &inner.managed {
                Ok(m) => (m.spec.advance_when_idle, m.spec.emit.early_interval),
                Err(_) => return,
            }
        };
        if idle.is_none() && early.is_none() {
            return;
        }
        let Some(log) = self.ingest.lock().expect("ingest lock").clone() else {
            return;
        };
        let now = crate::time::wall_clock_ms() as i64;
        if let Some(interval) = early
            && let Err(e) = log.append_early(now, interval)
        {
            warn!(pipeline = %self.name, error = %e, "could not append an early line");
        }
        let Some(idle) = idle else {
            return;
        };
        match log.append_advance(now, idle) {
            Ok(Some(quiet_ms)) => {
                tracing::debug!(pipeline = %self.name, quiet_ms, "input idle: watermark advanced")
            }
            Ok(None) => {}
            Err(e) => warn!(pipeline = %self.name, error = %e, "could not append an idle advance"),
        }
    }

    /// Deletes the ingest log's segments before the last checkpoint's input offset (a replay
    /// starts there) and before every savepoint's, once per new checkpoint offset, and
    /// publishes the log's size on disk.
    pub fn truncate_log(&self) {
        let offset = match self.inner.try_lock() {
            Ok(inner) => match &inner.control {
                Some(control) => control.stats.checkpointed_offset.load(Ordering::Relaxed),
                None => return,
            },
            Err(_) => return, // busy: the next tick comes soon
        };
        if self.holds.load(Ordering::Acquire) > 0 {
            return; // a savepoint is being taken or copied
        }
        let offset = offset.min(self.pinned());
        if offset <= self.truncated.load(Ordering::Relaxed) {
            return;
        }
        let Some(log) = self.ingest.lock().expect("ingest lock").clone() else {
            return;
        };
        match log.truncate_before(offset) {
            Ok(freed) => {
                self.truncated.store(offset, Ordering::Relaxed);
                if freed > 0 {
                    tracing::debug!(pipeline = %self.name, offset, freed, "ingest log truncated");
                }
                metrics::gauge!("weir_ingest_log_bytes", "pipeline" => self.name.clone())
                    .set(log.disk_bytes() as f64);
            }
            Err(e) => warn!(pipeline = %self.name, error = %e, "could not truncate the ingest log"),
        }
    }
}
