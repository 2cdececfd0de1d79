//! [`Deadlines`]: keys with an event time by which something of theirs expires (enrichment
//! TTLs, an interval join's kept events), in time order, one deadline per key. Depends on
//! `time` and `hashing` only.

use std::collections::BTreeSet;

use crate::hashing::HashMap;
use std::sync::Arc;

use crate::time::Millis;

/// One deadline per key, ordered by time.
#[derive(Debug, Default)]
pub(super) struct Deadlines {
    by_time: BTreeSet<(Millis, Arc<str>)>,
    by_key: HashMap<Arc<str>, Millis>,
}

impl Deadlines {
    /// Sets `key`'s deadline to `at`, replacing any other one. An unchanged deadline is left
    /// where it is (the interval join sets one for every event it keeps, mostly the same).
    pub(super) fn set(&mut self, key: Arc<str>, at: Millis) {
        match self.by_key.insert(key.clone(), at) {
            Some(old) if old == at => return,
            Some(old) => {
                self.by_time.remove(&(old, key.clone()));
            }
            None => {}
        }
        self.by_time.insert((at, key));
    }

    /// `key` shared: the copy kept with its deadline if it has one (so that it is not made
    /// again for every event of a key already waiting), else a new one. (The window engine's
    /// `own_key` does the same over its own map of keys.)
    pub(super) fn own_key(&self, key: &str) -> Arc<str> {
        match self.by_key.get_key_value(key) {
            Some((own, _)) => own.clone(),
            None => Arc::from(key),
        }
    }

    /// Sets `key`'s deadline to `at` unless it has an earlier one.
    pub(super) fn set_earliest(&mut self, key: &Arc<str>, at: Millis) {
        // Most kept events find their key's deadline already at or before theirs: one lookup.
        if self.by_key.get(key).is_some_and(|&old| old <= at) {
            return;
        }
        self.set(key.clone(), at);
    }

    /// Removes and returns a key whose deadline is at or before `last`, if there is one.
    pub(super) fn pop_through(&mut self, last: Millis) -> Option<Arc<str>> {
        let (at, _) = self.by_time.first()?;
        if *at > last {
            return None;
        }
        let (_, key) = self.by_time.pop_first()?;
        self.by_key.remove(&key);
        Some(key)
    }

    /// Whether no key has a deadline.
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key waiting for its deadline is handed out as the copy kept with it (no new one);
    /// once its deadline passed, it is not.
    #[test]
    fn a_waiting_key_is_shared_until_its_deadline_passes() {
        let mut deadlines = Deadlines::default();
        let key: Arc<str> = Arc::from("a key longer than twenty-four bytes");
        deadlines.set(key.clone(), 10);
        let own = deadlines.own_key("a key longer than twenty-four bytes");
        assert!(Arc::ptr_eq(&own, &key));
        assert_eq!(&*deadlines.own_key("another key"), "another key");
        assert_eq!(deadlines.pop_through(10).as_deref(), Some(&*key));
        let made = deadlines.own_key(&key);
        assert!(
            !Arc::ptr_eq(&made, &key),
            "a new copy once the deadline passed"
        );
        assert_eq!(made, key);
    }

    /// Setting a deadline again, unchanged or moved, leaves one deadline for the key, at the
    /// time last set, in time order with the others.
    #[test]
    fn a_key_has_one_deadline_whatever_is_set_again() {
        let mut deadlines = Deadlines::default();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        deadlines.set(a.clone(), 20);
        deadlines.set(b.clone(), 15);
        deadlines.set(a.clone(), 20);
        deadlines.set(Arc::from("a"), 20);
        assert_eq!(deadlines.by_time.len(), 2);
        deadlines.set(a.clone(), 10);
        deadlines.set_earliest(&b, 30);
        assert_eq!(deadlines.pop_through(12).as_deref(), Some("a"));
        assert_eq!(deadlines.pop_through(12), None);
        deadlines.set(b.clone(), 15);
        assert_eq!(deadlines.pop_through(15).as_deref(), Some("b"));
        assert!(deadlines.is_empty() && deadlines.by_time.is_empty());
    }
}
