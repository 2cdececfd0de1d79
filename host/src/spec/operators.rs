//! The `[[operators]]`, `[[stages]]` and `[join]` sections: the dataflow between source and
//! sinks (enrichers, one windowed aggregate, further stages aggregating its results, a join of
//! two kinds of event, a global or pre-aggregated aggregate), with their raw forms and checks.
//!
//! Depends on `values`, `window` (a stage has its own windows), `names` and `time`.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::values::{RawDuration, invalid, positive, signed_duration};
use super::window::{RawWindow, WindowSpec, check_window};
use super::{Result, SpecError};
use crate::time::Millis;

/// The field a join adds to each event: `left` or `right`.
pub const SIDE_FIELD: &str = "side";

/// The key of every event of a stage without a key field.
pub const GLOBAL_KEY: &str = "*";

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

impl OperatorSpec {
    /// `name@version`: how registries and shared pipelines name the operator's code.
    pub fn label(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }
}

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

/// One side of a join.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinSide {
    /// The value of the join's `field` that puts an event on this side.
    pub value: String,
    /// The field this side's events are keyed by.
    pub key: String,
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

/// An operator as written (in `[[operators]]`, or a stage's `operator`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOperator {
    pub(super) name: String,
    #[serde(default = "default_version")]
    version: String,
    kind: String,
    pub(super) module: Option<PathBuf>,
    native: Option<String>,
    pub(super) reference: Option<RawReference>,
    fields: Option<Vec<String>>,
    state_ttl: Option<RawDuration>,
    #[serde(default)]
    pub(super) global: bool,
    #[serde(default)]
    pub(super) pre_aggregate: bool,
}

fn default_version() -> String {
    "0.0.0".into()
}

/// An enrichment operator's reference data as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReference {
    path: PathBuf,
    key: String,
}

/// A `[[stages]]` entry as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStage {
    key: Option<String>,
    window: RawWindow,
    pub(super) operator: RawOperator,
}

/// The `[join]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJoin {
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

/// The checked `[[operators]]`, `[[stages]]` and `[join]` (see the fields of the same names in
/// [`PipelineSpec`](super::PipelineSpec)).
#[derive(Debug)]
pub(super) struct Dataflow {
    pub(super) enrichers: Vec<OperatorSpec>,
    pub(super) aggregate: Option<OperatorSpec>,
    pub(super) stages: Vec<StageSpec>,
    pub(super) join: Option<JoinSpec>,
    pub(super) global: bool,
    pub(super) pre_aggregate: bool,
}

/// Whether an operator combines partials (`global` or `pre_aggregate`).
pub(super) fn combines_partials(operators: &[RawOperator]) -> bool {
    operators.iter().any(|op| op.global || op.pre_aggregate)
}

/// Checks the `[join]`, whether the aggregate combines partials, the `[[operators]]` and the
/// `[[stages]]`, in that order, for a pipeline with `window`; paths are relative to `base`.
pub(super) fn check(
    operators: Vec<RawOperator>,
    stages: Vec<RawStage>,
    join: Option<RawJoin>,
    window: Option<&WindowSpec>,
    base: &Path,
) -> Result<Dataflow> {
    let join = match join {
        Some(_) if combines_partials(&operators) => {
            return Err(invalid(
                "join: a join is keyed by its sides' key fields; it cannot be global as well",
            ));
        }
        Some(join) => Some(check_join(join, window.is_some())?),
        None => None,
    };
    let (global, pre_aggregate) = check_global(&operators, window)?;
    let (enrichers, aggregate) = check_operators(operators, base, window)?;
    let stages = check_stages(stages, base, aggregate.as_ref())?;
    Ok(Dataflow {
        enrichers,
        aggregate,
        stages,
        join,
        global,
        pre_aggregate,
    })
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
        let (kind, spec) = check_operator(op, &at, base)?;
        match kind.as_str() {
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

/// Checks one operator, said of `at`, whatever its kind (returned with it): its name and
/// version, where its code is, its reference data (relative to `base`) and state TTL.
fn check_operator(op: RawOperator, at: &str, base: &Path) -> Result<(String, OperatorSpec)> {
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
    Ok((op.kind, spec))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::spec::tests::{SPEC, parse};
    use crate::spec::{IntervalBounds, PipelineSpec, Served, WindowSpec};

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
}
