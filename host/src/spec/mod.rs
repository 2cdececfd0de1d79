//! The pipeline spec: what a user writes in `pipeline.toml` (or sends as JSON), parsed and
//! checked into a [`PipelineSpec`] with durations in milliseconds and paths resolved against the
//! spec's directory. Every mistake is reported with the field it concerns and what to write.
//!
//! Depends on `time` and `names` only.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::time::{MAX_TIMESTAMP, Millis, parse_duration};

/// Errors in a pipeline spec.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// The spec file could not be read.
    #[error("cannot read pipeline spec {path}: {source}")]
    Read {
        /// The spec's path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The spec is not valid TOML or JSON, or has unknown or missing fields.
    #[error("pipeline spec {path} is not valid: {message}")]
    Syntax {
        /// The spec's path.
        path: PathBuf,
        /// The parser's message, which names the field.
        message: String,
    },
    /// The spec parses but a value is not acceptable.
    #[error("pipeline spec: {0}")]
    Invalid(String),
}

/// `Result` for spec loading.
pub type Result<T, E = SpecError> = std::result::Result<T, E>;

/// A checked pipeline spec.
#[derive(Debug, Clone)]
pub struct PipelineSpec {
    /// The pipeline's name (used in output ids and the data directory).
    pub name: String,
    /// Where events come from.
    pub source: SourceSpec,
    /// The field holding each event's key (empty with a join: it keys each side by its own
    /// field).
    pub key_field: String,
    /// The field holding each event's timestamp.
    pub timestamp_field: String,
    /// The watermark's bound on out-of-orderness.
    pub watermark_bound: Millis,
    /// How far an event may be ahead of the wall clock at which it was accepted (sources that
    /// record it: HTTP ingest); beyond it the event is a dead letter, not a watermark jump.
    pub max_ahead: Millis,
    /// HTTP sources: once no event has been accepted for this long, the watermark moves with
    /// the wall clock (`[watermark] advance_when_idle`), so windows close while the input
    /// pauses.
    pub advance_when_idle: Option<Millis>,
    /// The field naming each event's watermark partition (`[watermark] partition_field`); HTTP
    /// ingest also takes a partition from the `Weir-Partition` header. The watermark is the
    /// minimum over active partitions.
    pub partition_field: Option<String>,
    /// HTTP sources: a partition without events for this long (by the ingest clock) stops
    /// holding the watermark back (`[watermark] idle_timeout`).
    pub idle_timeout: Option<Millis>,
    /// The windows, when the pipeline aggregates.
    pub window: Option<WindowSpec>,
    /// How long after a window's end late events still update it.
    pub allowed_lateness: Millis,
    /// Enrichment operators, applied in order.
    pub enrichers: Vec<OperatorSpec>,
    /// The windowed aggregate, if any.
    pub aggregate: Option<OperatorSpec>,
    /// Further stages, each aggregating the window results of the one before.
    pub stages: Vec<StageSpec>,
    /// A join of two kinds of event (window or interval): each side's events keyed by its own
    /// field.
    pub join: Option<JoinSpec>,
    /// The aggregate is global (one result per window over every key), pre-aggregated: each
    /// shard folds its events into partial states per bucket of keys, and the partials are
    /// merged with the operator's `merge` at window end.
    pub global: bool,
    /// The aggregate pre-aggregates each key's events in buckets spread over the shards, and
    /// a combine merges each key's partials (`pre_aggregate = true`: for a few hot keys).
    pub pre_aggregate: bool,
    /// Where state lives.
    pub state: StateSpec,
    /// Where output goes.
    pub sinks: SinksSpec,
    /// Number of shards; `None` means one per core.
    pub shards: Option<usize>,
    /// Events per batch handed from the source to the shards.
    pub batch_size: usize,
    /// Processing time between checkpoints; `None` disables them. Only the redb backend
    /// checkpoints.
    pub checkpoint_interval: Option<Millis>,
    /// Roughly how much clean state a shard keeps in memory before evicting (redb backend).
    pub memory_budget: usize,
    /// The most state the operators may keep (`[state] max_keys`, `max_bytes`): scopes, and
    /// bytes of their encoded values. Writes past it are refused (dead letters).
    pub state_quota: StateQuotaSpec,
    /// An HTTP source's bound: how many bytes of accepted events the pipeline may have still to
    /// read before ingest answers 429 with `Retry-After` (`[source] max_behind`).
    pub max_behind: u64,
    /// An HTTP source's ingest log segment size: segments wholly before the last checkpoint
    /// are deleted (`[source] segment_size`).
    pub segment_size: u64,
    /// An HTTP source's ingest rate limit, in events per second (a second's worth may come at
    /// once); beyond it, ingest answers 429 (`[source] max_events_per_second`).
    pub max_rate: Option<u64>,
    /// What operators may use and how much.
    pub sandbox: SandboxSpec,
    /// How window results are written (`[emit]`).
    pub emit: EmitSpec,
}

/// How window results are written (`[emit] mode`): `on_close` (the default: a window's result
/// when the watermark passes its end, then an update per change within the allowed lateness),
/// `changelog` (each update preceded by the retraction of the result it replaces, so a
/// downstream sum can subtract) or `early` (also the window's current result every
/// `early_every` of its events before it closes). A result equal to the last one written for
/// its window is never written again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EmitSpec {
    /// Updates are written as a retraction and the new result.
    pub changelog: bool,
    /// Early results every this many events of a window.
    pub early_every: Option<u64>,
    /// HTTP sources: early results of every window that changed, every this long of wall
    /// clock (`early_interval`).
    pub early_interval: Option<Millis>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEmit {
    mode: Option<String>,
    early_every: Option<u64>,
    early_interval: Option<RawDuration>,
}

/// Checks the `[emit]`. Early results are the aggregate's: with stages (or a global
/// aggregate, whose combine is a stage) the output is a later stage's, which has none. Early
/// results by wall clock need the ingest log to record when they are due (an HTTP source).
fn check_emit(raw: &RawEmit, windowed: bool, staged: bool, http: bool) -> Result<EmitSpec> {
    let interval = match &raw.early_interval {
        None => None,
        Some(_) if raw.mode.as_deref() != Some("early") => {
            return Err(invalid("emit.early_interval is for emit.mode = \"early\""));
        }
        Some(_) if !http => {
            return Err(invalid(
                "emit.early_interval is for an HTTP source (weir serve records when each early \
                 result is due in the ingest log); use early_every with other sources",
            ));
        }
        Some(raw) => Some(positive("emit.early_interval", Some(raw))?),
    };
    let mode = raw.mode.as_deref().unwrap_or("on_close");
    if mode == "early" && staged {
        return Err(invalid(
            "emit.mode = \"early\" is for a pipeline whose output is its aggregate's: with \
             [[stages]] or a global aggregate the results are a stage's, emitted on close",
        ));
    }
    if mode != "on_close" && !windowed {
        return Err(invalid(format!(
            "emit.mode = {mode:?} is about window results: this pipeline has no [window]"
        )));
    }
    match (mode, raw.early_every) {
        ("on_close", None) => Ok(EmitSpec::default()),
        ("changelog", None) => Ok(EmitSpec {
            changelog: true,
            ..EmitSpec::default()
        }),
        ("early", None) if interval.is_some() => Ok(EmitSpec {
            early_interval: interval,
            ..EmitSpec::default()
        }),
        ("early", Some(every @ 1..=1_000_000_000)) => Ok(EmitSpec {
            changelog: false,
            early_every: Some(every),
            early_interval: interval,
        }),
        ("early", Some(other)) => Err(invalid(format!(
            "emit.early_every = {other}: give 1 to 1000000000 events per early result"
        ))),
        ("early", None) => Err(invalid(
            "emit.mode = \"early\" needs early_every (a window's current result every that many \
             of its events) or early_interval (every window's that changed, that often)",
        )),
        ("on_close" | "changelog", Some(_)) => {
            Err(invalid("emit.early_every is for emit.mode = \"early\""))
        }
        (other, _) => Err(invalid(format!(
            "emit.mode = {other:?}: expected \"on_close\", \"changelog\" or \"early\""
        ))),
    }
}

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

/// Events per batch unless the spec says otherwise. Measured on JSON Lines from a file (2 M
/// events, 1,000 keys, the Wasm count-sum, one shard, release): 1,024 gave 600 k events/s,
/// 4,096 gave 1.0 M, 16,384 gave 1.28 M; on `weir bench` (3 M generated events) 4,096 gave
/// 0.97-0.98 M and 16,384 1.40-1.42 M (more events per key per operator call; calls stay at
/// most 4,096 events). A source sends a partial batch whenever its input pauses or the batch
/// has waited 100 ms, so a larger batch costs memory, not latency.
pub const DEFAULT_BATCH_SIZE: usize = 16_384;

/// The default checkpoint interval: 1 s.
pub const DEFAULT_CHECKPOINT_INTERVAL: Millis = 1_000;
/// The default bound on how far ahead of the wall clock an ingested event may be: one day.
pub const DEFAULT_MAX_AHEAD: Millis = 86_400_000;
/// The default bound on accepted events an HTTP pipeline has still to read: 64 MiB.
pub const DEFAULT_MAX_BEHIND: u64 = 64 << 20;
/// The most watermark partitions a pipeline keeps (header or field values, files): each costs
/// memory and a place in every minimum, and a producer chooses them.
pub const MAX_PARTITIONS: usize = 1_024;

/// The default size of an ingest log segment: 64 MiB.
pub const DEFAULT_SEGMENT_SIZE: u64 = 64 << 20;

/// The default memory budget per shard: 256 MiB.
pub const DEFAULT_MEMORY_BUDGET: usize = 256 << 20;

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

/// A NATS subject to publish results to (`results = { nats = "nats://...", subject = "..." }`),
/// whose stream de-duplicates on the results' ids.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsSinkSpec {
    /// The server, `nats://host:port`.
    pub nats: String,
    /// The subject.
    pub subject: String,
}

/// Checks a NATS server address and subjects: `nats://` (or `tls://`), printable, bounded.
fn check_nats(field: &str, url: &str, subjects: &[&str]) -> Result<()> {
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

/// The most events per second of event time a Nexmark source may be asked for.
pub const MAX_NEXMARK_RATE: u64 = 1_000_000_000;

fn default_nexmark_rate() -> u64 {
    10_000
}
fn default_nexmark_base_time() -> Millis {
    1_767_225_600_000
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

fn default_generator_keys() -> u64 {
    1000
}
fn default_one() -> u64 {
    1
}

/// A window assigner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowSpec {
    /// Fixed, non-overlapping windows of `size`.
    Tumbling {
        /// Window length.
        size: Millis,
    },
    /// Windows of `size` starting every `slide`.
    Sliding {
        /// Window length.
        size: Millis,
        /// Distance between window starts; at most `size`.
        slide: Millis,
    },
    /// Per-key sessions closed by `gap` without events.
    Session {
        /// Inactivity that ends a session.
        gap: Millis,
    },
}

/// One operator of the chain.
#[derive(Debug, Clone, PartialEq)]
pub struct OperatorSpec {
    /// Name, as it appears in output records.
    pub name: String,
    /// Version, as it appears in output records.
    pub version: String,
    /// Where its code is.
    pub code: OperatorCode,
    /// Reference data loaded into each key's state (enrichment only).
    pub reference: Option<ReferenceSpec>,
    /// Only these fields are passed to the operator (all when `None`).
    pub fields: Option<Vec<String>>,
    /// Per-key state expires this long (event time) after the key's latest event (enrichment
    /// only).
    pub state_ttl: Option<Millis>,
}

/// A stage after the pipeline's aggregate: the previous stage's window results become its
/// events (their value's fields, with `key`, `window_start` and `window_end`, at the time
/// `window_end - 1`), keyed by `key_field` (or all under one key), aggregated in `window`.
#[derive(Debug, Clone, PartialEq)]
pub struct StageSpec {
    /// The field of the previous stage's results to key by; `None`: one key for all (a
    /// global aggregate per window).
    pub key_field: Option<String>,
    /// The stage's windows (never late input: its events arrive before the watermark that
    /// fired them).
    pub window: WindowSpec,
    /// The stage's aggregate.
    pub aggregate: OperatorSpec,
}

/// A join: the source's events are on the left or the right by the value of `field`, and each
/// side is keyed by its own key field. A window join lets the aggregate see both sides' events
/// of a key and window together (each with the field `side`: `left` or `right`); an interval
/// join pairs each left event with every right event of its key whose time is within its
/// bounds, and passes the pairs on as events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinSpec {
    /// The field that tells the sides apart.
    pub field: String,
    /// The left side.
    pub left: JoinSide,
    /// The right side.
    pub right: JoinSide,
    /// For an interval join: its bounds.
    pub interval: Option<IntervalBounds>,
}

/// An interval join's bounds: a left event at `t` pairs with the right events of its key at
/// `t + lower ..= t + upper` (as Flink's `between(lower, upper)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntervalBounds {
    /// The lower bound, in ms (may be negative).
    pub lower: Millis,
    /// The upper bound, in ms (at least `lower`).
    pub upper: Millis,
}

/// The `[join]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJoin {
    #[serde(rename = "type", default = "default_join_type")]
    kind: String,
    field: String,
    left: JoinSide,
    right: JoinSide,
    lower: Option<RawDuration>,
    upper: Option<RawDuration>,
}

fn default_join_type() -> String {
    "window".into()
}

/// One side of a join.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinSide {
    /// The value of the join's `field` that puts an event on this side.
    pub value: String,
    /// The field this side's events are keyed by.
    pub key: String,
}

/// The field a join adds to each event: `left` or `right`.
pub const SIDE_FIELD: &str = "side";

/// The key of every event of a stage without a key field.
pub const GLOBAL_KEY: &str = "*";

/// Where an operator's code comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum OperatorCode {
    /// A WebAssembly component file.
    Component(PathBuf),
    /// A built-in native operator, by name (used as the benchmark baseline).
    Native(String),
    /// The version `name@version` of `weir serve`'s operator registry.
    Registry,
    /// A component the registry stored, checked against its digest before it is loaded.
    Stored {
        /// The stored file.
        path: PathBuf,
        /// `sha256:<hex>`, recorded at upload.
        digest: String,
    },
}

/// Reference data for an enrichment operator: a JSON Lines file whose rows are loaded into the
/// map `reference` of the state of the key found in field `key`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReferenceSpec {
    /// The JSON Lines file.
    pub path: PathBuf,
    /// The field of each row holding the key it belongs to.
    pub key: String,
}

/// Which state backend to use.
#[derive(Debug, Clone, PartialEq)]
pub enum StateSpec {
    /// State in memory only.
    Memory,
    /// State in a redb file inside this directory.
    Redb(PathBuf),
}

/// The state quota (`[state] max_keys`, `max_bytes`); both absent: no quota.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateQuotaSpec {
    /// Scopes: a key's state, or a key's state in one window.
    pub max_keys: Option<u64>,
    /// Bytes of the scopes' encoded values.
    pub max_bytes: Option<u64>,
}

/// Where output goes. `None` for a sink means standard output.
#[derive(Debug, Clone, PartialEq)]
pub struct SinksSpec {
    /// Window results (and enriched events when there is no aggregate).
    pub results: Sink,
    /// Events too late for all their windows.
    pub late: Sink,
    /// Input and operator failures.
    pub dead_letters: Sink,
}

impl SinksSpec {
    /// Refuses two sinks writing the same file: their records would interleave and each would
    /// cut the other back on recovery.
    fn check_distinct(&self) -> Result<()> {
        let files = [
            ("results", &self.results),
            ("late", &self.late),
            ("dead_letters", &self.dead_letters),
        ];
        for (i, (a, first)) in files.iter().enumerate() {
            for (b, second) in &files[i + 1..] {
                if let (Sink::File(x), Sink::File(y)) = (first, second)
                    && x == y
                {
                    return Err(invalid(format!(
                        "sinks.{a} and sinks.{b} name the same file {}: give each its own",
                        x.display()
                    )));
                }
            }
        }
        Ok(())
    }
}

/// One output destination.
#[derive(Debug, Clone, PartialEq)]
pub enum Sink {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
    /// A JSON Lines file, created (with its directory) or truncated at start.
    File(PathBuf),
    /// Discarded (benchmarks).
    Discard,
    /// Published to a NATS JetStream subject, each record with its id as `Nats-Msg-Id`.
    Nats(NatsSinkSpec),
}

// ---- The file format -------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    name: String,
    source: RawSource,
    event: RawEvent,
    #[serde(default)]
    watermark: RawWatermark,
    window: Option<RawWindow>,
    #[serde(default)]
    operators: Vec<RawOperator>,
    #[serde(default)]
    stages: Vec<RawStage>,
    join: Option<RawJoin>,
    #[serde(default)]
    state: RawState,
    #[serde(default)]
    sinks: RawSinks,
    shards: Option<usize>,
    batch_size: Option<usize>,
    checkpoint_interval: Option<RawDuration>,
    #[serde(default)]
    sandbox: RawSandbox,
    #[serde(default)]
    emit: RawEmit,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSandbox {
    call_timeout: Option<RawDuration>,
    cpu: Option<f64>,
    total_memory: Option<RawSize>,
    memory: Option<RawSize>,
    max_output_bytes: Option<RawSize>,
    #[serde(default)]
    allow: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
enum RawSource {
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
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvent {
    /// Required unless a `[join]` keys each side by its own field.
    key: Option<String>,
    timestamp: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWatermark {
    bound: Option<RawDuration>,
    max_ahead: Option<RawDuration>,
    advance_when_idle: Option<RawDuration>,
    partition_field: Option<String>,
    idle_timeout: Option<RawDuration>,
}

/// A duration: integer milliseconds or text with a unit.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum RawDuration {
    Millis(i64),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWindow {
    #[serde(rename = "type")]
    kind: String,
    size: Option<RawDuration>,
    slide: Option<RawDuration>,
    gap: Option<RawDuration>,
    allowed_lateness: Option<RawDuration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOperator {
    name: String,
    #[serde(default = "default_version")]
    version: String,
    kind: String,
    module: Option<PathBuf>,
    native: Option<String>,
    reference: Option<RawReference>,
    fields: Option<Vec<String>>,
    state_ttl: Option<RawDuration>,
    #[serde(default)]
    global: bool,
    #[serde(default)]
    pre_aggregate: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStage {
    key: Option<String>,
    window: RawWindow,
    operator: RawOperator,
}

/// Checks a `[join]`: two sides told apart by different values, each with a key field, and
/// windows to join in (a window join) or bounds (an interval join).
fn check_join(join: RawJoin, windowed: bool) -> Result<JoinSpec> {
    let interval = match (join.kind.as_str(), &join.lower, &join.upper) {
        ("window", None, None) if windowed => None,
        ("window", None, None) => {
            return Err(invalid(
                "join: a window join pairs events within windows: add a [window] and an \
                 aggregate (or make it type = \"interval\" with lower and upper bounds)",
            ));
        }
        ("window", _, _) => {
            return Err(invalid(
                "join: lower and upper are the bounds of an interval join: add type = \"interval\"",
            ));
        }
        ("interval", Some(lower), Some(upper)) => {
            let lower = signed_duration("join.lower", lower)?;
            let upper = signed_duration("join.upper", upper)?;
            if lower > upper {
                return Err(invalid(format!(
                    "join: lower ({lower} ms) is above upper ({upper} ms): a left event at t pairs \
                     with right events at t + lower ..= t + upper"
                )));
            }
            Some(IntervalBounds { lower, upper })
        }
        ("interval", _, _) => {
            return Err(invalid(
                "join: an interval join needs lower and upper: a left event at t pairs with the \
                 right events of its key at t + lower ..= t + upper (e.g. lower = \"0s\", upper = \"10s\")",
            ));
        }
        (other, _, _) => {
            return Err(invalid(format!(
                "join.type = {other:?}: expected \"window\" or \"interval\""
            )));
        }
    };
    let join = JoinSpec {
        field: join.field,
        left: join.left,
        right: join.right,
        interval,
    };
    if join.field.is_empty() || join.left.key.is_empty() || join.right.key.is_empty() {
        return Err(invalid(
            "join: field, left.key and right.key must not be empty",
        ));
    }
    if join.left.value == join.right.value {
        return Err(invalid(format!(
            "join: left and right have the same value {:?} of `{}`: an event must be on one side",
            join.left.value, join.field
        )));
    }
    Ok(join)
}

/// Whether the aggregate combines partials (`global = true`: one result over all keys;
/// `pre_aggregate = true`: one per key, each key's events spread over buckets first), and if so
/// that the rest of the spec allows it: tumbling windows (a partial belongs to exactly one
/// window) and no enrichers (they key their state by the event's key, which the partials
/// replace by a bucket). With allowed lateness, an updated partial replaces the old one in the
/// combine (a stage). Returns `(global, pre_aggregate)`.
fn check_global(operators: &[RawOperator], window: Option<&WindowSpec>) -> Result<(bool, bool)> {
    let Some((i, op)) =
        (operators.iter().enumerate()).find(|(_, op)| op.global || op.pre_aggregate)
    else {
        return Ok((false, false));
    };
    let what = if op.global { "global" } else { "pre_aggregate" };
    let at = format!("operators[{i}] ({:?}): {what}", op.name);
    let refuse = |why: &str| Err(invalid(format!("{at}: {why}")));
    if op.global && op.pre_aggregate {
        return refuse(
            "global and pre_aggregate are two ways to combine partials: a global aggregate \
             pre-aggregates already",
        );
    }
    if op.kind != "aggregate" {
        return refuse("only an aggregate combines partials");
    }
    if !matches!(window, Some(WindowSpec::Tumbling { .. })) {
        return refuse(
            "a global aggregate needs tumbling windows (sliding and session windows are not supported yet)",
        );
    }
    if operators.iter().any(|op| op.kind == "enrich") {
        return refuse(
            "a global aggregate cannot follow enrichment operators yet (their state is per key)",
        );
    }
    Ok((op.global, op.pre_aggregate))
}

/// `error`, said of `at` (a part of the spec checked on its own).
fn within(at: &str, error: SpecError) -> SpecError {
    match error {
        SpecError::Invalid(message) => invalid(format!("{at}: {message}")),
        other => other,
    }
}

/// Checks the `[[stages]]`: each has windows without lateness of its own (a stage keeps its
/// windows for the pipeline's allowed lateness, as long as an upstream result can change) and
/// one aggregate.
fn check_stages(
    raw: Vec<RawStage>,
    base: &Path,
    aggregate: Option<&OperatorSpec>,
) -> Result<Vec<StageSpec>> {
    if !raw.is_empty() && aggregate.is_none() {
        return Err(invalid(
            "stages aggregate the results of the pipeline's aggregate: add an operator of kind \
             \"aggregate\" (and a [window]) before any [[stages]]",
        ));
    }
    raw.into_iter()
        .enumerate()
        .map(|(i, stage)| {
            let at = format!("stages[{i}]");
            if stage.operator.global || stage.operator.pre_aggregate {
                return Err(invalid(format!(
                    "{at}.operator: `global` is for the pipeline's aggregate; a stage without a \
                     key is global already"
                )));
            }
            if stage.key.as_deref() == Some("") {
                return Err(invalid(format!(
                    "{at}.key is empty: name a field of the previous stage's results, or leave \
                     it out for one key"
                )));
            }
            let (window, lateness) =
                check_window(Some(stage.window)).map_err(|e| within(&format!("{at}.window"), e))?;
            if lateness > 0 {
                return Err(invalid(format!(
                    "{at}.window.allowed_lateness: a stage's input is never late, so it has no \
                     allowed lateness of its own (it keeps its windows for the pipeline's \
                     window.allowed_lateness, while upstream results can still change)"
                )));
            }
            let (enrichers, aggregate) =
                check_operators(vec![stage.operator], base, window.as_ref())
                    .map_err(|e| within(&format!("{at}.operator"), e))?;
            match (enrichers.is_empty(), aggregate, window) {
                (true, Some(aggregate), Some(window)) => Ok(StageSpec {
                    key_field: stage.key,
                    window,
                    aggregate,
                }),
                _ => Err(invalid(format!(
                    "{at}.operator: a stage's operator is of kind \"aggregate\""
                ))),
            }
        })
        .collect()
}

fn default_version() -> String {
    "0.0.0".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReference {
    path: PathBuf,
    key: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawState {
    backend: Option<String>,
    dir: Option<PathBuf>,
    memory_budget: Option<RawSize>,
    max_keys: Option<u64>,
    max_bytes: Option<RawSize>,
}

/// A size: integer bytes or text with a unit.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum RawSize {
    Bytes(u64),
    Text(String),
}

/// Parses a size: a whole number of bytes, optionally with a unit (`B`, `KiB`, `MiB`, `GiB`).
pub fn parse_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: usize = digits
        .parse()
        .map_err(|_| format!("size {text:?} must start with a whole number"))?;
    let scale: usize = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        other => {
            return Err(format!(
                "size {text:?} has unknown unit {other:?} (use B, KiB, MiB or GiB)"
            ));
        }
    };
    n.checked_mul(scale)
        .ok_or_else(|| format!("size {text:?} is too large"))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSinks {
    results: Option<RawSink>,
    late: Option<RawSink>,
    dead_letters: Option<RawSink>,
}

/// A sink: a file path, `stdout`, `stderr` or `discard`, or a NATS subject.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum RawSink {
    Named(String),
    Nats(NatsSinkSpec),
}

impl PipelineSpec {
    /// Reads a spec file: TOML, or JSON when the name ends in `.json`.
    pub fn load(path: &Path) -> Result<PipelineSpec> {
        let text = std::fs::read_to_string(path).map_err(|source| SpecError::Read {
            path: path.to_owned(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let json = path.extension().is_some_and(|e| e == "json");
        Self::parse(&text, json, base).map_err(|e| match e {
            SpecError::Syntax { message, .. } => SpecError::Syntax {
                path: path.to_owned(),
                message,
            },
            other => other,
        })
    }

    /// Parses spec text; relative paths are resolved against `base`.
    pub fn parse(text: &str, json: bool, base: &Path) -> Result<PipelineSpec> {
        let raw: RawSpec = if json {
            serde_json::from_str(text).map_err(|e| SpecError::Syntax {
                path: PathBuf::new(),
                message: e.to_string(),
            })?
        } else {
            toml::from_str(text).map_err(|e| SpecError::Syntax {
                path: PathBuf::new(),
                message: e.to_string(),
            })?
        };
        raw.check(base, base)
    }

    /// Parses a JSON spec sent to `weir serve` for a pipeline living in `dir`. Such a spec names
    /// only what the server provides: events over HTTP (the ingest log `dir/ingest.jsonl`),
    /// operators from the registry (by name and version) or built in, state in `dir/data`, and
    /// sinks inside `dir/out`. File paths, standard streams and state
    /// directories are refused with the reason; `weir run`, a local command, keeps them.
    ///
    /// `Served::New` is a spec being created: its sinks are relative to `dir/out`. A server
    /// stores it with its sinks relative to `dir` (`"out/results.jsonl"`), as older Weirs did,
    /// and reads it back as `Served::Stored`: sinks relative to `dir`, and what newer rules
    /// refuse (the memory backend, more shards) still accepted, so an upgrade never turns a
    /// pipeline into a damaged one.
    pub fn parse_served(text: &str, dir: &Path, served: Served) -> Result<PipelineSpec> {
        Self::parse_served_with(text, dir, served, &[])
    }

    /// [`parse_served`](Self::parse_served) for a server that connects to the NATS servers at
    /// `nats` (the `--nats` it was started with): a spec may read a stream of, and publish to,
    /// those and no other.
    pub fn parse_served_with(
        text: &str,
        dir: &Path,
        served: Served,
        nats: &[String],
    ) -> Result<PipelineSpec> {
        let raw: RawSpec = serde_json::from_str(text).map_err(|e| SpecError::Syntax {
            path: PathBuf::new(),
            message: e.to_string(),
        })?;
        let out = dir.join("out");
        let sink_base = match served {
            Served::New => out.clone(),
            Served::Stored => dir.to_owned(),
        };
        raw.check_served(&sink_base, served, nats)?;
        let http = matches!(raw.source, RawSource::Http { .. });
        let given = [
            raw.sinks.results.is_some(),
            raw.sinks.late.is_some(),
            raw.sinks.dead_letters.is_some(),
        ];
        let mut spec = raw.check(dir, &sink_base)?;
        if http {
            spec.source = SourceSpec::Http(Some(dir.join("ingest.jsonl")));
        }
        if spec.state != StateSpec::Memory {
            spec.state = StateSpec::Redb(dir.join("data"));
        }
        let sinks = &mut spec.sinks;
        for ((given, sink), default) in given
            .into_iter()
            .zip([&mut sinks.results, &mut sinks.late, &mut sinks.dead_letters])
            .zip(["results.jsonl", "late.jsonl", "dead-letters.jsonl"])
        {
            if !given {
                *sink = Sink::File(out.join(default));
            }
        }
        spec.sinks.check_distinct()?;
        Ok(spec)
    }
}

/// Whether a served spec is being created or was stored by a server earlier (see
/// [`PipelineSpec::parse_served`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// Sent to create a pipeline: every rule applies.
    New,
    /// Read back from a pipeline's directory.
    Stored,
}

/// The most shards a pipeline may have.
pub const MAX_SHARDS: usize = 256;
/// The most windows one event may fall into (sliding windows: `size / slide`).
pub const MAX_WINDOWS_PER_EVENT: i64 = 1_000;
/// The largest batch.
pub const MAX_BATCH_SIZE: usize = 1 << 20;
/// The longest call an operator may be allowed: 10 minutes.
pub const MAX_CALL_TIMEOUT: Millis = 600_000;
/// The most shards a pipeline of `weir serve` may have (each is a thread).
pub const MAX_SERVED_SHARDS: usize = 32;
/// The largest state memory budget per shard.
pub const MAX_MEMORY_BUDGET: usize = 64 << 30;
/// The most memory one operator instance may be given.
pub const MAX_SANDBOX_MEMORY: usize = 4 << 30;

fn invalid(message: impl Into<String>) -> SpecError {
    SpecError::Invalid(message.into())
}

fn duration(field: &str, raw: &RawDuration) -> Result<Millis> {
    match raw {
        RawDuration::Millis(ms) if *ms > MAX_TIMESTAMP => Err(invalid(format!(
            "{field} = {ms} ms is too large (at most {MAX_TIMESTAMP} ms)"
        ))),
        RawDuration::Millis(ms) if *ms >= 0 => Ok(*ms),
        RawDuration::Millis(ms) => Err(invalid(format!("{field} = {ms} must not be negative"))),
        RawDuration::Text(text) => {
            parse_duration(text).map_err(|e| invalid(format!("{field}: {e}")))
        }
    }
}

/// A duration that may be negative (`-5s`, `-5000`).
fn signed_duration(field: &str, raw: &RawDuration) -> Result<Millis> {
    match raw {
        RawDuration::Millis(ms) if *ms < 0 => {
            duration(field, &RawDuration::Millis(-ms)).map(|ms| -ms)
        }
        RawDuration::Text(text) if text.trim_start().starts_with('-') => {
            let positive = text.trim_start()[1..].to_owned();
            duration(field, &RawDuration::Text(positive)).map(|ms| -ms)
        }
        raw => duration(field, raw),
    }
}

fn positive(field: &str, raw: Option<&RawDuration>) -> Result<Millis> {
    let raw = raw.ok_or_else(|| invalid(format!("{field} is required")))?;
    match duration(field, raw)? {
        0 => Err(invalid(format!("{field} must be greater than zero"))),
        ms => Ok(ms),
    }
}

fn sink(field: &str, raw: Option<RawSink>, default: Sink, base: &Path) -> Result<Sink> {
    let raw = match raw {
        Some(RawSink::Nats(nats)) => {
            check_nats(&format!("sinks.{field}"), &nats.nats, &[&nats.subject])?;
            if nats.subject.contains(['*', '>']) {
                return Err(invalid(format!(
                    "sinks.{field}: results are published to one subject, without wildcards"
                )));
            }
            return Ok(Sink::Nats(nats));
        }
        Some(RawSink::Named(name)) => Some(name),
        None => None,
    };
    Ok(match raw.as_deref() {
        None => default,
        Some("stdout") | Some("-") => Sink::Stdout,
        Some("stderr") => Sink::Stderr,
        Some("discard") => Sink::Discard,
        Some("") => {
            return Err(invalid(format!(
                "sinks.{field} must name a file, stdout, stderr or discard"
            )));
        }
        Some(path) => Sink::File(base.join(path)),
    })
}

/// Checks the `[source]`; a file's path is relative to `base`.
fn check_source(raw: RawSource, base: &Path) -> Result<SourceSpec> {
    Ok(match raw {
        RawSource::Nats(nats) => {
            let subjects: Vec<&str> = nats.subjects.iter().map(String::as_str).collect();
            check_nats("source", &nats.url, &subjects)?;
            crate::names::check("source.stream", &nats.stream)
                .map_err(|e| invalid(e.to_string()))?;
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

/// Checks the `[state]` backend; its directory is relative to `base`, and defaults to
/// `weir-data/<name>`.
fn check_state(raw: &RawState, name: &str, base: &Path) -> Result<StateSpec> {
    match raw.backend.as_deref() {
        None | Some("redb") => Ok(StateSpec::Redb(match &raw.dir {
            Some(dir) => base.join(dir),
            None => PathBuf::from("weir-data").join(name),
        })),
        Some("memory") => Ok(StateSpec::Memory),
        Some(other) => Err(invalid(format!(
            "state.backend {other:?} is unknown: use redb or memory"
        ))),
    }
}

/// Checks the `[window]`: the assigner and the allowed lateness.
fn check_window(raw: Option<RawWindow>) -> Result<(Option<WindowSpec>, Millis)> {
    Ok(match raw {
        None => (None, 0),
        Some(w) => {
            let lateness = match &w.allowed_lateness {
                Some(raw) => duration("window.allowed_lateness", raw)?,
                None => 0,
            };
            let spec = match w.kind.as_str() {
                "tumbling" => WindowSpec::Tumbling {
                    size: positive("window.size", w.size.as_ref())?,
                },
                "sliding" => {
                    let size = positive("window.size", w.size.as_ref())?;
                    let slide = positive("window.slide", w.slide.as_ref())?;
                    if slide > size {
                        return Err(invalid(format!(
                            "window.slide ({slide} ms) must not exceed window.size ({size} ms): \
                             events between windows would belong to none"
                        )));
                    }
                    if size / slide > MAX_WINDOWS_PER_EVENT {
                        return Err(invalid(format!(
                            "window: size {size} ms over slide {slide} ms puts every event \
                             into {} windows; the limit is {MAX_WINDOWS_PER_EVENT} \
                             (make the slide at least size / {MAX_WINDOWS_PER_EVENT})",
                            size / slide
                        )));
                    }
                    WindowSpec::Sliding { size, slide }
                }
                "session" => WindowSpec::Session {
                    gap: positive("window.gap", w.gap.as_ref())?,
                },
                other => {
                    return Err(invalid(format!(
                        "window.type {other:?} is unknown: use tumbling, sliding or session"
                    )));
                }
            };
            (Some(spec), lateness)
        }
    })
}

/// Checks the `[[operators]]`: enrichers first, then at most one aggregate, which needs a
/// window (and a window needs it).
fn check_operators(
    raw: Vec<RawOperator>,
    base: &Path,
    window: Option<&WindowSpec>,
) -> Result<(Vec<OperatorSpec>, Option<OperatorSpec>)> {
    let mut enrichers = Vec::new();
    let mut aggregate = None;
    for (i, op) in raw.into_iter().enumerate() {
        let at = format!("operators[{i}] ({:?})", op.name);
        crate::names::check("operator name", &op.name)
            .and_then(|()| crate::names::check("operator version", &op.version))
            .map_err(|e| invalid(format!("{at}: {e}")))?;
        let code = match (op.module, op.native) {
            (Some(module), None) => OperatorCode::Component(base.join(module)),
            (None, Some(native)) => OperatorCode::Native(native),
            (None, None) => OperatorCode::Registry,
            (Some(_), Some(_)) => {
                return Err(invalid(format!(
                    "{at}: give one of `module` (a component file) or `native`, not both"
                )));
            }
        };
        let reference = op.reference.map(|r| ReferenceSpec {
            path: base.join(r.path),
            key: r.key,
        });
        let state_ttl = match &op.state_ttl {
            Some(raw) => Some(positive(&format!("{at}: state_ttl"), Some(raw))?),
            None => None,
        };
        let spec = OperatorSpec {
            name: op.name,
            version: op.version,
            code,
            reference,
            fields: op.fields,
            state_ttl,
        };
        match op.kind.as_str() {
            "enrich" if aggregate.is_some() => {
                return Err(invalid(format!(
                    "{at}: enrichment operators must come before the aggregate"
                )));
            }
            "enrich" => enrichers.push(spec),
            "aggregate" if aggregate.is_some() => {
                return Err(invalid(format!(
                    "{at}: a pipeline has at most one aggregate operator"
                )));
            }
            "aggregate" => {
                if spec.state_ttl.is_some() {
                    return Err(invalid(format!(
                        "{at}: `state_ttl` is for enrichment operators; window state is dropped \
                         once the watermark passes the window's end plus the allowed lateness"
                    )));
                }
                if spec.reference.is_some() {
                    return Err(invalid(format!(
                        "{at}: `reference` is for enrichment operators"
                    )));
                }
                aggregate = Some(spec)
            }
            other => {
                return Err(invalid(format!(
                    "{at}: kind {other:?} is unknown: use enrich or aggregate"
                )));
            }
        }
    }
    match (window, &aggregate) {
        (Some(_), None) => {
            return Err(invalid(
                "a [window] needs an operator of kind = \"aggregate\"",
            ));
        }
        (None, Some(_)) => return Err(invalid("an aggregate operator needs a [window]")),
        _ => {}
    }
    Ok((enrichers, aggregate))
}

/// The smallest and largest CPU budget (`[sandbox] cpu`, in cores).
const MIN_CPU: f64 = 0.01;
const MAX_CPU: f64 = 1024.0;

/// Checks the `[sandbox]`: limits within their bounds, and only the grants Weir offers.
fn check_sandbox(raw: &RawSandbox) -> Result<SandboxSpec> {
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

/// A size field: integer bytes or text with a unit, `default` when absent.
fn size(field: &str, raw: &Option<RawSize>, default: usize) -> Result<usize> {
    match raw {
        None => Ok(default),
        Some(RawSize::Bytes(n)) => Ok(*n as usize),
        Some(RawSize::Text(text)) => parse_size(text).map_err(|e| invalid(format!("{field}: {e}"))),
    }
}

impl RawSpec {
    /// What a served spec may not name (see [`PipelineSpec::parse_served`]); its sinks are
    /// relative to `sink_base`; it may name the NATS servers at `nats` and no other.
    fn check_served(&self, sink_base: &Path, served: Served, nats: &[String]) -> Result<()> {
        let known = |field: &str, url: &str| {
            if nats.iter().any(|known| known == url) {
                Ok(())
            } else {
                Err(invalid(format!(
                    "{field}: a served pipeline connects only to the NATS servers weir serve was \
                     started with (--nats), named in the spec by \"server\" (source) or \"nats\" \
                     (sinks)"
                )))
            }
        };
        // Nor reach the server's own streams and subjects: JetStream's API (`$JS.API...`, a
        // publish to which is a request), key-value buckets and object stores (where the
        // cluster keeps its leases, watermarks, specs and components).
        let internal = |field: &str, subject: &str| {
            if subject.starts_with('$') {
                Err(invalid(format!(
                    "{field}: {subject:?} is a NATS system subject; a served pipeline reads and \
                     publishes only application subjects"
                )))
            } else {
                Ok(())
            }
        };
        match &self.source {
            RawSource::Http { .. } => {}
            RawSource::Nats(source) => {
                known("source", &source.url)?;
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
            _ => {
                return Err(invalid(
                    "source: a pipeline of weir serve reads the events sent to it over HTTP \
                     ({\"type\": \"http\"}) or a NATS stream of a server it was started with \
                     ({\"type\": \"nats\", \"stream\": ...}); files, stdin and generators are \
                     for `weir run`",
                ));
            }
        }
        if self
            .operators
            .iter()
            .any(|op| op.global || op.pre_aggregate)
        {
            return Err(invalid(
                "operators: a global or pre-aggregated aggregate runs under `weir run` for now \
                 (a rollout would merge partials of two versions)",
            ));
        }
        let operators = self
            .operators
            .iter()
            .enumerate()
            .map(|(i, op)| (format!("operators[{i}]"), op));
        let stages = self
            .stages
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
        if served == Served::New && self.state.backend.as_deref() == Some("memory") {
            return Err(invalid(
                "state.backend: a served pipeline keeps its state in redb, where memory_budget \
                 bounds it and checkpoints make it exactly-once; leave the backend out",
            ));
        }
        if served == Served::New && self.shards.is_some_and(|n| n > MAX_SERVED_SHARDS) {
            return Err(invalid(format!(
                "shards: a served pipeline has at most {MAX_SERVED_SHARDS} shards"
            )));
        }
        if self.state.dir.is_some() {
            return Err(invalid(
                "state.dir: a served pipeline keeps its state in its own directory; leave it out",
            ));
        }
        let sinks = [
            ("sinks.results", &self.sinks.results),
            ("sinks.late", &self.sinks.late),
            ("sinks.dead_letters", &self.sinks.dead_letters),
        ];
        for (field, sink) in sinks {
            let sink = match sink {
                // A caller of the API must not make the server connect where it likes.
                Some(RawSink::Nats(sink)) => {
                    known(field, &sink.nats)?;
                    internal(field, &sink.subject)?;
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
                    )
                    .map_err(|e| invalid(e.to_string()))?;
                }
            }
        }
        Ok(())
    }

    /// Checks everything; relative paths are resolved against `base`, sink files against
    /// `sink_base`.
    fn check(self, base: &Path, sink_base: &Path) -> Result<PipelineSpec> {
        crate::names::check("pipeline name", &self.name).map_err(|e| invalid(e.to_string()))?;
        let max_rate = match &self.source {
            RawSource::Http {
                max_events_per_second: Some(0),
                ..
            } => {
                return Err(invalid(
                    "source.max_events_per_second must be at least 1 (leave it out for no limit)",
                ));
            }
            RawSource::Http {
                max_events_per_second,
                ..
            } => *max_events_per_second,
            _ => None,
        };
        let (max_behind, segment_size) = match &self.source {
            RawSource::Http {
                max_behind,
                segment_size,
                ..
            } => {
                let behind =
                    match size("source.max_behind", max_behind, DEFAULT_MAX_BEHIND as usize)? {
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
                (behind, segment as u64)
            }
            _ => (DEFAULT_MAX_BEHIND, DEFAULT_SEGMENT_SIZE),
        };
        let source = check_source(self.source, base)?;
        if let SourceSpec::Nexmark(nexmark) = &source {
            // A join keys each side by its own field: the event key is not used.
            let key = if self.join.is_some() {
                None
            } else {
                self.event.key.as_deref()
            };
            check_nexmark(nexmark, key, &self.event.timestamp)?;
        }
        let key_field = match (self.event.key, &self.join) {
            (Some(key), _) => key,
            (None, Some(_)) => String::new(),
            (None, None) => {
                return Err(invalid(
                    "event.key is required: the field events are keyed by (only a [join], which \
                     keys each side by its own field, goes without it)",
                ));
            }
        };
        let watermark_bound = match &self.watermark.bound {
            Some(raw) => duration("watermark.bound", raw)?,
            None => 0,
        };
        let max_ahead = match &self.watermark.max_ahead {
            Some(raw) => positive("watermark.max_ahead", Some(raw))?,
            None => DEFAULT_MAX_AHEAD,
        };
        let advance_when_idle = match &self.watermark.advance_when_idle {
            None => None,
            Some(_) if !matches!(source, SourceSpec::Http(_)) => {
                return Err(invalid(
                    "watermark.advance_when_idle is for a live HTTP source (weir serve): a bounded \
                     input closes every window at its end",
                ));
            }
            Some(raw) => Some(positive("watermark.advance_when_idle", Some(raw))?),
        };
        let idle_timeout = match &self.watermark.idle_timeout {
            None => None,
            Some(_) if !matches!(source, SourceSpec::Http(_) | SourceSpec::Nats(_)) => {
                return Err(invalid(
                    "watermark.idle_timeout judges partitions by the clock at which their events \
                     were accepted (by weir serve, or by a NATS server): it is for an HTTP or NATS \
                     source",
                ));
            }
            Some(raw) => Some(positive("watermark.idle_timeout", Some(raw))?),
        };
        let partition_field = match self.watermark.partition_field {
            Some(field) if field.is_empty() => {
                return Err(invalid("watermark.partition_field must name a field"));
            }
            field => field,
        };
        let (window, allowed_lateness) = check_window(self.window)?;
        let staged = !self.stages.is_empty()
            || self
                .operators
                .iter()
                .any(|op| op.global || op.pre_aggregate);
        let http = matches!(source, SourceSpec::Http(_));
        let emit = check_emit(&self.emit, window.is_some(), staged, http)?;
        let join = match self.join {
            Some(_)
                if self
                    .operators
                    .iter()
                    .any(|op| op.global || op.pre_aggregate) =>
            {
                return Err(invalid(
                    "join: a join is keyed by its sides' key fields; it cannot be global as well",
                ));
            }
            Some(join) => Some(check_join(join, window.is_some())?),
            None => None,
        };
        let (global, pre_aggregate) = check_global(&self.operators, window.as_ref())?;
        let (enrichers, aggregate) = check_operators(self.operators, base, window.as_ref())?;
        let stages = check_stages(self.stages, base, aggregate.as_ref())?;
        let state = check_state(&self.state, &self.name, base)?;
        let sinks = SinksSpec {
            results: sink("results", self.sinks.results, Sink::Stdout, sink_base)?,
            late: sink("late", self.sinks.late, Sink::Stderr, sink_base)?,
            dead_letters: sink(
                "dead_letters",
                self.sinks.dead_letters,
                Sink::Stderr,
                sink_base,
            )?,
        };
        sinks.check_distinct()?;
        if let Some(shards) = self.shards
            && !(1..=MAX_SHARDS).contains(&shards)
        {
            return Err(invalid(format!(
                "shards = {shards}: a pipeline has 1 to {MAX_SHARDS} shards"
            )));
        }
        let checkpoint_interval = match &self.checkpoint_interval {
            None => Some(DEFAULT_CHECKPOINT_INTERVAL),
            Some(RawDuration::Text(off)) if off == "off" => None,
            Some(raw) => Some(positive("checkpoint_interval", Some(raw))?),
        };
        let memory_budget = size(
            "state.memory_budget",
            &self.state.memory_budget,
            DEFAULT_MEMORY_BUDGET,
        )?;
        if memory_budget > MAX_MEMORY_BUDGET {
            return Err(invalid(format!(
                "state.memory_budget must be at most {} GiB",
                MAX_MEMORY_BUDGET >> 30
            )));
        }
        let state_quota = StateQuotaSpec {
            max_keys: self.state.max_keys,
            max_bytes: match &self.state.max_bytes {
                Some(_) => Some(size("state.max_bytes", &self.state.max_bytes, 0)? as u64),
                None => None,
            },
        };
        if state_quota.max_keys == Some(0) || state_quota.max_bytes == Some(0) {
            return Err(invalid(
                "state.max_keys and state.max_bytes, when given, are positive: leave them out for no quota",
            ));
        }
        let sandbox = check_sandbox(&self.sandbox)?;
        let batch_size = self.batch_size.unwrap_or(DEFAULT_BATCH_SIZE);
        if !(1..=MAX_BATCH_SIZE).contains(&batch_size) {
            return Err(invalid(format!(
                "batch_size = {batch_size}: use 1 to {MAX_BATCH_SIZE} events"
            )));
        }
        Ok(PipelineSpec {
            name: self.name,
            source,
            key_field,
            timestamp_field: self.event.timestamp,
            watermark_bound,
            max_ahead,
            advance_when_idle,
            partition_field,
            idle_timeout,
            window,
            allowed_lateness,
            enrichers,
            aggregate,
            stages,
            join,
            global,
            pre_aggregate,
            state,
            sinks,
            shards: self.shards,
            batch_size,
            checkpoint_interval,
            memory_budget,
            state_quota,
            max_behind,
            segment_size,
            max_rate,
            emit,
            sandbox,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = r#"
        name = "demo"
        [source]
        type = "file"
        path = "events.jsonl"
        [event]
        key = "user"
        timestamp = "ts"
        [watermark]
        bound = "5s"
        [window]
        type = "sliding"
        size = "1m"
        slide = "30s"
        allowed_lateness = 1000
        [[operators]]
        name = "avg"
        kind = "aggregate"
        module = "avg.wasm"
    "#;

    fn parse(text: &str) -> Result<PipelineSpec> {
        PipelineSpec::parse(text, false, Path::new("/specs"))
    }

    #[test]
    fn parses_a_full_spec_with_defaults() {
        let spec = parse(SPEC).unwrap();
        assert_eq!(spec.source, SourceSpec::File("/specs/events.jsonl".into()));
        assert_eq!(spec.watermark_bound, 5_000);
        assert_eq!(
            spec.window,
            Some(WindowSpec::Sliding {
                size: 60_000,
                slide: 30_000
            })
        );
        assert_eq!(spec.allowed_lateness, 1_000);
        assert_eq!(
            spec.aggregate.unwrap().code,
            OperatorCode::Component("/specs/avg.wasm".into())
        );
        assert_eq!(spec.state, StateSpec::Redb("weir-data/demo".into()));
        assert_eq!(spec.sinks.results, Sink::Stdout);
        assert_eq!(spec.checkpoint_interval, Some(1_000));
        assert_eq!(spec.memory_budget, 256 << 20);
    }

    #[test]
    fn parses_checkpoint_and_memory_settings() {
        let text = format!(
            "checkpoint_interval = \"250ms\"\n{SPEC}\n[state]\nmemory_budget = \"64MiB\"\n"
        );
        let spec = parse(&text).unwrap();
        assert_eq!(spec.checkpoint_interval, Some(250));
        assert_eq!(spec.memory_budget, 64 << 20);
        let off = parse(&format!("checkpoint_interval = \"off\"\n{SPEC}")).unwrap();
        assert_eq!(off.checkpoint_interval, None);
        assert!(parse_size("3 parsecs").is_err());
    }

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

    #[test]
    fn refuses_a_slide_larger_than_the_size() {
        let err = parse(&SPEC.replace("slide = \"30s\"", "slide = \"2m\"")).unwrap_err();
        assert!(
            err.to_string().contains("must not exceed window.size"),
            "{err}"
        );
    }

    #[test]
    fn names_unknown_fields() {
        let err = parse(&SPEC.replace("bound = \"5s\"", "bund = \"5s\"")).unwrap_err();
        assert!(err.to_string().contains("bund"), "{err}");
    }

    #[test]
    fn refuses_an_aggregate_before_an_enricher() {
        let text = format!(
            "{SPEC}\n[[operators]]\nname = \"e\"\nkind = \"enrich\"\nmodule = \"e.wasm\"\n"
        );
        let err = parse(&text).unwrap_err();
        assert!(
            err.to_string().contains("must come before the aggregate"),
            "{err}"
        );
    }

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

    #[test]
    fn stages_follow_an_aggregate_and_are_checked_one_by_one() {
        const STAGED: &str = r#"
            name = "staged"
            [source]
            type = "stdin"
            [event]
            key = "user"
            timestamp = "ts"
            [window]
            type = "tumbling"
            size = "1m"
            [[operators]]
            name = "count"
            kind = "aggregate"
            native = "count-sum"
            [[stages]]
            key = "sum"
            [stages.window]
            type = "tumbling"
            size = "5m"
            [stages.operator]
            name = "top"
            kind = "aggregate"
            native = "top-keys"
        "#;
        let spec = parse(STAGED).unwrap();
        assert_eq!(spec.stages.len(), 1);
        assert_eq!(spec.stages[0].key_field.as_deref(), Some("sum"));
        assert_eq!(
            spec.stages[0].window,
            WindowSpec::Tumbling { size: 300_000 }
        );
        assert_eq!(spec.stages[0].aggregate.name, "top");
        let no_key = parse(&STAGED.replace("key = \"sum\"", "")).unwrap();
        assert_eq!(no_key.stages[0].key_field, None);
        let late =
            parse(&STAGED.replace("size = \"1m\"", "size = \"1m\"\nallowed_lateness = \"1s\""))
                .unwrap();
        assert_eq!(late.allowed_lateness, 1_000);
        let refused = [
            (
                "size = \"5m\"",
                "size = \"5m\"\nallowed_lateness = \"1s\"",
                "has no allowed lateness",
            ),
            ("key = \"sum\"", "key = \"\"", "stages[0].key is empty"),
            (
                "kind = \"aggregate\"\n            native = \"top-keys\"",
                "kind = \"enrich\"\n            native = \"top-keys\"",
                "stages[0].operator: a [window] needs an operator of kind = \"aggregate\"",
            ),
            ("size = \"5m\"", "size = \"0s\"", "stages[0].window"),
            (
                "[stages.window]\n            type = \"tumbling\"\n            size = \"5m\"",
                "",
                "missing field `window`",
            ),
            (
                "[window]\n            type = \"tumbling\"\n            size = \"1m\"\n            [[operators]]\n            name = \"count\"\n            kind = \"aggregate\"\n            native = \"count-sum\"",
                "",
                "add an operator of kind",
            ),
        ];
        for (from, to, expected) in refused {
            let text = STAGED.replace(from, to);
            assert_ne!(text, STAGED, "{from}");
            let err = parse(&text).unwrap_err().to_string();
            assert!(err.contains(expected), "{from} -> {to}: {err}");
        }
        let served = r#"{"name":"p","source":{"type":"http"},"event":{"key":"k","timestamp":"t"},
            "window":{"type":"tumbling","size":"1m"},
            "operators":[{"name":"c","kind":"aggregate","native":"count-sum"}],
            "stages":[{"window":{"type":"tumbling","size":"1m"},
                       "operator":{"name":"t","kind":"aggregate","native":"top-keys"}}]}"#;
        let spec = PipelineSpec::parse_served(served, Path::new("/d/p"), Served::New).unwrap();
        assert_eq!(spec.stages[0].aggregate.name, "t");
        let module = served.replace(r#""native":"top-keys""#, r#""module":"/etc/passwd""#);
        let err = PipelineSpec::parse_served(&module, Path::new("/d/p"), Served::New).unwrap_err();
        assert!(
            err.to_string()
                .contains("stages[0].operator: `module` names a file"),
            "{err}"
        );
    }

    #[test]
    fn a_global_aggregate_needs_tumbling_windows_and_no_enrichers() {
        let global = SPEC
            .replace("type = \"sliding\"\n        size = \"1m\"\n        slide = \"30s\"\n        allowed_lateness = 1000", "type = \"tumbling\"\n        size = \"1m\"")
            .replace("module = \"avg.wasm\"", "module = \"avg.wasm\"\n        global = true");
        assert_ne!(global, SPEC);
        assert!(parse(&global).unwrap().global);
        assert!(!parse(SPEC).unwrap().global);
        let late = global.replace(
            "size = \"1m\"",
            "size = \"1m\"\n        allowed_lateness = 5",
        );
        assert_eq!(parse(&late).unwrap().allowed_lateness, 5);
        let refused = [
            (
                SPEC.replace(
                    "module = \"avg.wasm\"",
                    "module = \"avg.wasm\"\n        global = true",
                ),
                "needs tumbling windows",
            ),
            (
                format!(
                    "{global}\n[[operators]]\nname = \"e\"\nkind = \"enrich\"\nmodule = \"e.wasm\"\n"
                ),
                "cannot follow enrichment",
            ),
        ];
        for (text, expected) in refused {
            let err = parse(&text).unwrap_err().to_string();
            assert!(err.contains(expected), "{expected}: {err}");
        }
    }

    #[test]
    fn a_join_has_two_distinct_sides_with_keys_and_windows() {
        let join = format!(
            "{SPEC}\n[join]\nfield = \"kind\"\nleft = {{ value = \"person\", key = \"id\" }}\n\
             right = {{ value = \"auction\", key = \"seller\" }}\n"
        );
        let spec = parse(&join).unwrap();
        let parsed = spec.join.unwrap();
        assert_eq!(
            (parsed.left.key.as_str(), parsed.right.value.as_str()),
            ("id", "auction")
        );
        assert_eq!(parsed.interval, None, "a window join by default");
        let keyless = join.replace("key = \"user\"\n        timestamp", "timestamp");
        assert_ne!(keyless, join);
        assert_eq!(
            parse(&keyless).unwrap().key_field,
            "",
            "a join needs no event key"
        );
        let err =
            parse(&SPEC.replace("key = \"user\"\n        timestamp", "timestamp")).unwrap_err();
        assert!(err.to_string().contains("event.key is required"), "{err}");
        let interval = join.replace(
            "field = \"kind\"",
            "type = \"interval\"\nlower = \"-1500ms\"\nupper = 2000\nfield = \"kind\"",
        );
        let bounds = parse(&interval).unwrap().join.unwrap().interval;
        assert_eq!(
            bounds,
            Some(IntervalBounds {
                lower: -1_500,
                upper: 2_000
            })
        );
        let refused = [
            (join.replace("\"auction\"", "\"person\""), "the same value"),
            (
                interval.replace("upper = 2000", "upper = -2000"),
                "is above upper",
            ),
            (
                join.replace("key = \"seller\"", "key = \"\""),
                "must not be empty",
            ),
            (
                join.replace("field = \"kind\"", "field = \"kind\"\nextra = 1"),
                "unknown field",
            ),
        ];
        for (text, expected) in refused {
            let err = parse(&text).unwrap_err().to_string();
            assert!(err.contains(expected), "{expected}: {err}");
        }
    }

    #[test]
    fn parses_json_specs() {
        let json = r#"{"name":"j","source":{"type":"stdin"},"event":{"key":"k","timestamp":"t"}}"#;
        let spec = PipelineSpec::parse(json, true, Path::new(".")).unwrap();
        assert_eq!(spec.source, SourceSpec::Stdin);
        assert!(spec.window.is_none());
    }
}
