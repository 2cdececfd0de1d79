//! [`ScopeState`]: the named values and named maps of one scope. Depends on `value`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::value::Value;

/// The state of one scope: named values and named maps of values. Ordered maps keep iteration
/// (and so serialised bytes and `map-entries`) deterministic.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScopeState {
    /// Named values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, Value>,
    /// Named maps.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub maps: BTreeMap<String, BTreeMap<String, Value>>,
    /// The latest event time that touched the scope, kept by the host for state TTLs (not
    /// visible to operators).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event: Option<i64>,
    /// The operator version that last wrote the scope, kept by the host so that another
    /// version migrates it before touching it (not visible to operators).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_by: Option<String>,
    /// The shadow candidate's copy of this scope during a shadow rollout (not visible to
    /// operators).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<Box<ScopeState>>,
}

impl ScopeState {
    /// Whether the scope holds nothing.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
            && self.maps.is_empty()
            && self.last_event.is_none()
            && self.shadow.is_none()
    }

    /// About how many bytes the named values take as they cross into an operator with a call.
    pub fn named_values_size(&self) -> usize {
        (self.values.iter())
            .map(|(name, value)| name.len() + value.size())
            .sum()
    }

    /// About how many bytes the operator's state takes: its named values and its maps' entries
    /// (not what the host keeps beside them). What the state-growth gate compares.
    pub fn operator_bytes(&self) -> usize {
        let maps = (self.maps.iter()).map(|(name, entries)| {
            name.len()
                + (entries.iter())
                    .map(|(entry, value)| entry.len() + value.size())
                    .sum::<usize>()
        });
        self.named_values_size() + maps.sum::<usize>()
    }

    /// Reads a named value.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.values.get(name)
    }

    /// Writes a named value.
    pub fn put(&mut self, name: &str, value: Value) {
        match self.values.get_mut(name) {
            Some(slot) => *slot = value,
            None => {
                self.values.insert(name.to_owned(), value);
            }
        }
    }

    /// Removes a named value.
    pub fn remove(&mut self, name: &str) {
        self.values.remove(name);
    }

    /// Reads an entry of a named map.
    pub fn map_get(&self, map: &str, entry: &str) -> Option<&Value> {
        self.maps.get(map)?.get(entry)
    }

    /// Writes an entry of a named map.
    pub fn map_put(&mut self, map: &str, entry: &str, value: Value) {
        if !self.maps.contains_key(map) {
            self.maps.insert(map.to_owned(), BTreeMap::new());
        }
        if let Some(m) = self.maps.get_mut(map) {
            m.insert(entry.to_owned(), value);
        }
    }

    /// Removes an entry of a named map; an emptied map disappears.
    pub fn map_remove(&mut self, map: &str, entry: &str) {
        if let Some(m) = self.maps.get_mut(map) {
            m.remove(entry);
            if m.is_empty() {
                self.maps.remove(map);
            }
        }
    }

    /// Number of entries in a named map.
    pub fn map_len(&self, map: &str) -> u64 {
        self.maps.get(map).map_or(0, |m| m.len() as u64)
    }

    /// Entry names of a named map, ascending.
    pub fn map_entries(&self, map: &str) -> Vec<String> {
        self.maps
            .get(map)
            .map_or_else(Vec::new, |m| m.keys().cloned().collect())
    }
}
