//! A replay from a savepoint of a pipeline on workers: each slice's checkpoint is the state of
//! its own keys at its own input position, so each version runs once per slice, in a sandbox of
//! the slice's own, from that slice's state and position: on its key groups of the whole stream,
//! or on its partition of a partitioned one or of a Kafka topic. A slice holding none of the
//! keys asked for is not run (of a topic, whose producers chose each key's partition, every
//! slice is). The slices' results, concatenated, are the version's, as the workers would give
//! them.
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
    /// Where each slice's replay from sliced savepoint `savepoint` ends: the stream sequence
    /// `end` for slices of key groups, each partition's last sequence now for a partitioned
    /// stream, each partition's offset in the spec's `until` for a Kafka topic (its slice's
    /// last uploaded checkpoint). Read once, so both versions replay the same input. Refused
    /// if the pipeline is no longer cut as the savepoint was.
    pub(super) fn slice_ends(
        &self,
        spec: &PipelineSpec,
        savepoint: &str,
        end: u64,
    ) -> Result<Vec<u64>, RequestError> {
        let saved = self.find_savepoint(savepoint)?;
        let cut = super::on_workers::slice_count(spec);
        if saved.slices.len() != cut {
            return Err(RequestError::Conflict(format!(
                "savepoint {savepoint:?} is cut into {} slices and pipeline {:?} now into {cut}: \
                 its slices' state no longer matches the pipeline's, so it cannot be replayed",
                saved.slices.len(),
                self.name
            )));
        }
        if let SourceSpec::Kafka(kafka) = &spec.source {
            let until = kafka.until.clone().unwrap_or_default();
            let end_of = |p: usize| until.get(&(p as i32)).map_or(0, |&o| o.max(0) as u64);
            return Ok((0..cut).map(end_of).collect());
        }
        match super::on_workers::partition_ends(spec)? {
            ends if ends.is_empty() => Ok(vec![end; cut]),
            ends => Ok(ends),
        }
    }

    /// Runs `version` over sliced savepoint `savepoint` in `dir` (see the module documentation),
    /// slice `i` up to stream sequence `ends[i]`: the file of its results.
    pub(super) fn replay_slices(
        &self,
        spec: &PipelineSpec,
        (dir, version, registry): (&Path, &str, &Registry),
        (request, savepoint): (&ReplayRequest, &str),
        ends: &[u64],
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
        let kafka = matches!(spec.source, SourceSpec::Kafka(_));
        for ((slice, manifest), &slice_end) in saved.slices.iter().enumerate().zip(ends) {
            // A topic's producers chose each key's partition: every slice may hold it.
            let holds = |key: &String| match &partitions {
                _ if kafka => true,
                Some(p) => crate::source::partition_of_key(key, p.count) == slice,
                None => KeyGroups::slice(slice, slices).contains(crate::state::key_group(key)),
            };
            if !request.keys.is_empty() && !request.keys.iter().any(holds) {
                continue;
            }
            let from = manifest.as_ref().map_or(0, |m| m.source.offset);
            if from >= slice_end {
                continue; // nothing after the savepoint on this slice
            }
            let slice_dir = dir.join(format!("slice-{slice}"));
            let mut spec = sandboxed(spec, &slice_dir, version, registry, slice_end)?;
            let options = match (&partitions, &mut spec.source) {
                (Some(_), SourceSpec::Nats(nats)) => {
                    nats.partition = Some(slice);
                    RunOptions::default()
                }
                (_, SourceSpec::Kafka(kafka)) => {
                    kafka.partition = Some(slice as i32);
                    RunOptions::default()
                }
                _ => RunOptions {
                    key_groups: Some(KeyGroups::slice(slice, slices)),
                    ..RunOptions::default()
                },
            };
            if manifest.is_some() {
                let StateSpec::Redb(data) = &spec.state else {
                    unreachable!("sandboxes keep their state in redb")
                };
                let home = self.sliced_home()?;
                crate::checkpoint::fork_slice(&home, savepoint, slice, data, &spec.name)?;
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
