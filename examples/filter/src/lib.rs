//! Filter transform: keeps JSON records whose `field` satisfies `op value`, optionally projected
//! to the `keep` fields, and drops the rest (records that are not JSON objects included).
//!
//! Parameters:
//! - `field`: the field to test; a dotted path (`user.age`) reaches into nested objects;
//! - `op`: `eq`, `ne`, `gt`, `lt`, `ge`, `le`, `contains`, `exists` (default `exists`);
//! - `value`: the operand (not used by `exists`); numbers compare numerically when both sides
//!   are numbers (or numeric strings), as text otherwise; `contains` tests substrings of strings and elements of
//!   arrays;
//! - `keep`: comma-separated top-level fields to keep in the output value (default: the value is
//!   forwarded unchanged); absent fields are left out.

use std::cmp::Ordering;

use runnel_sdk::{log, Config, Error, Output, Record, Transform};
use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Lt,
    Ge,
    Le,
    Contains,
    Exists,
}

impl Op {
    fn parse(text: &str) -> Result<Op, Error> {
        Ok(match text {
            "eq" => Op::Eq,
            "ne" => Op::Ne,
            "gt" => Op::Gt,
            "lt" => Op::Lt,
            "ge" => Op::Ge,
            "le" => Op::Le,
            "contains" => Op::Contains,
            "exists" => Op::Exists,
            other => {
                return Err(Error::new(format_args!(
                    "parameter `op`: unknown operator `{other}` (expected eq, ne, gt, lt, ge, le, contains, exists)"
                )))
            }
        })
    }
}

/// The transform; see the crate docs for its parameters.
pub struct Filter {
    path: Vec<String>,
    op: Op,
    /// The operand as text, and as a number when it is one.
    value: String,
    number: Option<f64>,
    keep: Vec<String>,
    /// Projection buffer reused across records.
    buffer: Vec<u8>,
    warned_invalid: bool,
}

impl Filter {
    /// Whether a record value passes the filter (parsed JSON).
    fn matches(&self, doc: &Value) -> bool {
        let mut field = Some(doc);
        for part in &self.path {
            field = field.and_then(|v| v.get(part));
        }
        let Some(field) = field else { return false };
        match self.op {
            Op::Exists => true,
            Op::Eq => self.compare(field) == Some(Ordering::Equal),
            Op::Ne => self.compare(field) != Some(Ordering::Equal),
            Op::Gt => self.compare(field) == Some(Ordering::Greater),
            Op::Lt => self.compare(field) == Some(Ordering::Less),
            Op::Ge => matches!(self.compare(field), Some(Ordering::Greater | Ordering::Equal)),
            Op::Le => matches!(self.compare(field), Some(Ordering::Less | Ordering::Equal)),
            Op::Contains => match field {
                Value::String(s) => s.contains(&self.value),
                Value::Array(items) => items.iter().any(|item| self.compare(item) == Some(Ordering::Equal)),
                _ => false,
            },
        }
    }

    /// `field` compared with the operand: numerically when both are numbers, else as text.
    fn compare(&self, field: &Value) -> Option<Ordering> {
        match (field, self.number) {
            (Value::Number(n), Some(operand)) => n.as_f64()?.partial_cmp(&operand),
            // Numbers that arrive as strings (`"9"`) still compare as numbers.
            (Value::String(s), Some(operand)) if s.trim().parse::<f64>().is_ok() => {
                s.trim().parse::<f64>().ok()?.partial_cmp(&operand)
            }
            (Value::String(s), _) => Some(s.as_str().cmp(&self.value)),
            (Value::Bool(b), _) => Some(if *b { "true" } else { "false" }.cmp(&self.value)),
            (Value::Null, _) => Some("null".cmp(&self.value)),
            (Value::Number(n), None) => Some(n.to_string().as_str().cmp(&self.value)),
            _ => None,
        }
    }

    /// Writes `{"a":..,"b":..}` with the `keep` fields in parameter order.
    fn project(&mut self, doc: &Value) -> Result<(), Error> {
        self.buffer.clear();
        self.buffer.push(b'{');
        let mut first = true;
        for name in &self.keep {
            if let Some(v) = doc.get(name) {
                if !first {
                    self.buffer.push(b',');
                }
                first = false;
                serde_json::to_writer(&mut self.buffer, name)?;
                self.buffer.push(b':');
                serde_json::to_writer(&mut self.buffer, v)?;
            }
        }
        self.buffer.push(b'}');
        Ok(())
    }
}

impl Transform for Filter {
    fn init(config: &Config) -> Result<Self, Error> {
        let field = config.require("field")?;
        let op = Op::parse(config.get("op").unwrap_or("exists"))?;
        let value = config.get("value").unwrap_or_default().to_string();
        if op != Op::Exists && config.get("value").is_none() {
            return Err(Error::new("missing required parameter `value` (needed by every op but `exists`)"));
        }
        let keep = config
            .get("keep")
            .map(|k| k.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect())
            .unwrap_or_default();
        Ok(Filter {
            path: field.split('.').map(String::from).collect(),
            op,
            number: value.parse().ok(),
            value,
            keep,
            buffer: Vec::new(),
            warned_invalid: false,
        })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Output<'_>) -> Result<(), Error> {
        let Some(bytes) = record.value() else { return Ok(()) };
        let doc: Value = match serde_json::from_slice(bytes) {
            Ok(doc) => doc,
            Err(e) => {
                // Once per instance: a topic of non-JSON records would otherwise flood the log.
                if !self.warned_invalid {
                    self.warned_invalid = true;
                    log::warn!("dropping records that are not JSON (first at offset {}: {e})", record.offset());
                }
                return Ok(());
            }
        };
        if !self.matches(&doc) {
            return Ok(());
        }
        if self.keep.is_empty() {
            out.forward(record);
            return Ok(());
        }
        self.project(&doc)?;
        out.record().key(record.key()).value(&self.buffer).headers_from(record).send()
    }
}

runnel_sdk::export_transform!(Filter);

#[cfg(test)]
mod tests {
    use super::*;
    use runnel_sdk::testing::{Harness, TestRecord};

    const DOCS: [&str; 5] = [
        r#"{"id":1,"status":"ok","age":30,"tags":["a","b"],"user":{"country":"uk"}}"#,
        r#"{"id":2,"status":"error","age":17,"tags":["b"],"user":{"country":"fr"}}"#,
        r#"{"id":3,"status":"okay","age":45.5,"user":{"country":"uk"},"flag":true}"#,
        r#"not json"#,
        r#"{"id":5,"status":null,"age":"9"}"#,
    ];

    /// The ids of DOCS that pass a filter with these parameters.
    fn ids(params: &[(&str, &str)]) -> Vec<i64> {
        let mut harness = Harness::<Filter>::new(params, &["out"]).unwrap();
        let input: Vec<_> = DOCS.iter().map(|d| TestRecord::new().key("k").value(*d)).collect();
        let written = harness.process(&input).unwrap();
        written
            .iter()
            .map(|w| serde_json::from_slice::<Value>(w.value.as_deref().unwrap()).unwrap()["id"].as_i64().unwrap())
            .collect()
    }

    /// Each operator keeps exactly the matching records; non-JSON records are dropped.
    #[test]
    fn operators() {
        assert_eq!(ids(&[("field", "status"), ("op", "eq"), ("value", "ok")]), [1]);
        assert_eq!(ids(&[("field", "status"), ("op", "ne"), ("value", "ok")]), [2, 3, 5]);
        assert_eq!(ids(&[("field", "age"), ("op", "gt"), ("value", "18")]), [1, 3]);
        assert_eq!(ids(&[("field", "age"), ("op", "ge"), ("value", "30")]), [1, 3]);
        assert_eq!(ids(&[("field", "age"), ("op", "lt"), ("value", "30")]), [2, 5]);
        assert_eq!(ids(&[("field", "age"), ("op", "le"), ("value", "30")]), [1, 2, 5]);
        assert_eq!(ids(&[("field", "status"), ("op", "contains"), ("value", "ok")]), [1, 3]);
        assert_eq!(ids(&[("field", "tags"), ("op", "contains"), ("value", "b")]), [1, 2]);
        assert_eq!(ids(&[("field", "flag"), ("op", "exists")]), [3]);
        assert_eq!(ids(&[("field", "flag")]), [3]);
        assert_eq!(ids(&[("field", "user.country"), ("op", "eq"), ("value", "uk")]), [1, 3]);
        assert_eq!(ids(&[("field", "status"), ("op", "eq"), ("value", "null")]), [5]);
        assert_eq!(ids(&[("field", "flag"), ("op", "eq"), ("value", "true")]), [3]);
    }

    /// `keep` projects matching records to the listed fields, in the listed order, keeping
    /// key, headers and timestamp.
    #[test]
    fn projection() {
        let mut harness = Harness::<Filter>::new(&[("field", "id"), ("keep", "status, id,missing")], &["out"]).unwrap();
        let written =
            harness.process(&[TestRecord::new().key("k").value(DOCS[0]).header("h", "v").timestamp(3)]).unwrap();
        assert_eq!(written[0].value_str(), Some(r#"{"status":"ok","id":1}"#));
        assert_eq!(
            (written[0].key_str(), written[0].header("h"), written[0].timestamp),
            (Some("k"), Some(&b"v"[..]), Some(3))
        );
    }

    /// Bad parameters fail init with a message naming them.
    #[test]
    fn bad_parameters() {
        let err = |p: &[(&str, &str)]| Harness::<Filter>::new(p, &["out"]).err().unwrap().message().to_string();
        assert!(err(&[]).contains("`field`"));
        assert!(err(&[("field", "a"), ("op", "like"), ("value", "x")]).contains("like"));
        assert!(err(&[("field", "a"), ("op", "eq")]).contains("`value`"));
    }

    /// A non-JSON record is dropped with a single warning, not an error.
    #[test]
    fn invalid_json_warns_once() {
        let mut harness = Harness::<Filter>::new(&[("field", "a")], &["out"]).unwrap();
        runnel_sdk::testing::take_logs();
        let written = harness.process(&[TestRecord::new().value("x"), TestRecord::new().value("y")]).unwrap();
        assert!(written.is_empty());
        assert_eq!(runnel_sdk::testing::take_logs().len(), 1);
    }
}
