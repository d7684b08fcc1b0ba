//! Stateful transform: drops a record whose key was already seen within a window, forwarding
//! the rest unchanged (retries of an upstream producer, at-least-once sources).
//!
//! Parameters: `window_ms` (default 3600000, one hour), measured on record timestamps. A record
//! is forwarded when its key was never seen, or last forwarded more than `window_ms` before
//! this record's timestamp; keyless records are always forwarded.
//!
//! The keyed state holds, per key, the time it was last forwarded, so duplicates stay dropped
//! across crashes and leader moves. Keys are also forgotten, so the state stays the size of
//! two to three windows of distinct keys instead of growing with every key ever seen: time is
//! cut into buckets of `window_ms`, each bucket keeps an index of the keys forwarded in it, and
//! once a record's bucket is three past a bucket, that bucket's keys (those not forwarded again
//! since) are deleted: every one of them was last forwarded more than a window before any
//! record within a window of that one. A record that arrives later than that (its timestamp
//! more than a window behind a newer record's) may find its key forgotten and be forwarded
//! again.
//!
//! State layout (the first byte tells the kind of entry):
//! - `k` + key: the time the key was last forwarded (i64, little-endian);
//! - `i` + bucket (i64, big-endian) + chunk (u32, big-endian): up to [`CHUNK_KEYS`] keys indexed
//!   in the bucket, each a u32 little-endian length and the key;
//! - `n` + bucket: how many keys the bucket's index holds (u32);
//! - `b`: the buckets that have an index, ascending (i64 little-endian each).

use runnel_sdk::{state, Config, Error, Output, Record, Transform};

/// Keys per index chunk: a chunk is rewritten (in the batch's state changes) when a key joins
/// it, so it stays small; a bucket has as many chunks as it needs.
const CHUNK_KEYS: u32 = 64;

pub struct Dedup {
    window_ms: i64,
}

impl Transform for Dedup {
    fn init(config: &Config) -> Result<Self, Error> {
        let window_ms = config.parse::<i64>("window_ms")?.unwrap_or(3_600_000);
        if window_ms <= 0 {
            return Err(Error::new("window_ms must be positive"));
        }
        Ok(Dedup { window_ms })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Output<'_>) -> Result<(), Error> {
        let Some(key) = record.key() else {
            out.forward(record);
            return Ok(());
        };
        let now = record.timestamp();
        let bucket = now.div_euclid(self.window_ms);
        // Buckets up to three back: a key forwarded in bucket - 2 may still be within a window
        // of a late record that is within a window of this one.
        self.forget_before(bucket - 2)?;
        let last_key = entry(b'k', key);
        if let Some(seen) = state::get_i64(&last_key)? {
            if now.saturating_sub(seen) <= self.window_ms {
                return Ok(());
            }
        }
        state::put_i64(&last_key, now)?;
        index(bucket, key)?;
        out.forward(record);
        Ok(())
    }
}

impl Dedup {
    /// Deletes the keys of every bucket before `bucket` that were not forwarded again since,
    /// with the buckets' indexes.
    fn forget_before(&self, bucket: i64) -> Result<(), Error> {
        let buckets = buckets()?;
        let (old, kept): (Vec<i64>, Vec<i64>) = buckets.iter().partition(|&&b| b < bucket);
        if old.is_empty() {
            return Ok(());
        }
        for b in old {
            let count = index_count(b)?;
            for chunk in 0..count.div_ceil(CHUNK_KEYS) {
                let chunk_key = chunk_entry(b, chunk);
                for key in keys_of(&state::get(&chunk_key).unwrap_or_default())? {
                    let last_key = entry(b'k', key);
                    // Forwarded again in a later bucket: indexed there, kept.
                    let seen = state::get_i64(&last_key)?;
                    if seen.is_some_and(|t| t.div_euclid(self.window_ms) == b) {
                        state::delete(&last_key);
                    }
                }
                state::delete(&chunk_key);
            }
            state::delete(entry(b'n', &b.to_be_bytes()));
        }
        put_buckets(&kept)
    }
}

/// Adds `key` to `bucket`'s index (and the bucket to the list when it is its first key).
fn index(bucket: i64, key: &[u8]) -> Result<(), Error> {
    let count = index_count(bucket)?;
    if count == 0 {
        let mut buckets = buckets()?;
        if let Err(at) = buckets.binary_search(&bucket) {
            buckets.insert(at, bucket);
            put_buckets(&buckets)?;
        }
    }
    let chunk_key = chunk_entry(bucket, count / CHUNK_KEYS);
    let mut chunk = state::get(&chunk_key).unwrap_or_default();
    chunk.extend_from_slice(&(key.len() as u32).to_le_bytes());
    chunk.extend_from_slice(key);
    state::put(&chunk_key, &chunk)?;
    state::put(entry(b'n', &bucket.to_be_bytes()), (count + 1).to_le_bytes())
}

fn index_count(bucket: i64) -> Result<u32, Error> {
    match state::get(entry(b'n', &bucket.to_be_bytes())) {
        None => Ok(0),
        Some(v) => Ok(u32::from_le_bytes(v.try_into().map_err(|_| Error::new("corrupt index count"))?)),
    }
}

fn buckets() -> Result<Vec<i64>, Error> {
    let list = state::get(b"b").unwrap_or_default();
    if list.len() % 8 != 0 {
        return Err(Error::new("corrupt bucket list"));
    }
    Ok(list.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes"))).collect())
}

fn put_buckets(buckets: &[i64]) -> Result<(), Error> {
    if buckets.is_empty() {
        state::delete(b"b");
        return Ok(());
    }
    state::put(b"b", buckets.iter().flat_map(|b| b.to_le_bytes()).collect::<Vec<u8>>())
}

/// The keys of an index chunk.
fn keys_of(chunk: &[u8]) -> Result<Vec<&[u8]>, Error> {
    let mut keys = Vec::new();
    let mut rest = chunk;
    while !rest.is_empty() {
        let (len, tail) = rest.split_first_chunk::<4>().ok_or_else(|| Error::new("corrupt index chunk"))?;
        let len = u32::from_le_bytes(*len) as usize;
        if tail.len() < len {
            return Err(Error::new("corrupt index chunk"));
        }
        let (key, tail) = tail.split_at(len);
        keys.push(key);
        rest = tail;
    }
    Ok(keys)
}

fn entry(kind: u8, rest: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + rest.len());
    key.push(kind);
    key.extend_from_slice(rest);
    key
}

fn chunk_entry(bucket: i64, chunk: u32) -> Vec<u8> {
    let mut key = entry(b'i', &bucket.to_be_bytes());
    key.extend_from_slice(&chunk.to_be_bytes());
    key
}

runnel_sdk::export_transform!(Dedup);

#[cfg(test)]
mod tests {
    use super::*;
    use runnel_sdk::testing::{Harness, TestRecord};

    fn at(key: &str, timestamp: i64) -> TestRecord {
        TestRecord::new().key(key).value(format!("{key}@{timestamp}")).timestamp(timestamp)
    }

    fn values(written: &[runnel_sdk::testing::Written]) -> Vec<Vec<u8>> {
        written.iter().map(|w| w.value.clone().unwrap()).collect()
    }

    #[test]
    fn repeats_within_the_window_are_dropped_across_batches() {
        let mut harness = Harness::<Dedup>::new(&[("window_ms", "100")], &["out"]).unwrap();
        let first = harness.process(&[at("a", 1_000), at("b", 1_000), at("a", 1_050)]).unwrap();
        assert_eq!(values(&first), [b"a@1000".to_vec(), b"b@1000".to_vec()]);
        let second = harness.process(&[at("a", 1_100), at("a", 1_101), TestRecord::new().value("keyless")]).unwrap();
        assert_eq!(
            values(&second),
            [b"a@1101".to_vec(), b"keyless".to_vec()],
            "1100 is within 100 ms of 1000, 1101 is not"
        );
    }

    #[test]
    fn keys_are_forgotten_three_buckets_later_unless_forwarded_again() {
        let mut harness = Harness::<Dedup>::new(&[("window_ms", "100")], &["out"]).unwrap();
        // Bucket 10 (1000..1100): a and b. a again at 1150 (bucket 11, more than a window on).
        harness.process(&[at("a", 1_010), at("b", 1_020)]).unwrap();
        assert_eq!(values(&harness.process(&[at("a", 1_150)]).unwrap()), [b"a@1150".to_vec()]);
        harness.process(&[at("c", 1_200)]).unwrap();
        assert!(harness.state_get(entry(b'k', b"b")).is_some(), "bucket 12 does not forget bucket 10");
        // Bucket 13 forgets bucket 10: b (last forwarded 1020), not a (1150, indexed in 11).
        harness.process(&[at("d", 1_300)]).unwrap();
        assert_eq!(harness.state_get(entry(b'k', b"b")), None);
        assert_eq!(harness.state_get(entry(b'k', b"a")), Some(1_150i64.to_le_bytes().to_vec()));
        assert_eq!(harness.state_get(chunk_entry(10, 0)), None, "bucket 10's index is gone");
        assert_eq!(harness.state_get(entry(b'n', &10i64.to_be_bytes())), None);
        let listed: Vec<u8> = [11i64, 12, 13].iter().flat_map(|b| b.to_le_bytes()).collect();
        assert_eq!(harness.state_get(b"b"), Some(listed));
        // a is still remembered: 1240 is within 100 ms of 1150.
        assert_eq!(values(&harness.process(&[at("a", 1_240), at("b", 1_240)]).unwrap()), [b"b@1240".to_vec()]);
    }

    #[test]
    fn a_late_record_within_a_window_of_the_newest_is_still_dropped() {
        // a@1099 forwarded; c@1200 two buckets on; a@1199 is 100 ms after a@1099 (within the
        // window) and 1 ms behind the newest record: dropped, not forwarded again because its
        // key was forgotten too early.
        let mut harness = Harness::<Dedup>::new(&[("window_ms", "100")], &["out"]).unwrap();
        let written = harness.process(&[at("a", 1_099), at("c", 1_200), at("a", 1_199)]).unwrap();
        assert_eq!(values(&written), [b"a@1099".to_vec(), b"c@1200".to_vec()]);
    }

    #[test]
    fn the_state_stays_bounded_over_many_windows_of_new_keys() {
        // 100 windows of 1,000 new keys each (more than one chunk per bucket): the state
        // holds at most about four buckets' worth of keys, not 100,000.
        let mut harness = Harness::<Dedup>::new(&[("window_ms", "1000")], &["out"]).unwrap().state_bytes_max(1 << 20);
        for window in 0..100i64 {
            let batch: Vec<TestRecord> = (0..1_000).map(|i| at(&format!("{window}-{i}"), window * 1_000 + i)).collect();
            let written = harness.process(&batch).unwrap();
            assert_eq!(written.len(), 1_000, "new keys are all forwarded");
            let keys = harness.state().iter().filter(|(k, _)| k[0] == b'k').count();
            assert!(keys <= 4_000, "window {window}: {keys} keys remembered");
        }
        // Repeats of the last window are still dropped.
        let repeats: Vec<TestRecord> = (0..10).map(|i| at(&format!("99-{i}"), 99_500)).collect();
        assert!(harness.process(&repeats).unwrap().is_empty());
    }

    #[test]
    fn a_bad_window_fails_init() {
        assert!(Harness::<Dedup>::new(&[("window_ms", "0")], &["out"]).is_err());
        assert!(Harness::<Dedup>::new(&[("window_ms", "soon")], &["out"]).is_err());
    }
}
