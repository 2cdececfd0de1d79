//! [`FieldName`]: the name of an event's field, cheap to copy between threads.
//!
//! Every event carries its field names, and events are made on the router's thread and read
//! on a shard's (where, when this was measured, they were also dropped). With
//! reference-counted names, each event cost an atomic increment on one core and a decrement on
//! another, on the same few cache lines for every event (7 % of a native run). Names are
//! therefore interned once per process into a bounded table of leaked strings:
//! copying or dropping one touches no shared memory. A hostile input can invent any number of
//! field names, so the table is bounded ([`MAX_INTERNED`] names of at most
//! [`MAX_INTERNED_LEN`] bytes, about 4 MiB at most); names past that are reference counted, as
//! before. [`NameCache`] keeps a thread's own names, so the hot path takes no lock for them.
//!
//! A name is one word: the address of its text, its low bit saying whether the text is
//! interned or reference counted (four `unsafe` blocks, each with why it is sound). An
//! event's fields are (name, value) pairs: at 40 bytes a pair instead of 56, the generator's
//! three fields take 120 bytes, two cache lines in mimalloc's 128-byte blocks instead of three,
//! which the router writes and a shard reads for every event.
//!
//! Depends on nothing in Weir (`std`, `serde`, `foldhash`); anything in Weir may use it.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock, RwLock};

/// Names interned at most, for the whole process.
pub const MAX_INTERNED: usize = 16_384;
/// Longest name interned, in bytes; longer ones are reference counted.
pub const MAX_INTERNED_LEN: usize = 256;

/// A field name: an interned, process-lifetime string, or a reference-counted one once the
/// interning table is full or for a name longer than [`MAX_INTERNED_LEN`]. Compares, hashes and
/// orders as its text.
#[derive(Clone)]
pub struct FieldName(Tagged);

/// The bit of a [`Tagged`] address that says the text is reference counted.
const SHARED: usize = 1;

/// A name in one word: the address of its text, a `Box<str>` that is either interned (leaked
/// for the process's life; the low bit clear) or the inside of an `Arc<Box<str>>` (the low bit
/// set). Both are aligned as a `usize` (at least 2 bytes), so the low bit is free. An enum of
/// the two was 16 bytes with thin pointers (24 with `&str` and `Arc<str>`). The `&Box<str>`
/// is what makes the address thin.
struct Tagged(NonNull<Box<str>>);

// SAFETY: a `Tagged` is an `&'static Box<str>` or an `Arc<Box<str>>`, both `Send` and `Sync`;
// it gives out only shared references to the text, and its reference count is atomic.
#[allow(unsafe_code)]
unsafe impl Send for Tagged {}
// SAFETY: as for `Send`.
#[allow(unsafe_code)]
unsafe impl Sync for Tagged {}

impl Tagged {
    #[allow(clippy::borrowed_box)] // a thin address, see above
    fn interned(text: &'static Box<str>) -> Tagged {
        Tagged(NonNull::from(text))
    }

    fn shared(text: &str) -> Tagged {
        let raw = Arc::into_raw(Arc::new(Box::<str>::from(text))).cast_mut();
        let tagged = NonNull::new(raw.map_addr(|address| address | SHARED));
        Tagged(tagged.expect("an Arc's address is not null"))
    }

    fn is_shared(&self) -> bool {
        self.0.addr().get() & SHARED != 0
    }

    /// The text's address, untagged.
    fn text(&self) -> *const Box<str> {
        self.0.as_ptr().map_addr(|address| address & !SHARED)
    }

    #[allow(unsafe_code)]
    fn as_str(&self) -> &str {
        // SAFETY: the untagged address is that of a live `Box<str>`: a leaked one, or one an
        // `Arc` holds while this `Tagged` holds one of its counts (see `Clone` and `Drop`).
        unsafe { &*self.text() }
    }
}

impl Clone for Tagged {
    #[allow(unsafe_code)]
    fn clone(&self) -> Tagged {
        if self.is_shared() {
            // SAFETY: the address came from `Arc::into_raw` and this `Tagged` holds a count, so
            // the `Arc` is alive; the new count belongs to the copy, and its `Drop` gives it back.
            unsafe { Arc::increment_strong_count(self.text()) };
        }
        Tagged(self.0)
    }
}

impl Drop for Tagged {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if self.is_shared() {
            // SAFETY: the address came from `Arc::into_raw`, and this `Tagged`'s count is given
            // back exactly once, here.
            drop(unsafe { Arc::from_raw(self.text()) });
        }
    }
}

/// An interned text in the table: looked up by its `str`.
#[derive(PartialEq, Eq, Hash)]
#[allow(clippy::borrowed_box)] // a thin address, see `Tagged`
struct Leaked(&'static Box<str>);

impl Borrow<str> for Leaked {
    fn borrow(&self) -> &str {
        self.0
    }
}

fn table() -> &'static RwLock<HashSet<Leaked>> {
    static TABLE: OnceLock<RwLock<HashSet<Leaked>>> = OnceLock::new();
    TABLE.get_or_init(Default::default)
}

impl FieldName {
    /// The name `text`, interned if the table has room.
    pub fn new(text: &str) -> Self {
        intern(table(), MAX_INTERNED, text)
    }

    /// The name's text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

/// `text` from `table`, added if it holds fewer than `bound` names.
fn intern(table: &RwLock<HashSet<Leaked>>, bound: usize, text: &str) -> FieldName {
    {
        let read = table.read().unwrap_or_else(|e| e.into_inner());
        if let Some(interned) = read.get(text) {
            return FieldName(Tagged::interned(interned.0));
        }
        // A full table is never written again: no name waits for the write lock.
        if text.len() > MAX_INTERNED_LEN || read.len() >= bound {
            return FieldName(Tagged::shared(text));
        }
    }
    let mut table = table.write().unwrap_or_else(|e| e.into_inner());
    if let Some(interned) = table.get(text) {
        return FieldName(Tagged::interned(interned.0));
    }
    if table.len() >= bound {
        return FieldName(Tagged::shared(text));
    }
    let leaked = Leaked(Box::leak(Box::new(text.into())));
    let name = FieldName(Tagged::interned(leaked.0));
    table.insert(leaked);
    name
}

/// An interned name as a plain word to copy: nothing to count or drop, and equal only to
/// itself (the process's table interns a text once, at one address, and never drops it).
/// [`FieldName::interned`] gives one; a name past the table's bounds has none.
#[derive(Clone, Copy)]
#[allow(clippy::borrowed_box)] // a thin address, see `Tagged`
pub struct InternedName(&'static Box<str>);

impl InternedName {
    /// The name's text.
    pub fn as_str(self) -> &'static str {
        self.0
    }
}

impl PartialEq for InternedName {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}

impl Eq for InternedName {}

impl fmt::Debug for InternedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl From<InternedName> for FieldName {
    fn from(name: InternedName) -> Self {
        FieldName(Tagged::interned(name.0))
    }
}

impl FieldName {
    /// The name as an [`InternedName`], if it is interned.
    #[allow(unsafe_code)]
    pub fn interned(&self) -> Option<InternedName> {
        if self.0.is_shared() {
            return None;
        }
        // SAFETY: an address is untagged only if made by `Tagged::interned`, whose argument is
        // a `&'static Box<str>` (a leaked one), which lives for the rest of the process.
        Some(InternedName(unsafe { &*self.0.text() }))
    }
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
        // Interned names are equal only if they are one string: compared without reading it.
        match self.0.is_shared() || other.0.is_shared() {
            false => self.0.0 == other.0.0,
            true => self.as_str() == other.as_str(),
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

    /// An interned name's plain word is equal to another only if it is the same name, gives
    /// the name back, and is one word even as an option; a long (counted) name has none.
    #[test]
    fn an_interned_name_is_a_word_equal_only_to_itself() {
        let amount = FieldName::new("amount").interned().expect("interned");
        assert_eq!(Some(amount), FieldName::from("amount").interned());
        assert_ne!(Some(amount), FieldName::new("amounts").interned());
        assert_eq!(amount.as_str(), "amount");
        assert_eq!(FieldName::from(amount), FieldName::new("amount"));
        let word = std::mem::size_of::<usize>();
        assert_eq!(std::mem::size_of::<Option<InternedName>>(), word);
        let long = FieldName::new(&"x".repeat(MAX_INTERNED_LEN + 1));
        assert_eq!(long.interned(), None);
    }

    #[test]
    fn long_names_are_not_interned_but_still_equal() {
        let long = "x".repeat(MAX_INTERNED_LEN + 1);
        let a = FieldName::new(&long);
        let b = FieldName::new(&long);
        assert!(a.0.is_shared());
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
        assert!(late.0.is_shared());
        assert_eq!(late, intern(&table, 16, "name-19"));
        assert!(!intern(&table, 16, "name-3").0.is_shared());
    }

    /// How many copies of a reference-counted name are alive (none for an interned one).
    fn copies(name: &FieldName) -> Option<usize> {
        name.0.is_shared().then(|| {
            // SAFETY (test): as in `Tagged::drop`, but the count is kept (`ManuallyDrop`).
            #[allow(unsafe_code)]
            let arc = std::mem::ManuallyDrop::new(unsafe { Arc::from_raw(name.0.text()) });
            Arc::strong_count(&arc)
        })
    }

    /// A name is one word, and so is an optional one.
    #[test]
    fn a_name_is_one_word() {
        let word = std::mem::size_of::<usize>();
        assert_eq!(std::mem::size_of::<FieldName>(), word);
        assert_eq!(std::mem::size_of::<Option<FieldName>>(), word);
    }

    /// Copies of a reference-counted name, made and dropped on many threads, share one text
    /// and count exactly: the last one dropped frees it, no earlier one does.
    #[test]
    fn a_shared_name_is_counted_across_threads_and_freed_by_its_last_copy() {
        let text = "z".repeat(MAX_INTERNED_LEN + 7);
        let name = FieldName::new(&text);
        assert_eq!(copies(&name), Some(1));
        let copies_made: Vec<Vec<FieldName>> = std::thread::scope(|threads| {
            let made: Vec<_> = (0..4)
                .map(|_| threads.spawn(|| (0..1_000).map(|_| name.clone()).collect()))
                .collect();
            made.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert_eq!(copies(&name), Some(4_001));
        let far = copies_made[3][999].clone();
        assert!(std::ptr::eq(far.as_str(), name.as_str()), "one text");
        std::thread::scope(|threads| {
            for made in copies_made {
                threads.spawn(move || drop(made));
            }
        });
        assert_eq!(copies(&name), Some(2));
        assert_eq!(far, name);
        assert_eq!(&*far, text);
        drop(name);
        assert_eq!(copies(&far), Some(1));
        let interned = FieldName::new("amount");
        assert_eq!(copies(&interned), None);
        assert_ne!(far, interned);
    }

    /// Interned and reference-counted names compare, hash and order by their text, whichever
    /// way round.
    #[test]
    fn interned_and_shared_names_compare_by_text() {
        let table = RwLock::new(HashSet::new());
        let interned = intern(&table, 1, "same");
        let shared = intern(&table, 1, "other");
        assert!(!interned.0.is_shared() && shared.0.is_shared());
        let shared_same = FieldName(Tagged::shared("same"));
        assert_eq!(interned, shared_same);
        assert_eq!(shared_same, interned);
        assert_ne!(interned, shared);
        use std::hash::BuildHasher;
        let hash = |name: &FieldName| foldhash::fast::FixedState::default().hash_one(name);
        assert_eq!(hash(&interned), hash(&shared_same));
        let text_hash = foldhash::fast::FixedState::default().hash_one("same");
        assert_eq!(
            hash(&shared_same),
            text_hash,
            "as its text, for `Borrow<str>`"
        );
        assert!(shared < interned, "\"other\" sorts before \"same\"");
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
