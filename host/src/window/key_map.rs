//! [`KeyMap`]: a hash map from event keys to values, for the window engine's lookup of a key's
//! open windows, made for every event. Keys are compared inline, and a key of up to 16 bytes
//! entirely within the table: comparing two `str`s calls `memcmp`, which took 7 % of a shard's
//! time for keys of a few bytes, and the map's own copy of a key is memory of its own to read.
//! Hashed with [`RandomState`], seeded at random per map, as the other maps of the hot path
//! are.
//! Depends on `hashing` (and the `hashbrown` crate's table) only.

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;

use crate::hashing::RandomState;

/// Values by key, each key held once as the map's own `Arc<str>`.
pub(super) struct KeyMap<V> {
    table: HashTable<Slot<V>>,
    hasher: RandomState,
}

/// A key, its [`Head`] and its value.
struct Slot<V> {
    head: Head,
    key: Arc<str>,
    value: V,
}

/// A key's length and bytes read as two overlapping words: all of a key of up to 16 bytes (the
/// words cover every byte, and the length says where they overlap), the first 16 of a longer.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Head {
    len: usize,
    words: (u64, u64),
}

/// Keys longer than this are compared past their [`Head`] too.
const HEAD_BYTES: usize = 16;

impl Head {
    /// Read with a few loads: copying the bytes into a buffer instead called `memcpy`, and
    /// reading the buffer back waited for the copy to land.
    fn of(key: &str) -> Head {
        let b = key.as_bytes();
        let len = b.len();
        let u64_at = |at: usize| u64::from_ne_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let u32_at = |at: usize| u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        let words = match len {
            0 => (0, 0),
            1..4 => (
                u64::from(b[0]) | u64::from(b[len / 2]) << 8 | u64::from(b[len - 1]) << 16,
                0,
            ),
            4..8 => (u64::from(u32_at(0)), u64::from(u32_at(len - 4))),
            8..=HEAD_BYTES => (u64_at(0), u64_at(len - 8)),
            _ => (u64_at(0), u64_at(8)),
        };
        Head { len, words }
    }
}

impl<V> Slot<V> {
    /// Whether the slot is `key`'s, whose head is `head`.
    fn holds(&self, head: Head, key: &str) -> bool {
        self.head == head && (key.len() <= HEAD_BYTES || *self.key == *key)
    }
}

impl<V> Default for KeyMap<V> {
    fn default() -> Self {
        KeyMap {
            table: HashTable::new(),
            hasher: RandomState::default(),
        }
    }
}

impl<V: std::fmt::Debug> std::fmt::Debug for KeyMap<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.table.iter().map(|slot| (&slot.key, &slot.value)))
            .finish()
    }
}

impl<V> KeyMap<V> {
    fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    fn find(&self, key: &str) -> Option<&Slot<V>> {
        let head = Head::of(key);
        self.table
            .find(self.hash(key), |slot| slot.holds(head, key))
    }

    pub(super) fn get(&self, key: &str) -> Option<&V> {
        self.find(key).map(|slot| &slot.value)
    }

    pub(super) fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        let (hash, head) = (self.hash(key), Head::of(key));
        let found = self.table.find_mut(hash, |slot| slot.holds(head, key));
        found.map(|slot| &mut slot.value)
    }

    /// The map's own copy of `key`, with its value.
    pub(super) fn get_key_value(&self, key: &str) -> Option<(&Arc<str>, &V)> {
        self.find(key).map(|slot| (&slot.key, &slot.value))
    }

    /// `key`'s value, a default one put in first if it has none.
    pub(super) fn get_or_default(&mut self, key: Arc<str>) -> &mut V
    where
        V: Default,
    {
        let (hash, head) = (self.hash(&key), Head::of(&key));
        let hasher = &self.hasher;
        let entry = self.table.entry(
            hash,
            |slot| slot.holds(head, &key),
            |slot| hasher.hash_one(&*slot.key),
        );
        let slot = entry.or_insert_with(|| Slot {
            head,
            key,
            value: V::default(),
        });
        &mut slot.into_mut().value
    }

    pub(super) fn remove(&mut self, key: &str) -> Option<V> {
        let (hash, head) = (self.hash(key), Head::of(key));
        let found = self.table.find_entry(hash, |slot| slot.holds(head, key));
        found.ok().map(|entry| entry.remove().0.value)
    }
}

/// Whether `a` and `b` are the same text, as a [`KeyMap`] compares them.
#[cfg(test)]
fn same(a: &str, b: &str) -> bool {
    let slot = Slot {
        head: Head::of(a),
        key: Arc::from(a),
        value: (),
    };
    slot.holds(Head::of(b), b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys of every length up to past the head are equal only to themselves, whichever byte
    /// differs.
    #[test]
    fn keys_compare_as_their_text() {
        for len in 0..40 {
            let key: String = (0..len)
                .map(|i| char::from(b'a' + (i % 26) as u8))
                .collect();
            assert!(same(&key, &key.clone()));
            for at in 0..len {
                let mut other = key.clone().into_bytes();
                other[at] = b'#';
                assert!(
                    !same(&key, std::str::from_utf8(&other).unwrap()),
                    "{len} {at}"
                );
            }
            assert!(!same(&key, &format!("{key}a")));
        }
    }

    /// Keys whose words are alike but whose lengths differ are different keys, whichever is
    /// held and whichever looked for; past the head, the whole key is compared.
    #[test]
    fn keys_of_other_lengths_with_the_same_words_differ() {
        let long = "abcdefghijklmnopq"; // 17 bytes: its head is its first 16
        let pairs = [
            ("a", "aa"),
            ("a", "aaa"),
            ("aaaa", "aaaaaaa"),
            (&"a".repeat(8), &"a".repeat(16)),
            (&long[..16], long),
            (long, "abcdefghijklmnopr"),
        ];
        for (a, b) in pairs {
            assert!(!same(a, b) && !same(b, a), "{a} {b}");
            assert!(same(a, a) && same(b, b));
        }
    }

    /// Values are found, added, changed and removed by key.
    #[test]
    fn a_key_map_maps_keys_to_values() {
        let mut map: KeyMap<Vec<u32>> = KeyMap::default();
        for i in 0..1_000u32 {
            map.get_or_default(Arc::from(format!("key-{i}"))).push(i);
        }
        map.get_or_default(Arc::from("key-7")).push(70);
        assert_eq!(map.get("key-7"), Some(&vec![7, 70]));
        assert_eq!(map.get("key-1000"), None);
        map.get_mut("key-8").unwrap().clear();
        assert_eq!(map.get("key-8"), Some(&vec![]));
        let (own, _) = map.get_key_value("key-9").unwrap();
        assert_eq!(&**own, "key-9");
        assert_eq!(map.remove("key-9"), Some(vec![9]));
        assert_eq!(map.remove("key-9"), None);
        assert_eq!(map.get("key-9"), None);
        assert_eq!(map.get("key-10"), Some(&vec![10]));
    }
}
