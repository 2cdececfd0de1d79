//! The router's tests: when a batch is full and when it may carry its events, bucket keys with
//! and without the cache, dropping spent events.

use super::*;

fn batch(records: usize, bytes: usize) -> Batch {
    Batch {
        per_shard: Vec::new(),
        advances: Vec::new(),
        early: Vec::new(),
        redrives: Vec::new(),
        dead: Vec::new(),
        records,
        bytes,
    }
}

#[test]
fn a_batch_is_full_at_its_size_or_its_bytes() {
    assert!(!batch(16_383, 0).is_full(16_384));
    assert!(batch(16_384, 0).is_full(16_384));
    // 64 lines of 1 MiB fill a batch of 16,384: its memory is bounded, not its count.
    assert!(!batch(63, 63 << 20).is_full(16_384));
    assert!(batch(64, 64 << 20).is_full(16_384));
}

#[test]
fn only_a_full_batch_neither_long_nor_large_lets_windows_carry_its_events() {
    assert!(batch(16_384, 737_280).carries(16_384));
    assert!(
        !batch(16_383, 0).carries(16_384),
        "not full: the input slowed"
    );
    // The largest batch size a spec allows, and a batch full of 1 MiB lines.
    assert!(batch(65_536, 0).carries(65_536));
    assert!(!batch(1_048_576, 0).carries(1_048_576));
    assert!(!batch(64, 64 << 20).carries(64));
    assert!(batch(8, 8 << 20).carries(8));
    assert!(!batch(9, (8 << 20) + 1).carries(9));
}

/// A key's bucket keys are `<key>/<bucket>`, by arrival, the same whether cached (keys of
/// at most 21 bytes, whose bucket keys all fit inline) or made afresh.
#[test]
fn bucket_keys_are_the_same_cached_or_not() {
    let mut buckets = Buckets::new(false);
    for length in [1, 21, 22, 40] {
        let key = CompactString::from("k".repeat(length));
        for seq in [0, 1, 31, 32, 75] {
            let bucket = buckets.of(&key, seq);
            assert_eq!(bucket, format!("{key}/{}", seq % u64::from(BUCKETS)));
            assert_eq!(unbucket(&bucket), key);
            if length <= MAX_CACHED_KEY {
                assert!(!bucket.is_heap_allocated(), "{bucket}");
            }
        }
        assert_eq!(buckets.per_key.contains_key(&key), length <= MAX_CACHED_KEY);
    }
    assert_eq!(buckets.of(&CompactString::from("k"), 75), "k/11");
    let long = "k".repeat(22);
    assert_eq!(
        buckets.of(&CompactString::from(long.as_str()), 31),
        format!("{long}/31")
    );
}

/// Spent events are all dropped, however many there are past the fetch distance and with
/// fields or none, and their list keeps its memory for the next batch.
#[test]
fn spent_events_are_all_dropped_and_their_list_kept() {
    // Counted through the origin every third event has (a reference-counted key), among
    // events without one, with fields or none, keys inline and on the heap.
    let key: Arc<str> = Arc::from("k1");
    let field = crate::field_name::FieldName::from("amount");
    for n in [0, 1, DROP_AHEAD, DROP_AHEAD + 1, 3 * DROP_AHEAD + 5] {
        let mut spent: Vec<Staged> = (0..n)
            .map(|seq| Staged {
                seq: seq as u64,
                event: Event {
                    line: seq as u64 + 1,
                    key: "k".repeat(1 + seq % 3 * 20).into(),
                    timestamp: 0,
                    fields: (seq % 2 == 0)
                        .then(|| (field.clone(), crate::value::Value::Text("x".into())))
                        .into_iter()
                        .collect(),
                },
                origin: (seq % 3 == 0).then(|| {
                    Box::new(crate::event::Origin {
                        key: key.clone(),
                        window: crate::time::Window { start: 0, end: 1 },
                        withdrawn: false,
                    })
                }),
                made_by: None,
            })
            .collect();
        assert_eq!(Arc::strong_count(&key), n.div_ceil(3) + 1);
        let capacity = spent.capacity();
        drop_spent(&mut spent);
        assert!(spent.is_empty());
        assert_eq!(spent.capacity(), capacity);
        assert_eq!(Arc::strong_count(&key), 1);
    }
}
