//! `weir bench`: throughput of a tumbling count-and-sum over generated events, for the Wasm
//! example component and the equivalent native operator, and their ratio. A measurement, not
//! a test: run it on a quiet machine, in a release build.

use std::path::PathBuf;

use crate::pipeline::{self, PipelineError, Summary};
use crate::spec::{
    GeneratorSpec, OperatorCode, OperatorSpec, PipelineSpec, Sink, SinksSpec, SourceSpec,
    StateSpec, WindowSpec,
};

/// Benchmark parameters.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Events to generate.
    pub events: u64,
    /// Distinct keys.
    pub keys: u64,
    /// Shards.
    pub shards: usize,
    /// The count-sum component.
    pub module: PathBuf,
    /// Events per batch.
    pub batch_size: usize,
}

/// The two runs' summaries.
#[derive(Debug, Clone)]
pub struct BenchReport {
    /// With the Wasm component.
    pub wasm: Summary,
    /// With the native operator.
    pub native: Summary,
}

impl BenchReport {
    /// Events per second of a run.
    pub fn rate(summary: &Summary) -> f64 {
        summary.events_in as f64 / summary.elapsed.as_secs_f64().max(f64::EPSILON)
    }
}

fn spec(options: &BenchOptions, code: OperatorCode) -> PipelineSpec {
    PipelineSpec {
        name: "bench".into(),
        source: SourceSpec::Generator(GeneratorSpec {
            events: options.events,
            keys: options.keys,
            seed: 1,
            interval_ms: 1,
            max_delay_ms: 2_000,
        }),
        key_field: "key".into(),
        timestamp_field: "ts".into(),
        watermark_bound: 2_000,
        window: Some(WindowSpec::Tumbling { size: 60_000 }),
        allowed_lateness: 0,
        enrichers: Vec::new(),
        aggregate: Some(OperatorSpec {
            name: "count-sum".into(),
            version: "bench".into(),
            code,
            reference: None,
            fields: None,
        }),
        state: StateSpec::Memory,
        sinks: SinksSpec {
            results: Sink::Discard,
            late: Sink::Discard,
            dead_letters: Sink::Discard,
        },
        shards: Some(options.shards),
        batch_size: options.batch_size,
        checkpoint_interval: None,
        memory_budget: crate::spec::DEFAULT_MEMORY_BUDGET,
    }
}

/// Runs both pipelines.
pub fn run(options: &BenchOptions) -> Result<BenchReport, PipelineError> {
    let wasm = pipeline::run(&spec(
        options,
        OperatorCode::Component(options.module.clone()),
    ))?;
    let native = pipeline::run(&spec(options, OperatorCode::Native("count-sum".into())))?;
    Ok(BenchReport { wasm, native })
}
