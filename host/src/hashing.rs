//! The hash maps of the hot path, keyed by what the input decides: keys, state scopes, windows,
//! watermark partitions. They use foldhash instead of the standard library's SipHash (which
//! took 5-6 % of a native run), seeded at random per process so that crafted keys cannot aim
//! at one bucket. Iteration order is as unspecified as before. Depends on nothing in Weir.

/// The hasher builder: foldhash, randomly seeded per map.
pub type RandomState = foldhash::fast::RandomState;

/// A [`std::collections::HashMap`] with the fast hasher; make one with `HashMap::default()`.
pub type HashMap<K, V> = std::collections::HashMap<K, V, RandomState>;

/// A [`std::collections::HashSet`] with the fast hasher; make one with `HashSet::default()`.
pub type HashSet<K> = std::collections::HashSet<K, RandomState>;
