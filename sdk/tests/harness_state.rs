//! The native harness's keyed state behaves as the broker's: seeded (restored) entries are
//! charged like any other, and changes made in `init` belong to no batch.

use runnel_sdk::testing::{Harness, TestRecord};
use runnel_sdk::{state, Config, Error, Output, Record, Transform};

/// Counts records per key; `init` writes a marker it should never see again.
struct Count;

impl Transform for Count {
    fn init(_: &Config) -> Result<Self, Error> {
        state::put("from-init", "x")?;
        Ok(Count)
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Output<'_>) -> Result<(), Error> {
        let key = record.key().unwrap_or(b"none");
        let count = state::get_u64(key)?.unwrap_or(0) + 1;
        state::put_u64(key, count)?;
        let seen_init = state::get("from-init").is_some();
        out.write(key, format!("{count} {seen_init}").as_bytes());
        Ok(())
    }
}

#[test]
fn a_seeded_entry_is_charged_its_overhead_and_can_be_replaced() {
    // Seeding charged key + value only while put and delete took back the full charge (64 more):
    // replacing a seeded key underflowed (a panic in debug builds).
    let mut harness = Harness::<Count>::new(&[], &["out"]).unwrap().state_bytes_max(200);
    harness.set_state("a", 5u64.to_le_bytes());
    let written = harness.process(&[TestRecord::new().key("a")]).unwrap();
    assert_eq!(written[0].value.as_deref(), Some(&b"6 false"[..]));
    // 73 bytes for "a" (1 + 8 + 64); a second key of 73 fits in 200, a third does not.
    harness.process(&[TestRecord::new().key("b")]).unwrap();
    let refused = harness.process(&[TestRecord::new().key("c")]).unwrap_err();
    assert!(refused.message().contains("state_bytes_max"), "{refused}");
}

#[test]
fn changes_made_in_init_are_dropped_as_on_the_broker() {
    let mut harness = Harness::<Count>::new(&[], &["out"]).unwrap();
    let written = harness.process(&[TestRecord::new().key("a")]).unwrap();
    assert_eq!(written[0].value.as_deref(), Some(&b"1 false"[..]), "init's put belongs to no batch");
    assert_eq!(harness.state_get("from-init"), None);
}

/// Forwards every record as it came.
struct Forward;

impl Transform for Forward {
    fn init(_: &Config) -> Result<Self, Error> {
        Ok(Forward)
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Output<'_>) -> Result<(), Error> {
        out.forward(record);
        Ok(())
    }
}

#[test]
fn an_input_timestamp_below_minus_one_arrives_as_none_and_forwards() {
    // The log takes any CreateTime; the broker hands a timestamp below -1 to the guest as -1,
    // so forwarding it is a valid output (it stopped the partition on the broker while the
    // harness accepted it).
    let mut harness = Harness::<Forward>::new(&[], &["out"]).unwrap();
    let written = harness.process(&[TestRecord::new().value("v").timestamp(-5)]).unwrap();
    assert_eq!(written[0].timestamp, None);
}
