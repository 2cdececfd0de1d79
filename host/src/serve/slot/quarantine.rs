//! A served pipeline's quarantine (`"quarantine"` in its spec): what its status shows of the
//! parked keys, and the re-drive (`POST /v1/pipelines/{name}/quarantine/redrive`), which goes
//! into the ingest log as a line the pipeline reads at that place, so the parked events go
//! through the version then serving their key exactly once, on every replay alike.
//!
//! Depends on `source` (the ingest log) and `window` (the parked keys' summaries).

use serde::Deserialize;

use super::Slot;
use crate::serve::RequestError;

/// The most keys one re-drive names.
pub const MAX_REDRIVE_KEYS: usize = 1_000;

/// The most parked keys the status lists (all are counted).
const LISTED: usize = 100;

/// What a re-drive asks (`{"keys": [...]}`, or `{}` for every parked key).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedriveRequest {
    /// The keys to re-drive; none: every parked key.
    pub keys: Option<Vec<String>>,
}

impl RedriveRequest {
    fn check(&self) -> Result<(), RequestError> {
        let Some(keys) = &self.keys else {
            return Ok(());
        };
        if keys.is_empty() || keys.len() > MAX_REDRIVE_KEYS {
            return Err(RequestError::Invalid(format!(
                "\"keys\" names 1 to {MAX_REDRIVE_KEYS} keys (leave it out for every parked key)"
            )));
        }
        if let Some(key) = keys.iter().find(|k| k.is_empty() || k.len() > 256) {
            return Err(RequestError::Invalid(format!(
                "a key is 1 to 256 bytes; {} bytes given",
                key.len()
            )));
        }
        Ok(())
    }
}

impl Slot {
    /// Re-drives the parked keys asked (see the module documentation). Returns what was asked:
    /// the keys, or `"all"`; a key that is not parked when the line is read is left alone.
    pub fn redrive(&self, request: &RedriveRequest) -> Result<serde_json::Value, RequestError> {
        request.check()?;
        self.refuse_on_workers("a re-drive")?;
        let quarantined = self.with_managed(|managed| Ok(managed.spec.quarantine.is_some()))?;
        if !quarantined {
            return Err(RequestError::Conflict(format!(
                "pipeline {:?} has no quarantine: its failed events are dead letters (give its \
                 spec \"quarantine\": {{}} to park them)",
                self.name
            )));
        }
        let log = self.ingest_log()?;
        let now = crate::time::wall_clock_ms() as i64;
        log.append_redrive(now, request.keys.as_deref())
            .map_err(|e| match e {
                crate::source::IngestError::DiskFull => RequestError::DiskFull(e.to_string()),
                other => RequestError::Internal(other.to_string()),
            })?;
        tracing::info!(pipeline = %self.name, keys = ?request.keys, "quarantine re-drive sent");
        Ok(serde_json::json!({
            "redriving": match &request.keys {
                Some(keys) => serde_json::json!(keys),
                None => serde_json::json!("all"),
            }
        }))
    }
}

/// The status's `quarantine`: the parked keys and events, and the first of them.
pub(super) fn status(control: &crate::pipeline::PipelineControl) -> serde_json::Value {
    let parked = control.stats.quarantine.lock().expect("quarantine lock");
    let events: usize = parked.values().map(|p| p.events).sum();
    let listed: Vec<serde_json::Value> = (parked.iter().take(LISTED))
        .map(|(key, p)| {
            serde_json::json!({"key": key, "events": p.events, "reason": p.reason,
                "parked_at_watermark": p.since})
        })
        .collect();
    serde_json::json!({"keys": parked.len(), "events": events, "parked": listed})
}
