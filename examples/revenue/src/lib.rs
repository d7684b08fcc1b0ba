//! Stateful transform: a running count and sum per key, e.g. revenue per customer from order
//! events (the dashboard a shop keeps up to date from its order stream).
//!
//! Each input value is a JSON object; the record is counted under the value of `key_field`
//! (default `customer`; strings as they are, other JSON values as JSON text) and its
//! `amount_field` (default `amount`, a JSON number) is added to the key's sum. For each input
//! record it writes the key's new totals to output topic 0, keyed by the key:
//! `{"key":"c-17","count":3,"sum":129.5}`. Records that are not JSON objects, or lack either
//! field, fail the batch with the reason (the deployment's error policy decides what then).
//!
//! State is scoped to the input partition, so the totals of a key are whole only when all its
//! records reach one partition: key the input by the customer (the default partitioner then
//! sends each customer's orders to one partition); orders keyed otherwise get partial totals
//! per partition under the same output key.
//!
//! The totals live in the transform's keyed state (16 bytes per key: the count as a u64 and the
//! sum as an f64), which the broker commits with the outputs: after a crash or a leader move
//! the totals continue exactly where the committed outputs left them.

use runnel_sdk::{state, Config, Error, Output, Record, Transform};
use serde_json::Value;

pub struct Revenue {
    key_field: String,
    amount_field: String,
    key_buffer: String,
}

/// A key's totals as stored: count (u64 LE) then sum (f64 LE).
fn decode(stored: Option<Vec<u8>>) -> Result<(u64, f64), Error> {
    let Some(bytes) = stored else { return Ok((0, 0.0)) };
    let bytes: [u8; 16] =
        bytes.try_into().map_err(|v: Vec<u8>| Error::new(format_args!("stored totals of {} bytes", v.len())))?;
    let (count, sum) = bytes.split_at(8);
    Ok((
        u64::from_le_bytes(count.try_into().unwrap_or_default()),
        f64::from_le_bytes(sum.try_into().unwrap_or_default()),
    ))
}

fn encode(count: u64, sum: f64) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&count.to_le_bytes());
    bytes[8..].copy_from_slice(&sum.to_le_bytes());
    bytes
}

impl Transform for Revenue {
    fn init(config: &Config) -> Result<Self, Error> {
        Ok(Revenue {
            key_field: config.get("key_field").unwrap_or("customer").to_string(),
            amount_field: config.get("amount_field").unwrap_or("amount").to_string(),
            key_buffer: String::new(),
        })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Output<'_>) -> Result<(), Error> {
        let at = record.offset();
        let doc: Value = serde_json::from_slice(record.value().unwrap_or_default())
            .map_err(|e| Error::new(format_args!("offset {at}: not JSON: {e}")))?;
        let key = match doc.get(&self.key_field) {
            Some(Value::String(s)) => s.as_str(),
            Some(other) => {
                self.key_buffer = other.to_string();
                self.key_buffer.as_str()
            }
            None => return Err(Error::new(format_args!("offset {at}: no field `{}`", self.key_field))),
        };
        let amount = doc
            .get(&self.amount_field)
            .and_then(Value::as_f64)
            .ok_or_else(|| Error::new(format_args!("offset {at}: `{}` is not a number", self.amount_field)))?;
        let (count, sum) = decode(state::get(key))?;
        let (count, sum) = (count + 1, sum + amount);
        state::put(key, encode(count, sum))?;
        let totals = serde_json::json!({ "key": key, "count": count, "sum": sum });
        out.write(key.as_bytes(), totals.to_string().as_bytes());
        Ok(())
    }
}

runnel_sdk::export_transform!(Revenue);

#[cfg(test)]
mod tests {
    use super::*;
    use runnel_sdk::testing::{Harness, TestRecord};

    fn order(customer: &str, amount: f64) -> TestRecord {
        TestRecord::new().value(format!(r#"{{"customer":"{customer}","amount":{amount},"id":1}}"#))
    }

    fn totals(value: &Option<Vec<u8>>) -> Value {
        serde_json::from_slice(value.as_deref().unwrap_or_default()).unwrap()
    }

    #[test]
    fn totals_accumulate_per_key_across_batches() {
        let mut harness = Harness::<Revenue>::new(&[], &["revenue"]).unwrap();
        harness.process(&[order("a", 10.0), order("b", 1.5)]).unwrap();
        let written = harness.process(&[order("a", 2.5)]).unwrap();
        assert_eq!(written[0].key.as_deref(), Some(&b"a"[..]));
        assert_eq!(totals(&written[0].value), serde_json::json!({"key": "a", "count": 2, "sum": 12.5}));
        assert_eq!(decode(harness.state_get("b")).unwrap(), (1, 1.5));
    }

    #[test]
    fn a_failed_batch_leaves_the_totals_as_they_were() {
        let mut harness = Harness::<Revenue>::new(&[], &["revenue"]).unwrap();
        harness.process(&[order("a", 10.0)]).unwrap();
        let bad = TestRecord::new().value(r#"{"customer":"a"}"#);
        assert!(harness.process(&[order("a", 5.0), bad]).is_err());
        assert_eq!(decode(harness.state_get("a")).unwrap(), (1, 10.0), "the failed batch's +5 is gone");
    }

    #[test]
    fn key_and_amount_fields_are_parameters_and_the_state_is_bounded() {
        let params = [("key_field", "region"), ("amount_field", "total")];
        let mut harness = Harness::<Revenue>::new(&params, &["out"]).unwrap().state_bytes_max(104);
        let written = harness.process(&[TestRecord::new().value(r#"{"region":7,"total":3}"#)]).unwrap();
        assert_eq!(totals(&written[0].value)["key"], "7");
        let long = TestRecord::new().value(r#"{"region":"a-region-name-too-long-to-fit","total":1}"#);
        let error = harness.process(&[long]).unwrap_err();
        assert!(error.message().contains("state_bytes_max"), "{error}");
    }
}
