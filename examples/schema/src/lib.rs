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

use runnel_sdk::{Config, Error, Record, Validator};
use serde_json::Value;

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

    fn of(value: &Value) -> Kind {
        match value {
            Value::String(_) => Kind::String,
            Value::Number(n) if n.is_i64() || n.is_u64() => Kind::Integer,
            Value::Number(_) => Kind::Number,
            Value::Bool(_) => Kind::Boolean,
            Value::Object(_) => Kind::Object,
            Value::Array(_) => Kind::Array,
            Value::Null => Kind::Null,
        }
    }

    fn admits(self, value: &Value) -> bool {
        let actual = Kind::of(value);
        actual == self || (self == Kind::Number && actual == Kind::Integer)
    }
}

/// A dotted field path, kept both split (to walk) and whole (for messages).
struct Field {
    name: String,
    path: Vec<String>,
}

impl Field {
    fn new(name: &str) -> Result<Field, Error> {
        let name = name.trim();
        if name.is_empty() || name.split('.').any(str::is_empty) {
            return Err(Error::new(format_args!("empty field name in `{name}`")));
        }
        Ok(Field { name: name.to_string(), path: name.split('.').map(str::to_string).collect() })
    }

    fn find<'v>(&self, doc: &'v Value) -> Option<&'v Value> {
        self.path.iter().try_fold(doc, |value, part| value.get(part))
    }
}

/// The validator; see the crate docs for its parameters.
pub struct Schema {
    required: Vec<Field>,
    types: Vec<(Field, Kind)>,
    allow_null_value: bool,
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
        let required = list("required")
            .iter()
            .map(|f| Field::new(f))
            .collect::<Result<_, _>>()
            .map_err(|e| e.context("required"))?;
        let types = list("types")
            .iter()
            .map(|pair| {
                let (field, kind) = pair
                    .split_once(':')
                    .ok_or_else(|| Error::new(format_args!("parameter `types`: `{pair}` is not field:type")))?;
                Ok((Field::new(field)?, Kind::parse(kind.trim())?))
            })
            .collect::<Result<_, Error>>()?;
        Ok(Schema { required, types, allow_null_value: config.parse_or("allow_null_value", false)? })
    }

    fn validate(&mut self, record: &Record<'_>) -> Result<(), Error> {
        let Some(value) = record.value() else {
            return if self.allow_null_value { Ok(()) } else { Err(Error::new("the value is null")) };
        };
        let doc: Value =
            serde_json::from_slice(value).map_err(|e| Error::new(format_args!("the value is not JSON: {e}")))?;
        if !doc.is_object() {
            return Err(Error::new(format_args!("the value is a JSON {}, not an object", Kind::of(&doc).name())));
        }
        for field in &self.required {
            if field.find(&doc).is_none() {
                return Err(Error::new(format_args!("missing required field `{}`", field.name)));
            }
        }
        for (field, kind) in &self.types {
            if let Some(found) = field.find(&doc) {
                if !kind.admits(found) {
                    return Err(Error::new(format_args!(
                        "field `{}` is a {}, expected {}",
                        field.name,
                        Kind::of(found).name(),
                        kind.name()
                    )));
                }
            }
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
