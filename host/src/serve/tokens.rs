//! Bearer tokens and their scopes, from a JSON file and the environment. Every token is checked
//! when the server starts (no empty, blank, short, duplicate or unprintable tokens), and a
//! presented token is compared with every configured one in constant time.

use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::ServeError;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Everything: operators, pipelines, rollouts, result streams, ingest and metrics.
    Admin,
    /// Sending events.
    Ingest,
    /// Reading `/metrics`.
    Metrics,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    /// A name for logs (never the token itself).
    #[serde(default)]
    name: Option<String>,
    token: String,
    scopes: Vec<Scope>,
}

/// The shortest token accepted.
pub const MIN_TOKEN_LEN: usize = 8;

/// The tokens the API accepts.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    entries: Vec<(String, [u8; 32], Vec<Scope>)>,
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
    /// `WEIR_ADMIN_TOKEN`, `WEIR_INGEST_TOKEN` and `WEIR_METRICS_TOKEN` from the environment.
    pub fn load(file: Option<&Path>) -> Result<Tokens, ServeError> {
        let mut entries: Vec<Entry> = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| fail(format!("{}: {e}", path.display())))?;
                serde_json::from_str(&text).map_err(|e| fail(format!("{}: {e}", path.display())))?
            }
            None => Vec::new(),
        };
        for (variable, scope) in [
            ("WEIR_ADMIN_TOKEN", Scope::Admin),
            ("WEIR_INGEST_TOKEN", Scope::Ingest),
            ("WEIR_METRICS_TOKEN", Scope::Metrics),
        ] {
            if let Ok(token) = std::env::var(variable) {
                entries.push(Entry {
                    name: Some(variable.to_owned()),
                    token,
                    scopes: vec![scope],
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
                    crate::names::check("token name", &name).map_err(|e| fail(e.to_string()))?;
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
            if tokens.entries.iter().any(|(_, other, _)| *other == digest) {
                return Err(fail(format!(
                    "{name}: the same token is configured twice; give each caller its own"
                )));
            }
            tokens.entries.push((name, digest, entry.scopes));
        }
        Ok(tokens)
    }

    /// Whether any token is configured.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Judges a presented token for a scope (admin implies every scope). Compares against
    /// every configured token, in constant time, so the answer's timing tells nothing.
    pub fn judge(&self, presented: &str, scope: Scope) -> (Verdict, Option<&str>) {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found = None;
        for (name, configured, scopes) in &self.entries {
            let same = configured
                .iter()
                .zip(digest.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
            if same {
                found = Some((name.as_str(), scopes));
            }
        }
        match found {
            None => (Verdict::Unknown, None),
            Some((name, scopes)) if scopes.contains(&scope) || scopes.contains(&Scope::Admin) => {
                (Verdict::Allowed, Some(name))
            }
            Some((name, _)) => (Verdict::Forbidden, Some(name)),
        }
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
