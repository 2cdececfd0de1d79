//! `[workers]`: where a pipeline runs. Without the section it runs in the process that reads
//! the spec (`weir run`, or `weir serve` itself); with it, a spec sent to `weir serve` is
//! shared with the `weir worker` processes of its NATS server, which run it in `slices`
//! (`Placement::Workers`). `weir run` and `weir cluster deploy` read the section too: the first
//! runs the pipeline in one process as ever, the second takes its slice count.
//!
//! Depends on `values` and `source` (only a NATS stream can be shared).

use serde::Deserialize;

use super::Result;
use super::source::SourceSpec;
use super::values::invalid;

/// The most slices a shared pipeline may be cut into.
pub const MAX_SLICES: usize = 64;

/// Where a pipeline runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Placement {
    /// In the process that reads the spec.
    #[default]
    Local,
    /// On the cluster's workers, its key groups cut into `slices` (`None`: the stream's
    /// partition count, or the cluster's default).
    Workers {
        /// How many slices.
        slices: Option<usize>,
    },
}

/// `[workers]` as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWorkers {
    slices: Option<usize>,
}

/// The placement `[workers]` asks for, for a pipeline reading `source`.
pub(super) fn check(raw: Option<RawWorkers>, source: &SourceSpec) -> Result<Placement> {
    let Some(raw) = raw else {
        return Ok(Placement::Local);
    };
    let SourceSpec::Nats(nats) = source else {
        return Err(invalid(
            "workers: only a pipeline that reads a NATS stream ([source] type = \"nats\") can \
             be placed on workers from a spec (one reading a Kafka topic is shared with `weir \
             cluster deploy`); leave [workers] out to run it in one process",
        ));
    };
    if let Some(slices) = raw.slices {
        if !(1..=MAX_SLICES).contains(&slices) {
            return Err(invalid(format!(
                "workers.slices = {slices}: from 1 to {MAX_SLICES}"
            )));
        }
        if let Some(partitions) = &nats.partitions
            && partitions.count != slices
        {
            return Err(invalid(format!(
                "workers.slices = {slices}: a stream cut into {} partitions runs in as many \
                 slices, one per partition; leave slices out",
                partitions.count
            )));
        }
    }
    Ok(Placement::Workers { slices: raw.slices })
}
