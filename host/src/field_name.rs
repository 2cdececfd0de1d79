//! [`FieldName`]: the name of an event's field, cheap to copy between threads.
//!
//! Every event carries its field names, and events are made on the router's thread and dropped
//! on a shard's. With reference-counted names, each event cost an atomic increment on one core
//! and a decrement on another, on the same few cache lines for every event (7 % of a native
//! run). Names are therefore interned once per process into a bounded table of leaked strings:
//! copying or dropping one touches no shared memory. A hostile input can invent any number of
//! field names, so the table is bounded ([`MAX_INTERNED`] names of at most
//! [`MAX_INTERNED_LEN`] bytes, about 4 MiB at most); names past that are reference counted, as
//! before. [`NameCache`] keeps a thread's own names, so the hot path takes no lock for them.
//! Depends on nothing in Weir (`std`, `serde`, `foldhash`).

use std::borrow::Borrow;
use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::{Arc, OnceLock, RwLock};

/// Names interned at most, for the whole process.
pub const MAX_INTERNED: usize = 16_384;
/// Longest name interned, in bytes; longer ones are reference counted.
pub const MAX_INTERNED_LEN: usize = 256;

/// A field name: an interned, process-lifetime string, or a reference-counted one once the
/// interning table is full. Compares, hashes and orders as its text.
#[derive(Clone)]
pub struct FieldName(Repr);

#[derive(Clone)]
enum Repr {
    Interned(&'static str),
    Shared(Arc<str>),
}

fn table() -> &'static RwLock<HashSet<&'static str>> {
    static TABLE: OnceLock<RwLock<HashSet<&'static str>>> = OnceLock::new();
    TABLE.get_or_init(Default::default)
}

impl FieldName {
    /// The name `text`, interned if the table has room.
    pub fn new(text: &str) -> Self {
        intern(table(), MAX_INTERNED, text)
    }

    /// The name's text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Interned(text) => text,
            Repr::Shared(text) => text,
        }
    }
}

/// `text` from `table`, added if it holds fewer than `bound` names.
fn intern(table: &RwLock<HashSet<&'static str>>, bound: usize, text: &str) -> FieldName {
    {
        let read = table.read().unwrap_or_else(|e| e.into_inner());
        if let Some(interned) = read.get(text) {
            return FieldName(Repr::Interned(interned));
        }
        // A full table is never written again: no name waits for the write lock.
        if text.len() > MAX_INTERNED_LEN || read.len() >= bound {
            return FieldName(Repr::Shared(text.into()));
        }
    }
    let mut table = table.write().unwrap_or_else(|e| e.into_inner());
    if let Some(interned) = table.get(text) {
        return FieldName(Repr::Interned(interned));
    }
    if table.len() >= bound {
        return FieldName(Repr::Shared(text.into()));
    }
    let leaked: &'static str = Box::leak(text.into());
    table.insert(leaked);
    FieldName(Repr::Interned(leaked))
}

/// Names a [`NameCache`] keeps.
pub const MAX_CACHED_NAMES: usize = 4_096;

/// One thread's names by text, so that making a name it made before takes no shared lock: the
/// table behind [`FieldName::new`] is process-wide, and the hot path takes no locks. Holds at
/// most [`MAX_CACHED_NAMES`] names of at most [`MAX_INTERNED_LEN`] bytes (about 2 MiB with
/// their keys): input may invent names, and the others are made each time.
#[derive(Debug, Default)]
pub struct NameCache {
    names: std::collections::HashMap<Box<str>, FieldName, foldhash::fast::RandomState>,
}

impl NameCache {
    /// The name `text`.
    pub fn get(&mut self, text: &str) -> FieldName {
        if let Some(name) = self.names.get(text) {
            return name.clone();
        }
        let name = FieldName::new(text);
        if self.names.len() < MAX_CACHED_NAMES && text.len() <= MAX_INTERNED_LEN {
            self.names.insert(text.into(), name.clone());
        }
        name
    }

    /// How many names it holds.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

impl Deref for FieldName {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for FieldName {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for FieldName {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for FieldName {
    fn from(text: &str) -> Self {
        Self::new(text)
    }
}

impl From<String> for FieldName {
    fn from(text: String) -> Self {
        Self::new(&text)
    }
}

impl From<&String> for FieldName {
    fn from(text: &String) -> Self {
        Self::new(text)
    }
}

impl From<Arc<str>> for FieldName {
    fn from(text: Arc<str>) -> Self {
        Self::new(&text)
    }
}

impl PartialEq for FieldName {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Repr::Interned(a), Repr::Interned(b)) => std::ptr::eq(*a, *b),
            _ => self.as_str() == other.as_str(),
        }
    }
}

impl Eq for FieldName {}

impl PartialEq<str> for FieldName {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for FieldName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Hash for FieldName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialOrd for FieldName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for FieldName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl fmt::Debug for FieldName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for FieldName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for FieldName {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for FieldName {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Ok(Self::new(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_names_are_one_interned_string() {
        let a = FieldName::new("amount");
        let b = FieldName::from(String::from("amount"));
        assert_eq!(a, b);
        assert!(std::ptr::eq(a.as_str(), b.as_str()));
        assert_eq!(&*a, "amount");
    }

    #[test]
    fn long_names_are_not_interned_but_still_equal() {
        let long = "x".repeat(MAX_INTERNED_LEN + 1);
        let a = FieldName::new(&long);
        let b = FieldName::new(&long);
        assert!(matches!(a.0, Repr::Shared(_)));
        assert_eq!(a, b);
        assert_eq!(a.len(), MAX_INTERNED_LEN + 1);
    }

    #[test]
    fn the_table_stops_growing_at_its_bound() {
        let table = RwLock::new(HashSet::new());
        for i in 0..20 {
            intern(&table, 16, &format!("name-{i}"));
        }
        assert_eq!(table.read().unwrap().len(), 16);
        let late = intern(&table, 16, "name-19");
        assert!(matches!(late.0, Repr::Shared(_)));
        assert_eq!(late, intern(&table, 16, "name-19"));
        assert!(matches!(intern(&table, 16, "name-3").0, Repr::Interned(_)));
    }

    #[test]
    fn a_name_cache_keeps_short_names_up_to_its_bound() {
        let mut cache = NameCache::default();
        let long = "y".repeat(MAX_INTERNED_LEN + 1);
        assert_eq!(&*cache.get(&long), long);
        assert!(cache.is_empty());
        for i in 0..MAX_CACHED_NAMES + 10 {
            cache.get(&format!("cache-test-{i}"));
        }
        assert_eq!(cache.len(), MAX_CACHED_NAMES);
        assert_eq!(cache.get("cache-test-3"), FieldName::new("cache-test-3"));
    }
}
