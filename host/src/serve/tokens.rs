//! Bearer tokens, their scopes, quotas, pipelines and lives: those set at start (a JSON file
//! and the environment, checked when the server starts: no empty, blank, short, duplicate or
//! unprintable tokens) and those made over the API ([`TokenStore`]). A presented token is
//! compared with every one in constant time; an expired one is unknown. A token's quotas (how
//! many pipelines and operator versions it may own) and the pipelines it is narrowed to
//! travel with the request as its [`Caller`], which also says which routes a narrowed token
//! may reach ([`Caller::reach`]).
//!
//! Depends on `names` and `time`.

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::ServeError;
use super::token_store::TokenStore;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Everything: operators, pipelines, rollouts, result streams, ingest and metrics.
    Admin,
    /// Making and changing operators and pipelines (uploads, creates, starts and stops,
    /// rollouts, savepoints, forks, replays); also what `read` allows. Not deleting, not
    /// tokens, tenants or the audit log: a CI pipeline's token.
    Deploy,
    /// Sending events; also what `read` allows (a producer may watch what it feeds).
    Ingest,
    /// Reading `/metrics`.
    Metrics,
    /// Reading pipelines, their specs, results and dead letters, and the registry: the
    /// console's read-only view. Changes nothing.
    Read,
}

impl Scope {
    /// Whether a token with `scopes` may use a route that needs this scope.
    fn granted_by(self, scopes: &[Scope]) -> bool {
        scopes.contains(&self)
            || scopes.contains(&Scope::Admin)
            || (self == Scope::Read
                && (scopes.contains(&Scope::Ingest) || scopes.contains(&Scope::Deploy)))
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    /// A name for logs (never the token itself).
    #[serde(default)]
    name: Option<String>,
    token: String,
    scopes: Vec<Scope>,
    /// The most pipelines the token may own (those it created and that exist).
    #[serde(default)]
    max_pipelines: Option<usize>,
    /// The most operator versions it may own (those it uploaded and that exist).
    #[serde(default)]
    max_operators: Option<usize>,
    /// The tenant it is bound to (none: the server's).
    #[serde(default)]
    tenant: Option<String>,
}

/// What a token may own; `None`: no limit of its own (the server's limits still apply).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenQuota {
    /// Pipelines.
    pub max_pipelines: Option<usize>,
    /// Operator versions.
    pub max_operators: Option<usize>,
}

/// Who makes a request: the token's name (what it owns is recorded under it) and its quota.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's name.
    pub name: String,
    /// Its quota.
    pub quota: TokenQuota,
    /// Its scopes.
    pub scopes: Vec<Scope>,
    /// The only pipelines it may address, if narrowed.
    pub pipelines: Option<Vec<String>>,
    /// The tenant it is bound to: it reaches only that tenant's pipelines and operators.
    pub tenant: Option<String>,
    /// When its token stops being accepted, ms since the epoch.
    pub expires_at_ms: Option<u64>,
}

/// Whether a caller may reach a route's target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// It may.
    Allowed,
    /// The route names a pipeline the token is not narrowed to: it is answered as if the
    /// pipeline did not exist (`404`), so a narrowed token learns no other names.
    Hidden,
    /// A route that names no pipeline of the token's, or makes a new one: `403`.
    Refused,
}

impl Caller {
    /// Whether this caller may call `method route`, whose `{name}` is `target` (if the route
    /// has one). A tenant's token reaches only its tenant's pipelines and operators (others
    /// are hidden; an upload is judged by its handler) and cannot set tenants. A token narrowed to pipelines may use their routes,
    /// list pipelines (it sees its own) and ask who it is; nothing else: no other pipeline,
    /// no operator or token, no new pipeline (a fork).
    pub fn reach(&self, method: &str, route: &str, target: Option<&str>) -> Reach {
        let names_pipeline = route.starts_with("/v1/pipelines/{name}");
        if let Some(tenant) = &self.tenant {
            // An upload names what it makes: its handler refuses a name outside the tenant
            // with the naming rule, which says nothing of what exists.
            let upload = method == "POST" && route == "/v1/operators/{name}/{version}";
            let named = names_pipeline || (route.starts_with("/v1/operators/{name}") && !upload);
            if named && !target.is_some_and(|name| super::tenants::holds(tenant, name)) {
                return Reach::Hidden;
            }
            if route.starts_with("/v1/tenants") && method != "GET" {
                return Reach::Refused;
            }
        }
        let Some(mine) = &self.pipelines else {
            return Reach::Allowed;
        };
        match target.filter(|_| names_pipeline) {
            Some(name) if !mine.iter().any(|p| p == name) => Reach::Hidden,
            _ if route.ends_with("/fork") => Reach::Refused,
            Some(_) => Reach::Allowed,
            None if method == "GET" && matches!(route, "/v1/pipelines" | "/v1/whoami") => {
                Reach::Allowed
            }
            None => Reach::Refused,
        }
    }

    /// Whether the caller may see pipeline `name` (in a listing).
    pub fn sees(&self, name: &str) -> bool {
        self.sees_name(name)
            && (self.pipelines.as_ref()).is_none_or(|mine| mine.iter().any(|p| p == name))
    }

    /// Whether the caller's tenant (if it has one) holds pipeline or operator `name`.
    pub fn sees_name(&self, name: &str) -> bool {
        (self.tenant.as_deref()).is_none_or(|tenant| super::tenants::holds(tenant, name))
    }

    /// Whether the caller sees what tenant `tenant` has (a token, an audit record, a metric).
    pub fn sees_tenant(&self, tenant: Option<&str>) -> bool {
        self.tenant.is_none() || self.tenant.as_deref() == tenant
    }
}

/// One accepted token: its name, the digest of its secret, and what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Its name.
    pub name: String,
    /// The SHA-256 digest of its secret.
    pub digest: [u8; 32],
    /// What it may do.
    pub scopes: Vec<Scope>,
    /// What it may own.
    pub quota: TokenQuota,
    /// The only pipelines it may address, if narrowed.
    pub pipelines: Option<Vec<String>>,
    /// When it stops being accepted, ms since the epoch.
    pub expires_at_ms: Option<u64>,
    /// The tenant it is bound to.
    pub tenant: Option<String>,
}

impl Grant {
    fn caller(&self) -> Caller {
        Caller {
            name: self.name.clone(),
            quota: self.quota,
            scopes: self.scopes.clone(),
            pipelines: self.pipelines.clone(),
            tenant: self.tenant.clone(),
            expires_at_ms: self.expires_at_ms,
        }
    }
}

/// The shortest token accepted.
pub const MIN_TOKEN_LEN: usize = 8;

/// The tokens the API accepts: those set at start, and those made over the API once the
/// server has opened its data directory ([`Tokens::open_store`]).
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    fixed: Vec<Grant>,
    store: Arc<TokenStore>,
}

/// What a presented token is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not a configured token.
    Unknown,
    /// A configured token without the scope needed.
    Forbidden,
    /// A configured token with the scope needed.
    Allowed,
}

fn fail(message: impl Into<String>) -> ServeError {
    ServeError::Tokens(message.into())
}

impl Tokens {
    /// Tokens from `file` (JSON: `[{"name": "ci", "token": "...", "scopes": ["admin"]}]`), plus
    /// `WEIR_ADMIN_TOKEN`, `WEIR_INGEST_TOKEN`, `WEIR_METRICS_TOKEN` and `WEIR_READ_TOKEN` from the
    /// environment.
    pub fn load(file: Option<&Path>) -> Result<Tokens, ServeError> {
        let mut entries: Vec<Entry> = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| {
                    let path = path.to_owned();
                    ServeError::TokensRead { path, source }
                })?;
                serde_json::from_str(&text).map_err(|source| {
                    let path = path.to_owned();
                    ServeError::TokensJson { path, source }
                })?
            }
            None => Vec::new(),
        };
        for (variable, scope) in [
            ("WEIR_ADMIN_TOKEN", Scope::Admin),
            ("WEIR_INGEST_TOKEN", Scope::Ingest),
            ("WEIR_READ_TOKEN", Scope::Read),
            ("WEIR_METRICS_TOKEN", Scope::Metrics),
        ] {
            if let Ok(token) = std::env::var(variable) {
                entries.push(Entry {
                    name: Some(variable.to_owned()),
                    token,
                    scopes: vec![scope],
                    max_pipelines: None,
                    max_operators: None,
                    tenant: None,
                });
            }
        }
        Self::from_entries(entries)
    }

    fn from_entries(entries: Vec<Entry>) -> Result<Tokens, ServeError> {
        let mut tokens = Tokens::default();
        for (i, entry) in entries.into_iter().enumerate() {
            let name = match entry.name {
                Some(name) => {
                    crate::names::check("token name", &name)?;
                    name
                }
                None => format!("token-{}", i + 1),
            };
            if entry.token.trim().is_empty() {
                return Err(fail(format!("{name}: the token is empty or blank")));
            }
            if entry.token.len() < MIN_TOKEN_LEN {
                return Err(fail(format!(
                    "{name}: tokens must be at least {MIN_TOKEN_LEN} characters"
                )));
            }
            if !entry.token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(fail(format!(
                    "{name}: a token may hold only printable ASCII without spaces"
                )));
            }
            if entry.scopes.is_empty() {
                return Err(fail(format!("{name}: the token has no scopes")));
            }
            let digest: [u8; 32] = Sha256::digest(entry.token.as_bytes()).into();
            if tokens.fixed.iter().any(|other| other.digest == digest) {
                return Err(fail(format!(
                    "{name}: the same token is configured twice; give each caller its own"
                )));
            }
            if tokens.fixed.iter().any(|other| other.name == name) {
                return Err(fail(format!(
                    "{name}: two tokens have this name; what a token owns is recorded by name"
                )));
            }
            let quota = TokenQuota {
                max_pipelines: entry.max_pipelines,
                max_operators: entry.max_operators,
            };
            if let Some(tenant) = &entry.tenant {
                super::tenants::check_name(tenant).map_err(|e| fail(format!("{name}: {e}")))?;
                if !super::tenants::holds(tenant, &name) {
                    return Err(fail(format!(
                        "{name}: a token of tenant {tenant:?} is named \"{tenant}.<name>\""
                    )));
                }
            }
            tokens.fixed.push(Grant {
                name,
                digest,
                scopes: entry.scopes,
                quota,
                pipelines: None,
                expires_at_ms: None,
                tenant: entry.tenant,
            });
        }
        Ok(tokens)
    }

    /// Reads the tokens made over the API from data directory `dir`; from then on they are
    /// accepted, and more can be made. One set at start keeps its name: a stored token of the
    /// same name stops the start.
    pub fn open_store(&mut self, dir: &Path) -> Result<(), ServeError> {
        let store = TokenStore::open(dir)?;
        if let Some(clash) = (store.list().iter()).find(|made| self.is_fixed(&made.name)) {
            return Err(fail(format!(
                "{}: a token made over the API has the name of one set at start; rename the one \
                 set at start, or revoke the other (remove it from api-tokens.json while the \
                 server is stopped)",
                clash.name
            )));
        }
        self.store = Arc::new(store);
        Ok(())
    }

    /// The tokens made over the API.
    pub fn store(&self) -> &TokenStore {
        &self.store
    }

    /// Every tenant a token (set at start or made over the API) is bound to.
    pub fn tenants(&self) -> std::collections::BTreeSet<String> {
        let made = self.store.grants();
        (self.fixed.iter().chain(made.1.iter()))
            .filter_map(|grant| grant.tenant.clone())
            .collect()
    }

    /// Whether `name` is a token set at start.
    pub fn is_fixed(&self, name: &str) -> bool {
        self.fixed.iter().any(|grant| grant.name == name)
    }

    /// The tokens set at start, for a listing: name, scopes and quotas.
    pub fn fixed(&self) -> impl Iterator<Item = &Grant> {
        self.fixed.iter()
    }

    /// Whether any token is set at start (tokens made over the API need an admin first).
    pub fn is_empty(&self) -> bool {
        self.fixed.is_empty()
    }

    /// Judges a presented token for a scope (admin implies every scope). Compares against
    /// every accepted token, in constant time, so the answer's timing tells nothing; an
    /// expired token is unknown.
    pub fn judge(&self, presented: &str, scope: Scope) -> (Verdict, Option<Caller>) {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let made = self.store.grants();
        let mut found = None;
        for grant in self.fixed.iter().chain(made.1.iter()) {
            let same = (grant.digest.iter())
                .zip(digest.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
            if same {
                found = Some(grant);
            }
        }
        let now = crate::time::wall_clock_ms();
        match found {
            None => (Verdict::Unknown, None),
            Some(grant) if grant.expires_at_ms.is_some_and(|at| at <= now) => {
                (Verdict::Unknown, None)
            }
            Some(grant) if scope.granted_by(&grant.scopes) => {
                (Verdict::Allowed, Some(grant.caller()))
            }
            Some(grant) => (Verdict::Forbidden, Some(grant.caller())),
        }
    }

    /// The named tokens with a quota, for the ownership gauges.
    pub fn with_quotas(&self) -> Vec<(String, TokenQuota)> {
        let made = self.store.grants();
        (self.fixed.iter().chain(made.1.iter()))
            .filter(|grant| grant.quota != TokenQuota::default())
            .map(|grant| (grant.name.clone(), grant.quota))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(token: &str, scopes: &[Scope]) -> Entry {
        Entry {
            name: None,
            token: token.into(),
            scopes: scopes.to_vec(),
            max_pipelines: None,
            max_operators: None,
            tenant: None,
        }
    }

    #[test]
    fn refuses_empty_blank_short_duplicate_and_unprintable_tokens() {
        for bad in [
            vec![entry("", &[Scope::Admin])],
            vec![entry("          ", &[Scope::Admin])],
            vec![entry("short", &[Scope::Admin])],
            vec![entry("with space 1", &[Scope::Admin])],
            vec![entry("tab\there12", &[Scope::Admin])],
            vec![entry("no-scopes-1", &[])],
            vec![
                entry("same-token-1", &[Scope::Admin]),
                entry("same-token-1", &[Scope::Ingest]),
            ],
        ] {
            assert!(Tokens::from_entries(bad.clone()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn admin_implies_every_scope() {
        let tokens = Tokens::from_entries(vec![
            entry("admin-token-1", &[Scope::Admin]),
            entry("ingest-token-1", &[Scope::Ingest]),
        ])
        .unwrap();
        assert_eq!(
            tokens.judge("admin-token-1", Scope::Metrics).0,
            Verdict::Allowed
        );
        assert_eq!(
            tokens.judge("ingest-token-1", Scope::Ingest).0,
            Verdict::Allowed
        );
        assert_eq!(
            tokens.judge("ingest-token-1", Scope::Admin).0,
            Verdict::Forbidden
        );
        assert_eq!(
            tokens.judge("ingest-token", Scope::Ingest).0,
            Verdict::Unknown
        );
    }

    #[test]
    fn an_expired_token_is_unknown() {
        let mut tokens =
            Tokens::from_entries(vec![entry("admin-token-1", &[Scope::Admin])]).unwrap();
        let digest: [u8; 32] = Sha256::digest(b"old-token-1").into();
        tokens.fixed.push(Grant {
            name: "old".into(),
            digest,
            scopes: vec![Scope::Read],
            quota: TokenQuota::default(),
            pipelines: None,
            expires_at_ms: Some(crate::time::wall_clock_ms() - 1),
            tenant: None,
        });
        assert_eq!(
            tokens.judge("old-token-1", Scope::Read),
            (Verdict::Unknown, None)
        );
    }

    #[test]
    fn a_narrowed_token_reaches_its_pipelines_only() {
        let caller = Caller {
            name: "producer".into(),
            quota: TokenQuota::default(),
            scopes: vec![Scope::Admin],
            pipelines: Some(vec!["clicks".into()]),
            tenant: None,
            expires_at_ms: None,
        };
        let events = "/v1/pipelines/{name}/events";
        assert_eq!(caller.reach("POST", events, Some("clicks")), Reach::Allowed);
        assert_eq!(caller.reach("POST", events, Some("other")), Reach::Hidden);
        assert_eq!(caller.reach("GET", "/v1/pipelines", None), Reach::Allowed);
        assert_eq!(caller.reach("POST", "/v1/pipelines", None), Reach::Refused);
        assert_eq!(caller.reach("POST", "/v1/tokens", None), Reach::Refused);
        assert_eq!(caller.reach("GET", "/v1/operators", None), Reach::Refused);
        let fork = "/v1/pipelines/{name}/savepoints/{savepoint}/fork";
        assert_eq!(caller.reach("POST", fork, Some("clicks")), Reach::Refused);
        assert!(caller.sees("clicks") && !caller.sees("other"));
        let everyone = Caller {
            pipelines: None,
            ..caller
        };
        assert_eq!(everyone.reach("POST", "/v1/tokens", None), Reach::Allowed);
    }

    #[test]
    fn a_tenants_token_reaches_its_tenants_names_only() {
        let caller = Caller {
            name: "team-a-admin".into(),
            quota: TokenQuota::default(),
            scopes: vec![Scope::Admin],
            pipelines: None,
            tenant: Some("team-a".into()),
            expires_at_ms: None,
        };
        let status = "/v1/pipelines/{name}";
        assert_eq!(
            caller.reach("GET", status, Some("team-a.clicks")),
            Reach::Allowed
        );
        assert_eq!(
            caller.reach("GET", status, Some("team-b.clicks")),
            Reach::Hidden
        );
        assert_eq!(caller.reach("GET", status, Some("clicks")), Reach::Hidden);
        let version = "/v1/operators/{name}/{version}";
        assert_eq!(
            caller.reach("DELETE", version, Some("team-b.op")),
            Reach::Hidden
        );
        assert_eq!(caller.reach("POST", "/v1/pipelines", None), Reach::Allowed);
        assert_eq!(
            caller.reach("PUT", "/v1/tenants/{name}", Some("team-a")),
            Reach::Refused
        );
        assert!(caller.sees("team-a.x") && !caller.sees("team-b.x") && !caller.sees("x"));
        assert!(caller.sees_tenant(Some("team-a")) && !caller.sees_tenant(None));
    }
}
