//! Hostile test guest: `process` executes `unreachable` (a wasm trap). The host must report a
//! trap, poison the instance and keep running.
//!
//! With the parameter `every` = N it forwards records (as the identity example does) and traps
//! at the N-th record an instance processes: under the retry policy the host retries that batch
//! on a fresh instance, which gets N-1 records further before it traps in turn.

use runnel_sdk::{Config, Error, Output, Record, Transform};

pub struct Trap {
    every: Option<u64>,
    processed: u64,
}

impl Transform for Trap {
    fn init(config: &Config) -> Result<Self, Error> {
        Ok(Trap { every: config.parse::<u64>("every")?.filter(|n| *n > 0), processed: 0 })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Output<'_>) -> Result<(), Error> {
        self.processed += 1;
        if self.every.is_some_and(|every| self.processed % every != 0) {
            out.forward(record);
            return Ok(());
        }
        #[cfg(target_arch = "wasm32")]
        core::arch::wasm32::unreachable();
        #[cfg(not(target_arch = "wasm32"))]
        std::process::abort();
    }
}

runnel_sdk::export_transform!(Trap);
