//! # Weir
//!
//! A stateful stream processor whose user logic runs as WebAssembly components. Weir holds
//! events in event-time windows until the watermark says they are complete, then hands each
//! window's events, batched per key, to an operator component, and writes the results.
//!
//! ```no_run
//! use std::path::Path;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let spec = weir::PipelineSpec::load(Path::new("examples/tumbling-count-sum/pipeline.toml"))?;
//!     let summary = weir::pipeline::run(&spec)?;
//!     eprintln!("{summary}");
//!     Ok(())
//! }
//! ```
//!
//! The modules follow the pipeline: [`source`] and [`event`] (decoding, dead letters),
//! [`watermark`], [`window`] (assignment and the per-shard engine), [`operator`] (the wasmtime
//! engine and native baselines), [`state`] (backends), [`emit`] (records and sinks), and
//! [`pipeline`], which wires a [`spec`] into all of them.

pub mod api;
pub mod bench;
pub mod checkpoint;
pub mod client;
pub mod cluster;
pub mod cpu_time;
pub mod emit;
pub mod event;
pub mod field_name;
pub mod fsutil;
pub mod hashing;
pub mod names;
pub mod nats_client;
pub mod operator;
pub mod pipeline;
pub mod prefetch;
pub mod project;
pub mod rollout;
pub mod serve;
pub mod source;
pub mod spec;
pub mod state;
pub mod time;
pub mod value;
pub mod watermark;
pub mod window;

pub use pipeline::{PipelineError, RunOptions, Summary, run, run_with};
pub use spec::{PipelineSpec, SpecError};
pub use value::Value;
