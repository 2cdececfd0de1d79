//! Repro bundles ([`crate::repro::Bundle`]): the row a user saw (a result, a candidate's shadow
//! result, a replay row, a dead letter) names a key and a window; the key's events in that
//! window are read from the pipeline's input (its ingest log, NATS stream or Kafka topic, to where
//! the live pipeline read), and each of two versions runs them alone, from
//! an empty state, in a sandbox (file source, state in memory, one shard, every window closed at
//! the end). The bundle carries the events and what each version gave; a pair that gives the
//! same is refused, as there is nothing to reproduce.
//!
//! One sandboxed run at a time on the server (the replay turn); the log is held from truncation
//! while it is read. Depends on `event`, `repro`, `spec`, `window` and the replay's sandbox.

use std::io::BufRead;
use std::path::Path;

use serde::Deserialize;

use super::Slot;
use super::replay::{Sandbox, Turn, replayable};
use super::savepoints::Hold;
use crate::operator::{ComponentKind, Registry};
use crate::repro::{Bundle, ReproEvent, Said, value_json};
use crate::serve::RequestError;
use crate::spec::{PipelineSpec, Sink, SourceSpec, StateSpec, WindowSpec};
use crate::time::Millis;

/// The most events one bundle carries.
pub const MAX_REPRO_EVENTS: usize = 10_000;
/// How long reading a stream or topic to where the pipeline read may take.
const READ_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Calls `line` with each line `source` yields until `done` says its position is where the
/// pipeline had read (or the input ends); refused after [`READ_LIMIT`].
fn read_source(
    mut source: Box<dyn crate::source::Source>,
    done: impl Fn(&crate::source::SourcePosition) -> bool,
    line: &mut dyn FnMut(&[u8]) -> Result<(), RequestError>,
) -> Result<(), RequestError> {
    use crate::source::Record;
    let began = std::time::Instant::now();
    loop {
        match source.next_record()? {
            Some(Record::Line(_, bytes)) => line(&bytes)?,
            Some(Record::Tick) if done(&source.position()) => return Ok(()),
            Some(Record::Tick) if began.elapsed() > READ_LIMIT => {
                return Err(RequestError::Busy(format!(
                    "the input could not be read to where the pipeline had read within {} s: \
                     try again",
                    READ_LIMIT.as_secs()
                )));
            }
            Some(Record::Tick) => std::thread::sleep(std::time::Duration::from_millis(1)),
            Some(_) => {}
            None => return Ok(()),
        }
    }
}

/// What a repro is made from (`POST /v1/pipelines/{name}/repro`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReproRequest {
    /// A row as the user saw it: a record of `results.jsonl` or `shadow.jsonl`, a row of a
    /// replay's answer, or a dead letter.
    pub row: serde_json::Value,
    /// The live version and the candidate; by default the live one and the row's own version,
    /// or the rollout's candidate.
    #[serde(default)]
    pub versions: Option<[String; 2]>,
}

/// The window a row names, and what it recorded.
#[derive(Debug)]
struct Target {
    key: String,
    start: Millis,
    end: Millis,
    made_from: &'static str,
    /// The version the row shows beside the live one: a shadow comparison's candidate, or the
    /// version that wrote a result.
    own: Option<String>,
    /// A version's output as the row recorded it.
    recorded: Option<(String, serde_json::Value)>,
}

impl Slot {
    /// Makes the bundle for `request` (see the module documentation).
    pub fn repro(
        &self,
        request: &ReproRequest,
        registry: &Registry,
    ) -> Result<Bundle, RequestError> {
        let (spec, candidate) = self.with_managed(|managed| {
            let rollout = managed.desired.rollout.as_ref().map(|r| r.version.clone());
            Ok((managed.spec.clone(), rollout))
        })?;
        let operator = replayable(&spec)?;
        if !spec.enrichers.is_empty() {
            return Err(RequestError::Conflict(
                "a repro reads the events an aggregate got from the pipeline's input; this \
                 pipeline enriches them first"
                    .into(),
            ));
        }
        let target = target(&request.row, &spec)?;
        let [live, candidate] = versions(request, &spec, &target, candidate)?;
        for version in [&live, &candidate] {
            let known = (registry.get(&operator, version))
                .is_some_and(|info| info.world == ComponentKind::Aggregate.world());
            if !known {
                return Err(RequestError::NotFound(format!(
                    "aggregate {operator}@{version} is not in the registry"
                )));
            }
        }
        let _turn = Turn::take()?;
        let _hold = Hold::new(self);
        let sandbox = Sandbox(self.sandbox_dir()?);
        std::fs::create_dir_all(&sandbox.0).map_err(RequestError::from_io)?;
        let input = sandbox.0.join("events.jsonl");
        // A delete removes the log under the read: say so rather than fail.
        let deleted = |error: RequestError| match self.is_deleted() {
            true => RequestError::Conflict("the pipeline was deleted during the repro".into()),
            false => error,
        };
        let events = self
            .window_events(&spec, &target, &input)
            .map_err(deleted)?;
        let mut said = Vec::with_capacity(2);
        for (index, version) in [&live, &candidate].into_iter().enumerate() {
            let dir = sandbox.0.join(index.to_string());
            said.push(run_window(&spec, &input, &dir, version, registry, &target)?);
        }
        let candidate = said.pop().expect("two runs");
        let expected = said.pop().expect("two runs");
        if expected.output == candidate.output && expected.error == candidate.error {
            return Err(RequestError::Conflict(format!(
                "{operator}@{live} and @{} give the same for key {:?} in window [{}, {}) ({}): \
                 nothing to reproduce",
                candidate.version,
                target.key,
                target.start,
                target.end,
                serde_json::to_string(&expected.output).unwrap_or_default()
            )));
        }
        let note = (target.recorded.as_ref())
            .filter(|(version, output)| {
                *version == live && Some(output) != expected.output.as_ref()
            })
            .map(|(_, output)| {
                format!(
                    "the live run recorded {output} for this window: some of its events were late \
                     there, or the log was read from another state"
                )
            });
        Ok(Bundle {
            pipeline: self.name.clone(),
            operator,
            key: target.key,
            window_start: target.start,
            window_end: target.end,
            made_from: target.made_from.into(),
            events,
            state_before: serde_json::json!({"values": {}, "maps": {}}),
            expected,
            candidate,
            note,
        })
    }

    /// The key's events in the window, in arrival order, from the pipeline's input up to where
    /// it has read ([`Slot::each_input_line`]); also written, as they were sent, to `input` for
    /// the sandboxed runs.
    fn window_events(
        &self,
        spec: &PipelineSpec,
        target: &Target,
        input: &Path,
    ) -> Result<Vec<ReproEvent>, RequestError> {
        use std::io::Write;
        let mut decoder = crate::event::Decoder::new(&spec.key_field, &spec.timestamp_field);
        let mut written =
            std::io::BufWriter::new(std::fs::File::create(input).map_err(RequestError::from_io)?);
        let (mut events, mut line_no) = (Vec::new(), 0u64);
        self.each_input_line(spec, &mut |line| {
            line_no += 1;
            let Ok(event) = decoder.decode(line_no, line) else {
                return Ok(());
            };
            if event.key.as_str() != target.key
                || event.timestamp < target.start
                || event.timestamp >= target.end
            {
                return Ok(());
            }
            if events.len() == MAX_REPRO_EVENTS {
                return Err(RequestError::TooLarge(format!(
                    "key {:?} has more than {MAX_REPRO_EVENTS} events in the window; a repro \
                     carries at most that many",
                    target.key
                )));
            }
            written
                .write_all(line)
                .and_then(|()| written.write_all(b"\n"))
                .map_err(RequestError::from_io)?;
            events.push(ReproEvent {
                timestamp: event.timestamp,
                fields: (event.fields.iter())
                    .map(|(name, value)| (name.to_string(), value_json(value)))
                    .collect(),
            });
            Ok(())
        })?;
        written.flush().map_err(RequestError::from_io)?;
        if events.is_empty() {
            return Err(RequestError::NotFound(format!(
                "the pipeline's input holds no event of key {:?} in window [{}, {})",
                target.key, target.start, target.end
            )));
        }
        Ok(events)
    }

    /// Calls `line` with every input line the live pipeline has read: its ingest log (whole, to
    /// what is committed), its NATS stream (to the sequence it read; on workers, to the
    /// stream's last message now) or its Kafka topic (to its last checkpoint's offsets).
    fn each_input_line(
        &self,
        spec: &PipelineSpec,
        line: &mut dyn FnMut(&[u8]) -> Result<(), RequestError>,
    ) -> Result<(), RequestError> {
        match &spec.source {
            SourceSpec::Nats(nats) => {
                let end = match self.on_workers()? {
                    true => super::on_workers::stream_end(nats)?,
                    false => self.input_read(),
                };
                let mut nats = nats.clone();
                nats.until = Some(end);
                let source = crate::source::NatsSource::new(nats)?;
                read_source(Box::new(source), |at| at.offset >= end, line)
            }
            SourceSpec::Kafka(kafka) => {
                let until = self.kafka_checkpointed()?;
                let mut kafka = kafka.clone();
                kafka.until = Some(until.clone());
                let source = crate::source::KafkaSource::new(
                    kafka,
                    &spec.name,
                    &spec.key_field,
                    &spec.timestamp_field,
                )?;
                let done = |at: &crate::source::SourcePosition| {
                    until.iter().all(|(&p, &next)| {
                        let read = at.files.iter().find(|f| f.rng == Some(p as u64));
                        read.map_or(next <= 0, |f| f.offset as i64 >= next)
                    })
                };
                read_source(Box::new(source), done, line)
            }
            _ => self.each_log_line(line),
        }
    }

    /// Calls `line` with every event line of the whole ingest log, to what is committed.
    fn each_log_line(
        &self,
        line: &mut dyn FnMut(&[u8]) -> Result<(), RequestError>,
    ) -> Result<(), RequestError> {
        self.whole_log()?;
        let end = self.ingest_log()?.gate().committed();
        let log = self.dir.join(super::INGEST_FILE);
        let segments = crate::source::segments(&log).map_err(RequestError::from_io)?;
        for (base, path) in segments {
            let file = std::fs::File::open(&path).map_err(RequestError::from_io)?;
            let mut offset = base;
            for read in std::io::BufReader::new(file).split(b'\n') {
                let read = read.map_err(RequestError::from_io)?;
                offset += read.len() as u64 + 1;
                if offset > end {
                    return Ok(());
                }
                if read.first() != Some(&b'#') {
                    line(&read)?;
                }
            }
        }
        Ok(())
    }
}

/// The key and window a row names.
fn target(row: &serde_json::Value, spec: &PipelineSpec) -> Result<Target, RequestError> {
    let invalid = |message: &str| RequestError::Invalid(message.to_owned());
    let row = row.as_object().ok_or_else(|| {
        invalid(
            "\"row\" is a JSON object: a result, a shadow result, a replay row or a dead letter",
        )
    })?;
    let (key, start, end, made_from) = match (row.get("key"), row.get("raw")) {
        (Some(key), _) => {
            let key = key
                .as_str()
                .ok_or_else(|| invalid("the row's \"key\" is text"))?;
            let bound = |name: &str| row.get(name).and_then(serde_json::Value::as_i64);
            let (Some(start), Some(end)) = (bound("window_start"), bound("window_end")) else {
                return Err(invalid(
                    "the row has a \"key\" but no \"window_start\" and \"window_end\": a late event \
                     counts in no window, so it has no result to reproduce",
                ));
            };
            let made_from = if row.contains_key("candidate_version") {
                "shadow comparison"
            } else if row.contains_key("a") && row.contains_key("b") {
                "replay row"
            } else {
                "result"
            };
            (key.to_owned(), start, end, made_from)
        }
        (None, Some(raw)) => {
            let raw = raw
                .as_str()
                .ok_or_else(|| invalid("the dead letter's \"raw\" is text"))?;
            let (key, start, end) = dead_letter_window(raw, spec)?;
            (key, start, end, "dead letter")
        }
        (None, None) => {
            return Err(invalid(
                "the row has neither a \"key\" (a result, a shadow result, a replay row) nor a \
                 \"raw\" line (a dead letter)",
            ));
        }
    };
    if key.is_empty() || key.len() > 256 {
        return Err(invalid("a key is 1 to 256 bytes"));
    }
    if start >= end {
        return Err(invalid(
            "the row's window_start must be before its window_end",
        ));
    }
    let text = |name: &str| row.get(name).and_then(|v| v.as_str()).map(str::to_owned);
    // A result: `operator_version` and `value`; a shadow comparison: `served_by` and `live`
    // beside `candidate_version`.
    let recorded = match (text("operator_version"), text("served_by")) {
        (Some(version), _) => row.get("value").map(|value| (version, value.clone())),
        (None, Some(version)) => row.get("live").map(|value| (version, value.clone())),
        _ => None,
    };
    let own = text("candidate_version").or_else(|| text("operator_version"));
    Ok(Target {
        key,
        start,
        end,
        made_from,
        own,
        recorded,
    })
}

/// The key of a dead letter's event and the first window its time falls in.
fn dead_letter_window(
    raw: &str,
    spec: &PipelineSpec,
) -> Result<(String, Millis, Millis), RequestError> {
    let mut decoder = crate::event::Decoder::new(&spec.key_field, &spec.timestamp_field);
    let event = decoder.decode(0, raw.as_bytes()).map_err(|dead| {
        RequestError::Invalid(format!(
            "the dead letter's line is not an event of this pipeline ({}): an input the pipeline \
             refused has no window to reproduce",
            dead.reason
        ))
    })?;
    let window = spec
        .window
        .as_ref()
        .ok_or_else(|| RequestError::Conflict("the pipeline has no window".into()))?;
    if let WindowSpec::Session { .. } = window {
        return Err(RequestError::Invalid(
            "a session's bounds are known from its result: make the repro from the session's result row".into(),
        ));
    }
    let mut windows = Vec::new();
    crate::window::assign(window, event.timestamp, &mut windows)
        .map_err(|e| RequestError::Invalid(format!("the dead letter's event: {e}")))?;
    let first = windows
        .first()
        .ok_or_else(|| RequestError::Invalid("the event falls in no window".into()))?;
    Ok((event.key.to_string(), first.start, first.end))
}

/// The live version and the candidate.
fn versions(
    request: &ReproRequest,
    spec: &PipelineSpec,
    target: &Target,
    rollout: Option<String>,
) -> Result<[String; 2], RequestError> {
    if let Some(versions) = &request.versions {
        for version in versions {
            crate::names::check("operator version", version)?;
        }
        return Ok(versions.clone());
    }
    let live = (spec.aggregate.as_ref())
        .map(|op| op.version.clone())
        .unwrap_or_default();
    let own = target.own.clone();
    match own
        .filter(|own| *own != live)
        .or(rollout.filter(|c| *c != live))
    {
        Some(candidate) => Ok([live, candidate]),
        None => Err(RequestError::Invalid(format!(
            "the row is the live version's ({live}) and no rollout names a candidate: give \
             \"versions\": [\"{live}\", candidate]"
        ))),
    }
}

/// Runs `input` through `version` alone in `dir` and says what it gave for the window.
fn run_window(
    spec: &PipelineSpec,
    input: &Path,
    dir: &Path,
    version: &str,
    registry: &Registry,
    target: &Target,
) -> Result<Said, RequestError> {
    std::fs::create_dir_all(dir).map_err(RequestError::from_io)?;
    let mut spec = spec.clone();
    spec.source = SourceSpec::File(input.to_path_buf());
    // Nothing is late: every event of the window counts, and the end of the input closes it.
    spec.watermark_bound = Millis::MAX / 4;
    spec.advance_when_idle = None;
    spec.idle_timeout = None;
    spec.partition_field = None;
    let op = spec.aggregate.as_mut().expect("checked: replayable");
    op.code = registry.code(&op.name, version)?;
    op.version = version.to_owned();
    spec.state = StateSpec::Memory;
    spec.sinks.results = Sink::File(dir.join("results.jsonl"));
    spec.sinks.late = Sink::Discard;
    spec.sinks.dead_letters = Sink::File(dir.join("dead-letters.jsonl"));
    spec.shards = Some(1);
    spec.checkpoint_interval = None;
    spec.max_rate = None;
    crate::pipeline::run(&spec).map_err(|e| {
        RequestError::Conflict(format!(
            "running {version} on the window's events failed: {e}"
        ))
    })?;
    let lines = |name: &str| -> Vec<serde_json::Value> {
        (std::fs::read_to_string(dir.join(name))
            .unwrap_or_default()
            .lines())
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
    };
    let output = (lines("results.jsonl").into_iter())
        .rev()
        .find(|r| {
            r["key"] == target.key.as_str()
                && r["window_start"] == target.start
                && r["window_end"] == target.end
                && r["kind"] != "retract"
        })
        .map(|r| r["value"].clone());
    let error = match output {
        Some(_) => None,
        None => Some(
            (lines("dead-letters.jsonl").first())
                .and_then(|d| d["reason"].as_str().map(str::to_owned))
                .unwrap_or_else(|| "no result for the window".into()),
        ),
    };
    Ok(Said {
        version: version.to_owned(),
        output,
        error,
    })
}
