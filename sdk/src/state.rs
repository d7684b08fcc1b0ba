//! Keyed state of a stateful transform: byte values under byte keys, scoped to the input
//! partition being processed (each partition has its own), kept by the broker.
//!
//! Changes made while processing a batch belong to it: the broker keeps them exactly when it
//! keeps the batch's outputs (exactly-once: in the same transaction, with the input position
//! and a record per change in the transform's changelog topic
//! `__runnel_transform_<name>_state`), and drops them when the batch fails or its transaction
//! aborts. After a restart, crash or leader move the state is restored from the changelog
//! before the first batch, so it always matches the input position.
//!
//! The state is bounded by the deployment's `state_bytes_max` (keys plus values plus 64 bytes
//! per entry, what the host's maps cost): a [`put`]
//! past it fails and changes nothing. Natively (`cargo test`) the same functions work on an
//! in-memory state that [`crate::testing::Harness`] commits per batch.
//!
//! ```
//! use runnel_sdk::{state, Config, Error, Output, Record, Transform};
//!
//! /// Counts records per key and writes the running count.
//! struct Count;
//!
//! impl Transform for Count {
//!     fn init(_: &Config) -> Result<Self, Error> {
//!         Ok(Count)
//!     }
//!
//!     fn process(&mut self, record: &Record<'_>, out: &mut Output<'_>) -> Result<(), Error> {
//!         let key = record.key().unwrap_or_default();
//!         let count = state::get_u64(key)?.unwrap_or(0) + 1;
//!         state::put_u64(key, count)?;
//!         out.write(key, count.to_string().as_bytes());
//!         Ok(())
//!     }
//! }
//!
//! let mut harness = runnel_sdk::testing::Harness::<Count>::new(&[], &["counts"])?;
//! use runnel_sdk::testing::TestRecord;
//! harness.process(&[TestRecord::new().key("a"), TestRecord::new().key("a")])?;
//! let written = harness.process(&[TestRecord::new().key("a")])?;
//! assert_eq!(written[0].value.as_deref(), Some(&b"3"[..]));
//! assert_eq!(harness.state_get("a"), Some(3u64.to_le_bytes().to_vec()));
//! # Ok::<(), Error>(())
//! ```

use crate::Error;

/// The value under `key`, if any (changes of the current batch included).
pub fn get(key: impl AsRef<[u8]>) -> Option<Vec<u8>> {
    imp::get(key.as_ref())
}

/// Sets `key` to `value`. Fails, changing nothing, when the partition's state would pass the
/// transform's `state_bytes_max`, or the key is empty.
pub fn put(key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<(), Error> {
    imp::put(key.as_ref(), value.as_ref()).map_err(Error::new)
}

/// Removes `key`; nothing if it is absent.
pub fn delete(key: impl AsRef<[u8]>) {
    imp::delete(key.as_ref())
}

/// A `u64` stored by [`put_u64`] (8 bytes, little-endian); an error if the value has another
/// length.
pub fn get_u64(key: impl AsRef<[u8]>) -> Result<Option<u64>, Error> {
    get(key).map(|v| fixed::<8>(&v, "u64").map(u64::from_le_bytes)).transpose()
}

pub fn put_u64(key: impl AsRef<[u8]>, value: u64) -> Result<(), Error> {
    put(key, value.to_le_bytes())
}

/// An `i64` stored by [`put_i64`] (8 bytes, little-endian).
pub fn get_i64(key: impl AsRef<[u8]>) -> Result<Option<i64>, Error> {
    get(key).map(|v| fixed::<8>(&v, "i64").map(i64::from_le_bytes)).transpose()
}

pub fn put_i64(key: impl AsRef<[u8]>, value: i64) -> Result<(), Error> {
    put(key, value.to_le_bytes())
}

/// An `f64` stored by [`put_f64`] (8 bytes, little-endian IEEE 754).
pub fn get_f64(key: impl AsRef<[u8]>) -> Result<Option<f64>, Error> {
    get(key).map(|v| fixed::<8>(&v, "f64").map(f64::from_le_bytes)).transpose()
}

pub fn put_f64(key: impl AsRef<[u8]>, value: f64) -> Result<(), Error> {
    put(key, value.to_le_bytes())
}

/// A UTF-8 string stored by [`put_str`].
pub fn get_str(key: impl AsRef<[u8]>) -> Result<Option<String>, Error> {
    get(key).map(|v| String::from_utf8(v).map_err(|e| Error::new(format_args!("state value: {e}")))).transpose()
}

pub fn put_str(key: impl AsRef<[u8]>, value: &str) -> Result<(), Error> {
    put(key, value.as_bytes())
}

fn fixed<const N: usize>(value: &[u8], what: &str) -> Result<[u8; N], Error> {
    value
        .try_into()
        .map_err(|_| Error::new(format_args!("state value of {} bytes is not a {what} ({N} bytes)", value.len())))
}

#[cfg(target_arch = "wasm32")]
mod imp {
    use crate::bindings::transform::runnel::transform::state;

    pub fn get(key: &[u8]) -> Option<Vec<u8>> {
        state::get(key)
    }

    pub fn put(key: &[u8], value: &[u8]) -> Result<(), String> {
        state::put(key, value)
    }

    pub fn delete(key: &[u8]) {
        state::delete(key)
    }
}

/// Natively: one in-memory state per thread, with the host's batch semantics (see
/// [`crate::testing::Harness`]).
#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod imp {
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    pub(crate) struct NativeState {
        committed: BTreeMap<Vec<u8>, Vec<u8>>,
        batch: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
        pub(crate) limit_bytes: usize,
        /// Keys plus values of `committed`, and of what the current batch sees.
        committed_bytes: usize,
        batch_bytes: usize,
    }

    /// What the broker charges an entry: key, value and 64 bytes (its `ENTRY_OVERHEAD_BYTES`).
    const ENTRY_OVERHEAD_BYTES: usize = 64;

    fn entry(key: &[u8], value: Option<&[u8]>) -> usize {
        value.map_or(0, |v| key.len() + v.len() + ENTRY_OVERHEAD_BYTES)
    }

    impl NativeState {
        fn view(&self, key: &[u8]) -> Option<&[u8]> {
            match self.batch.get(key) {
                Some(change) => change.as_deref(),
                None => self.committed.get(key).map(Vec::as_slice),
            }
        }

        /// An empty, unbounded state (a new harness).
        pub(crate) fn reset(&mut self) {
            *self = NativeState::default();
        }

        /// Sets a committed value directly (a state as a restore would find it).
        pub(crate) fn set_committed(&mut self, key: Vec<u8>, value: Vec<u8>) {
            let (old, new) = (entry(&key, self.committed.get(&key).map(Vec::as_slice)), entry(&key, Some(&value)));
            self.committed_bytes = self.committed_bytes - old + new;
            self.batch_bytes = self.batch_bytes - old + new;
            self.committed.insert(key, value);
        }

        pub(crate) fn committed(&self) -> &BTreeMap<Vec<u8>, Vec<u8>> {
            &self.committed
        }
    }

    impl Default for NativeState {
        fn default() -> Self {
            NativeState {
                committed: BTreeMap::new(),
                batch: BTreeMap::new(),
                limit_bytes: usize::MAX,
                committed_bytes: 0,
                batch_bytes: 0,
            }
        }
    }

    thread_local! {
        static STATE: RefCell<NativeState> = RefCell::new(NativeState::default());
    }

    pub(crate) fn with<R>(f: impl FnOnce(&mut NativeState) -> R) -> R {
        STATE.with(|s| f(&mut s.borrow_mut()))
    }

    /// Keeps (`true`) or drops the current batch's changes.
    pub(crate) fn end_batch(keep: bool) {
        with(|s| {
            for (key, change) in std::mem::take(&mut s.batch) {
                if keep {
                    match change {
                        Some(value) => s.committed.insert(key, value),
                        None => s.committed.remove(&key),
                    };
                }
            }
            if keep {
                s.committed_bytes = s.batch_bytes;
            } else {
                s.batch_bytes = s.committed_bytes;
            }
        })
    }

    pub fn get(key: &[u8]) -> Option<Vec<u8>> {
        with(|s| s.view(key).map(<[u8]>::to_vec))
    }

    pub fn put(key: &[u8], value: &[u8]) -> Result<(), String> {
        with(|s| {
            if key.is_empty() {
                return Err("a state key cannot be empty".to_string());
            }
            let old = entry(key, s.view(key));
            let new = entry(key, Some(value));
            let size = s.batch_bytes - old + new;
            if size > s.limit_bytes && new > old {
                return Err(format!(
                    "state of {size} bytes would pass the transform's state_bytes_max of {}",
                    s.limit_bytes
                ));
            }
            s.batch.insert(key.to_vec(), Some(value.to_vec()));
            s.batch_bytes = size;
            Ok(())
        })
    }

    pub fn delete(key: &[u8]) {
        with(|s| {
            // Keys are never empty: a present entry has a size.
            let old = entry(key, s.view(key));
            if old > 0 {
                s.batch_bytes -= old;
                s.batch.insert(key.to_vec(), None);
            }
        })
    }
}
