//! A replay from a savepoint of a pipeline on workers: each slice's checkpoint is the state of
//! its own keys at its own input position, so each version runs once per slice, in a sandbox of
//! the slice's own, from that slice's state and position: on its key groups of the whole stream,
//! or on its partition of a partitioned one. A slice holding none of the keys asked for is not
//! run. The slices' results, concatenated, are the version's, as the workers would give them.
//!
//! Depends on `checkpoint` (the savepoint's slices), `pipeline` (a slice's key groups), `source`
//! (a key's partition), `state` (a key's key group) and the replay's sandbox (`replay.rs`).

use std::io::Write;
use std::path::{Path, PathBuf};

use super::Slot;
use super::replay::{ReplayRequest, run_to, sandboxed};
use crate::operator::Registry;
use crate::pipeline::{KeyGroups, RunOptions};
use crate::serve::RequestError;
use crate::spec::{PipelineSpec, SourceSpec, StateSpec};

impl Slot {
    /// Runs `version` over sliced savepoint `savepoint` in `dir` (see the module documentation)
    /// up to stream sequence `end`: the file of its results.
    pub(super) fn replay_slices(
        &self,
        spec: &PipelineSpec,
        (dir, version, registry): (&Path, &str, &Registry),
        (request, savepoint): (&ReplayRequest, &str),
        end: u64,
    ) -> Result<PathBuf, RequestError> {
        let saved = self.find_savepoint(savepoint)?;
        let slices = saved.slices.len();
        let partitions = match &spec.source {
            SourceSpec::Nats(nats) => nats.partitions.clone(),
            _ => None,
        };
        let results = dir.join("results.jsonl");
        std::fs::create_dir_all(dir).map_err(RequestError::from_io)?;
        let mut all = std::fs::File::create(&results).map_err(RequestError::from_io)?;
        for (slice, manifest) in saved.slices.iter().enumerate() {
            let holds = |key: &String| match &partitions {
                Some(p) => crate::source::partition_of_key(key, p.count) == slice,
                None => KeyGroups::slice(slice, slices).contains(crate::state::key_group(key)),
            };
            if !request.keys.is_empty() && !request.keys.iter().any(holds) {
                continue;
            }
            let slice_dir = dir.join(format!("slice-{slice}"));
            let (slice_end, options) = match &partitions {
                Some(p) => (
                    super::on_workers::subject_end(spec, &p.subject_of(slice))?,
                    RunOptions::default(),
                ),
                None => {
                    let options = RunOptions {
                        key_groups: Some(KeyGroups::slice(slice, slices)),
                        ..RunOptions::default()
                    };
                    (end, options)
                }
            };
            let from = manifest.as_ref().map_or(0, |m| m.source.offset);
            if from >= slice_end {
                continue; // nothing after the savepoint on this slice
            }
            let mut spec = sandboxed(spec, &slice_dir, version, registry, slice_end)?;
            if let (Some(_), SourceSpec::Nats(nats)) = (&partitions, &mut spec.source) {
                nats.partition = Some(slice);
            }
            if manifest.is_some() {
                let StateSpec::Redb(data) = &spec.state else {
                    unreachable!("sandboxes keep their state in redb")
                };
                crate::checkpoint::fork_slice(
                    &self.sliced_home()?,
                    savepoint,
                    slice,
                    data,
                    &spec.name,
                )?;
            }
            run_to(&spec, slice_end, options, || self.is_deleted())?;
            append(&mut all, &slice_dir.join("results.jsonl"))?;
        }
        all.flush().map_err(RequestError::from_io)?;
        Ok(results)
    }
}

/// Appends the results file `path` (if the run made one) to `all`.
fn append(all: &mut std::fs::File, path: &Path) -> Result<(), RequestError> {
    match std::fs::File::open(path) {
        Ok(mut file) => std::io::copy(&mut file, all)
            .map(drop)
            .map_err(RequestError::from_io),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(RequestError::from_io(e)),
    }
}
