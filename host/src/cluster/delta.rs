//! The encoding of a slice's incremental checkpoint in the object store: one or more
//! consecutive checkpoints as committed (their changed scopes and windows, manifest and
//! figures), and the checkpoint they follow, so a restore can check that a chain of them is
//! unbroken. Little-endian lengths; every length is checked against what is left, since the
//! bytes come from the server.
//!
//! Depends on `state`.

use crate::state::{Change, StoredCheckpoint};

const MAGIC: &[u8; 8] = b"WEIRDLT1";

/// Checkpoints that follow checkpoint `after`.
#[derive(Debug, Clone, Default)]
pub(super) struct Delta {
    /// The checkpoint these follow (the chain's previous link).
    pub after: u64,
    /// The checkpoints, in order.
    pub checkpoints: Vec<StoredCheckpoint>,
}

/// One checkpoint's record (see [`join`]).
pub(super) fn encode_checkpoint(checkpoint: &StoredCheckpoint) -> Vec<u8> {
    let size = checkpoint
        .state
        .iter()
        .chain(&checkpoint.windows)
        .map(|c| 17 + c.key.len() + c.value.as_ref().map_or(0, Vec::len))
        .sum::<usize>();
    let mut out = Vec::with_capacity(64 + size + checkpoint.manifest.len());
    out.extend_from_slice(&checkpoint.id.to_le_bytes());
    put_bytes(&mut out, &checkpoint.manifest);
    put_bytes(&mut out, &checkpoint.stats);
    for changes in [&checkpoint.state, &checkpoint.windows] {
        out.extend_from_slice(&(changes.len() as u64).to_le_bytes());
        for change in changes {
            put_bytes(&mut out, &change.key);
            match &change.value {
                Some(value) => {
                    out.push(1);
                    put_bytes(&mut out, value);
                }
                None => out.push(0),
            }
        }
    }
    out
}

/// A delta object: the header, then the checkpoints' records as [`encode_checkpoint`] made
/// them.
pub(super) fn join(after: u64, records: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(24 + records.iter().map(Vec::len).sum::<usize>());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&after.to_le_bytes());
    out.extend_from_slice(&(records.len() as u64).to_le_bytes());
    for record in records {
        out.extend_from_slice(record);
    }
    out
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Why a delta object cannot be read (it is damaged, or not one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeltaError {
    /// The object does not begin as a delta does.
    #[error("not a Weir checkpoint delta")]
    NotADelta,
    /// The object ends in the middle of a field.
    #[error("a delta cut short")]
    CutShort,
    /// A length does not fit in memory.
    #[error("a length too large")]
    LengthTooLarge,
    /// A change count larger than the bytes left could hold.
    #[error("a change count larger than the delta")]
    CountTooLarge,
    /// A change is marked neither a removal (0) nor a write (1).
    #[error("a change marked {0}")]
    BadMark(u8),
    /// Bytes follow the last checkpoint.
    #[error("bytes after the last checkpoint")]
    TrailingBytes,
}

/// Reads a delta object.
pub(super) fn decode(bytes: &[u8]) -> Result<Delta, DeltaError> {
    let mut reader = Reader { bytes, at: 0 };
    if reader.take(8)? != MAGIC {
        return Err(DeltaError::NotADelta);
    }
    let after = reader.u64()?;
    let count = reader.u64()?;
    let mut checkpoints = Vec::new();
    for _ in 0..count {
        let id = reader.u64()?;
        let manifest = reader.bytes()?.to_vec();
        let stats = reader.bytes()?.to_vec();
        let state = reader.changes()?;
        let windows = reader.changes()?;
        checkpoints.push(StoredCheckpoint {
            id,
            manifest,
            state,
            windows,
            stats,
        });
    }
    if reader.at != bytes.len() {
        return Err(DeltaError::TrailingBytes);
    }
    Ok(Delta { after, checkpoints })
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DeltaError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or(DeltaError::CutShort)?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn u64(&mut self) -> Result<u64, DeltaError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn bytes(&mut self) -> Result<&'a [u8], DeltaError> {
        let n = usize::try_from(self.u64()?).map_err(|_| DeltaError::LengthTooLarge)?;
        self.take(n)
    }

    fn changes(&mut self) -> Result<Vec<Change>, DeltaError> {
        let count = self.u64()?;
        // Each change takes at least 9 bytes: a count beyond that is a lie.
        if count > (self.bytes.len() - self.at) as u64 / 9 {
            return Err(DeltaError::CountTooLarge);
        }
        let mut changes = Vec::with_capacity((count as usize).min(4_096));
        for _ in 0..count {
            let key = self.bytes()?.to_vec();
            let value = match self.take(1)?[0] {
                0 => None,
                1 => Some(self.bytes()?.to_vec()),
                other => return Err(DeltaError::BadMark(other)),
            };
            changes.push(Change { key, value });
        }
        Ok(changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint(id: u64) -> StoredCheckpoint {
        StoredCheckpoint {
            id,
            manifest: format!("{{\"id\":{id}}}").into_bytes(),
            state: vec![
                Change {
                    key: vec![0, 1, 2],
                    value: Some(vec![9; 20]),
                },
                Change {
                    key: vec![3],
                    value: None,
                },
            ],
            windows: vec![Change {
                key: vec![7],
                value: Some(b"{}".to_vec()),
            }],
            stats: b"{}".to_vec(),
        }
    }

    #[test]
    fn deltas_read_back_as_written() {
        let records = [
            encode_checkpoint(&checkpoint(5)),
            encode_checkpoint(&checkpoint(6)),
        ];
        let delta = decode(&join(4, &records)).unwrap();
        assert_eq!(delta.after, 4);
        assert_eq!(delta.checkpoints.len(), 2);
        assert_eq!(delta.checkpoints[1].state, checkpoint(6).state);
        assert_eq!(delta.checkpoints[0].manifest, checkpoint(5).manifest);
    }

    #[test]
    fn damaged_deltas_are_refused_not_misread() {
        let bytes = join(4, &[encode_checkpoint(&checkpoint(5))]);
        for cut in [0, 7, 8, 20, bytes.len() - 1] {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
        let mut huge = bytes[..24].to_vec();
        huge.extend_from_slice(&5u64.to_le_bytes());
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode(&huge).is_err());
        let mut wrong = bytes;
        wrong[0] = b'X';
        assert!(decode(&wrong).is_err());
    }
}
