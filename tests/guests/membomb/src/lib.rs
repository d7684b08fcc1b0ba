//! Hostile test guest: `process` allocates and touches memory until an allocation is refused
//! (then Rust aborts, a trap). The host must cap the instance's memory and survive it.

use std::sync::Mutex;

use runnel_sdk::{Config, Error, Output, Record, Transform};

/// Kept alive in a static so nothing can be freed or optimized out.
static HOARD: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

pub struct MemBomb;

impl Transform for MemBomb {
    fn init(_: &Config) -> Result<Self, Error> {
        Ok(MemBomb)
    }

    fn process(&mut self, _: &Record<'_>, _: &mut Output<'_>) -> Result<(), Error> {
        let mut hoard = HOARD.lock().map_err(|_| Error::new("poisoned"))?;
        loop {
            let mut chunk = vec![0u8; 1 << 20];
            // Touch every page so the memory is really committed.
            for page in chunk.chunks_mut(4096) {
                page[0] = core::hint::black_box(1);
            }
            hoard.push(core::hint::black_box(chunk));
        }
    }
}

runnel_sdk::export_transform!(MemBomb);
