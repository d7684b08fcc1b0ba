//! Identity transform: copies every record (key, value, headers, timestamp) unchanged to output
//! topic 0. It is the baseline of the transform benchmark: what remains is the cost of the host,
//! the boundary and the SDK.

use runnel_sdk::{Config, Error, Output, Record, Transform};

/// Forwards each input record to the first output topic.
pub struct Identity;

impl Transform for Identity {
    fn init(_config: &Config) -> Result<Self, Error> {
        Ok(Identity)
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Output<'_>) -> Result<(), Error> {
        out.forward(record);
        Ok(())
    }
}

runnel_sdk::export_transform!(Identity);

#[cfg(test)]
mod tests {
    use super::*;
    use runnel_sdk::testing::{Harness, TestRecord};

    /// Every field of every record, nulls included, comes out as it went in, in order.
    #[test]
    fn copies_records_unchanged() {
        let mut harness = Harness::<Identity>::new(&[], &["out"]).unwrap();
        let input = [
            TestRecord::new().key("k").value("v").header("h", "1").header("n", None::<&[u8]>).timestamp(5),
            TestRecord::new().value(""),
            TestRecord::new().key(&[0xff, 0x00][..]),
        ];
        let written = harness.process(&input).unwrap();
        assert_eq!(written.len(), 3);
        assert_eq!(written[0].key.as_deref(), Some(&b"k"[..]));
        assert_eq!(written[0].value.as_deref(), Some(&b"v"[..]));
        assert_eq!(written[0].headers, [("h".to_string(), Some(b"1".to_vec())), ("n".to_string(), None)]);
        assert_eq!(written[0].timestamp, Some(5));
        assert_eq!((written[1].key.as_deref(), written[1].value.as_deref()), (None, Some(&b""[..])));
        assert_eq!((written[2].key.as_deref(), written[2].value.as_deref()), (Some(&[0xff, 0x00][..]), None));
        assert!(written.iter().all(|w| w.topic == "out" && w.partition.is_none()));
    }
}
