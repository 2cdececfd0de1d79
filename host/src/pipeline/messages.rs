//! The messages between the threads of a running pipeline: the router sends batches and
//! barriers to the shards; shards and router send their parts of each batch (or barrier) to the
//! collector, which commits a checkpoint once it holds every part of a barrier.
//!
//! Depends on `checkpoint`, `event`, `operator`, `rollout` and `time`, and of `pipeline` on
//! `control` and `shard` (its output and snapshot).

use std::sync::Arc;

use super::ShardOutput;
use super::ShardSnapshot;
use super::control::SavepointRequest;
use crate::event::DeadLetter;
use crate::event::Share;
use crate::operator::VersionCode;
use crate::rollout::Routing;
use crate::time::Millis;

/// Messages to a shard.
pub(super) enum ShardMsg {
    Batch {
        id: u64,
        /// This shard's events of the batch (and their crossings, if the router took them).
        share: Share,
        advances: Arc<Vec<(u64, Millis)>>,
        /// Arrival indexes after which every changed window emits early.
        early: Arc<Vec<u64>>,
        /// Quarantined keys to re-drive (`None`: all), each after the arrival index it has.
        redrives: Arc<Vec<(u64, Option<Arc<str>>)>>,
        end_of_input: bool,
        /// Whether windows may keep this batch's events pending into the next batches (see
        /// [`crate::window::WindowEngine::process_carrying`]): never before a barrier.
        carry: bool,
    },
    Barrier {
        id: u64,
        change: Option<RoutingChange>,
    },
}

/// A new routing, applied by every shard right after a barrier.
#[derive(Clone)]
pub(super) struct RoutingChange {
    pub(super) routing: Routing,
    /// The candidate's code, when it is a version the shards do not run yet.
    pub(super) candidate: Option<VersionCode>,
}

/// The router's part of a checkpoint.
pub(super) use crate::checkpoint::Barrier as Position;

/// The router's part of a batch: its dead letters, and what the stages after the aggregate
/// need to run the batch as the shards did (the watermark advances and the end of input).
pub(super) struct RouterPart {
    pub(super) dead: Vec<DeadLetter>,
    pub(super) advances: Arc<Vec<(u64, Millis)>>,
    pub(super) end_of_input: bool,
}

/// What the collector receives for a batch (or a barrier) id.
pub(super) enum Part {
    Shard(ShardOutput),
    Router(RouterPart),
    Snapshot(ShardSnapshot),
    /// The router's position at a barrier, the routing change that applies from it (the
    /// stages, run by the collector, take theirs there), and the savepoints asked for before
    /// it, which its checkpoint serves.
    Position(Box<(Position, Option<RoutingChange>, Vec<SavepointRequest>)>),
    /// A shard failed and stopped: no batch will be complete again, so the collector stops too
    /// (which ends any shard's wait for a checkpoint's acknowledgement).
    Failed,
}
