//! Verified uploads: a migration dry run of a candidate version over a real savepoint. The
//! savepoint is copied into a sandbox beside the pipelines (removed afterwards; a crash leaves
//! it to the next start's clean-up, as a replay's), and the candidate's `migrate` is called on
//! every state scope of the pipeline's aggregate that another version wrote (read row by row,
//! one dry run or replay at a time), in the sandbox's limits; the first that fails is the
//! counterexample (its key, window, the state as it was
//! and the error), and the version is refused. Nothing of the live pipeline is touched.
//!
//! An upload's own examples (`?verify=examples`) run the same way, one sandboxed run at a time:
//! those `weir build` embedded in the component, through it, in a pipeline of their own each
//! ([`examples_dry_run`]).
//!
//! Depends on `checkpoint`, `operator`, `project` (the examples) and `state`.

use std::sync::Arc;

use super::Slot;
use super::replay::{SANDBOX_PREFIX, Sandbox, Turn, sandbox_nonce};
use crate::operator::{AggregateCode, Limits, Projection, Scope, WasmOperator};
use crate::serve::RequestError;
use crate::state::{Namespace, RedbStore, StateKey};

/// The most state scopes one dry run converts (the rest are counted, not checked).
pub const MAX_VERIFIED_SCOPES: usize = 100_000;

impl Slot {
    /// Runs `candidate` (`operator@version`, an aggregate) over savepoint `savepoint`'s state
    /// of this pipeline's aggregate: how many scopes it converted, or the first it could not.
    pub fn migration_dry_run(
        &self,
        savepoint: &str,
        (operator, version): (&str, &str),
        candidate: &WasmOperator,
    ) -> Result<serde_json::Value, RequestError> {
        crate::names::check("savepoint name", savepoint)?;
        let spec = self.with_managed(|managed| Ok(managed.spec.clone()))?;
        let aggregate = spec.aggregate.as_ref().map(|op| op.name.as_str());
        if aggregate != Some(operator) {
            return Err(RequestError::Invalid(format!(
                "verify: pipeline {:?}'s aggregate is {}, not {operator}: a migration is checked \
                 against the state of the operator it would replace",
                self.name,
                aggregate.unwrap_or("(none)")
            )));
        }
        let index = spec.enrichers.len() as u16;
        let saved = self.find_savepoint(savepoint)?;
        // One sandboxed run at a time, replays included.
        let _turn = Turn::take()?;
        let pipelines = self
            .dir
            .parent()
            .ok_or_else(|| RequestError::Internal("a pipeline's directory has no parent".into()))?;
        let sandbox = Sandbox(pipelines.join(format!(
            "{SANDBOX_PREFIX}verify-{}-{}",
            self.name,
            sandbox_nonce()
        )));
        // A pipeline on workers saved each slice's state: every slice is checked.
        let stores: Vec<std::path::PathBuf> = match saved.slices.len() {
            0 => {
                crate::checkpoint::fork_savepoint(
                    &self.data_dir()?,
                    savepoint,
                    &sandbox.0,
                    "verify",
                )?;
                vec![sandbox.0.clone()]
            }
            _ => {
                self.fork_slices_into(savepoint, "verify", &sandbox.0)?;
                (saved.slices.iter().enumerate())
                    .filter(|(_, manifest)| manifest.is_some())
                    .map(|(slice, _)| crate::checkpoint::slice_dir(&sandbox.0, slice))
                    .collect()
            }
        };
        let mut instance = candidate.instantiate(Limits::default(), Projection::All)?;
        let (mut scopes, mut migrated, mut skipped) = (0usize, 0usize, 0usize);
        let mut refused: Option<String> = None;
        for path in &stores {
            if refused.is_some() {
                break;
            }
            let store = RedbStore::open(path)?;
            // Row by row: a savepoint's state is not read into memory at once.
            store.visit(false, (&[], &[0xff; 3]), |row_key, value| {
                let Some(key) = StateKey::decode(row_key).filter(|k| k.operator == index) else {
                    return true;
                };
                scopes += 1;
                if migrated >= MAX_VERIFIED_SCOPES {
                    skipped += 1;
                    return true;
                }
                let Ok(state) = crate::state::decode_scope(value) else {
                    return true;
                };
                let Some(from) = state.written_by.clone().filter(|by| by != version) else {
                    return true;
                };
                let before = serde_json::to_value(&state).unwrap_or_default();
                let mut scope = Scope {
                    key: Arc::clone(&key.key),
                    state,
                };
                if let Err(error) = instance.migrate(&mut scope, &from) {
                    let window = match key.namespace {
                        Namespace::Window { start, end } => format!(", window [{start}, {end})"),
                        Namespace::Global => String::new(),
                    };
                    refused = Some(format!(
                        "{operator}@{version} was refused: its migrate failed on savepoint \
                     {savepoint:?} of pipeline {:?}: key {:?}{window}, state written by {from}: \
                     {before}; {error}",
                        self.name, &*key.key
                    ));
                    return false;
                }
                migrated += 1;
                true
            })?;
        }
        if let Some(refused) = refused {
            return Err(RequestError::Invalid(refused));
        }
        Ok(serde_json::json!({
            "pipeline": self.name,
            "savepoint": savepoint,
            "scopes": scopes,
            "migrated": migrated,
            "not_checked": skipped,
        }))
    }
}

/// Runs the examples the uploaded component `body` carries (see the module documentation), in
/// a sandbox beside the pipelines in `pipelines`: how many results each gave, or the first that
/// does not hold (a `400`).
pub fn examples_dry_run(
    pipelines: &std::path::Path,
    body: &[u8],
) -> Result<serde_json::Value, RequestError> {
    let embedded = crate::project::embedded_examples(body)
        .map_err(|e| RequestError::Invalid(format!("verify=examples: {e}")))?
        .ok_or_else(|| {
            RequestError::Invalid(
                "verify=examples: the component carries no examples; build it with `weir build` \
                 from a project whose weir.toml has [[examples]]"
                    .into(),
            )
        })?;
    let _turn = Turn::take()?;
    let sandbox = Sandbox(pipelines.join(format!("{SANDBOX_PREFIX}examples-{}", sandbox_nonce())));
    std::fs::create_dir_all(&sandbox.0).map_err(RequestError::from_io)?;
    let module = sandbox.0.join("operator.wasm");
    std::fs::write(&module, body).map_err(RequestError::from_io)?;
    let checked = crate::project::check_embedded(&embedded, &module, &sandbox.0.join("run"))
        .map_err(|e| match e {
            crate::project::ProjectError::Io { source, .. } => RequestError::from_io(source),
            other => RequestError::Invalid(format!("verify=examples: {other}")),
        })?;
    let examples: Vec<serde_json::Value> = (checked.iter())
        .map(|(example, results)| serde_json::json!({"example": example, "results": results}))
        .collect();
    Ok(serde_json::json!({"examples": examples}))
}
