//! The rules for a spec sent to `weir serve` (see
//! [`PipelineSpec::parse_served`](super::PipelineSpec::parse_served)): it names only what the
//! server provides (events over HTTP or from a NATS stream of a server it was started with,
//! operators from the registry or built in, state and sinks in the pipeline's directory); and
//! [`Served`], whether such a spec is new or stored.
//!
//! Judges the spec as written, before the sections' own checks, so it depends on the raw forms
//! of `raw`, `source`, `operators`, `state` and `sinks`, and on `values` and `names`.

use std::path::Path;

use super::Result;
use super::operators::{RawOperator, RawStage, combines_partials};
use super::raw::RawSpec;
use super::sinks::{RawSink, RawSinks};
use super::source::RawSource;
use super::values::invalid;

/// The most shards a pipeline of `weir serve` may have (each is a thread).
pub const MAX_SERVED_SHARDS: usize = 32;

/// Whether a served spec is being created or was stored by a server earlier (see
/// [`PipelineSpec::parse_served`](super::PipelineSpec::parse_served)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// Sent to create a pipeline: every rule applies.
    New,
    /// Read back from a pipeline's directory.
    Stored,
}

/// What a served spec may not name (see
/// [`PipelineSpec::parse_served`](super::PipelineSpec::parse_served)); its sinks are relative
/// to `sink_base`; it may name the NATS servers at `nats` and no other.
pub(super) fn check(
    raw: &RawSpec,
    sink_base: &Path,
    served: Served,
    nats: &[String],
) -> Result<()> {
    check_source(&raw.source, nats)?;
    if let Some(url) = raw.workers.as_ref().and_then(|w| w.nats()) {
        known(nats, "workers.nats", url)?;
    }
    check_operators(&raw.operators, &raw.stages)?;
    if served == Served::New && raw.state.backend.as_deref() == Some("memory") {
        return Err(invalid(
            "state.backend: a served pipeline keeps its state in redb, where memory_budget \
             bounds it and checkpoints make it exactly-once; leave the backend out",
        ));
    }
    if served == Served::New && raw.shards.is_some_and(|n| n > MAX_SERVED_SHARDS) {
        return Err(invalid(format!(
            "shards: a served pipeline has at most {MAX_SERVED_SHARDS} shards"
        )));
    }
    if raw.state.dir.is_some() {
        return Err(invalid(
            "state.dir: a served pipeline keeps its state in its own directory; leave it out",
        ));
    }
    check_sinks(&raw.sinks, sink_base, served, nats)
}

/// A served spec connects only to the NATS servers at `nats`.
fn known(nats: &[String], field: &str, url: &str) -> Result<()> {
    known_as(nats, field, url, ("NATS servers", "--nats", "nats"))
}

/// A served spec produces to and reads from only the Kafka clusters at `known` (their broker
/// lists, among the NATS servers' URLs).
fn known_kafka(known: &[String], field: &str, brokers: &str) -> Result<()> {
    known_as(
        known,
        field,
        brokers,
        ("Kafka clusters", "--kafka", "kafka"),
    )
}

/// `address` is among `known`, or the error says where a served spec may connect: to the
/// `kind` named by `flag` at start, by `"server"` in a source or `sink_key` in a sink.
fn known_as(
    known: &[String],
    field: &str,
    address: &str,
    (kind, flag, sink_key): (&str, &str, &str),
) -> Result<()> {
    if known.iter().any(|k| k == address) {
        return Ok(());
    }
    Err(invalid(format!(
        "{field}: a served pipeline connects only to the {kind} weir serve was started with \
         ({flag}), named in the spec by \"server\" (source) or \"{sink_key}\" (sinks)"
    )))
}

/// A served spec does not read or write Kafka's own topics (`__consumer_offsets`,
/// `__transaction_state`: the brokers' bookkeeping).
fn kafka_internal(field: &str, topic: &str) -> Result<()> {
    if topic.starts_with("__") {
        return Err(invalid(format!(
            "{field}: {topic:?} is one of Kafka's own topics; a served pipeline reads and \
             produces only application topics"
        )));
    }
    Ok(())
}

/// A served spec does not reach the server's own streams and subjects: JetStream's API
/// (`$JS.API...`, a publish to which is a request), key-value buckets and object stores (where
/// the cluster keeps its leases, watermarks, specs and components).
fn internal(field: &str, subject: &str) -> Result<()> {
    if subject.starts_with('$') {
        Err(invalid(format!(
            "{field}: {subject:?} is a NATS system subject; a served pipeline reads and \
             publishes only application subjects"
        )))
    } else {
        Ok(())
    }
}

/// A served pipeline reads events sent over HTTP or a NATS stream of a known server.
fn check_source(raw: &RawSource, nats: &[String]) -> Result<()> {
    match raw {
        RawSource::Http { .. } => {}
        RawSource::Nats(source) => {
            known(nats, "source", &source.url)?;
            if source.stream.starts_with("KV_") || source.stream.starts_with("OBJ_") {
                return Err(invalid(
                    "source.stream: a key-value bucket's or object store's stream is the \
                     server's, not a pipeline's input",
                ));
            }
            for subject in
                (source.subjects.iter()).chain(source.partitions.as_ref().map(|p| &p.subject))
            {
                internal("source.subjects", subject)?;
            }
        }
        RawSource::Kafka(source) => {
            known_kafka(nats, "source", &source.brokers)?;
            kafka_internal("source.topic", &source.topic)?;
        }
        _ => {
            return Err(invalid(
                "source: a pipeline of weir serve reads the events sent to it over HTTP \
                 ({\"type\": \"http\"}), a NATS stream ({\"type\": \"nats\", \"stream\": \
                 ...}) or a Kafka topic ({\"type\": \"kafka\", \"topic\": ...}) of a server \
                 it was started with; files, stdin and generators are for `weir run`",
            ));
        }
    }
    Ok(())
}

/// A served pipeline's operators (and its stages') come from the registry or are built in, and
/// do not combine partials.
fn check_operators(operators: &[RawOperator], stages: &[RawStage]) -> Result<()> {
    if combines_partials(operators) {
        return Err(invalid(
            "operators: a global or pre-aggregated aggregate runs under `weir run` for now \
             (a rollout would merge partials of two versions)",
        ));
    }
    let operators = operators
        .iter()
        .enumerate()
        .map(|(i, op)| (format!("operators[{i}]"), op));
    let stages = stages
        .iter()
        .enumerate()
        .map(|(i, stage)| (format!("stages[{i}].operator"), &stage.operator));
    for (at, op) in operators.chain(stages) {
        if op.module.is_some() {
            return Err(invalid(format!(
                "{at}: `module` names a file; on weir serve name an uploaded \
                 operator by `name` and `version` (POST /v1/operators/{{name}}/{{version}})"
            )));
        }
        if op.reference.is_some() {
            return Err(invalid(format!(
                "{at}: `reference` names a file; reference files are for `weir run`"
            )));
        }
    }
    Ok(())
}

/// A served pipeline's sinks are files in its out/ directory (`sink_base`), `discard`, or NATS
/// subjects of a known server.
fn check_sinks(sinks: &RawSinks, sink_base: &Path, served: Served, nats: &[String]) -> Result<()> {
    let sinks = [
        ("sinks.results", &sinks.results),
        ("sinks.late", &sinks.late),
        ("sinks.dead_letters", &sinks.dead_letters),
    ];
    for (field, sink) in sinks {
        let sink = match sink {
            // A caller of the API must not make the server connect where it likes.
            Some(RawSink::Nats(sink)) => {
                known(nats, field, &sink.nats)?;
                internal(field, &sink.subject)?;
                continue;
            }
            Some(RawSink::Kafka(sink)) => {
                known_kafka(nats, field, &sink.kafka)?;
                kafka_internal(field, &sink.topic)?;
                continue;
            }
            Some(RawSink::Named(name)) => Some(name.as_str()),
            None => None,
        };
        match sink {
            None | Some("discard") => {}
            Some("stdout" | "stderr" | "-") => {
                return Err(invalid(format!(
                    "{field}: the server's standard streams are not a sink; name a file in \
                     the pipeline's out/ directory (\"results.jsonl\") or \"discard\""
                )));
            }
            Some(path) if served == Served::New && path.split('/').next() == Some("out") => {
                return Err(invalid(format!(
                    "{field}: sinks are relative to the pipeline's out/ directory already; \
                     leave out the leading out/"
                )));
            }
            Some("shadow.jsonl") => {
                return Err(invalid(format!(
                    "{field}: shadow.jsonl holds a rollout's shadow results; choose another name"
                )));
            }
            Some(path) => {
                crate::names::join_relative(
                    field,
                    sink_base,
                    path,
                    "the pipeline's out/ directory",
                )?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::spec::{PipelineSpec, Served, Sink, StateSpec};

    #[test]
    fn a_stored_served_spec_reads_as_it_was_accepted() {
        let dir = Path::new("/data/pipelines/p");
        let spec = r#"{"name":"p","source":{"type":"http"},"event":{"key":"k","timestamp":"t"},
            "state":{"backend":"memory"},"shards":64,"sinks":{"results":"out/r.jsonl"}}"#;
        let stored = PipelineSpec::parse_served(spec, dir, Served::Stored).unwrap();
        assert_eq!(stored.sinks.results, Sink::File(dir.join("out/r.jsonl")));
        assert_eq!(stored.state, StateSpec::Memory);
        let err = PipelineSpec::parse_served(spec, dir, Served::New).unwrap_err();
        assert!(err.to_string().contains("state.backend"), "{err}");
        let new = spec
            .replace(r#""state":{"backend":"memory"},"shards":64,"#, "")
            .replace("out/r.jsonl", "r.jsonl");
        let created = PipelineSpec::parse_served(&new, dir, Served::New).unwrap();
        assert_eq!(created.sinks.results, Sink::File(dir.join("out/r.jsonl")));
        let err = PipelineSpec::parse_served(
            spec.replace(r#""state":{"backend":"memory"},"shards":64,"#, "")
                .as_str(),
            dir,
            Served::New,
        )
        .unwrap_err();
        assert!(err.to_string().contains("leading out/"), "{err}");
    }
}
