//! Hostile test guest: `process` executes `unreachable` (a wasm trap). The host must report a
//! trap, poison the instance and keep running.

use runnel_sdk::{Config, Error, Output, Record, Transform};

pub struct Trap;

impl Transform for Trap {
    fn init(_: &Config) -> Result<Self, Error> {
        Ok(Trap)
    }

    fn process(&mut self, _: &Record<'_>, _: &mut Output<'_>) -> Result<(), Error> {
        #[cfg(target_arch = "wasm32")]
        core::arch::wasm32::unreachable();
        #[cfg(not(target_arch = "wasm32"))]
        std::process::abort();
    }
}

runnel_sdk::export_transform!(Trap);
