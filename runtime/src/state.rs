//! Keyed state of one transform partition ([`KeyedState`]), as the guest's `state` import sees
//! it and as the broker commits it.
//!
//! Three layers, read top down: the changes of the batch the guest is processing, the changes
//! of the batches in the open transaction, and the committed state. A batch's changes move to
//! the transaction when its outputs and changelog records are written
//! ([`KeyedState::batch_changes`], then [`KeyedState::keep_batch`]), and to the committed state when the transaction commits; a failed
//! batch drops its own ([`KeyedState::discard_batch`]), an aborted transaction all since the
//! last commit ([`KeyedState::abort`]).
//!
//! Invariant: the state's size (keys plus values of what `get` sees, plus
//! [`ENTRY_OVERHEAD_BYTES`] per entry, in bytes) never passes
//! its limit through a `put`; `size_bytes` is that sum, kept per layer so that dropping a layer
//! restores the size below it. (A restore may load more than the limit, e.g. after the limit
//! was lowered: then only changes that do not grow it are accepted.)

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// What one entry costs beyond its key and value: the maps' nodes and allocations that hold it
/// (and its changelog record's framing). Counted against the limit, so a guest writing many
/// tiny entries cannot hold many times its limit in host memory.
pub const ENTRY_OVERHEAD_BYTES: usize = 64;

fn entry_size(key: &[u8], value: &[u8]) -> usize {
    key.len() + value.len() + ENTRY_OVERHEAD_BYTES
}

/// A partition's state shared by the broker's worker and the guest instance processing for it
/// (the instance is replaced after a trap; the state is not).
pub type StateHandle = Arc<Mutex<KeyedState>>;

#[derive(Debug, Default)]
pub struct KeyedState {
    committed: HashMap<Vec<u8>, Vec<u8>>,
    txn: HashMap<Vec<u8>, Option<Vec<u8>>>,
    batch: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    limit_bytes: usize,
    /// The largest key plus value one entry may have (its changelog record must fit the
    /// changelog topic's `max.message.bytes`); `None`: unbounded.
    entry_max_bytes: Option<usize>,
    committed_bytes: usize,
    txn_bytes: usize,
    batch_bytes: usize,
}

impl KeyedState {
    pub fn new(limit_bytes: usize) -> Self {
        KeyedState { limit_bytes, ..KeyedState::default() }
    }

    pub fn shared(limit_bytes: usize) -> StateHandle {
        Arc::new(Mutex::new(KeyedState::new(limit_bytes)))
    }

    /// Bounds one entry's key plus value (what its changelog record may carry): a larger
    /// `put` fails at once, where the guest sees it, instead of failing its batch's commit at
    /// every retry.
    pub fn set_entry_max_bytes(&mut self, max: usize) {
        self.entry_max_bytes = Some(max);
    }

    /// The value under `key` as the current batch sees it.
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        if let Some(change) = self.batch.get(key) {
            return change.as_deref();
        }
        if let Some(change) = self.txn.get(key) {
            return change.as_deref();
        }
        self.committed.get(key).map(Vec::as_slice)
    }

    fn entry_bytes(&self, key: &[u8]) -> usize {
        self.get(key).map_or(0, |v| entry_size(key, v))
    }

    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<(), String> {
        if key.is_empty() {
            return Err("a state key cannot be empty".to_string());
        }
        if let Some(max) = self.entry_max_bytes.filter(|max| key.len() + value.len() > *max) {
            return Err(format!(
                "an entry of {} bytes (key of {}, value of {}) is larger than its changelog record may be ({max} bytes, \
                 from the changelog topic's max.message.bytes)",
                key.len() + value.len(),
                key.len(),
                value.len()
            ));
        }
        let old = self.entry_bytes(&key);
        let new = entry_size(&key, &value);
        let size = self.batch_bytes - old + new;
        if size > self.limit_bytes && new > old {
            return Err(format!(
                "state of {size} bytes would pass the transform's state_bytes_max of {} (key of {} bytes, value of {})",
                self.limit_bytes,
                key.len(),
                value.len()
            ));
        }
        self.batch_bytes = size;
        self.batch.insert(key, Some(value));
        Ok(())
    }

    pub fn delete(&mut self, key: &[u8]) {
        if self.get(key).is_none() {
            return;
        }
        self.batch_bytes -= self.entry_bytes(key);
        self.batch.insert(key.to_vec(), None);
    }

    /// The current batch's changes, one per key in key order: what to write to the changelog
    /// with the batch's outputs.
    pub fn batch_changes(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        self.batch.iter().map(|(k, v)| (k.as_slice(), v.as_deref()))
    }

    /// Whether the current batch changed anything.
    pub fn batch_is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    /// The current batch's changes become part of the open transaction (its outputs and
    /// changelog records were written).
    pub fn keep_batch(&mut self) {
        for (key, value) in std::mem::take(&mut self.batch) {
            self.txn.insert(key, value);
        }
        self.txn_bytes = self.batch_bytes;
    }

    /// Forgets the current batch's changes (the batch failed).
    pub fn discard_batch(&mut self) {
        self.batch.clear();
        self.batch_bytes = self.txn_bytes;
    }

    /// The open transaction committed: its changes are the state now.
    pub fn commit(&mut self) {
        self.discard_batch();
        for (key, value) in self.txn.drain() {
            match value {
                Some(value) => self.committed.insert(key, value),
                None => self.committed.remove(&key),
            };
        }
        self.committed_bytes = self.txn_bytes;
    }

    /// The open transaction aborted: back to the committed state.
    pub fn abort(&mut self) {
        self.batch.clear();
        self.txn.clear();
        self.txn_bytes = self.committed_bytes;
        self.batch_bytes = self.committed_bytes;
    }

    /// Applies a committed change read from the changelog (no limit: it was accepted once).
    /// Only between transactions (nothing open).
    pub fn restore(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        debug_assert!(self.txn.is_empty() && self.batch.is_empty(), "restore with changes open");
        let old = self.committed.get(&key).map_or(0, |v| entry_size(&key, v));
        self.committed_bytes -= old;
        if let Some(value) = value {
            self.committed_bytes += entry_size(&key, &value);
            self.committed.insert(key, value);
        } else {
            self.committed.remove(&key);
        }
        self.txn_bytes = self.committed_bytes;
        self.batch_bytes = self.committed_bytes;
    }

    /// Empties the state (a restore starting over); its bounds stay.
    pub fn clear(&mut self) {
        *self = KeyedState {
            limit_bytes: self.limit_bytes,
            entry_max_bytes: self.entry_max_bytes,
            ..KeyedState::default()
        };
    }

    /// Size in bytes (keys, values and [`ENTRY_OVERHEAD_BYTES`] per entry) of the state as the
    /// current batch sees it.
    pub fn size_bytes(&self) -> usize {
        self.batch_bytes
    }

    /// Keys of the committed state.
    pub fn committed_keys(&self) -> usize {
        self.committed.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_larger_than_its_changelog_record_may_be_is_refused_at_put() {
        let mut state = KeyedState::new(1 << 20);
        state.set_entry_max_bytes(100);
        assert!(state.put(b"k".to_vec(), vec![0; 99]).is_ok());
        let refused = state.put(b"k".to_vec(), vec![0; 100]).unwrap_err();
        assert!(refused.contains("changelog") && refused.contains("101 bytes"), "{refused}");
        assert_eq!(state.get(b"k").map(<[u8]>::len), Some(99), "the refused put changed nothing");
        state.clear();
        assert!(state.get(b"k").is_none(), "cleared");
        assert!(state.put(b"k".to_vec(), vec![0; 100]).is_err(), "a restore's clear keeps the entry bound");
    }

    #[test]
    fn layers_commit_and_roll_back_with_their_sizes() {
        // Proves a batch sees its own changes, a failed batch leaves nothing, an aborted
        // transaction leaves the committed state, and sizes follow each layer.
        const O: usize = ENTRY_OVERHEAD_BYTES;
        let mut s = KeyedState::new(1000);
        s.put(b"a".to_vec(), b"1".to_vec()).unwrap();
        assert_eq!(s.get(b"a"), Some(&b"1"[..]));
        assert_eq!(s.batch_changes().collect::<Vec<_>>(), vec![(&b"a"[..], Some(&b"1"[..]))]);
        s.keep_batch();
        s.commit();
        assert_eq!(s.size_bytes(), 2 + O);

        s.put(b"a".to_vec(), b"22".to_vec()).unwrap();
        s.delete(b"a");
        s.put(b"b".to_vec(), b"3".to_vec()).unwrap();
        assert_eq!(s.get(b"a"), None);
        s.discard_batch();
        assert_eq!(s.get(b"a"), Some(&b"1"[..]));
        assert_eq!(s.size_bytes(), 2 + O);

        s.put(b"a".to_vec(), b"333".to_vec()).unwrap();
        assert_eq!(s.batch_changes().count(), 1);
        s.keep_batch();
        s.put(b"c".to_vec(), b"4".to_vec()).unwrap();
        assert_eq!(s.size_bytes(), 6 + 2 * O);
        s.abort();
        assert_eq!((s.get(b"a"), s.get(b"c"), s.size_bytes()), (Some(&b"1"[..]), None, 2 + O));

        s.delete(b"a");
        assert_eq!(s.batch_changes().collect::<Vec<_>>(), vec![(&b"a"[..], None)]);
        s.keep_batch();
        s.commit();
        assert_eq!((s.get(b"a"), s.size_bytes(), s.committed_keys()), (None, 0, 0));
        s.delete(b"never");
        assert!(s.batch_is_empty(), "deleting an absent key changes nothing");
    }

    #[test]
    fn a_put_past_the_limit_fails_and_changes_nothing() {
        const O: usize = ENTRY_OVERHEAD_BYTES;
        let mut s = KeyedState::new(10 + O);
        s.put(b"key".to_vec(), b"1234".to_vec()).unwrap();
        let error = s.put(b"other".to_vec(), b"123".to_vec()).unwrap_err();
        assert!(error.contains(&format!("state_bytes_max of {}", 10 + O)), "{error}");
        assert_eq!((s.get(b"other"), s.size_bytes()), (None, 7 + O));
        // Replacing a value with a same-size or smaller one is fine at the limit.
        s.put(b"key".to_vec(), b"12".to_vec()).unwrap();
        assert_eq!(s.size_bytes(), 5 + O);
        assert!(s.put(Vec::new(), b"x".to_vec()).is_err(), "empty keys are refused");
    }

    #[test]
    fn restore_applies_changes_and_tombstones() {
        const O: usize = ENTRY_OVERHEAD_BYTES;
        let mut s = KeyedState::new(4);
        s.restore(b"a".to_vec(), Some(b"12345".to_vec()));
        s.restore(b"b".to_vec(), Some(b"1".to_vec()));
        s.restore(b"b".to_vec(), None);
        assert_eq!((s.size_bytes(), s.committed_keys()), (6 + O, 1));
        assert!(s.put(b"c".to_vec(), b"1".to_vec()).is_err(), "over the limit after restore: no growth");
        s.put(b"a".to_vec(), b"1".to_vec()).unwrap();
        assert_eq!(s.size_bytes(), 2 + O);
    }

    #[test]
    fn every_entry_costs_its_overhead() {
        // Proves tiny entries are charged what they cost the host: 3-byte keys with empty values
        // were charged 3 bytes each, so a limit held ~30 times its size in maps.
        let mut s = KeyedState::new(10 * (3 + ENTRY_OVERHEAD_BYTES));
        let fitted =
            (0..100u8).take_while(|i| s.put(vec![b'k', b'0' + i / 10, b'0' + i % 10], Vec::new()).is_ok()).count();
        assert_eq!(fitted, 10);
    }
}
