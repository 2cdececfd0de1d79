//! `[workers]`: where a pipeline runs. Without the section it runs in the process that reads
//! the spec (`weir run`, or `weir serve` itself); with it, a spec sent to `weir serve` is
//! shared with the `weir worker` processes of a NATS server, which run it in `slices`
//! (`Placement::Workers`): its stream's server, or for a pipeline reading a Kafka topic the
//! server `nats` names (a served spec names it by `"server"`, which `weir serve` resolves).
//! `weir run` and `weir cluster deploy` read the section too: the first runs the pipeline in
//! one process as ever, the second takes its slice count.
//!
//! Depends on `values` and `source` (only a NATS stream or a Kafka topic can be shared).

use serde::Deserialize;

use super::Result;
use super::source::SourceSpec;
use super::values::invalid;

/// The most slices a shared pipeline may be cut into.
pub const MAX_SLICES: usize = 64;

/// Where a pipeline runs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Placement {
    /// In the process that reads the spec.
    #[default]
    Local,
    /// On the cluster's workers, its key groups cut into `slices` (`None`: the stream's
    /// partition count, or the cluster's default).
    Workers {
        /// How many slices.
        slices: Option<usize>,
        /// The NATS server whose workers run a pipeline that reads no NATS stream (a Kafka
        /// topic's): `nats://` or `tls://`.
        nats: Option<String>,
    },
}

/// `[workers]` as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWorkers {
    slices: Option<usize>,
    nats: Option<String>,
}

impl RawWorkers {
    /// The NATS server it names, if any.
    pub(super) fn nats(&self) -> Option<&str> {
        self.nats.as_deref()
    }
}

/// The placement `[workers]` asks for, for a pipeline reading `source`.
pub(super) fn check(raw: Option<RawWorkers>, source: &SourceSpec) -> Result<Placement> {
    let Some(raw) = raw else {
        return Ok(Placement::Local);
    };
    let partitions = match source {
        SourceSpec::Nats(_) if raw.nats.is_some() => {
            return Err(invalid(
                "workers.nats: a pipeline reading a NATS stream runs on that stream's server's \
                 workers; leave workers.nats out",
            ));
        }
        SourceSpec::Nats(nats) => nats.partitions.as_ref().map(|p| p.count),
        SourceSpec::Kafka(_) => None,
        _ => {
            return Err(invalid(
                "workers: only a pipeline that reads a NATS stream or a Kafka topic ([source] \
                 type = \"nats\" or \"kafka\") can be placed on workers; leave [workers] out \
                 to run it in one process",
            ));
        }
    };
    if let Some(url) = &raw.nats {
        let scheme = url.starts_with("nats://") || url.starts_with("tls://");
        if !scheme || url.chars().any(char::is_whitespace) {
            return Err(invalid(format!(
                "workers.nats = {url:?}: the NATS server, nats://host:port or tls://host:port"
            )));
        }
    }
    if let Some(slices) = raw.slices {
        if !(1..=MAX_SLICES).contains(&slices) {
            return Err(invalid(format!(
                "workers.slices = {slices}: from 1 to {MAX_SLICES}"
            )));
        }
        if let Some(partitions) = partitions
            && partitions != slices
        {
            return Err(invalid(format!(
                "workers.slices = {slices}: a stream cut into {partitions} partitions runs in as \
                 many slices, one per partition; leave slices out"
            )));
        }
    }
    Ok(Placement::Workers {
        slices: raw.slices,
        nats: raw.nats,
    })
}
