//! Hostile test guest: writes 17 MiB of output for every batch (17 records of 1 MiB), over the
//! host's 16 MiB per-batch output limit. The host must reject the batch (output too large).

use runnel_sdk::{Config, Error, Output, Record, Transform};

const CHUNK: usize = 1 << 20;
const CHUNKS: usize = 17;

pub struct Oversized {
    chunk: Vec<u8>,
}

impl Transform for Oversized {
    fn init(_: &Config) -> Result<Self, Error> {
        Ok(Oversized { chunk: vec![b'x'; CHUNK] })
    }

    fn process(&mut self, _: &Record<'_>, _: &mut Output<'_>) -> Result<(), Error> {
        Ok(())
    }

    fn process_batch(&mut self, _: &runnel_sdk::Batch<'_>, out: &mut Output<'_>) -> Result<(), Error> {
        for _ in 0..CHUNKS {
            out.write(None::<&[u8]>, &self.chunk);
        }
        Ok(())
    }
}

runnel_sdk::export_transform!(Oversized);

#[cfg(test)]
mod tests {
    use super::*;
    use runnel_sdk::testing::{Harness, TestRecord};

    /// One batch writes more than 16 MiB.
    #[test]
    fn writes_over_16_mib() {
        let mut harness = Harness::<Oversized>::new(&[], &["out"]).unwrap();
        let written = harness.process(&[TestRecord::new().value("v")]).unwrap();
        let total: usize = written.iter().map(|w| w.value.as_ref().map_or(0, Vec::len)).sum();
        assert!(total > 16 << 20, "{total}");
    }
}
