//! Hostile test guest: `process` panics with "boom" (with `panic = "abort"` the message goes to
//! stderr, then the guest traps). The host must surface the message and survive.

use runnel_sdk::{Config, Error, Output, Record, Transform};

pub struct Panic;

impl Transform for Panic {
    fn init(_: &Config) -> Result<Self, Error> {
        Ok(Panic)
    }

    fn process(&mut self, _: &Record<'_>, _: &mut Output<'_>) -> Result<(), Error> {
        panic!("boom");
    }
}

runnel_sdk::export_transform!(Panic);

#[cfg(test)]
mod tests {
    use super::*;
    use runnel_sdk::testing::{Harness, TestRecord};

    /// The panic message is "boom" (what host tests look for in the trap message/logs).
    #[test]
    #[should_panic(expected = "boom")]
    fn panics_with_boom() {
        let mut harness = Harness::<Panic>::new(&[], &["out"]).unwrap();
        let _ = harness.process(&[TestRecord::new().value("v")]);
    }
}
