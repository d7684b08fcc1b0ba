//! Hostile test guest: `process` sleeps for an hour at a time until an hour has passed. A WASI
//! sleep waits in the host, where the epoch deadline cannot interrupt it; the host makes every
//! such wait end at once, so this guest spins in wasm into its call deadline instead of holding
//! a broker thread for an hour.

use std::time::{Duration, Instant};

use runnel_sdk::{Config, Error, Output, Record, Transform};

pub struct Sleep;

impl Transform for Sleep {
    fn init(_: &Config) -> Result<Self, Error> {
        Ok(Sleep)
    }

    fn process(&mut self, _: &Record<'_>, _: &mut Output<'_>) -> Result<(), Error> {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(3600) {
            std::thread::sleep(Duration::from_secs(3600));
        }
        Ok(())
    }
}

runnel_sdk::export_transform!(Sleep);
