//! [`PipelineMetrics`]: the figures an operator of a pipeline charts, as Prometheus metrics
//! labelled with the pipeline's name (operator calls are labelled with the version too, in
//! `rollout`). The README maps each to its Flink name. Handles are registered once per run, so
//! the hot path only adds to atomics; without a recorder installed (`weir run` without
//! `--metrics-listen`, the benchmark) they cost nothing.
//!
//! Depends on `event` (dead-letter causes), `checkpoint` (its figures) and `time`.

use std::sync::Arc;

use metrics::{Counter, Gauge, Histogram};

use crate::checkpoint::CheckpointStats;
use crate::event::DeadCause;
use crate::time::{MINUS_INFINITY, Millis, PLUS_INFINITY};

/// One pipeline's metrics.
pub struct PipelineMetrics {
    pipeline: Arc<str>,
    events_in: Counter,
    late: Counter,
    late_ratio: Gauge,
    watermark: Gauge,
    watermark_lag: Gauge,
    input_lag: Gauge,
    input_lag_sequences: Gauge,
    state_keys: Gauge,
    state_bytes: Gauge,
    checkpoints: Counter,
    checkpoint_duration: Histogram,
    checkpoint_bytes: Gauge,
    backpressure: Counter,
    /// Operator time charged to the CPU quota (µs), and time waited for it (ms).
    pub(crate) cpu_used: Counter,
    pub(crate) cpu_throttled: Counter,
    /// Linear memory the operator instances hold from the pipeline's pool.
    pub(crate) operator_memory: Gauge,
    /// Keys parked in the quarantine, and their events.
    pub(crate) quarantined_keys: Gauge,
    pub(crate) quarantined_events: Gauge,
    /// Whether the series by kind and cause (made per batch) are recorded: not for a sandbox.
    recorded: bool,
}

impl std::fmt::Debug for PipelineMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipelineMetrics")
            .field("pipeline", &self.pipeline)
            .finish()
    }
}

impl PipelineMetrics {
    /// The metrics of pipeline `pipeline`.
    pub fn new(pipeline: &str) -> PipelineMetrics {
        let p = || ("pipeline", pipeline.to_owned());
        PipelineMetrics {
            pipeline: pipeline.into(),
            events_in: metrics::counter!("weir_events_in_total", &[p()]),
            late: metrics::counter!("weir_late_events_total", &[p()]),
            late_ratio: metrics::gauge!("weir_late_ratio", &[p()]),
            watermark: metrics::gauge!("weir_watermark_ms", &[p()]),
            watermark_lag: metrics::gauge!("weir_watermark_lag_ms", &[p()]),
            input_lag: metrics::gauge!("weir_input_lag_bytes", &[p()]),
            input_lag_sequences: metrics::gauge!("weir_input_lag_sequences", &[p()]),
            state_keys: metrics::gauge!("weir_state_keys", &[p()]),
            state_bytes: metrics::gauge!("weir_state_bytes", &[p()]),
            checkpoints: metrics::counter!("weir_checkpoints_total", &[p()]),
            checkpoint_duration: metrics::histogram!("weir_checkpoint_duration_seconds", &[p()]),
            checkpoint_bytes: metrics::gauge!("weir_checkpoint_bytes", &[p()]),
            backpressure: metrics::counter!("weir_backpressure_milliseconds_total", &[p()]),
            cpu_used: metrics::counter!("weir_operator_cpu_microseconds_total", &[p()]),
            cpu_throttled: metrics::counter!("weir_operator_throttled_milliseconds_total", &[p()]),
            operator_memory: metrics::gauge!("weir_operator_memory_bytes", &[p()]),
            quarantined_keys: metrics::gauge!("weir_quarantined_keys", &[p()]),
            quarantined_events: metrics::gauge!("weir_quarantined_events", &[p()]),
            recorded: true,
        }
    }

    /// Metrics recorded nowhere: for a sandboxed run (a replay) that must not show in the
    /// pipeline's own series.
    pub fn unrecorded(pipeline: &str) -> PipelineMetrics {
        PipelineMetrics {
            pipeline: pipeline.into(),
            events_in: Counter::noop(),
            late: Counter::noop(),
            late_ratio: Gauge::noop(),
            watermark: Gauge::noop(),
            watermark_lag: Gauge::noop(),
            input_lag: Gauge::noop(),
            input_lag_sequences: Gauge::noop(),
            state_keys: Gauge::noop(),
            state_bytes: Gauge::noop(),
            checkpoints: Counter::noop(),
            checkpoint_duration: Histogram::noop(),
            checkpoint_bytes: Gauge::noop(),
            backpressure: Counter::noop(),
            cpu_used: Counter::noop(),
            cpu_throttled: Counter::noop(),
            operator_memory: Gauge::noop(),
            quarantined_keys: Gauge::noop(),
            quarantined_events: Gauge::noop(),
            recorded: false,
        }
    }

    /// How far the router has read: events over the pipeline's life, its watermark, (HTTP
    /// ingest) the bytes of accepted events still to read and (NATS) the stream sequences
    /// behind the last one on its subjects.
    pub fn read(
        &self,
        events_in: u64,
        watermark: Millis,
        input_lag: Option<u64>,
        backlog: Option<u64>,
    ) {
        self.events_in.absolute(events_in);
        if watermark != MINUS_INFINITY && watermark != PLUS_INFINITY {
            self.watermark.set(watermark as f64);
            let now = crate::time::wall_clock_ms() as f64;
            self.watermark_lag.set(now - watermark as f64);
        }
        if let Some(lag) = input_lag {
            self.input_lag.set(lag as f64);
        }
        if let Some(sequences) = backlog {
            self.input_lag_sequences.set(sequences as f64);
        }
    }

    /// The router waited this long for busy shards to take a batch.
    pub fn backpressured(&self, waited: std::time::Duration) {
        self.backpressure.increment(waited.as_millis() as u64);
    }

    /// A batch's output: result records by kind, late events (and the late ratio over the
    /// pipeline's `events_in` and `late_total`), dead letters by cause.
    pub fn wrote(
        &self,
        kinds: &[(&'static str, u64)],
        late: u64,
        late_total: u64,
        events_in: u64,
        dead: &[(DeadCause, u64)],
    ) {
        let recorded = |n: &u64| self.recorded && *n > 0;
        for &(kind, n) in kinds.iter().filter(|(_, n)| recorded(n)) {
            let labels = [
                ("pipeline", self.pipeline.to_string()),
                ("kind", kind.to_owned()),
            ];
            metrics::counter!("weir_results_total", &labels).increment(n);
        }
        self.late.increment(late);
        if events_in > 0 {
            self.late_ratio.set(late_total as f64 / events_in as f64);
        }
        for &(cause, n) in dead.iter().filter(|(_, n)| recorded(n)) {
            let labels = [
                ("pipeline", self.pipeline.to_string()),
                ("cause", cause.as_str().to_owned()),
            ];
            metrics::counter!("weir_dead_letters_total", &labels).increment(n);
        }
    }

    /// A committed checkpoint: its figures, the scopes in memory and the state file's size.
    pub fn checkpointed(&self, stats: &CheckpointStats, state_keys: u64, state_bytes: Option<u64>) {
        self.checkpoints.increment(1);
        self.checkpoint_duration.record(stats.duration_ms / 1e3);
        self.checkpoint_bytes.set(stats.bytes as f64);
        self.state_keys.set(state_keys as f64);
        if let Some(bytes) = state_bytes {
            self.state_bytes.set(bytes as f64);
        }
    }
}
