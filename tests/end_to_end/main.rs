//! End-to-end tests: the real `weir` binary, real components built from `examples/`, real redb
//! files, checked against an independent reference model of the window semantics.
//!
//! One test binary, a module per topic (like wasmtime's `tests/all`).

mod audit;
mod cluster;
mod concurrency;
mod console;
mod docs;
mod emit;
mod enrichment;
mod errors;
mod examples;
mod gated_rollouts;
mod hostile;
mod hostile_server;
mod kafka;
mod live;
mod nats;
mod nexmark;
mod old_contracts;
mod operator_rollouts;
mod partitioned;
mod polyglot;
mod properties;
mod quarantine;
mod quotas;
mod recovery;
mod reference;
mod replay;
mod repro;
mod routes;
mod savepoints;
mod serve;
mod served_nats;
mod served_workers;
mod server;
mod sources;
mod stages;
mod support;
mod tenants;
mod tls;
mod tokens;
mod verified_uploads;
mod windows;
