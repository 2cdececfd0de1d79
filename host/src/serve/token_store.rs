//! Tokens made over the API: created, listed, revoked and rotated by an admin while the server
//! runs, effective at once, and kept in `api-tokens.json` in the data directory (not
//! `tokens.json`, the name a `--tokens` file often has) as SHA-256 digests of their secrets (a
//! secret is shown once, in the answer that makes it; the file, the list and the audit log
//! never hold it). Each secret is 32 bytes from the operating system's
//! random source, so its plain digest is as hard to reverse as the secret is to guess.
//!
//! A change is written (atomically, synced) before it takes effect and before it is answered,
//! one change at a time: two creations of one name make one token; a crash between the two
//! steps leaves the file as it was or as changed, never half. A file that cannot be read stops
//! the server's start with the reason (dropping it silently would be safe for revocations but
//! would lock out every caller holding such a token).
//!
//! Depends on `fsutil`, `names` and `time`; its grants are judged in `tokens`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::tenants;
use super::tokens::{Caller, Grant, Scope, TokenQuota};
use super::{RequestError, ServeError};

/// The file, in the data directory.
pub const TOKENS_FILE: &str = "api-tokens.json";
/// The most tokens made over the API that a server keeps.
pub const MAX_TOKENS: usize = 10_000;
/// The most pipelines a token may be narrowed to.
pub const MAX_NARROWED: usize = 64;
/// The longest life a token may be given: ten years.
pub const MAX_LIFE_S: u64 = 10 * 365 * 24 * 3600;
/// What every secret made here starts with (so a leaked one is recognisable in a scan).
const SECRET_PREFIX: &str = "weir_";

/// A request to make a token (`POST /v1/tokens`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewToken {
    /// Its name: what it owns and does is recorded under it.
    pub name: String,
    /// What it may do.
    pub scopes: Vec<Scope>,
    /// The only pipelines it may address, if narrowed.
    #[serde(default)]
    pub pipelines: Option<Vec<String>>,
    /// How long it lives, in seconds from now (none: until revoked).
    #[serde(default)]
    pub expires_in_s: Option<u64>,
    /// The most pipelines it may own.
    #[serde(default)]
    pub max_pipelines: Option<usize>,
    /// The most operator versions it may own.
    #[serde(default)]
    pub max_operators: Option<usize>,
    /// The tenant it is bound to (a tenant's admin makes its own tenant's tokens only).
    #[serde(default)]
    pub tenant: Option<String>,
}

impl NewToken {
    /// Checks everything the caller sent, in one place.
    fn check(&self) -> Result<(), RequestError> {
        crate::names::check("token name", &self.name)?;
        let numbered = (self.name.strip_prefix("token-"))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if self.name.starts_with("WEIR_") || numbered {
            return Err(RequestError::Invalid(format!(
                "name: {:?} is a name tokens set at start take (WEIR_*, token-N): choose another",
                self.name
            )));
        }
        if let Some(tenant) = &self.tenant {
            tenants::check_name(tenant)?;
        }
        let invalid = |message: String| Err(RequestError::Invalid(message));
        if self.scopes.is_empty() {
            return invalid(
                "a token needs at least one scope (admin, deploy, ingest, read, metrics)".into(),
            );
        }
        if let Some(pipelines) = &self.pipelines {
            if pipelines.is_empty() || pipelines.len() > MAX_NARROWED {
                return invalid(format!(
                    "pipelines: name 1 to {MAX_NARROWED} pipelines, or leave it out for all"
                ));
            }
            for (i, name) in pipelines.iter().enumerate() {
                crate::names::check("pipeline name", name)?;
                if pipelines[..i].contains(name) {
                    return invalid(format!("pipelines: {name:?} is named twice"));
                }
            }
            if let Some(tenant) = &self.tenant
                && let Some(outside) = pipelines.iter().find(|p| !tenants::holds(tenant, p))
            {
                return invalid(format!(
                    "pipelines: {outside:?} is not tenant {tenant:?}'s (its pipelines are \
                     named \"{tenant}.<name>\")"
                ));
            }
            if self.scopes.contains(&Scope::Metrics) {
                return invalid(
                    "a metrics token sees every pipeline's metrics: it cannot be narrowed to \
                     pipelines"
                        .into(),
                );
            }
        }
        match self.expires_in_s {
            Some(0) => invalid("expires_in_s: at least 1 second".into()),
            Some(s) if s > MAX_LIFE_S => {
                invalid(format!("expires_in_s: at most {MAX_LIFE_S} (ten years)"))
            }
            _ => Ok(()),
        }
    }
}

/// A token as kept in the file, and as listed (without its digest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenRecord {
    /// Its name.
    pub name: String,
    /// The SHA-256 digest of its secret, in hex (never listed).
    #[serde(skip_serializing_if = "String::is_empty", default)]
    pub sha256: String,
    /// What it may do.
    pub scopes: Vec<Scope>,
    /// The only pipelines it may address, if narrowed.
    pub pipelines: Option<Vec<String>>,
    /// When it stops being accepted, ms since the epoch.
    pub expires_at_ms: Option<u64>,
    /// The most pipelines it may own.
    pub max_pipelines: Option<usize>,
    /// The most operator versions it may own.
    pub max_operators: Option<usize>,
    /// When it was made, ms since the epoch.
    pub created_at_ms: u64,
    /// The name of the token that made it.
    pub created_by: String,
    /// When its secret was last replaced, ms since the epoch.
    pub rotated_at_ms: Option<u64>,
    /// The tenant it is bound to.
    #[serde(default)]
    pub tenant: Option<String>,
}

impl TokenRecord {
    /// The record without its digest, to list.
    pub fn listed(&self) -> TokenRecord {
        TokenRecord {
            sha256: String::new(),
            ..self.clone()
        }
    }

    fn grant(&self) -> Result<Grant, String> {
        let digest = from_hex(&self.sha256)
            .ok_or_else(|| format!("token {:?}: sha256 is not 64 hex digits", self.name))?;
        Ok(Grant {
            name: self.name.clone(),
            digest,
            scopes: self.scopes.clone(),
            quota: TokenQuota {
                max_pipelines: self.max_pipelines,
                max_operators: self.max_operators,
            },
            pipelines: self.pipelines.clone(),
            expires_at_ms: self.expires_at_ms,
            tenant: self.tenant.clone(),
        })
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    tokens: Vec<TokenRecord>,
}

/// A token just made or rotated: its record and its secret, shown this once.
#[derive(Debug, Clone, Serialize)]
pub struct Issued {
    /// The record (without its digest).
    #[serde(flatten)]
    pub record: TokenRecord,
    /// The secret to present as `Authorization: Bearer <token>`.
    pub token: String,
}

/// The tokens made over the API.
#[derive(Debug, Default)]
pub struct TokenStore {
    /// The file; none before a data directory is opened (nothing can be made then).
    path: Option<PathBuf>,
    /// What the file holds, and the grants judged from it.
    current: RwLock<Arc<(Vec<TokenRecord>, Vec<Grant>)>>,
    /// One change at a time.
    changing: Mutex<()>,
}

impl TokenStore {
    /// The store in data directory `dir`, read from its file if there is one.
    pub fn open(dir: &Path) -> Result<TokenStore, ServeError> {
        let path = dir.join(TOKENS_FILE);
        let records = match std::fs::read(&path) {
            Ok(bytes) => {
                let file: TokensFile = serde_json::from_slice(&bytes).map_err(|e| {
                    ServeError::Tokens(format!(
                        "{}: {e}; restore it, or remove it to revoke every token made over the API",
                        path.display()
                    ))
                })?;
                file.tokens
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => return Err(ServeError::TokensRead { path, source }),
        };
        let grants = (records.iter().map(TokenRecord::grant))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ServeError::Tokens(format!("{}: {e}", path.display())))?;
        Ok(TokenStore {
            path: Some(path),
            current: RwLock::new(Arc::new((records, grants))),
            changing: Mutex::new(()),
        })
    }

    /// The grants to judge presented tokens by.
    pub fn grants(&self) -> Arc<(Vec<TokenRecord>, Vec<Grant>)> {
        self.current.read().expect("tokens lock").clone()
    }

    /// Every token made here, without digests, by name.
    pub fn list(&self) -> Vec<TokenRecord> {
        let mut listed: Vec<TokenRecord> = self.grants().0.iter().map(|r| r.listed()).collect();
        listed.sort_by(|a, b| a.name.cmp(&b.name));
        listed
    }

    /// Checks request `new` of `maker` as [`Self::create`] will, without making anything (so
    /// that nothing is made for a request that is refused).
    pub fn check(
        &self,
        new: &NewToken,
        maker: Option<&Caller>,
        reserved: impl Fn(&str) -> bool,
    ) -> Result<(), RequestError> {
        let new = checked(new, maker)?;
        if reserved(&new.name) || self.grants().0.iter().any(|r| r.name == new.name) {
            return Err(taken(&new.name));
        }
        Ok(())
    }

    /// Makes token `new` for `maker` (the caller; none in tests): a tenant's caller makes
    /// tokens of its tenant only, named `<tenant>.<name>`, at most `tenant_cap` of them; no
    /// token outlives its maker or owns more than it may. `reserved` says whether a name
    /// belongs to a token set at start.
    pub fn create(
        &self,
        new: &NewToken,
        maker: Option<&Caller>,
        reserved: impl Fn(&str) -> bool,
        tenant_cap: Option<usize>,
    ) -> Result<Issued, RequestError> {
        let new = &checked(new, maker)?;
        let now = crate::time::wall_clock_ms();
        let (secret, sha256) = make_secret()?;
        let record = TokenRecord {
            name: new.name.clone(),
            sha256,
            scopes: new.scopes.clone(),
            pipelines: new.pipelines.clone(),
            expires_at_ms: new.expires_in_s.map(|s| now.saturating_add(s * 1000)),
            max_pipelines: new.max_pipelines,
            max_operators: new.max_operators,
            created_at_ms: now,
            created_by: maker.map(|m| m.name.clone()).unwrap_or_default(),
            rotated_at_ms: None,
            tenant: new.tenant.clone(),
        };
        self.change(|records| {
            // One answer whoever holds the name, so a tenant learns no other's names.
            if reserved(&new.name) || records.iter().any(|r| r.name == new.name) {
                return Err(taken(&new.name));
            }
            if records.len() >= MAX_TOKENS {
                return Err(RequestError::Conflict(format!(
                    "the server keeps {MAX_TOKENS} tokens made over the API already: revoke some"
                )));
            }
            let of_tenant = |r: &&TokenRecord| r.tenant.is_some() && r.tenant == new.tenant;
            if let Some(cap) = tenant_cap
                && records.iter().filter(of_tenant).count() >= cap
            {
                return Err(RequestError::Conflict(format!(
                    "tenant {:?} has {cap} tokens, its quota (max_tokens): revoke one first",
                    new.tenant.as_deref().unwrap_or_default()
                )));
            }
            records.push(record.clone());
            Ok(())
        })?;
        Ok(Issued {
            record: record.listed(),
            token: secret,
        })
    }

    /// Revokes token `name` if `visible` lets the caller see its tenant: refused from the
    /// moment this returns.
    pub fn revoke(
        &self,
        name: &str,
        visible: impl Fn(Option<&str>) -> bool,
    ) -> Result<(), RequestError> {
        crate::names::check("token name", name)?;
        self.change(|records| {
            let at = (records.iter())
                .position(|r| r.name == name && visible(r.tenant.as_deref()))
                .ok_or_else(|| unknown(name))?;
            records.remove(at);
            Ok(())
        })
    }

    /// Gives token `name` a new secret if `visible` lets the caller see its tenant and the
    /// token is no stronger than `maker` (as for [`Self::create`]): the old one is refused from
    /// the moment this returns.
    pub fn rotate(
        &self,
        name: &str,
        visible: impl Fn(Option<&str>) -> bool,
        maker: Option<&Caller>,
    ) -> Result<Issued, RequestError> {
        crate::names::check("token name", name)?;
        let (secret, sha256) = make_secret()?;
        let mut rotated = None;
        self.change(|records| {
            let record = (records.iter_mut())
                .find(|r| r.name == name && visible(r.tenant.as_deref()))
                .ok_or_else(|| unknown(name))?;
            // A new secret of a stronger token is as good as a stronger token.
            if let Some(maker) = maker {
                let asked = NewToken {
                    name: record.name.clone(),
                    scopes: record.scopes.clone(),
                    pipelines: record.pipelines.clone(),
                    expires_in_s: (record.expires_at_ms)
                        .map(|at| at.saturating_sub(crate::time::wall_clock_ms()) / 1000),
                    max_pipelines: record.max_pipelines,
                    max_operators: record.max_operators,
                    tenant: record.tenant.clone(),
                };
                bounded_by(&asked, Some(maker))?;
                let unbounded =
                    |mine: Option<usize>, theirs: Option<usize>| mine.is_some() && theirs.is_none();
                if unbounded(maker.quota.max_pipelines, record.max_pipelines)
                    || unbounded(maker.quota.max_operators, record.max_operators)
                {
                    return Err(RequestError::Invalid(format!(
                        "token {name:?} may own more than this token: it cannot rotate it"
                    )));
                }
            }
            record.sha256 = sha256.clone();
            record.rotated_at_ms = Some(crate::time::wall_clock_ms());
            rotated = Some(record.listed());
            Ok(())
        })?;
        Ok(Issued {
            record: rotated.expect("set by the change"),
            token: secret,
        })
    }

    /// Applies `edit` to the records, writes them, then makes them the ones judged by.
    fn change(
        &self,
        edit: impl FnOnce(&mut Vec<TokenRecord>) -> Result<(), RequestError>,
    ) -> Result<(), RequestError> {
        let Some(path) = &self.path else {
            return Err(RequestError::Internal(
                "tokens cannot be made without a data directory".into(),
            ));
        };
        let _turn = self.changing.lock().expect("tokens change lock");
        let mut records = self.grants().0.clone();
        // Expired tokens are refused already; each change drops them from the file too.
        let now = crate::time::wall_clock_ms();
        records.retain(|r| r.expires_at_ms.is_none_or(|at| at > now));
        edit(&mut records)?;
        let grants = (records.iter().map(TokenRecord::grant))
            .collect::<Result<Vec<_>, _>>()
            .map_err(RequestError::Internal)?;
        let text = serde_json::to_vec_pretty(&TokensFile {
            tokens: records.clone(),
        })
        .map_err(|e| RequestError::Internal(e.to_string()))?;
        crate::fsutil::write_atomic(path, &text).map_err(RequestError::from_io)?;
        *self.current.write().expect("tokens lock") = Arc::new((records, grants));
        Ok(())
    }
}

/// The answer for a name taken, whoever holds it.
fn taken(name: &str) -> RequestError {
    RequestError::Conflict(format!(
        "a token named {name:?} exists: choose another name (or revoke or rotate it)"
    ))
}

/// The answer for a token the caller cannot see or that does not exist.
pub fn unknown(name: &str) -> RequestError {
    RequestError::NotFound(format!(
        "no token named {name:?} was made over the API; GET /v1/tokens lists them"
    ))
}

/// `new` as `maker` may make it, checked.
fn checked(new: &NewToken, maker: Option<&Caller>) -> Result<NewToken, RequestError> {
    let new = bounded_by(new, maker)?;
    new.check()?;
    Ok(new)
}

/// `new` as `maker` may make it: of the maker's tenant (and named in it), living no longer
/// than the maker, owning no more than it may.
fn bounded_by(new: &NewToken, maker: Option<&Caller>) -> Result<NewToken, RequestError> {
    let mut new = new.clone();
    let Some(maker) = maker else {
        return Ok(new);
    };
    let invalid = |message: String| Err(RequestError::Invalid(message));
    if let Some(own) = maker.tenant.as_deref() {
        match new.tenant.as_deref() {
            Some(other) if other != own => {
                return invalid(format!(
                    "tenant: a token of tenant {own:?} makes tokens of tenant {own:?} only"
                ));
            }
            _ => new.tenant = Some(own.to_owned()),
        }
    }
    if let Some(tenant) = new.tenant.as_deref()
        && !tenants::holds(tenant, &new.name)
    {
        return invalid(format!(
            "name: tenant {tenant:?}'s tokens are named \"{tenant}.<name>\""
        ));
    }
    if let Some(until) = maker.expires_at_ms {
        let left_s = until.saturating_sub(crate::time::wall_clock_ms()) / 1000;
        match new.expires_in_s {
            Some(life) if life <= left_s => {}
            _ => {
                return invalid(format!(
                    "expires_in_s: this token expires in {left_s} s; what it makes expires no \
                     later"
                ));
            }
        }
    }
    for (field, mine, theirs) in [
        (
            "max_pipelines",
            maker.quota.max_pipelines,
            &mut new.max_pipelines,
        ),
        (
            "max_operators",
            maker.quota.max_operators,
            &mut new.max_operators,
        ),
    ] {
        match (mine, *theirs) {
            (Some(limit), Some(asked)) if asked > limit => {
                return invalid(format!(
                    "{field}: this token may own {limit}; what it makes may own no more"
                ));
            }
            (Some(limit), None) => *theirs = Some(limit),
            _ => {}
        }
    }
    Ok(new)
}

/// A new secret and the hex of its digest.
fn make_secret() -> Result<(String, String), RequestError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| RequestError::Internal(format!("no random bytes for a token: {e}")))?;
    let secret = format!("{SECRET_PREFIX}{}", to_hex(&bytes));
    let digest = to_hex(&Sha256::digest(secret.as_bytes()));
    Ok((secret, digest))
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(name: &str) -> NewToken {
        NewToken {
            name: name.into(),
            scopes: vec![Scope::Ingest],
            pipelines: Some(vec!["clicks".into()]),
            expires_in_s: Some(60),
            max_pipelines: None,
            max_operators: None,
            tenant: None,
        }
    }

    #[test]
    fn a_made_token_is_kept_as_a_digest_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = TokenStore::open(dir.path()).unwrap();
        let issued = store
            .create(&new("producer"), None, |_| false, None)
            .unwrap();
        assert!(issued.token.starts_with(SECRET_PREFIX) && issued.token.len() == 69);
        let text = std::fs::read_to_string(dir.path().join(TOKENS_FILE)).unwrap();
        assert!(!text.contains(&issued.token), "the secret is not kept");
        let again = TokenStore::open(dir.path()).unwrap();
        let grants = again.grants();
        let digest: [u8; 32] = Sha256::digest(issued.token.as_bytes()).into();
        assert_eq!(grants.1[0].digest, digest);
        assert_eq!(again.list()[0].sha256, "", "listed without the digest");
    }

    #[test]
    fn bad_requests_are_refused_with_the_field() {
        let store = TokenStore::open(tempfile::tempdir().unwrap().path()).unwrap();
        let cases: Vec<(NewToken, &str)> = vec![
            (
                NewToken {
                    name: "../x".into(),
                    ..new("a")
                },
                "token name",
            ),
            (
                NewToken {
                    scopes: vec![],
                    ..new("a")
                },
                "scope",
            ),
            (
                NewToken {
                    pipelines: Some(vec![]),
                    ..new("a")
                },
                "pipelines",
            ),
            (
                NewToken {
                    pipelines: Some(vec!["a".into(), "a".into()]),
                    ..new("a")
                },
                "twice",
            ),
            (
                NewToken {
                    pipelines: Some(vec!["a/b".into()]),
                    ..new("a")
                },
                "pipeline name",
            ),
            (
                NewToken {
                    scopes: vec![Scope::Metrics],
                    ..new("a")
                },
                "narrowed",
            ),
            (
                NewToken {
                    expires_in_s: Some(0),
                    ..new("a")
                },
                "expires_in_s",
            ),
            (
                NewToken {
                    expires_in_s: Some(u64::MAX),
                    ..new("a")
                },
                "expires_in_s",
            ),
        ];
        for (request, expected) in cases {
            let error = store.create(&request, None, |_| false, None).unwrap_err();
            assert!(error.to_string().contains(expected), "{request:?}: {error}");
        }
        assert!(
            store
                .create(&new("env"), None, |n| n == "env", None)
                .is_err()
        );
        assert!(store.list().is_empty());
    }

    #[test]
    fn a_damaged_file_stops_the_start() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(TOKENS_FILE), b"{\"tokens\": [{").unwrap();
        assert!(TokenStore::open(dir.path()).is_err());
        let record = r#"{"tokens": [{"name": "a", "sha256": "zz", "scopes": ["read"],
            "pipelines": null, "expires_at_ms": null, "max_pipelines": null,
            "max_operators": null, "created_at_ms": 1, "created_by": "x", "rotated_at_ms": null}]}"#;
        std::fs::write(dir.path().join(TOKENS_FILE), record).unwrap();
        let error = TokenStore::open(dir.path()).unwrap_err();
        assert!(error.to_string().contains("sha256"), "{error}");
    }

    #[test]
    fn no_token_makes_one_stronger_than_itself_or_outside_its_tenant() {
        let dir = tempfile::tempdir().unwrap();
        let store = TokenStore::open(dir.path()).unwrap();
        let maker = Caller {
            name: "team-a.admin".into(),
            quota: TokenQuota {
                max_pipelines: Some(2),
                max_operators: None,
            },
            scopes: vec![Scope::Admin],
            pipelines: None,
            tenant: Some("team-a".into()),
            expires_at_ms: Some(crate::time::wall_clock_ms() + 3_600_000),
        };
        let make = |request: NewToken| store.create(&request, Some(&maker), |_| false, Some(1));
        let forever = NewToken {
            expires_in_s: None,
            pipelines: None,
            ..new("team-a.x")
        };
        assert!(make(forever).unwrap_err().to_string().contains("expires"));
        let big = NewToken {
            max_pipelines: Some(3),
            pipelines: None,
            ..new("team-a.x")
        };
        assert!(make(big).unwrap_err().to_string().contains("max_pipelines"));
        let outside = NewToken {
            pipelines: None,
            ..new("x")
        };
        assert!(
            make(outside)
                .unwrap_err()
                .to_string()
                .contains("team-a.<name>")
        );
        let other = NewToken {
            tenant: Some("team-b".into()),
            pipelines: None,
            ..new("team-b.x")
        };
        assert!(make(other).unwrap_err().to_string().contains("tenant"));
        let fine = NewToken {
            pipelines: None,
            ..new("team-a.x")
        };
        let made = make(fine.clone()).unwrap();
        assert_eq!(made.record.tenant.as_deref(), Some("team-a"));
        assert_eq!(
            made.record.max_pipelines,
            Some(2),
            "the maker's quota is its ceiling"
        );
        let second = NewToken {
            name: "team-a.y".into(),
            ..fine
        };
        assert!(make(second).unwrap_err().to_string().contains("max_tokens"));
    }
}
