//! [`ScopeSlot`]: a scope's state as a guest sees it during one call. Writes go to an overlay
//! that is applied only when the call succeeds, so a call that traps or returns an error leaves
//! the state exactly as it was, at a cost proportional to what the call wrote (not to the
//! state's size).
//!
//! Depends on `state` and `value`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::state::ScopeState;
use crate::value::Value;

/// The host side of the WIT resource `scope` for one call.
#[derive(Debug, Default)]
pub struct ScopeSlot {
    /// The key the scope belongs to.
    pub key: Arc<str>,
    /// The state before the call.
    pub base: ScopeState,
    /// Values written (`Some`) or removed (`None`) during the call.
    values: BTreeMap<String, Option<Value>>,
    /// Map entries written or removed during the call.
    maps: BTreeMap<String, BTreeMap<String, Option<Value>>>,
}

impl ScopeSlot {
    /// A slot over `base` for `key`.
    pub fn new(key: Arc<str>, base: ScopeState) -> Self {
        ScopeSlot {
            key,
            base,
            values: BTreeMap::new(),
            maps: BTreeMap::new(),
        }
    }

    /// Reads a named value.
    pub fn get(&self, name: &str) -> Option<Value> {
        match self.values.get(name) {
            Some(change) => change.clone(),
            None => self.base.get(name).cloned(),
        }
    }

    /// Writes a named value.
    pub fn put(&mut self, name: String, value: Value) {
        self.values.insert(name, Some(value));
    }

    /// Removes a named value.
    pub fn remove(&mut self, name: String) {
        self.values.insert(name, None);
    }

    /// Reads a map entry.
    pub fn map_get(&self, map: &str, entry: &str) -> Option<Value> {
        match self.maps.get(map).and_then(|m| m.get(entry)) {
            Some(change) => change.clone(),
            None => self.base.map_get(map, entry).cloned(),
        }
    }

    /// Writes a map entry.
    pub fn map_put(&mut self, map: String, entry: String, value: Value) {
        self.maps.entry(map).or_default().insert(entry, Some(value));
    }

    /// Removes a map entry.
    pub fn map_remove(&mut self, map: String, entry: String) {
        self.maps.entry(map).or_default().insert(entry, None);
    }

    /// The entry names of a map, ascending, with this call's changes applied.
    pub fn map_entries(&self, map: &str) -> Vec<String> {
        let Some(changes) = self.maps.get(map) else {
            return self.base.map_entries(map);
        };
        let mut names: BTreeSet<&String> = self
            .base
            .maps
            .get(map)
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        for (entry, change) in changes {
            match change {
                Some(_) => names.insert(entry),
                None => names.remove(entry),
            };
        }
        names.into_iter().cloned().collect()
    }

    /// The number of entries of a map, with this call's changes applied.
    pub fn map_len(&self, map: &str) -> u64 {
        let Some(changes) = self.maps.get(map) else {
            return self.base.map_len(map);
        };
        let mut len = self.base.map_len(map) as i64;
        for (entry, change) in changes {
            let existed = self.base.map_get(map, entry).is_some();
            len += match (existed, change.is_some()) {
                (false, true) => 1,
                (true, false) => -1,
                _ => 0,
            };
        }
        len.max(0) as u64
    }

    /// The state with this call's changes applied.
    pub fn commit(mut self) -> ScopeState {
        for (name, change) in self.values {
            match change {
                Some(value) => self.base.put(&name, value),
                None => self.base.remove(&name),
            }
        }
        for (map, changes) in self.maps {
            for (entry, change) in changes {
                match change {
                    Some(value) => self.base.map_put(&map, &entry, value),
                    None => self.base.map_remove(&map, &entry),
                }
            }
        }
        self.base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_visible_during_the_call_and_applied_by_commit() {
        let mut base = ScopeState::default();
        base.put("a", Value::Int(1));
        base.map_put("m", "x", Value::Int(1));
        base.map_put("m", "y", Value::Int(2));
        let mut slot = ScopeSlot::new("k".into(), base.clone());
        slot.put("a".into(), Value::Int(5));
        slot.map_remove("m".into(), "x".into());
        slot.map_put("m".into(), "z".into(), Value::Int(3));
        assert_eq!(slot.get("a"), Some(Value::Int(5)));
        assert_eq!(slot.map_len("m"), 2);
        assert_eq!(slot.map_entries("m"), ["y", "z"]);
        assert_eq!(slot.base, base, "the base is untouched until commit");
        let state = slot.commit();
        assert_eq!(state.get("a"), Some(&Value::Int(5)));
        assert_eq!(state.map_entries("m"), ["y", "z"]);
    }
}
