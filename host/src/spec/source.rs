//! The `[source]` section: where events come from (files, standard input, a generator,
//! Nexmark, HTTP ingest, a NATS stream), the raw form it is written in, its defaults and limits
//! (the HTTP source's `max_behind`, `segment_size` and `max_events_per_second` among them) and
//! its checks, including the Nexmark source's against the event's key and time fields.
//!
//! Depends on `values`, `names` and `time` only.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::Result;
use super::values::{RawSize, invalid, size};
use crate::time::Millis;

/// The default bound on accepted events an HTTP pipeline has still to read: 64 MiB.
pub const DEFAULT_MAX_BEHIND: u64 = 64 << 20;

/// The default size of an ingest log segment: 64 MiB.
pub const DEFAULT_SEGMENT_SIZE: u64 = 64 << 20;

/// The most watermark partitions a pipeline keeps (header or field values, files): each costs
/// memory and a place in every minimum, and a producer chooses them.
pub const MAX_PARTITIONS: usize = 1_024;

/// The most events per second of event time a Nexmark source may be asked for.
pub const MAX_NEXMARK_RATE: u64 = 1_000_000_000;

/// Where events come from.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceSpec {
    /// A JSON Lines file.
    File(PathBuf),
    /// Several JSON Lines files read one line from each in turn, each a watermark partition
    /// named by its path as the spec gives it: `(file, name)`.
    Files(Vec<(PathBuf, String)>),
    /// JSON Lines on standard input.
    Stdin,
    /// A deterministic generator, for demos and benchmarks.
    Generator(GeneratorSpec),
    /// The Nexmark benchmark's persons, auctions and bids.
    Nexmark(NexmarkSpec),
    /// Events sent over HTTP to `weir serve`, which appends them to this durable ingest log
    /// (`None` until the server assigns one).
    Http(Option<PathBuf>),
    /// A NATS JetStream stream.
    Nats(NatsSourceSpec),
    /// A Kafka topic.
    Kafka(KafkaSourceSpec),
}

/// A Kafka topic to read (`[source] type = "kafka"`): every partition, each a watermark
/// partition, its offset kept in the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSourceSpec {
    /// The brokers, `host:port[,host:port...]`.
    pub brokers: String,
    /// The topic.
    pub topic: String,
    /// The consumer group named to the brokers (for monitoring only: Weir assigns partitions
    /// itself and keeps offsets in its checkpoints). Default `weir-<pipeline>`.
    #[serde(default)]
    pub group: Option<String>,
    /// Every header of a record into its event, as an object under `@kafka.headers`.
    #[serde(default)]
    pub headers: bool,
    /// Each partition's offset to stop before (a replay's sandbox: what the live pipeline's
    /// last checkpoint had read); a partition not named is not read. Never from a spec.
    #[serde(skip)]
    pub until: Option<std::collections::BTreeMap<i32, i64>>,
    /// Read only this partition (a shared pipeline's slice); never from a spec.
    #[serde(skip)]
    pub partition: Option<i32>,
}

/// A NATS JetStream stream to read (`[source] type = "nats"`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsSourceSpec {
    /// The server, `nats://host:port`.
    pub url: String,
    /// The stream's name.
    pub stream: String,
    /// Only messages of these subjects (wildcards allowed); all of the stream's when empty.
    #[serde(default)]
    pub subjects: Vec<String>,
    /// Read no message after this stream sequence (a replay's end); never from a spec.
    #[serde(skip)]
    pub until: Option<u64>,
    /// The stream cut into partitions by key (`partitions = { count = 6, subject =
    /// "part.{partition}.*" }`): each a watermark partition, and a shared pipeline's slice.
    #[serde(default)]
    pub partitions: Option<NatsPartitions>,
    /// Read only this partition (a shared pipeline's slice); never from a spec.
    #[serde(skip)]
    pub partition: Option<usize>,
}

/// A NATS stream cut into `count` partitions by its events' keys: partition `p`'s messages are
/// on the subjects `subject` matches with its `{partition}` token made `p` (a server-side
/// subject mapping, `{{partition(count, 1)}}` on the key's token, puts them there).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsPartitions {
    /// How many partitions (2 to 64).
    pub count: usize,
    /// The subjects of a partition, one of whose tokens is `{partition}`.
    pub subject: String,
}

/// The token of a partition's number in [`NatsPartitions::subject`].
pub const PARTITION_TOKEN: &str = "{partition}";

impl NatsPartitions {
    /// Where `{partition}` is among the subject's tokens.
    pub fn token(&self) -> usize {
        (self.subject.split('.'))
            .position(|token| token == PARTITION_TOKEN)
            .unwrap_or(0)
    }

    /// The subjects of partition `p`.
    pub fn subject_of(&self, p: usize) -> String {
        self.subject.replace(PARTITION_TOKEN, &p.to_string())
    }

    /// The subjects of every partition (the token a wildcard).
    pub fn all_subjects(&self) -> String {
        self.subject.replace(PARTITION_TOKEN, "*")
    }

    /// The partition a message's subject names, if it names one of them.
    pub fn of_subject<'a>(&self, subject: &'a str) -> Option<&'a str> {
        let token = subject.split('.').nth(self.token())?;
        token
            .parse::<usize>()
            .ok()
            .filter(|p| *p < self.count && p.to_string() == token)
            .map(|_| token)
    }

    fn check(&self) -> Result<()> {
        if !(2..=64).contains(&self.count) {
            return Err(invalid(
                "source.partitions.count: from 2 to 64 (each is a shared pipeline's slice)",
            ));
        }
        let tokens = self
            .subject
            .split('.')
            .filter(|t| *t == PARTITION_TOKEN)
            .count();
        if tokens != 1 || self.subject.contains('>') {
            return Err(invalid(format!(
                "source.partitions.subject: one token is {PARTITION_TOKEN} (\"part.{PARTITION_TOKEN}.*\"), \
                 and no >: not {:?}",
                self.subject
            )));
        }
        check_nats("source.partitions", "nats://x", &[&self.all_subjects()])
    }
}

/// The generator's parameters. Events have the fields `key`, `ts` and `amount`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeneratorSpec {
    /// How many events to produce.
    pub events: u64,
    /// How many distinct keys (`k0`, `k1`, ...).
    #[serde(default = "default_generator_keys")]
    pub keys: u64,
    /// Seed of the pseudo-random sequence.
    #[serde(default)]
    pub seed: u64,
    /// Event time advances by this many milliseconds per event.
    #[serde(default = "default_one")]
    pub interval_ms: u64,
    /// Each event's timestamp is moved back by up to this many milliseconds (disorder).
    #[serde(default)]
    pub max_delay_ms: u64,
}

/// The Nexmark source's parameters: `events` events (persons, auctions and bids in the
/// benchmark's 1:3:46 mix) at `rate` events per second of event time from `base_time`, the same
/// for the same seed. `kinds` keeps only some kinds (the others are generated and skipped, so
/// ids and times do not depend on the filter).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NexmarkSpec {
    /// How many events to generate (of every kind, before `kinds` filters them).
    pub events: u64,
    /// Events per second of event time (the spacing of `date_time`).
    #[serde(default = "default_nexmark_rate")]
    pub rate: u64,
    /// Seed of the pseudo-random choices.
    #[serde(default)]
    pub seed: u64,
    /// The kinds to keep (default: all three).
    #[serde(default = "NexmarkKind::all")]
    pub kinds: Vec<NexmarkKind>,
    /// The first event's `date_time`, in ms since the epoch (default 2026-01-01T00:00:00Z).
    #[serde(default = "default_nexmark_base_time")]
    pub base_time: Millis,
}

/// The kinds of Nexmark event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NexmarkKind {
    /// A person who sells and bids.
    Person,
    /// An item put up for auction by a person.
    Auction,
    /// A bid on an auction.
    Bid,
}

impl NexmarkKind {
    /// Every kind.
    pub fn all() -> Vec<NexmarkKind> {
        vec![NexmarkKind::Person, NexmarkKind::Auction, NexmarkKind::Bid]
    }

    /// The name in the `kind` field.
    pub fn name(self) -> &'static str {
        match self {
            NexmarkKind::Person => "person",
            NexmarkKind::Auction => "auction",
            NexmarkKind::Bid => "bid",
        }
    }

    /// The fields of this kind's events, in order (as Nexmark's SQL tables name them, with
    /// `kind` first; the benchmark's `extra` padding is left out).
    pub fn fields(self) -> &'static [&'static str] {
        match self {
            NexmarkKind::Person => &[
                "kind",
                "id",
                "name",
                "email_address",
                "credit_card",
                "city",
                "state",
                "date_time",
            ],
            NexmarkKind::Auction => &[
                "kind",
                "id",
                "item_name",
                "description",
                "initial_bid",
                "reserve",
                "date_time",
                "expires",
                "seller",
                "category",
            ],
            NexmarkKind::Bid => &[
                "kind",
                "auction",
                "bidder",
                "price",
                "channel",
                "url",
                "date_time",
            ],
        }
    }
}

fn default_generator_keys() -> u64 {
    1000
}

fn default_one() -> u64 {
    1
}

fn default_nexmark_rate() -> u64 {
    10_000
}

fn default_nexmark_base_time() -> Millis {
    1_767_225_600_000
}

/// The `[source]` as written.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub(super) enum RawSource {
    File {
        path: PathBuf,
    },
    Files {
        paths: Vec<PathBuf>,
    },
    Stdin,
    Http {
        max_behind: Option<RawSize>,
        segment_size: Option<RawSize>,
        max_events_per_second: Option<u64>,
    },
    Generator(GeneratorSpec),
    Nexmark(NexmarkSpec),
    Nats(NatsSourceSpec),
    Kafka(KafkaSourceSpec),
}

/// The checked `[source]`.
#[derive(Debug)]
pub(super) struct Source {
    /// Where events come from.
    pub(super) spec: SourceSpec,
    /// An HTTP source's limits (the defaults for other sources).
    pub(super) limits: HttpLimits,
}

/// An HTTP source's limits (see the fields of the same names in
/// [`PipelineSpec`](super::PipelineSpec)).
#[derive(Debug)]
pub(super) struct HttpLimits {
    pub(super) max_behind: u64,
    pub(super) segment_size: u64,
    pub(super) max_rate: Option<u64>,
}

/// Checks the `[source]`: an HTTP source's limits, the source itself (a file's path is relative
/// to `base`), and a Nexmark source against the fields its events are keyed (`key`: `None` with
/// a join, which keys each side by its own field) and timed by.
pub(super) fn check(
    raw: RawSource,
    base: &Path,
    key: Option<&str>,
    timestamp: &str,
) -> Result<Source> {
    let limits = check_http(&raw)?;
    let spec = check_source(raw, base)?;
    if let SourceSpec::Nexmark(nexmark) = &spec {
        check_nexmark(nexmark, key, timestamp)?;
    }
    Ok(Source { spec, limits })
}

/// Checks an HTTP source's `max_events_per_second`, `max_behind` and `segment_size`; other
/// sources get the defaults.
fn check_http(raw: &RawSource) -> Result<HttpLimits> {
    let RawSource::Http {
        max_behind,
        segment_size,
        max_events_per_second,
    } = raw
    else {
        return Ok(HttpLimits {
            max_behind: DEFAULT_MAX_BEHIND,
            segment_size: DEFAULT_SEGMENT_SIZE,
            max_rate: None,
        });
    };
    if *max_events_per_second == Some(0) {
        return Err(invalid(
            "source.max_events_per_second must be at least 1 (leave it out for no limit)",
        ));
    }
    let max_behind = match size("source.max_behind", max_behind, DEFAULT_MAX_BEHIND as usize)? {
        0 => return Err(invalid("source.max_behind must be more than 0 bytes")),
        bytes => bytes as u64,
    };
    let segment = size(
        "source.segment_size",
        segment_size,
        DEFAULT_SEGMENT_SIZE as usize,
    )?;
    if segment < 1024 {
        return Err(invalid("source.segment_size must be at least 1KiB"));
    }
    Ok(HttpLimits {
        max_behind,
        segment_size: segment as u64,
        max_rate: *max_events_per_second,
    })
}

/// Checks the `[source]`; a file's path is relative to `base`.
fn check_source(raw: RawSource, base: &Path) -> Result<SourceSpec> {
    Ok(match raw {
        RawSource::Nats(nats) => {
            let subjects: Vec<&str> = nats.subjects.iter().map(String::as_str).collect();
            check_nats("source", &nats.url, &subjects)?;
            crate::names::check("source.stream", &nats.stream)?;
            if nats.stream.contains('.') || nats.subjects.len() > 64 {
                return Err(invalid(
                    "source.stream is a stream name without dots, with at most 64 subjects",
                ));
            }
            if let Some(partitions) = &nats.partitions {
                partitions.check()?;
                if !nats.subjects.is_empty() {
                    return Err(invalid(
                        "source: a partitioned stream is read by its partitions' subjects; \
                         leave out subjects",
                    ));
                }
            }
            SourceSpec::Nats(nats)
        }
        RawSource::Kafka(kafka) => {
            check_kafka("source", &kafka.brokers, &kafka.topic)?;
            if let Some(group) = &kafka.group {
                crate::names::check("source.group", group)?;
            }
            SourceSpec::Kafka(kafka)
        }
        RawSource::File { path } => SourceSpec::File(base.join(path)),
        RawSource::Files { paths } => {
            if paths.is_empty() || paths.len() > MAX_PARTITIONS {
                return Err(invalid(format!(
                    "source.paths: give 1 to {} files (each is a watermark partition)",
                    MAX_PARTITIONS
                )));
            }
            let mut seen = std::collections::HashSet::new();
            let mut files = Vec::with_capacity(paths.len());
            for path in paths {
                let name = path.display().to_string();
                if !seen.insert(name.clone()) {
                    return Err(invalid(format!("source.paths names {name:?} twice")));
                }
                files.push((base.join(&path), name));
            }
            SourceSpec::Files(files)
        }
        RawSource::Stdin => SourceSpec::Stdin,
        RawSource::Http { .. } => SourceSpec::Http(None),
        RawSource::Generator(g) => {
            if g.keys == 0 {
                return Err(invalid("source.keys must be at least 1"));
            }
            SourceSpec::Generator(g)
        }
        RawSource::Nexmark(nexmark) => SourceSpec::Nexmark(nexmark),
    })
}

/// Checks Kafka brokers (`host:port`, comma-separated) and a topic name (Kafka's rule: 1 to
/// 249 of letters, digits, `.`, `_` and `-`).
pub(super) fn check_kafka(field: &str, brokers: &str, topic: &str) -> Result<()> {
    let broker_ok = |b: &str| {
        b.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty()
                && !host.contains("://")
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || ".-_[]:".contains(c))
                && port.parse::<u16>().is_ok_and(|p| p > 0)
        })
    };
    if brokers.is_empty() || brokers.len() > 1024 || !brokers.split(',').all(broker_ok) {
        return Err(invalid(format!(
            "{field}: the brokers are host:port addresses, comma-separated, not {brokers:?}"
        )));
    }
    let topic_ok = !topic.is_empty()
        && topic.len() <= 249
        && topic != "."
        && topic != ".."
        && topic
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if !topic_ok {
        return Err(invalid(format!(
            "{field}: {topic:?} is not a Kafka topic (1 to 249 letters, digits, '.', '_' or '-')"
        )));
    }
    Ok(())
}

/// Checks a NATS server address and subjects: `nats://` (or `tls://`), printable, bounded.
pub(super) fn check_nats(field: &str, url: &str, subjects: &[&str]) -> Result<()> {
    let scheme = url.starts_with("nats://") || url.starts_with("tls://");
    if !scheme || url.len() > 1024 || url.chars().any(char::is_whitespace) {
        return Err(invalid(format!(
            "{field}: the server is a nats://host:port (or tls://host:port) address, not {url:?}"
        )));
    }
    for subject in subjects {
        let bad = subject.is_empty()
            || subject.len() > 256
            || subject.chars().any(|c| c.is_whitespace() || c.is_control())
            || subject.split('.').any(str::is_empty);
        if bad {
            return Err(invalid(format!(
                "{field}: {subject:?} is not a NATS subject (dot-separated tokens, no spaces, at most 256 bytes)"
            )));
        }
    }
    Ok(())
}

/// Checks a Nexmark source against the fields the pipeline keys and times its events by.
fn check_nexmark(nexmark: &NexmarkSpec, key: Option<&str>, timestamp: &str) -> Result<()> {
    if !(1..=MAX_NEXMARK_RATE).contains(&nexmark.rate) {
        return Err(invalid(format!(
            "source.rate = {}: use 1 to {MAX_NEXMARK_RATE} events per second",
            nexmark.rate
        )));
    }
    if nexmark.kinds.is_empty() {
        return Err(invalid(
            "source.kinds is empty: name at least one of person, auction, bid",
        ));
    }
    if timestamp != "date_time" {
        return Err(invalid(format!(
            "event.timestamp = {timestamp:?}: Nexmark events are timed by date_time; use \
             timestamp = \"date_time\""
        )));
    }
    for kind in &nexmark.kinds {
        if let Some(key) = key
            && !kind.fields().contains(&key)
        {
            return Err(invalid(format!(
                "event.key = {key:?} is not a field of Nexmark {} events ({}); keep only the \
                 kinds that have it with source.kinds",
                kind.name(),
                kind.fields().join(", ")
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::spec::tests::parse;
    use crate::spec::{NexmarkKind, SourceSpec};

    #[test]
    fn a_nexmark_source_is_checked_against_the_key_and_time_fields() {
        let nexmark = |source: &str, key: &str, ts: &str| {
            parse(&format!(
                "name = \"n\"\n[source]\ntype = \"nexmark\"\n{source}\n[event]\nkey = \"{key}\"\ntimestamp = \"{ts}\"\n"
            ))
        };
        let spec = nexmark("events = 10\nkinds = [\"bid\"]", "auction", "date_time").unwrap();
        let SourceSpec::Nexmark(source) = spec.source else {
            panic!("{:?}", spec.source)
        };
        assert_eq!((source.events, source.rate, source.seed), (10, 10_000, 0));
        assert_eq!(source.kinds, vec![NexmarkKind::Bid]);
        let refused = [
            (
                "events = 10",
                "auction",
                "date_time",
                "not a field of Nexmark person",
            ),
            (
                "events = 10\nkinds = [\"bid\"]",
                "auction",
                "ts",
                "are timed by date_time",
            ),
            (
                "events = 10\nkinds = [\"bid\"]",
                "auction",
                "price",
                "are timed by date_time",
            ),
            (
                "events = 10\nkinds = []",
                "kind",
                "date_time",
                "kinds is empty",
            ),
            (
                "events = 10\nkinds = [\"lot\"]",
                "kind",
                "date_time",
                "unknown variant",
            ),
            (
                "events = 10\nrate = 0",
                "kind",
                "date_time",
                "source.rate = 0",
            ),
            ("events = -1", "kind", "date_time", "invalid value"),
            (
                "events = 1\nextra = 3",
                "kind",
                "date_time",
                "unknown field",
            ),
        ];
        for (source, key, ts, expected) in refused {
            let err = nexmark(source, key, ts).unwrap_err().to_string();
            assert!(err.contains(expected), "{source} / {key} / {ts}: {err}");
        }
    }
}
