//! Benchmark guest: the identity transform plus 2 MiB of incompressible static data, so the
//! component is over 2 MiB and deploy-to-first-output can be measured for a module of
//! realistic size (compile time and artifact size grow with it; see
//! broker/examples/transform_bench.rs). `init` passes the data through `black_box`, so neither
//! the compiler nor the linker can drop it.

use runnel_sdk::{Config, Error, Output, Record, Transform};

/// Written by build.rs: fixed-seed xorshift output, 2 MiB.
static BLOB: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/blob.bin"));

/// Forwards each input record to the first output topic.
pub struct Big;

impl Transform for Big {
    fn init(_config: &Config) -> Result<Self, Error> {
        // The slice escapes into black_box, so its contents must exist in the data segment.
        let blob = core::hint::black_box(BLOB);
        core::hint::black_box(blob.first().copied().unwrap_or(0) ^ blob.last().copied().unwrap_or(0));
        Ok(Big)
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Output<'_>) -> Result<(), Error> {
        out.forward(record);
        Ok(())
    }
}

runnel_sdk::export_transform!(Big);
