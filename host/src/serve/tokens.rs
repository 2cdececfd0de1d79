//! Bearer tokens and their scopes, from a JSON file and the environment.

use std::path::Path;

use serde::Deserialize;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Operators, pipelines, rollouts, result streams (and ingest).
    Admin,
    /// Sending events.
    Ingest,
}

#[derive(Debug, Clone, Deserialize)]
struct Entry {
    token: String,
    scopes: Vec<Scope>,
}

/// The tokens the API accepts.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    entries: Vec<Entry>,
}

impl Tokens {
    /// Tokens from `file` (JSON: `[{"token": "...", "scopes": ["admin", "ingest"]}]`), plus
    /// `WEIR_ADMIN_TOKEN` and `WEIR_INGEST_TOKEN` from the environment.
    pub fn load(file: Option<&Path>) -> Result<Tokens, super::ServeError> {
        let mut entries: Vec<Entry> = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| super::ServeError::Tokens(format!("{}: {e}", path.display())))?;
                serde_json::from_str(&text)
                    .map_err(|e| super::ServeError::Tokens(format!("{}: {e}", path.display())))?
            }
            None => Vec::new(),
        };
        for (variable, scope) in [
            ("WEIR_ADMIN_TOKEN", Scope::Admin),
            ("WEIR_INGEST_TOKEN", Scope::Ingest),
        ] {
            if let Ok(token) = std::env::var(variable)
                && !token.is_empty()
            {
                entries.push(Entry {
                    token,
                    scopes: vec![scope],
                });
            }
        }
        if entries.iter().any(|e| e.token.len() < 8) {
            return Err(super::ServeError::Tokens(
                "tokens must be at least 8 characters".into(),
            ));
        }
        Ok(Tokens { entries })
    }

    /// Whether any token is configured.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `None` if the token is unknown; otherwise whether it carries `scope` (admin implies
    /// ingest).
    pub fn allows(&self, token: &str, scope: Scope) -> Option<bool> {
        let entry = self
            .entries
            .iter()
            .find(|e| constant_time_eq(e.token.as_bytes(), token.as_bytes()))?;
        Some(entry.scopes.contains(&scope) || entry.scopes.contains(&Scope::Admin))
    }
}

/// Compares without an early exit, so response times do not reveal how much of a token matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
