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
