//! Tenants: teams sharing one server that cannot see each other. A tenant is a name; its
//! pipelines and operators are named `<tenant>.<name>` (`team-a.clicks`), so no two tenants'
//! names can meet and nothing needs a second namespace on disk. A token bound to a tenant
//! reaches only names in it (others answer `404`, as if they did not exist: see
//! `tokens::Caller::reach`); a token bound to none is the server's.
//!
//! Each tenant has quotas, set by a server admin (`PUT /v1/tenants/{name}`) and kept in
//! `tenants.json` in the data directory; a tenant nobody set has [`TenantQuota::default`]. They
//! count its pipelines and operator versions, and bound what each of its pipelines may ask
//! for: a spec asking for more CPU, memory, state or ingest rate than the tenant's is refused
//! with the limit, and one that asks for none gets the tenant's ([`bound_spec`]).
//!
//! Depends on `fsutil` and `spec`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};

use serde::{Deserialize, Serialize};

use super::{RequestError, ServeError};
use crate::spec::{PipelineSpec, Sink, SourceSpec};

/// The file, in the data directory.
pub const TENANTS_FILE: &str = "tenants.json";
/// The longest tenant name.
pub const MAX_TENANT_LEN: usize = 32;
/// The most tenants with quotas of their own.
pub const MAX_TENANTS: usize = 1_000;

/// Checks a tenant's name: 1-32 lowercase ASCII letters, digits, `-` or `_`, starting with a
/// letter or digit (no `.`: it ends the tenant's part of a name; no capitals: `Team-A` and
/// `team-a` would share directories on a case-insensitive file system).
pub fn check_name(name: &str) -> Result<(), RequestError> {
    let bytes = name.as_bytes();
    let allowed = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let ok = !bytes.is_empty()
        && bytes.len() <= MAX_TENANT_LEN
        && allowed(&bytes[0])
        && (bytes.iter()).all(|b| allowed(b) || matches!(b, b'-' | b'_'));
    if ok {
        return Ok(());
    }
    Err(RequestError::Invalid(format!(
        "tenant {name:?}: 1-{MAX_TENANT_LEN} lowercase ASCII letters, digits, '-' or '_', \
         starting with a letter or digit"
    )))
}

/// Whether pipeline or operator `name` belongs to `tenant` (it is `<tenant>.<something>`).
pub fn holds(tenant: &str, name: &str) -> bool {
    name.strip_prefix(tenant)
        .and_then(|rest| rest.strip_prefix('.'))
        .is_some_and(|rest| !rest.is_empty())
}

/// The tenant a pipeline or operator name belongs to, if it has a tenant's form.
pub fn of(name: &str) -> Option<&str> {
    let (tenant, rest) = name.split_once('.')?;
    (check_name(tenant).is_ok() && !rest.is_empty()).then_some(tenant)
}

/// Refuses `name` (of a `what`: "pipeline", "operator") for a caller of `tenant`.
pub fn check_holds(tenant: &str, what: &str, name: &str) -> Result<(), RequestError> {
    if holds(tenant, name) {
        return Ok(());
    }
    Err(RequestError::Invalid(format!(
        "{what} {name:?}: tenant {tenant:?} names its {what}s \"{tenant}.<name>\""
    )))
}

/// Refuses a spec (as sent) of a tenant's pipeline naming an operator outside the tenant, in
/// `operators` or a stage's `operator`, built-in ones included (a built-in's name is what
/// rollouts, replays and repro bundles look versions up by).
pub fn check_operator_names(tenant: &str, json: &serde_json::Value) -> Result<(), RequestError> {
    let listed = |value: &serde_json::Value| value.as_array().cloned().unwrap_or_default();
    let operators = listed(&json["operators"]);
    let stages = listed(&json["stages"])
        .into_iter()
        .map(|stage| stage["operator"].clone());
    for operator in operators.into_iter().chain(stages) {
        match operator["name"].as_str() {
            Some(name) => check_holds(tenant, "operator", name)?,
            None => {
                return Err(RequestError::Invalid(
                    "operators: every operator needs a \"name\"".into(),
                ));
            }
        }
    }
    Ok(())
}

/// Refuses a tenant's pipeline reading or writing NATS subjects or Kafka topics outside the
/// tenant: each must start with `<tenant>.`, and a NATS source must name its subjects (a
/// whole stream may hold other tenants' subjects).
pub fn check_external_names(tenant: &str, spec: &PipelineSpec) -> Result<(), RequestError> {
    let mut names: Vec<(&str, &str)> = Vec::new();
    match &spec.source {
        SourceSpec::Nats(source) => {
            if source.subjects.is_empty() && source.partitions.is_none() {
                return Err(RequestError::Invalid(format!(
                    "source.subjects: a pipeline of tenant {tenant:?} names the subjects it \
                     reads (\"{tenant}.>\" for all of its own)"
                )));
            }
            names.extend(
                source
                    .subjects
                    .iter()
                    .map(|s| ("source.subjects", s.as_str())),
            );
            if let Some(partitions) = &source.partitions {
                names.push(("source.partitions.subject", &partitions.subject));
            }
        }
        SourceSpec::Kafka(source) => names.push(("source.topic", &source.topic)),
        _ => {}
    }
    let sinks = [
        ("sinks.results", &spec.sinks.results),
        ("sinks.late", &spec.sinks.late),
        ("sinks.dead_letters", &spec.sinks.dead_letters),
    ];
    for (field, sink) in sinks {
        match sink {
            Sink::Nats(sink) => names.push((field, &sink.subject)),
            Sink::Kafka(sink) => names.push((field, &sink.topic)),
            _ => {}
        }
    }
    for (field, name) in names {
        if !holds(tenant, name) {
            return Err(RequestError::Invalid(format!(
                "{field}: {name:?} is not tenant {tenant:?}'s: its subjects and topics start \
                 with \"{tenant}.\""
            )));
        }
    }
    Ok(())
}

/// What a tenant may have and ask for.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TenantQuota {
    /// Pipelines.
    pub max_pipelines: usize,
    /// Operator versions.
    pub max_operators: usize,
    /// Tokens made over the API.
    pub max_tokens: usize,
    /// Shards (threads) each pipeline may have (`shards`; a spec without one gets this many
    /// rather than one per core).
    pub shards: usize,
    /// Cores each pipeline's operators may use (`sandbox.cpu`).
    pub cpu: f64,
    /// Bytes of memory all of each pipeline's instances may hold (`sandbox.total_memory`).
    pub total_memory: u64,
    /// Bytes of state each pipeline may keep (`state.max_bytes`).
    pub state_bytes: u64,
    /// Events per second each pipeline fed over HTTP may take
    /// (`source.max_events_per_second`).
    pub max_events_per_second: u64,
}

impl Default for TenantQuota {
    fn default() -> Self {
        TenantQuota {
            max_pipelines: 20,
            max_operators: 100,
            max_tokens: 100,
            shards: 2,
            cpu: 1.0,
            total_memory: 1 << 30,
            state_bytes: 1 << 30,
            max_events_per_second: 100_000,
        }
    }
}

impl TenantQuota {
    /// Checks a quota an admin sets, in one place.
    fn check(&self) -> Result<(), RequestError> {
        let invalid = |message: &str| Err(RequestError::Invalid(message.to_owned()));
        if self.max_pipelines > 100_000 || self.max_operators > 1_000_000 {
            return invalid("max_pipelines is at most 100000 and max_operators 1000000");
        }
        if self.max_tokens > super::MAX_TOKENS {
            return invalid("max_tokens is at most 10000");
        }
        if !(1..=crate::spec::MAX_SHARDS).contains(&self.shards) {
            return invalid("shards is 1 to 256 per pipeline");
        }
        if !(0.01..=1024.0).contains(&self.cpu) {
            return invalid("cpu is 0.01 to 1024 cores per pipeline");
        }
        if !(1 << 20..=16 << 30).contains(&self.total_memory) {
            return invalid("total_memory is 1 MiB to 16 GiB per pipeline, in bytes");
        }
        if self.state_bytes == 0 || self.max_events_per_second == 0 {
            return invalid("state_bytes and max_events_per_second are at least 1");
        }
        Ok(())
    }
}

/// The tenants' quotas.
#[derive(Debug, Default)]
pub struct TenantStore {
    path: Option<PathBuf>,
    set: RwLock<BTreeMap<String, TenantQuota>>,
    changing: Mutex<()>,
}

impl TenantStore {
    /// The quotas kept in data directory `dir`.
    pub fn open(dir: &Path) -> Result<TenantStore, ServeError> {
        let path = dir.join(TENANTS_FILE);
        let set: BTreeMap<String, TenantQuota> = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                ServeError::Tenants(format!(
                    "{}: {e}; restore it, or delete it to give every tenant the default quotas",
                    path.display()
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(ServeError::Tenants(format!("{}: {e}", path.display()))),
        };
        for (name, quota) in &set {
            check_name(name)
                .and_then(|()| quota.check())
                .map_err(|e| ServeError::Tenants(format!("{}: {e}", path.display())))?;
        }
        Ok(TenantStore {
            path: Some(path),
            set: RwLock::new(set),
            changing: Mutex::new(()),
        })
    }

    /// Tenant `name`'s quota: the one set, or the default.
    pub fn quota(&self, name: &str) -> TenantQuota {
        let set = self.set.read().expect("tenants lock");
        set.get(name).copied().unwrap_or_default()
    }

    /// Whether tenant `name` exists.
    pub fn contains(&self, name: &str) -> bool {
        self.set.read().expect("tenants lock").contains_key(name)
    }

    /// The tenants, with their quotas.
    pub fn list(&self) -> BTreeMap<String, TenantQuota> {
        self.set.read().expect("tenants lock").clone()
    }

    /// Sets tenant `name`'s quota, durably, before it applies.
    pub fn set(&self, name: &str, quota: TenantQuota) -> Result<(), RequestError> {
        check_name(name)?;
        quota.check()?;
        let Some(path) = &self.path else {
            return Err(RequestError::Internal(
                "no data directory for tenants".into(),
            ));
        };
        let _turn = self.changing.lock().expect("tenants change lock");
        let mut set = self.list();
        if !set.contains_key(name) && set.len() >= MAX_TENANTS {
            return Err(RequestError::Conflict(format!(
                "{MAX_TENANTS} tenants exist already: a tenant is removed by editing tenants.json \
                 while the server is stopped, once nothing is named in it"
            )));
        }
        set.insert(name.to_owned(), quota);
        let text = serde_json::to_vec_pretty(&set).expect("quotas serialise");
        crate::fsutil::write_atomic(path, &text).map_err(RequestError::from_io)?;
        *self.set.write().expect("tenants lock") = set;
        Ok(())
    }
}

/// Holds a tenant's pipeline spec to its quota: a limit the spec asks more than is refused
/// with the tenant's; one it leaves out is written into `json` as the tenant's (the caller
/// checks `json` again). Returns whether `json` changed.
pub fn bound_spec(
    json: &mut serde_json::Value,
    spec: &PipelineSpec,
    tenant: &str,
    quota: &TenantQuota,
) -> Result<bool, RequestError> {
    let cpu = (quota.cpu * 1000.0).round() as u64;
    // (table, field), what the spec asks (CPU in thousandths of a core), what the tenant
    // allows, and what is written when the spec asks nothing.
    let mut limits = vec![
        (
            ("", "shards"),
            spec.shards.map(|n| n as u64),
            quota.shards as u64,
            serde_json::json!(quota.shards),
        ),
        (
            ("sandbox", "cpu"),
            spec.sandbox.cpu_millicores.map(u64::from),
            cpu,
            serde_json::json!(quota.cpu),
        ),
        (
            ("sandbox", "total_memory"),
            spec.sandbox.total_memory.map(|b| b as u64),
            quota.total_memory,
            serde_json::json!(quota.total_memory),
        ),
        (
            ("state", "max_bytes"),
            spec.state_quota.max_bytes,
            quota.state_bytes,
            serde_json::json!(quota.state_bytes),
        ),
    ];
    if matches!(spec.source, SourceSpec::Http(_)) {
        let rate = quota.max_events_per_second;
        let field = ("source", "max_events_per_second");
        limits.push((field, spec.max_rate, rate, serde_json::json!(rate)));
    }
    let mut changed = false;
    for ((table, field), asked, allowed, default) in limits {
        match asked {
            Some(asked) if asked > allowed => {
                let shown = |n: u64| match field {
                    "cpu" => format!("{} cores", n as f64 / 1000.0),
                    _ => n.to_string(),
                };
                let at = if table.is_empty() {
                    field.to_owned()
                } else {
                    format!("{table}.{field}")
                };
                return Err(RequestError::Invalid(format!(
                    "{at} asks for {}; tenant {tenant:?} allows at most {} per pipeline (a \
                     server admin sets it: PUT /v1/tenants/{tenant})",
                    shown(asked),
                    shown(allowed)
                )));
            }
            Some(_) => {}
            None => {
                write_limit(json, table, field, default)?;
                changed = true;
            }
        }
    }
    Ok(changed)
}

/// Writes `value` as `table.field` of the spec `json` (a top-level `field` without a table).
fn write_limit(
    json: &mut serde_json::Value,
    table: &str,
    field: &str,
    value: serde_json::Value,
) -> Result<(), RequestError> {
    let Some(object) = json.as_object_mut() else {
        return Err(RequestError::Invalid(
            "the spec is not a JSON object".into(),
        ));
    };
    if table.is_empty() {
        object.insert(field.to_owned(), value);
        return Ok(());
    }
    let table = object.entry(table).or_insert_with(|| serde_json::json!({}));
    let Some(table) = table.as_object_mut() else {
        return Err(RequestError::Invalid(format!(
            "{field}: its table is not a JSON object"
        )));
    };
    table.insert(field.to_owned(), value);
    Ok(())
}

/// Prometheus text `text` with a `tenant` label on every sample of a pipeline that belongs to
/// a `known` tenant; with `only`, the samples of tenant `only`'s pipelines alone (and the
/// comment lines).
pub fn label_metrics(text: &str, only: Option<&str>, known: impl Fn(&str) -> bool) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for line in text.lines() {
        let tenant = match line.starts_with('#') {
            true => None,
            false => pipeline_label(line).and_then(of).filter(|t| known(t)),
        };
        if only.is_some() && !line.starts_with('#') && tenant != only {
            continue;
        }
        match (tenant, line.find('{')) {
            (Some(tenant), Some(at)) => {
                out.push_str(&line[..=at]);
                out.push_str(&format!("tenant=\"{tenant}\","));
                out.push_str(&line[at + 1..]);
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// The value of a sample line's `pipeline` label.
fn pipeline_label(line: &str) -> Option<&str> {
    let open = line.find('{')?;
    let labels = &line[open..open + line[open..].find('}')?];
    let start = labels.find("pipeline=\"")? + "pipeline=\"".len();
    let value = &labels[start..];
    Some(&value[..value.find('"')?])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_belong_to_the_tenant_they_start_with() {
        assert!(holds("team-a", "team-a.clicks"));
        assert!(!holds("team-a", "team-a."));
        assert!(!holds("team-a", "team-ab.clicks"));
        assert!(!holds("team-a", "clicks"));
        assert_eq!(of("team-a.clicks"), Some("team-a"));
        assert_eq!(of("clicks"), None);
        for bad in ["", "a.b", "-a", &"a".repeat(33), "a b", "Team-a"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn quotas_are_kept_checked_and_default() {
        let dir = tempfile::tempdir().unwrap();
        let store = TenantStore::open(dir.path()).unwrap();
        assert_eq!(store.quota("team-a"), TenantQuota::default());
        let small = TenantQuota {
            max_pipelines: 1,
            ..TenantQuota::default()
        };
        store.set("team-a", small).unwrap();
        assert_eq!(
            TenantStore::open(dir.path()).unwrap().quota("team-a"),
            small
        );
        let bad = TenantQuota {
            cpu: 0.0,
            ..TenantQuota::default()
        };
        assert!(store.set("team-b", bad).is_err());
        assert!(store.set("a.b", small).is_err());
    }

    #[test]
    fn metrics_get_a_tenant_label_and_a_tenant_sees_its_own() {
        let text = "# TYPE weir_events_in_total counter\n\
            weir_events_in_total{pipeline=\"team-a.clicks\"} 5\n\
            weir_events_in_total{pipeline=\"team-b.clicks\"} 7\n\
            weir_events_in_total{pipeline=\"clicks\"} 9\n\
            weir_uploads_total 2\n";
        let labelled = label_metrics(text, None, |_| true);
        assert!(
            labelled.contains("{tenant=\"team-a\",pipeline=\"team-a.clicks\"} 5"),
            "{labelled}"
        );
        assert!(
            labelled.contains("{pipeline=\"clicks\"} 9") && labelled.contains("uploads_total 2")
        );
        let own = label_metrics(text, Some("team-a"), |_| true);
        let unknown = label_metrics(text, None, |t| t == "team-b");
        assert!(!unknown.contains("tenant=\"team-a\"") && unknown.contains("tenant=\"team-b\""));
        assert!(
            own.contains("team-a.clicks") && !own.contains("team-b") && !own.contains(" 9"),
            "{own}"
        );
        assert!(
            !own.contains("uploads_total") && own.contains("# TYPE"),
            "{own}"
        );
    }

    fn nats_spec(subjects: &str, results: &str) -> PipelineSpec {
        let text = format!(
            "name = \"team-a.p\"\n[source]\ntype = \"nats\"\nurl = \"nats://127.0.0.1:4222\"\n\
             stream = \"S\"\nsubjects = {subjects}\n[event]\nkey = \"k\"\ntimestamp = \"ts\"\n\
             [window]\ntype = \"tumbling\"\nsize = 10\n[[operators]]\nname = \"c\"\n\
             kind = \"aggregate\"\nnative = \"count-sum\"\n[sinks]\n\
             results = {{ nats = \"nats://127.0.0.1:4222\", subject = \"{results}\" }}\n"
        );
        PipelineSpec::parse(&text, false, Path::new(".")).unwrap()
    }

    #[test]
    fn a_tenants_pipeline_reads_and_writes_its_own_subjects_only() {
        let own = nats_spec("[\"team-a.>\"]", "team-a.results");
        assert!(check_external_names("team-a", &own).is_ok());
        for (spec, field) in [
            (nats_spec("[]", "team-a.results"), "source.subjects"),
            (
                nats_spec("[\"team-b.>\"]", "team-a.results"),
                "source.subjects",
            ),
            (nats_spec("[\">\"]", "team-a.results"), "source.subjects"),
            (
                nats_spec("[\"team-a.>\"]", "team-b.clicks"),
                "sinks.results",
            ),
        ] {
            let error = check_external_names("team-a", &spec).unwrap_err();
            assert!(error.to_string().contains(field), "{error}");
        }
        let json = serde_json::json!({"operators": [{"name": "team-b.x", "native": "count-sum"}]});
        assert!(check_operator_names("team-a", &json).is_err());
        let stage = serde_json::json!({"stages": [{"operator": {"name": "team-b.x"}}]});
        assert!(check_operator_names("team-a", &stage).is_err());
        let nameless = serde_json::json!({"operators": [{"version": "1"}]});
        assert!(check_operator_names("team-a", &nameless).is_err());
    }
}
