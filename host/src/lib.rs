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
//! [`watermark`], [`window`] (assignment and the per-shard engine), [`operator`] (the operator
//! traits, the wasmtime engine, the registry, quotas and native baselines), [`rollout`] (two
//! versions of an operator at once), [`state`] (backends), [`checkpoint`] (manifest, commit,
//! recovery, savepoints), [`emit`] (records and sinks), and [`pipeline`], which wires a
//! [`spec`] into all of them.
//!
//! Around a pipeline: [`serve`] (`weir serve`'s registry and pipelines) and [`api`] (its HTTP
//! layer), [`cluster`] (scale-out over NATS JetStream), [`project`] (operator projects: `weir
//! new`, `build`, `deploy`), [`client`] (the CLI's client of a server) and
//! [`bench`](mod@bench) (`weir bench`).
//!
//! Beneath everything, depending on nothing else of the crate: [`time`], [`value`],
//! [`field_name`], [`hashing`], [`prefetch`], [`names`], [`fsutil`], [`cpu_time`] and
//! [`nats_client`].
//!
//! The lower layers, [`time`], [`value`], [`state`] and [`window`], know nothing of Wasm, HTTP
//! or NATS: they never use `operator`'s Wasm items, [`serve`], [`api`], [`cluster`],
//! [`nats_client`], wasmtime, axum or async-nats.

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
pub mod repro;
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
