//! Schema validator: refuses produced records whose value is not a JSON object with the
//! required fields of the right types (a validator, run on the partition leader before a batch
//! is appended; a refused batch answers the producer INVALID_RECORD naming each bad record).
//!
//! Parameters:
//! - `required`: comma-separated fields every value must have (dotted paths such as
//!   `customer.id` reach into nested objects);
//! - `types`: comma-separated `field:type` pairs, `type` one of `string`, `number`, `integer`,
//!   `boolean`, `object`, `array`, `null`; a field listed here must have that type when present
//!   (list it in `required` as well to require it);
//! - `allow_null_value`: `true` lets null values (tombstones) through (default `false`).
//!
//! Example: `required=id,amount` and `types=id:string,amount:number,tags:array`.
//!
//! The value is scanned, not built: one pass of a strict JSON scanner (`scan.rs`) checks the
//! syntax and, matching keys against the rules as it goes, the fields the rules name; nothing is
//! allocated per record (measured in WASM on ~83 B orders: see `runtime/examples/guest_bench.rs`).
//! It reads JSON as serde_json does (the tests compare the two on generated text).

mod scan;

use runnel_sdk::{Config, Error, Record, Validator};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    String,
    Number,
    Integer,
    Boolean,
    Object,
    Array,
    Null,
}

impl Kind {
    fn parse(text: &str) -> Result<Kind, Error> {
        Ok(match text {
            "string" => Kind::String,
            "number" => Kind::Number,
            "integer" => Kind::Integer,
            "boolean" => Kind::Boolean,
            "object" => Kind::Object,
            "array" => Kind::Array,
            "null" => Kind::Null,
            other => {
                return Err(Error::new(format_args!(
                    "parameter `types`: unknown type `{other}` (expected string, number, integer, boolean, object, \
                     array or null)"
                )))
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Number => "number",
            Kind::Integer => "integer",
            Kind::Boolean => "boolean",
            Kind::Object => "object",
            Kind::Array => "array",
            Kind::Null => "null",
        }
    }

    fn admits(self, actual: Kind) -> bool {
        actual == self || (self == Kind::Number && actual == Kind::Integer)
    }
}

/// One checked field: a dotted path, whether it must be present, and the type it must have.
struct Rule {
    name: String,
    path: Vec<String>,
    required: bool,
    kind: Option<Kind>,
}

/// Rules at most (each is a bit of the masks the walk passes down).
const RULES_MAX: usize = 64;

/// The validator; see the crate docs for its parameters.
pub struct Schema {
    rules: Vec<Rule>,
    allow_null_value: bool,
}

impl Schema {
    fn rule(&mut self, name: &str) -> Result<&mut Rule, Error> {
        let name = name.trim();
        if name.is_empty() || name.split('.').any(str::is_empty) {
            return Err(Error::new(format_args!("empty field name in `{name}`")));
        }
        if let Some(at) = self.rules.iter().position(|r| r.name == name) {
            return Ok(&mut self.rules[at]);
        }
        if self.rules.len() == RULES_MAX {
            return Err(Error::new(format_args!("at most {RULES_MAX} fields can be checked")));
        }
        let path = name.split('.').map(str::to_string).collect();
        self.rules.push(Rule { name: name.to_string(), path, required: false, kind: None });
        Ok(self.rules.last_mut().expect("just pushed"))
    }
}

impl Validator for Schema {
    fn init(config: &Config) -> Result<Self, Error> {
        let list = |name: &str| -> Vec<String> {
            config
                .get(name)
                .unwrap_or("")
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        };
        let mut schema = Schema { rules: Vec::new(), allow_null_value: config.parse_or("allow_null_value", false)? };
        for field in list("required") {
            schema.rule(&field).map_err(|e| e.context("parameter `required`"))?.required = true;
        }
        for pair in list("types") {
            let (field, kind) = pair
                .split_once(':')
                .ok_or_else(|| Error::new(format_args!("parameter `types`: `{pair}` is not field:type")))?;
            let kind = Kind::parse(kind.trim())?;
            schema.rule(field).map_err(|e| e.context("parameter `types`"))?.kind = Some(kind);
        }
        Ok(schema)
    }

    fn validate(&mut self, record: &Record<'_>) -> Result<(), Error> {
        let Some(value) = record.value() else {
            return if self.allow_null_value { Ok(()) } else { Err(Error::new("the value is null")) };
        };
        let all = if self.rules.len() == RULES_MAX { u64::MAX } else { (1u64 << self.rules.len()) - 1 };
        let mut scanner = scan::Scanner::new(value, &self.rules);
        let kind = scanner.document(all).map_err(|e| Error::new(format_args!("the value is not JSON: {e}")))?;
        let found = scanner.found;
        if kind != Kind::Object {
            return Err(Error::new(format_args!("the value is a JSON {}, not an object", kind.name())));
        }
        if let Some(missing) = self.rules.iter().enumerate().find(|(i, r)| r.required && found.present & (1 << i) == 0)
        {
            return Err(Error::new(format_args!("missing required field `{}`", missing.1.name)));
        }
        if let Some((i, actual)) = found.mismatch {
            let rule = &self.rules[i];
            return Err(Error::new(format_args!(
                "field `{}` is a {}, expected {}",
                rule.name,
                actual.name(),
                rule.kind.map_or("?", Kind::name)
            )));
        }
        Ok(())
    }
}

runnel_sdk::export_validator!(Schema);

#[cfg(test)]
mod tests {
    use runnel_sdk::testing::{TestRecord, ValidatorHarness};

    use super::*;

    fn orders() -> ValidatorHarness<Schema> {
        ValidatorHarness::new(&[
            ("required", "id, amount,customer.id"),
            ("types", "id:string,amount:number,qty:integer,tags:array,customer:object"),
        ])
        .unwrap()
    }

    /// Values with the required fields of the right types pass; integers count as numbers.
    #[test]
    fn well_formed_orders_pass() {
        let ok = [
            TestRecord::new().value(r#"{"id":"a","amount":1.5,"customer":{"id":7}}"#),
            TestRecord::new().value(r#"{"id":"b","amount":2,"qty":3,"tags":[],"customer":{"id":"x"},"extra":null}"#),
        ];
        assert_eq!(orders().validate(&ok), Ok(()));
    }

    /// Each bad record is named by its index with the reason; the message leads with the first.
    #[test]
    fn bad_records_are_named_with_the_reason() {
        let batch = [
            TestRecord::new().value(r#"{"id":"a","amount":1,"customer":{"id":1}}"#),
            TestRecord::new().value(r#"{"id":"a","customer":{"id":1}}"#),
            TestRecord::new().value("not json"),
            TestRecord::new().value(r#"{"id":5,"amount":1,"customer":{"id":1}}"#),
            TestRecord::new().value(r#"{"id":"a","amount":1,"qty":1.5,"customer":{"id":1}}"#),
            TestRecord::new().value("[1,2]"),
            TestRecord::new().value(r#"{"id":"a","amount":1,"customer":{}}"#),
            TestRecord::new(),
        ];
        let rejection = orders().validate(&batch).unwrap_err();
        let reasons: Vec<(u32, &str)> = rejection.records.iter().map(|e| (e.index, e.message.as_str())).collect();
        assert_eq!(reasons[0], (1, "missing required field `amount`"));
        assert!(reasons[1].0 == 2 && reasons[1].1.starts_with("the value is not JSON"), "{reasons:?}");
        assert_eq!(reasons[2], (3, "field `id` is a integer, expected string"));
        assert_eq!(reasons[3], (4, "field `qty` is a number, expected integer"));
        assert_eq!(reasons[4], (5, "the value is a JSON array, not an object"));
        assert_eq!(reasons[5], (6, "missing required field `customer.id`"));
        assert_eq!(reasons[6], (7, "the value is null"));
        assert_eq!(rejection.message, "record 1: missing required field `amount` (and 6 more records refused)");
    }

    /// Bad parameters fail init with a message naming them; null values pass when allowed.
    #[test]
    fn parameters_are_checked() {
        assert!(ValidatorHarness::<Schema>::new(&[("types", "id:text")]).is_err());
        assert!(ValidatorHarness::<Schema>::new(&[("types", "id")]).is_err());
        assert!(ValidatorHarness::<Schema>::new(&[("required", "a..b")]).is_err());
        let mut tombstones = ValidatorHarness::<Schema>::new(&[("allow_null_value", "true")]).unwrap();
        assert_eq!(tombstones.validate(&[TestRecord::new().key("k")]), Ok(()));
    }
}
