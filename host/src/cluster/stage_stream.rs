//! The stream between the two halves of a shared pipeline with stages (or a global or
//! pre-aggregated aggregate): slices `0..n` publish their aggregate's results and watermark
//! marks to it (`weir-stages.<slice>.<pipeline>`), and slice `n`, the stage slice, reads them
//! (see `pipeline::upstream` and `pipeline::stage_slice`). Its duplicate window drops what a
//! slice publishes again after a restore from its last checkpoint.
//!
//! Depends on `spec` and the rest of `cluster` (its connection).

use std::time::Duration;

use super::{ClusterError, Connection, NatsFailure, Result};
use crate::spec::{NatsSinkSpec, NatsSourceSpec, PipelineSpec};

/// How long the stream drops a record published again under the same id: longer than any
/// slice's replay after a takeover (checkpoints are a few seconds apart at most).
const DUPLICATE_WINDOW: Duration = Duration::from_secs(10 * 60);

/// Whether a shared pipeline has a stage slice (stages, a global or pre-aggregated aggregate).
pub fn staged(spec: &PipelineSpec) -> bool {
    !spec.stages.is_empty() || spec.global || spec.pre_aggregate
}

/// Whether the pipeline of `record` has a stage slice, as its spec says.
pub(super) fn recorded(record: &super::deploy::PipelineRecord) -> bool {
    PipelineSpec::parse(&record.spec, record.json, std::path::Path::new("."))
        .is_ok_and(|spec| staged(&spec))
}

/// The stream's name (see [`super::dotless_name`]).
fn name(pipeline: &str) -> String {
    super::dotless_name("weir-stages", pipeline)
}

/// The subject slice `slice` publishes to. The pipeline's name comes last: a dotted name adds
/// tokens, so no pipeline's subjects are another's.
fn subject(pipeline: &str, slice: &str) -> String {
    format!("weir-stages.{slice}.{pipeline}")
}

/// The sink slice `slice` writes its results to.
pub(super) fn sink(connection: &Connection, pipeline: &str, slice: usize) -> NatsSinkSpec {
    NatsSinkSpec {
        nats: connection.url.clone(),
        subject: subject(pipeline, &slice.to_string()),
    }
}

/// The source the stage slice reads.
pub(super) fn source(connection: &Connection, pipeline: &str) -> NatsSourceSpec {
    NatsSourceSpec {
        url: connection.url.clone(),
        stream: name(pipeline),
        subjects: Vec::new(),
        until: None,
        partitions: None,
        partition: None,
    }
}

/// Makes the stream of `pipeline` unless it is there.
pub(super) fn ensure(connection: &Connection, pipeline: &str) -> Result<()> {
    let stream = name(pipeline);
    connection
        .block_on(async {
            if connection.jetstream.get_stream(&stream).await.is_ok() {
                return Ok(());
            }
            use async_nats::jetstream::stream::{Config, DiscardPolicy};
            let created = (connection.jetstream)
                .create_stream(Config {
                    name: stream.clone(),
                    subjects: vec![subject(pipeline, "*")],
                    duplicate_window: DUPLICATE_WINDOW,
                    // Kept until the stage slice's uploaded checkpoint is past them (`purge`),
                    // however long the pipeline is stopped.
                    max_message_size: 8 << 20,
                    discard: DiscardPolicy::Old,
                    num_replicas: 1,
                    ..Default::default()
                })
                .await;
            match (created, connection.jetstream.get_stream(&stream).await) {
                (_, Ok(_)) => Ok(()),
                // Made by another worker at the same time, or refused.
                (Err(error), Err(_)) => Err(NatsFailure::client(error)),
                (Ok(_), Err(error)) => Err(NatsFailure::client(error)),
            }
        })
        .map_err(|e| connection.error(&format!("stream {stream}"), e))
}

/// Makes the stream of `pipeline`, a shared pipeline, unless it is there; if the pipeline was
/// withdrawn meanwhile (its record goes before its stream), deletes it again and says so,
/// so a worker taking a slice at that moment leaves no stream behind.
pub(super) fn ensure_shared(connection: &Connection, pipeline: &str) -> Result<()> {
    ensure(connection, pipeline)?;
    match super::deploy::fetch_record(connection, pipeline) {
        Err(ClusterError::Unknown(name)) => {
            // Only an empty one, as this call made it: a fork seeds its stream before its
            // record is written.
            if last_sequence(connection, pipeline) == Some(0) {
                forget(connection, pipeline)?;
            }
            Err(ClusterError::Unknown(name))
        }
        other => other.map(drop),
    }
}

/// The last sequence of `pipeline`'s stream (purged or not), if the server says.
pub(super) fn last_sequence(connection: &Connection, pipeline: &str) -> Option<u64> {
    let stream = name(pipeline);
    connection.block_on(async {
        let mut stream = super::timed(connection.jetstream.get_stream(&stream))
            .await
            .ok()?
            .ok()?;
        let info = super::timed(stream.info()).await.ok()?.ok()?;
        Some(info.state.last_sequence)
    })
}

/// Purges the records of `pipeline`'s stream up to sequence `read` (what the stage slice's
/// uploaded checkpoint has read: a takeover resumes after it).
pub(super) fn purge(connection: &Connection, pipeline: &str, read: u64) -> Result<()> {
    let stream = name(pipeline);
    let fail = |e: NatsFailure| connection.error(&format!("purging stream {stream}"), e);
    connection.block_on(async {
        let found = super::timed(connection.jetstream.get_stream(&stream)).await;
        let stream = found
            .map_err(|e| fail(e.into()))?
            .map_err(|e| fail(NatsFailure::client(e)))?;
        super::timed(async { stream.purge().sequence(read + 1).await })
            .await
            .map_err(|e| fail(e.into()))?
            .map_err(|e| fail(NatsFailure::client(e)))
            .map(drop)
    })
}

/// The most a savepoint copies of the records the stage slice has not checkpointed yet.
const MAX_TAIL_BYTES: u64 = 256 << 20;

/// Why the records after a sequence could not be copied.
pub(super) enum CopyError {
    /// Some were purged before they were read (the stage slice checkpointed further meanwhile).
    Gone,
    Failed(ClusterError),
}

/// Copies the records of `pipeline`'s stream after sequence `after`, up to its last now, into
/// the new file `to`, one line each (the record as the slice published it): what the stage
/// slice had not taken in its checkpoint at `after`, for a savepoint. Returns their count.
pub(super) fn copy_after(
    connection: &Connection,
    pipeline: &str,
    after: u64,
    to: &std::path::Path,
) -> std::result::Result<u64, CopyError> {
    use async_nats::jetstream::consumer::{DeliverPolicy, pull};
    use std::io::Write;
    use tokio_stream::StreamExt;
    let stream = name(pipeline);
    let fail = |e: NatsFailure| {
        CopyError::Failed(connection.error(&format!("copying stream {stream}"), e))
    };
    let io = |source| {
        CopyError::Failed(ClusterError::Io {
            path: to.to_owned(),
            source,
        })
    };
    let mut file = std::io::BufWriter::new(std::fs::File::create(to).map_err(io)?);
    let copied = connection.block_on(async {
        let (found, last) = stream_and_last(connection, &stream).await.map_err(fail)?;
        if last <= after {
            return Ok(0);
        }
        let config: pull::Config = pull::OrderedConfig {
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: after + 1,
            },
            ..Default::default()
        }
        .into();
        let consumer = (super::timed(found.create_consumer(config)).await)
            .map_err(|e| fail(e.into()))?
            .map_err(|e| fail(NatsFailure::client(e)))?;
        let mut messages = (super::timed(consumer.messages()).await)
            .map_err(|e| fail(e.into()))?
            .map_err(|e| fail(NatsFailure::client(e)))?;
        let (mut expected, mut bytes) = (after + 1, 0u64);
        while expected <= last {
            let message = match super::timed(messages.next()).await {
                Ok(Some(Ok(message))) => message,
                Ok(Some(Err(e))) => return Err(fail(NatsFailure::client(e))),
                Ok(None) => {
                    return Err(fail(NatsFailure::client(std::io::Error::other(
                        "the consumer ended",
                    ))));
                }
                Err(elapsed) => return Err(fail(elapsed.into())),
            };
            let sequence = (message.info())
                .map_err(|e| fail(NatsFailure::client(std::io::Error::other(e.to_string()))))?
                .stream_sequence;
            if sequence != expected {
                return Err(CopyError::Gone);
            }
            bytes += message.payload.len() as u64 + 1;
            if bytes > MAX_TAIL_BYTES {
                return Err(CopyError::Failed(ClusterError::NotSaved(format!(
                    "the stage slice of pipeline {pipeline:?} has more than {} MiB of results \
                     not yet in its checkpoint: take the savepoint once it has caught up",
                    MAX_TAIL_BYTES >> 20
                ))));
            }
            file.write_all(&message.payload).map_err(io)?;
            file.write_all(b"\n").map_err(io)?;
            expected += 1;
        }
        Ok(last - after)
    })?;
    let file = file.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    Ok(copied)
}

/// Gives `pipeline`, not shared yet, a stream holding the records of `tail` (copied by
/// [`copy_after`] from another pipeline's after sequence `after`) at the sequences they had:
/// from `after + 1`, so its stage slice, seeded with the checkpoint that read to `after`,
/// reads on from there. What a seed before a crash published already is not published again.
/// They go without ids: a slice replayed long after its first run may have published a
/// record twice under one id, which the new stream would refuse.
pub(super) fn seed(
    connection: &Connection,
    pipeline: &str,
    after: u64,
    tail: &std::path::Path,
) -> Result<()> {
    ensure(connection, pipeline)?;
    let records = tail_records(tail)?;
    let stream = name(pipeline);
    let fail = |e: NatsFailure| connection.error(&format!("seeding stream {stream}"), e);
    let foreign = |last: u64| {
        ClusterError::NotSaved(format!(
            "stream {stream} holds records to sequence {last}, not from this savepoint (which \
             continues after {after}): withdraw pipeline {pipeline:?}, or fork under another name"
        ))
    };
    connection.block_on(async {
        let (found, last) = stream_and_last(connection, &stream).await.map_err(fail)?;
        if last == 0 && after > 0 {
            // An empty stream's next sequence is set by a purge up to it.
            (super::timed(async { found.purge().sequence(after + 1).await }).await)
                .map_err(|e| fail(e.into()))?
                .map_err(|e| fail(NatsFailure::client(e)))?;
        } else if last < after || last > after + records.len() as u64 {
            return Err(foreign(last));
        }
        let published = last.saturating_sub(after) as usize;
        // Published in part before a crash: the first and last there must be this tail's.
        for at in [0, published.saturating_sub(1)]
            .into_iter()
            .take(published.min(2))
        {
            let stored = (super::timed(found.get_raw_message(after + at as u64 + 1)).await)
                .map_err(|e| fail(e.into()))?
                .map_err(|e| fail(NatsFailure::client(e)))?;
            if stored.payload.as_ref() != records[at].1.as_bytes() {
                return Err(foreign(last));
            }
        }
        let mut next = after + published as u64 + 1;
        for chunk in records[published..].chunks(SEED_CHUNK) {
            let mut acks = Vec::with_capacity(chunk.len());
            for (slice, line) in chunk {
                let subject = subject(pipeline, &slice.to_string());
                let sent = connection.jetstream.publish(subject, line.clone().into());
                let ack = (super::timed(sent).await)
                    .map_err(|e| fail(e.into()))?
                    .map_err(|e| fail(NatsFailure::client(e)))?;
                acks.push(ack);
            }
            for ack in acks {
                let ack = (super::timed(ack.into_future()).await)
                    .map_err(|e| fail(e.into()))?
                    .map_err(|e| fail(NatsFailure::client(e)))?;
                if ack.sequence != next {
                    return Err(ClusterError::NotSaved(format!(
                        "stream {stream} took a savepoint's stage record at sequence {} instead \
                         of {next} (another publisher?): withdraw pipeline {pipeline:?} and fork \
                         again",
                        ack.sequence
                    )));
                }
                next += 1;
            }
        }
        Ok(())
    })
}

/// Stream `stream`, and its last sequence now.
async fn stream_and_last(
    connection: &Connection,
    stream: &str,
) -> std::result::Result<(async_nats::jetstream::stream::Stream, u64), NatsFailure> {
    let mut found = (super::timed(connection.jetstream.get_stream(stream)).await)?
        .map_err(NatsFailure::client)?;
    let info = (super::timed(found.info()).await)?.map_err(NatsFailure::client)?;
    let last = info.state.last_sequence;
    Ok((found, last))
}

/// How many of a seed's records are published before their acknowledgements are awaited.
const SEED_CHUNK: usize = 512;

/// The records of a savepoint's `tail` file: each line with the slice that published it.
fn tail_records(tail: &std::path::Path) -> Result<Vec<(u64, String)>> {
    use std::io::BufRead;
    let io = |source| ClusterError::Io {
        path: tail.to_owned(),
        source,
    };
    let damaged = |what: String| {
        ClusterError::Damaged(format!(
            "the savepoint's stage records {}: {what}",
            tail.display()
        ))
    };
    let file = std::io::BufReader::new(std::fs::File::open(tail).map_err(io)?);
    let mut records = Vec::new();
    for line in file.lines() {
        let line = line.map_err(io)?;
        #[derive(serde::Deserialize)]
        struct Slice {
            slice: u64,
        }
        let Slice { slice } = serde_json::from_str(&line).map_err(|e| {
            damaged(format!(
                "{e}: {}",
                line.chars().take(200).collect::<String>()
            ))
        })?;
        records.push((slice, line));
    }
    Ok(records)
}

/// Deletes the stream of `pipeline`, if there is one (the pipeline is withdrawn).
pub(super) fn forget(connection: &Connection, pipeline: &str) -> Result<()> {
    let stream = name(pipeline);
    let fail = |e: NatsFailure| connection.error(&format!("deleting stream {stream}"), e);
    let deleted = connection.block_on(super::timed(connection.jetstream.delete_stream(&stream)));
    match deleted {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if e.to_string().contains("not found") => Ok(()),
        Ok(Err(e)) => Err(fail(NatsFailure::client(e))),
        Err(elapsed) => Err(fail(elapsed.into())),
    }
}

/// Refuses what a staged pipeline on workers cannot do yet: a Kafka sink, which the stage
/// slice and the other slices would both write under one partition's transactional read-back.
pub(super) fn check(spec: &PipelineSpec) -> Result<()> {
    use crate::spec::Sink;
    let sinks = &spec.sinks;
    let kafka = [&sinks.results, &sinks.late, &sinks.dead_letters]
        .iter()
        .any(|sink| matches!(sink, Sink::Kafka(_)));
    if staged(spec) && kafka {
        return Err(ClusterError::Unshareable(
            "a shared pipeline with stages, a global or a pre-aggregated aggregate writes NATS \
             subjects only (its stage slice and its other slices would share a Kafka partition)"
                .into(),
        ));
    }
    Ok(())
}
