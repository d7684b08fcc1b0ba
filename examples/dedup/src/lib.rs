//! Stateful transform: drops a record whose key was already seen within a window, forwarding
//! the rest unchanged (retries of an upstream producer, at-least-once sources).
//!
//! Parameters: `window_ms` (default 3600000, one hour), measured on record timestamps. A record
//! is forwarded when its key was never seen, or last forwarded more than `window_ms` before
//! this record's timestamp; keyless records are always forwarded. The time each key was last
//! forwarded lives in the keyed state (the key and 8 bytes), so duplicates stay dropped across
//! crashes and leader moves. Keys are never forgotten on their own: the deployment's
//! `state_bytes_max` bounds the state, and a batch that would pass it fails (error policy).

use runnel_sdk::{state, Config, Error, Output, Record, Transform};

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
        if let Some(seen) = state::get_i64(key)? {
            if now.saturating_sub(seen) <= self.window_ms {
                return Ok(());
            }
        }
        state::put_i64(key, now)?;
        out.forward(record);
        Ok(())
    }
}

runnel_sdk::export_transform!(Dedup);

#[cfg(test)]
mod tests {
    use super::*;
    use runnel_sdk::testing::{Harness, TestRecord};

    fn at(key: &str, timestamp: i64) -> TestRecord {
        TestRecord::new().key(key).value(format!("{key}@{timestamp}")).timestamp(timestamp)
    }

    #[test]
    fn repeats_within_the_window_are_dropped_across_batches() {
        let mut harness = Harness::<Dedup>::new(&[("window_ms", "100")], &["out"]).unwrap();
        let first = harness.process(&[at("a", 1_000), at("b", 1_000), at("a", 1_050)]).unwrap();
        let values: Vec<_> = first.iter().map(|w| w.value.clone().unwrap()).collect();
        assert_eq!(values, [b"a@1000".to_vec(), b"b@1000".to_vec()]);
        let second = harness.process(&[at("a", 1_100), at("a", 1_101), TestRecord::new().value("keyless")]).unwrap();
        let values: Vec<_> = second.iter().map(|w| w.value.clone().unwrap()).collect();
        assert_eq!(values, [b"a@1101".to_vec(), b"keyless".to_vec()], "1100 is within 100 ms of 1000, 1101 is not");
    }

    #[test]
    fn a_bad_window_fails_init() {
        assert!(Harness::<Dedup>::new(&[("window_ms", "0")], &["out"]).is_err());
        assert!(Harness::<Dedup>::new(&[("window_ms", "soon")], &["out"]).is_err());
    }
}
