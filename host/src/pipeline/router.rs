//! The router: reads the source, decodes, numbers events in arrival order, tracks the
//! watermark, routes events to shards by key group in batches, and injects checkpoint barriers.

use std::sync::Arc;
use std::sync::mpsc::SyncSender;
use std::time::{Duration, Instant};

use tracing::info;

use super::{Part, Position, Result, ShardMsg, shard_of};
use crate::event::{DeadLetter, Decoder};
use crate::source::{Record, Source};
use crate::spec::PipelineSpec;
use crate::state::key_group;
use crate::time::Millis;
use crate::watermark::BoundedOutOfOrderness;
use crate::window::Staged;

/// Where routing starts: from scratch, or from a checkpoint.
#[derive(Debug, Clone, Copy)]
pub(super) struct Start {
    /// The next event's arrival index.
    pub events: u64,
    /// The watermark.
    pub watermark: Millis,
    /// Whether the input was already finished.
    pub finished: bool,
}

pub(super) struct Router<'a> {
    pub spec: &'a PipelineSpec,
    pub shards: &'a [SyncSender<ShardMsg>],
    pub parts: &'a SyncSender<(u64, Part)>,
    /// Checkpoint every this often; `None`: never (not even at the end).
    pub checkpoint_interval: Option<Duration>,
}

struct Batch {
    per_shard: Vec<Vec<Staged>>,
    advances: Vec<(u64, Millis)>,
    dead: Vec<DeadLetter>,
    records: usize,
}

impl Router<'_> {
    /// Reads the source to its end. Returns the number of events routed by this run, or
    /// early (without error) if a shard or the collector stopped: `run` reports their error.
    pub fn route(&self, source: &mut dyn Source, start: Start) -> Result<u64> {
        let spec = self.spec;
        let n = self.shards.len();
        let mut decoder = Decoder::new(&spec.key_field, &spec.timestamp_field);
        let mut watermark = BoundedOutOfOrderness::resume(spec.watermark_bound, start.watermark);
        let mut seq = start.events;
        let mut batch_id = 0u64;
        let mut batch = Batch {
            per_shard: (0..n).map(|_| Vec::new()).collect(),
            advances: Vec::new(),
            dead: Vec::new(),
            records: 0,
        };
        let mut last_checkpoint = Instant::now();
        if start.finished {
            info!("input already finished at the last checkpoint");
            return Ok(0);
        }
        while let Some(record) = source.next_record()? {
            let event = match record {
                Record::Event(event) => Some(event),
                Record::Line(line, bytes) => match decoder.decode(line, &bytes) {
                    Ok(event) => Some(event),
                    Err(dead_letter) => {
                        batch.dead.push(dead_letter);
                        None
                    }
                },
            };
            if let Some(event) = event {
                if let Some(w) = watermark.observe(event.timestamp) {
                    batch.advances.push((seq, w));
                }
                let shard = shard_of(key_group(&event.key), n);
                batch.per_shard[shard].push(Staged { seq, event });
                seq += 1;
            }
            batch.records += 1;
            let due = self.checkpoint_interval.is_some_and(|interval| {
                batch.records.is_multiple_of(64) && last_checkpoint.elapsed() >= interval
            });
            if batch.records >= spec.batch_size || due {
                if !self.send(&mut batch, batch_id, false) {
                    return Ok(seq - start.events);
                }
                batch_id += 1;
            }
            if due {
                let position = Position {
                    source: source.position(),
                    events: seq,
                    watermark: watermark.current(),
                    finished: false,
                    started: Instant::now(),
                };
                if !self.barrier(batch_id, position) {
                    return Ok(seq - start.events);
                }
                batch_id += 1;
                last_checkpoint = Instant::now();
            }
        }
        let end = watermark.finish();
        if self.send(&mut batch, batch_id, true) && self.checkpoint_interval.is_some() {
            let position = Position {
                source: source.position(),
                events: seq,
                watermark: end,
                finished: true,
                started: Instant::now(),
            };
            self.barrier(batch_id + 1, position);
        }
        info!(events = seq - start.events, "input finished");
        Ok(seq - start.events)
    }

    fn send(&self, batch: &mut Batch, id: u64, end_of_input: bool) -> bool {
        let advances = Arc::new(std::mem::take(&mut batch.advances));
        for (shard, tx) in self.shards.iter().enumerate() {
            let events = std::mem::take(&mut batch.per_shard[shard]);
            if tx
                .send(ShardMsg::Batch {
                    id,
                    events,
                    advances: advances.clone(),
                    end_of_input,
                })
                .is_err()
            {
                return false;
            }
        }
        batch.records = 0;
        self.parts
            .send((id, Part::Router(std::mem::take(&mut batch.dead))))
            .is_ok()
    }

    fn barrier(&self, id: u64, position: Position) -> bool {
        for tx in self.shards {
            if tx.send(ShardMsg::Barrier { id }).is_err() {
                return false;
            }
        }
        self.parts.send((id, Part::Position(position))).is_ok()
    }
}
