//! Hostile test guest: writes every record to output topic index 99, which no deployment has.
//! The host must reject the batch as invalid output instead of writing anywhere.

use runnel_sdk::{Config, Error, Output, Record, Transform};

pub struct BadTopic;

impl Transform for BadTopic {
    fn init(_: &Config) -> Result<Self, Error> {
        Ok(BadTopic)
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Output<'_>) -> Result<(), Error> {
        // The SDK's checked API refuses unknown topics; the hidden escape hatch does not.
        out.record().__topic_index_unchecked(99).key(record.key()).value(record.value()).send()
    }
}

runnel_sdk::export_transform!(BadTopic);

#[cfg(test)]
mod tests {
    use super::*;
    use runnel_sdk::testing::{Harness, TestRecord};

    /// The output names topic index 99, which the harness rejects as the host does.
    #[test]
    fn writes_topic_99() {
        let mut harness = Harness::<BadTopic>::new(&[], &["out"]).unwrap();
        let err = harness.process(&[TestRecord::new().value("v")]).unwrap_err();
        assert!(err.message().contains("topic index 99"), "{err}");
    }
}
