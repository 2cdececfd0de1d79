//! The `weir` binary's commands: one module per command (its arguments and what it does);
//! `main.rs` parses the command line and dispatches to them. Depends on the `weir` library
//! only; nothing in the library depends on it.

mod bench;
mod bench_figures;
mod bench_serve;
mod cluster;
mod metrics_endpoint;
mod nats_auth;
mod project;
mod replay;
mod repro;
mod run;
mod savepoint;
mod serve;
mod signals;
mod state;
mod token;

pub(crate) use bench::*;
pub(crate) use bench_figures::*;
pub(crate) use bench_serve::*;
pub(crate) use cluster::*;
pub(crate) use metrics_endpoint::*;
pub(crate) use nats_auth::*;
pub(crate) use project::*;
pub(crate) use replay::*;
pub(crate) use repro::*;
pub(crate) use run::*;
pub(crate) use savepoint::*;
pub(crate) use serve::*;
pub(crate) use signals::*;
pub(crate) use state::*;
pub(crate) use token::*;
