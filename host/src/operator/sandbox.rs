//! The limits a sandboxed operator's calls and instances run under ([`Limits`]): time per call,
//! memory, output size, clocks and entropy, and the pipeline's shared CPU, memory and state
//! quotas. Made from a spec's `[sandbox]`; native operators ignore them.
//!
//! Depends on `spec` (the sandbox section) and `operator::quota`.

use std::time::Duration;

/// Limits on each guest call and instance. What each protects is in its field's doc.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Wall time one call may take before it is interrupted (protects the shard from a runaway
    /// loop that would stall every key behind it). Default 1 s. With a CPU quota, the time a
    /// call waits for the quota mid-call is not counted: only its run time.
    pub call_timeout: Duration,
    /// Linear memory one instance may grow to (protects the host's memory from one guest).
    /// Default 64 MiB.
    pub memory_bytes: usize,
    /// Largest output of one call, in bytes (protects sinks and downstream consumers from one
    /// call's flood). Default 1 MiB.
    pub max_output_bytes: usize,
    /// Real clocks instead of clocks frozen at the epoch.
    pub clock: bool,
    /// Real entropy instead of a fixed pseudo-random sequence.
    pub random: bool,
    /// The pipeline's CPU budget for operator code, shared by all its instances (protects the
    /// other pipelines' share of the cores).
    pub cpu: Option<std::sync::Arc<crate::operator::quota::CpuQuota>>,
    /// The pipeline's memory pool, shared by all its instances (protects the host's memory from
    /// one pipeline's many instances).
    pub memory_pool: Option<std::sync::Arc<crate::operator::quota::MemoryPool>>,
    /// The pipeline's state quota, shared by all its instances (protects the disk and the
    /// memory state takes).
    pub state_quota: Option<std::sync::Arc<crate::operator::quota::StateQuota>>,
}

impl From<&crate::spec::SandboxSpec> for Limits {
    fn from(sandbox: &crate::spec::SandboxSpec) -> Self {
        Limits {
            call_timeout: Duration::from_millis(sandbox.call_timeout as u64),
            memory_bytes: sandbox.memory,
            max_output_bytes: sandbox.max_output_bytes,
            clock: sandbox.clock,
            random: sandbox.random,
            cpu: None,
            memory_pool: None,
            state_quota: None,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::from(&crate::spec::SandboxSpec::default())
    }
}
