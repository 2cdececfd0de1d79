//! The pipeline's limits: the `[sandbox]` (what operators may use and how much), the number
//! of shards, the batch size and the checkpoint interval, with their raw forms, `DEFAULT_` and
//! `MAX_` constants and checks.
//!
//! Depends on `values` and `time` only.

use serde::Deserialize;

use super::Result;
use super::values::{RawDuration, RawSize, invalid, positive, size};
use crate::time::Millis;

/// Events per batch unless the spec says otherwise. Measured on JSON Lines from a file (2 M
/// events, 1,000 keys, the Wasm count-sum, one shard, release): 1,024 gave 600 k events/s,
/// 4,096 gave 1.0 M, 16,384 gave 1.28 M; on `weir bench` (3 M generated events) 4,096 gave
/// 0.97-0.98 M and 16,384 1.40-1.42 M (more events per key per operator call; calls stay at
/// most 4,096 events). A source sends a partial batch whenever its input pauses or the batch
/// has waited 100 ms, so a larger batch costs memory, not latency.
pub const DEFAULT_BATCH_SIZE: usize = 16_384;

/// The largest batch.
pub const MAX_BATCH_SIZE: usize = 1 << 20;

/// The most shards a pipeline may have.
pub const MAX_SHARDS: usize = 256;

/// The default checkpoint interval: 1 s.
pub const DEFAULT_CHECKPOINT_INTERVAL: Millis = 1_000;

/// The longest call an operator may be allowed: 10 minutes.
pub const MAX_CALL_TIMEOUT: Millis = 600_000;

/// The most memory one operator instance may be given.
pub const MAX_SANDBOX_MEMORY: usize = 4 << 30;

/// The smallest and largest CPU budget (`[sandbox] cpu`, in cores).
const MIN_CPU: f64 = 0.01;
const MAX_CPU: f64 = 1024.0;

/// Limits on operators and what they are allowed beyond computing. See the README's
/// "Bad input and misbehaving operators" for what each limit protects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxSpec {
    /// Wall time one operator call may take before it is interrupted (with a CPU quota, its
    /// run time: the waits for the quota are not counted).
    pub call_timeout: Millis,
    /// Linear memory one operator instance may grow to, in bytes.
    pub memory: usize,
    /// Largest output of one call (a window result, or one call's enriched events), in bytes.
    pub max_output_bytes: usize,
    /// Operators see the real wall and monotonic clocks (default: frozen at the epoch).
    pub clock: bool,
    /// Operators get real entropy (default: a fixed pseudo-random sequence).
    pub random: bool,
    /// The share of a core the pipeline's operator code may use, over all its instances, in
    /// thousandths of a core; beyond it, calls wait (the pipeline is slowed, not stopped).
    /// `None`: no budget.
    pub cpu_millicores: Option<u32>,
    /// Linear memory all of the pipeline's operator instances may hold together, in bytes.
    /// `None`: no pool (each instance has its own `memory`).
    pub total_memory: Option<usize>,
}

impl Default for SandboxSpec {
    fn default() -> Self {
        SandboxSpec {
            call_timeout: 1_000,
            memory: 64 << 20,
            max_output_bytes: 1 << 20,
            clock: false,
            random: false,
            cpu_millicores: None,
            total_memory: None,
        }
    }
}

/// The `[sandbox]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSandbox {
    call_timeout: Option<RawDuration>,
    cpu: Option<f64>,
    total_memory: Option<RawSize>,
    memory: Option<RawSize>,
    max_output_bytes: Option<RawSize>,
    #[serde(default)]
    allow: Vec<String>,
}

/// Checks the `[sandbox]`: limits within their bounds, and only the grants Weir offers.
pub(super) fn check_sandbox(raw: &RawSandbox) -> Result<SandboxSpec> {
    let defaults = SandboxSpec::default();
    let mut sandbox = SandboxSpec {
        call_timeout: match &raw.call_timeout {
            Some(raw) => positive("sandbox.call_timeout", Some(raw))?,
            None => defaults.call_timeout,
        },
        memory: size("sandbox.memory", &raw.memory, defaults.memory)?,
        max_output_bytes: size(
            "sandbox.max_output_bytes",
            &raw.max_output_bytes,
            defaults.max_output_bytes,
        )?,
        ..defaults
    };
    if sandbox.call_timeout > MAX_CALL_TIMEOUT {
        return Err(invalid(format!(
            "sandbox.call_timeout must be at most {} minutes",
            MAX_CALL_TIMEOUT / 60_000
        )));
    }
    if sandbox.memory > MAX_SANDBOX_MEMORY {
        return Err(invalid(format!(
            "sandbox.memory must be at most {} GiB",
            MAX_SANDBOX_MEMORY >> 30
        )));
    }
    if sandbox.memory < 1 << 20 {
        return Err(invalid(
            "sandbox.memory must be at least 1MiB: a component needs some memory to start",
        ));
    }
    if let Some(cpu) = raw.cpu {
        if !(MIN_CPU..=MAX_CPU).contains(&cpu) {
            return Err(invalid(format!(
                "sandbox.cpu is the share of a core the operators may use, {MIN_CPU} to {MAX_CPU} (e.g. 0.5); {cpu} given"
            )));
        }
        sandbox.cpu_millicores = Some((cpu * 1000.0).round() as u32);
    }
    if raw.total_memory.is_some() {
        let total = size("sandbox.total_memory", &raw.total_memory, 0)?;
        if !(1 << 20..=MAX_SANDBOX_MEMORY * 4).contains(&total) {
            return Err(invalid(format!(
                "sandbox.total_memory is the memory of all the pipeline's instances together, \
                 1MiB to {} GiB; {total} bytes given",
                (MAX_SANDBOX_MEMORY * 4) >> 30
            )));
        }
        sandbox.total_memory = Some(total);
    }
    for grant in &raw.allow {
        match grant.as_str() {
            "clock" => sandbox.clock = true,
            "random" => sandbox.random = true,
            other => {
                return Err(invalid(format!(
                    "sandbox.allow: {other:?} is unknown: operators may be allowed \"clock\" and \"random\"; files and network are never granted"
                )));
            }
        }
    }
    Ok(sandbox)
}

/// Checks the number of shards (`None`: one per core).
pub(super) fn check_shards(shards: Option<usize>) -> Result<Option<usize>> {
    if let Some(shards) = shards
        && !(1..=MAX_SHARDS).contains(&shards)
    {
        return Err(invalid(format!(
            "shards = {shards}: a pipeline has 1 to {MAX_SHARDS} shards"
        )));
    }
    Ok(shards)
}

/// Checks the checkpoint interval: [`DEFAULT_CHECKPOINT_INTERVAL`] when absent, `None` when
/// `"off"`.
pub(super) fn check_checkpoint_interval(raw: Option<&RawDuration>) -> Result<Option<Millis>> {
    Ok(match raw {
        None => Some(DEFAULT_CHECKPOINT_INTERVAL),
        Some(RawDuration::Text(off)) if off == "off" => None,
        Some(raw) => Some(positive("checkpoint_interval", Some(raw))?),
    })
}

/// Checks the batch size: [`DEFAULT_BATCH_SIZE`] when absent.
pub(super) fn check_batch_size(batch_size: Option<usize>) -> Result<usize> {
    let batch_size = batch_size.unwrap_or(DEFAULT_BATCH_SIZE);
    if !(1..=MAX_BATCH_SIZE).contains(&batch_size) {
        return Err(invalid(format!(
            "batch_size = {batch_size}: use 1 to {MAX_BATCH_SIZE} events"
        )));
    }
    Ok(batch_size)
}

#[cfg(test)]
mod tests {
    use crate::spec::SandboxSpec;
    use crate::spec::tests::{SPEC, parse};

    #[test]
    fn parses_the_sandbox() {
        let text = format!(
            "{SPEC}\n[sandbox]\ncall_timeout = \"250ms\"\nmemory = \"16MiB\"\nallow = [\"clock\"]\n"
        );
        let spec = parse(&text).unwrap();
        assert_eq!(
            spec.sandbox,
            SandboxSpec {
                call_timeout: 250,
                memory: 16 << 20,
                clock: true,
                ..SandboxSpec::default()
            }
        );
        let err = parse(&format!("{SPEC}\n[sandbox]\nallow = [\"network\"]\n")).unwrap_err();
        assert!(err.to_string().contains("never granted"), "{err}");
    }
}
