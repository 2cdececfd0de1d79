//! Addressing state: key groups and [`StateKey`], with its byte encoding for redb.
//!
//! Keys hash into a fixed space of [`KEY_GROUPS`] groups. The number and the hash are fixed
//! forever, so that state can later move between shards and machines group by group.
//!
//! Depends on `time`.

use std::sync::Arc;

use crate::time::Millis;

/// The number of key groups. Fixed forever: changing it would move every key.
pub const KEY_GROUPS: u16 = 32_768;

/// The key group of a key: FNV-1a (64-bit) of its UTF-8 bytes, modulo [`KEY_GROUPS`].
pub fn key_group(key: &str) -> u16 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in key.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash % u64::from(KEY_GROUPS)) as u16
}

/// Which part of a key's state: per window (aggregates) or for the key as a whole
/// (enrichment operators).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Namespace {
    /// State of the key, not tied to a window.
    Global,
    /// State of one window `[start, end)` of the key.
    Window {
        /// Window start.
        start: Millis,
        /// Window end.
        end: Millis,
    },
}

/// The address of one scope's state.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateKey {
    /// The key's group.
    pub group: u16,
    /// The operator's position in the pipeline's chain.
    pub operator: u16,
    /// Global or per window.
    pub namespace: Namespace,
    /// The key.
    pub key: Arc<str>,
}

impl StateKey {
    /// Encodes the key so that byte order groups state by key group, then operator, then
    /// namespace (windows in time order), then key: big-endian integers, signed values with the
    /// sign bit flipped.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(22 + self.key.len());
        out.extend_from_slice(&self.group.to_be_bytes());
        out.extend_from_slice(&self.operator.to_be_bytes());
        match self.namespace {
            Namespace::Global => out.push(0),
            Namespace::Window { start, end } => {
                out.push(1);
                out.extend_from_slice(&((start as u64) ^ (1 << 63)).to_be_bytes());
                out.extend_from_slice(&((end as u64) ^ (1 << 63)).to_be_bytes());
            }
        }
        out.extend_from_slice(self.key.as_bytes());
        out
    }

    /// Decodes [`encode`](Self::encode)'s output; `None` if the bytes are not a state key.
    pub fn decode(bytes: &[u8]) -> Option<StateKey> {
        let group = u16::from_be_bytes(bytes.get(0..2)?.try_into().ok()?);
        let operator = u16::from_be_bytes(bytes.get(2..4)?.try_into().ok()?);
        let (namespace, rest) = match bytes.get(4)? {
            0 => (Namespace::Global, bytes.get(5..)?),
            1 => {
                let start = u64::from_be_bytes(bytes.get(5..13)?.try_into().ok()?) ^ (1 << 63);
                let end = u64::from_be_bytes(bytes.get(13..21)?.try_into().ok()?) ^ (1 << 63);
                (
                    Namespace::Window {
                        start: start as i64,
                        end: end as i64,
                    },
                    bytes.get(21..)?,
                )
            }
            _ => return None,
        };
        let key = std::str::from_utf8(rest).ok()?;
        (group < KEY_GROUPS).then(|| StateKey {
            group,
            operator,
            namespace,
            key: key.into(),
        })
    }

    /// The smallest encoded key of a key group: scans of `[group_start(a), group_start(b))`
    /// cover the groups `a..b`.
    pub fn group_start(group: u16) -> Vec<u8> {
        group.to_be_bytes().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_groups_are_stable() {
        // Fixed forever: these values must never change.
        assert_eq!(key_group(""), (0xcbf2_9ce4_8422_2325u64 % 32_768) as u16);
        assert_eq!(key_group("a"), (0xaf63_dc4c_8601_ec8cu64 % 32_768) as u16);
    }

    #[test]
    fn encoding_orders_windows_by_time() {
        let at = |start: Millis| StateKey {
            group: 1,
            operator: 0,
            namespace: Namespace::Window {
                start,
                end: start + 10,
            },
            key: "k".into(),
        };
        assert!(at(-5).encode() < at(3).encode());
        assert!(at(3).encode() < at(1_000).encode());
    }

    #[test]
    fn keys_decode_to_themselves() {
        for namespace in [Namespace::Global, Namespace::Window { start: -5, end: 7 }] {
            let key = StateKey {
                group: 77,
                operator: 2,
                namespace,
                key: "k/ü".into(),
            };
            assert_eq!(StateKey::decode(&key.encode()), Some(key));
        }
        assert_eq!(StateKey::decode(b"\x00"), None);
    }
}
