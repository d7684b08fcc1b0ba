//! Hostile test guest: `init` always fails with "failinit: refusing to start". The host must
//! report the message as an init error and not call `process`.

use runnel_sdk::{Config, Error, Output, Record, Transform};

pub struct FailInit;

impl Transform for FailInit {
    fn init(_: &Config) -> Result<Self, Error> {
        Err(Error::new("failinit: refusing to start"))
    }

    fn process(&mut self, _: &Record<'_>, _: &mut Output<'_>) -> Result<(), Error> {
        Ok(())
    }
}

runnel_sdk::export_transform!(FailInit);

#[cfg(test)]
mod tests {
    use super::*;
    use runnel_sdk::testing::Harness;

    /// init fails with the documented message.
    #[test]
    fn init_fails() {
        let err = Harness::<FailInit>::new(&[], &["out"]).err().unwrap();
        assert_eq!(err.message(), "failinit: refusing to start");
    }
}
