//! Hostile test guest: `process` never returns (a busy loop). The host must interrupt it at the
//! per-call deadline and poison the instance, never hang a worker.

use runnel_sdk::{Config, Error, Output, Record, Transform};

pub struct Spin;

impl Transform for Spin {
    fn init(_: &Config) -> Result<Self, Error> {
        Ok(Spin)
    }

    fn process(&mut self, _: &Record<'_>, _: &mut Output<'_>) -> Result<(), Error> {
        let mut counter = 0u64;
        loop {
            // black_box: the optimizer may not prove the loop side-effect free and drop it.
            counter = core::hint::black_box(counter).wrapping_add(1);
        }
    }
}

runnel_sdk::export_transform!(Spin);
