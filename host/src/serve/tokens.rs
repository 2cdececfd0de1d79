//! Bearer tokens, their scopes and quotas, from a JSON file and the environment. Every token is
//! checked when the server starts (no empty, blank, short, duplicate or unprintable tokens), and
//! a presented token is compared with every configured one in constant time. A token's quotas
//! (how many pipelines and operator versions it may own) travel with the request as its
//! [`Caller`].
//!
//! Depends on `names`.

use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::ServeError;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Everything: operators, pipelines, rollouts, result streams, ingest and metrics.
    Admin,
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
            || (self == Scope::Read && scopes.contains(&Scope::Ingest))
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
}

/// The shortest token accepted.
pub const MIN_TOKEN_LEN: usize = 8;

/// The tokens the API accepts.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    entries: Vec<(String, [u8; 32], Vec<Scope>, TokenQuota)>,
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
            if tokens.entries.iter().any(|(_, other, ..)| *other == digest) {
                return Err(fail(format!(
                    "{name}: the same token is configured twice; give each caller its own"
                )));
            }
            if tokens.entries.iter().any(|(other, ..)| *other == name) {
                return Err(fail(format!(
                    "{name}: two tokens have this name; what a token owns is recorded by name"
                )));
            }
            let quota = TokenQuota {
                max_pipelines: entry.max_pipelines,
                max_operators: entry.max_operators,
            };
            tokens.entries.push((name, digest, entry.scopes, quota));
        }
        Ok(tokens)
    }

    /// Whether any token is configured.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Judges a presented token for a scope (admin implies every scope). Compares against
    /// every configured token, in constant time, so the answer's timing tells nothing.
    pub fn judge(&self, presented: &str, scope: Scope) -> (Verdict, Option<Caller>) {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found = None;
        for (name, configured, scopes, quota) in &self.entries {
            let same = configured
                .iter()
                .zip(digest.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
            if same {
                found = Some((name.as_str(), scopes, *quota));
            }
        }
        let caller = |name: &str, quota, scopes: &[Scope]| Caller {
            name: name.to_owned(),
            quota,
            scopes: scopes.to_vec(),
        };
        match found {
            None => (Verdict::Unknown, None),
            Some((name, scopes, quota)) if scope.granted_by(scopes) => {
                (Verdict::Allowed, Some(caller(name, quota, scopes)))
            }
            Some((name, scopes, quota)) => (Verdict::Forbidden, Some(caller(name, quota, scopes))),
        }
    }

    /// The named tokens with a quota, for the ownership gauges.
    pub fn with_quotas(&self) -> impl Iterator<Item = (&str, TokenQuota)> {
        (self.entries.iter())
            .filter(|(.., quota)| *quota != TokenQuota::default())
            .map(|(name, .., quota)| (name.as_str(), *quota))
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
}
