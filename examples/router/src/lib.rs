//! Router transform: sends each JSON record to the output topic chosen by one of its fields,
//! optionally re-keying it by another field.
//!
//! Parameters:
//! - `route_field`: the field whose value picks the route (dotted path for nested objects);
//! - `route.<value>=<topic>`: records whose `route_field` is `<value>` go to `<topic>`;
//! - `default`: the topic of records that match no route (without it they are dropped);
//! - `key_field` (optional): the output key becomes this field's value (strings as they are,
//!   other JSON values as JSON text); records without the field keep their key.
//!
//! Every topic named must be an output topic of the deployment; init checks it.

use std::collections::HashMap;

use runnel_sdk::{Config, Error, Output, Record, Transform};
use serde_json::Value;

/// The transform; see the crate docs for its parameters.
pub struct Router {
    route_path: Vec<String>,
    key_path: Option<Vec<String>>,
    /// Route value → output topic index.
    routes: HashMap<String, u32>,
    default: Option<u32>,
    key_buffer: String,
}

fn path(field: &str) -> Vec<String> {
    field.split('.').map(String::from).collect()
}

fn lookup<'v>(doc: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter().try_fold(doc, |v, part| v.get(part))
}

/// A JSON value as route or key text: strings without quotes, the rest as JSON.
fn text<'v>(value: &'v Value, buffer: &'v mut String) -> &'v str {
    match value {
        Value::String(s) => s,
        other => {
            buffer.clear();
            buffer.push_str(&other.to_string());
            buffer
        }
    }
}

impl Transform for Router {
    fn init(config: &Config) -> Result<Self, Error> {
        let topic = |name: &str, param: &str| {
            config.output_topic_index(name).ok_or_else(|| {
                Error::new(format_args!(
                    "parameter `{param}`: `{name}` is not an output topic (outputs: {})",
                    config.output_topics().join(", ")
                ))
            })
        };
        let mut routes = HashMap::new();
        for (value, name) in config.with_prefix("route.") {
            routes.insert(value.to_string(), topic(name, &format!("route.{value}"))?);
        }
        let default = config.get("default").map(|name| topic(name, "default")).transpose()?;
        if routes.is_empty() && default.is_none() {
            return Err(Error::new("no routes: set `route.<value>=<topic>` parameters and/or `default`"));
        }
        Ok(Router {
            route_path: path(config.require("route_field")?),
            key_path: config.get("key_field").map(path),
            routes,
            default,
            key_buffer: String::new(),
        })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Output<'_>) -> Result<(), Error> {
        let doc: Option<Value> = record.value().and_then(|v| serde_json::from_slice(v).ok());
        let mut route_buffer = String::new();
        let routed = doc
            .as_ref()
            .and_then(|d| lookup(d, &self.route_path))
            .and_then(|v| self.routes.get(text(v, &mut route_buffer)).copied());
        let Some(topic) = routed.or(self.default) else { return Ok(()) };
        let new_key = match (&doc, &self.key_path) {
            (Some(d), Some(path)) => lookup(d, path),
            _ => None,
        };
        let builder = out.record().topic_index(topic).value(record.value()).headers_from(record);
        let builder = match new_key {
            Some(k) => builder.key(text(k, &mut self.key_buffer)),
            None => builder.key(record.key()),
        };
        builder.send()
    }
}

runnel_sdk::export_transform!(Router);

#[cfg(test)]
mod tests {
    use super::*;
    use runnel_sdk::testing::{Harness, TestRecord};

    const OUTPUTS: [&str; 3] = ["orders-eu", "orders-us", "orders-other"];

    fn harness(extra: &[(&str, &str)]) -> Harness<Router> {
        let mut params = vec![("route_field", "region"), ("route.eu", "orders-eu"), ("route.us", "orders-us")];
        params.extend_from_slice(extra);
        Harness::<Router>::new(&params, &OUTPUTS).unwrap()
    }

    /// Routes pick the topic; unmatched records go to `default`, or are dropped without it.
    #[test]
    fn routes_and_default() {
        let input = [
            TestRecord::new().key("1").value(r#"{"region":"eu"}"#),
            TestRecord::new().key("2").value(r#"{"region":"us"}"#),
            TestRecord::new().key("3").value(r#"{"region":"apac"}"#),
            TestRecord::new().key("4").value("not json"),
            TestRecord::new().key("5"),
        ];
        let written = harness(&[]).process(&input).unwrap();
        let got: Vec<_> = written.iter().map(|w| (w.key_str().unwrap(), w.topic.as_str())).collect();
        assert_eq!(got, [("1", "orders-eu"), ("2", "orders-us")]);

        let written = harness(&[("default", "orders-other")]).process(&input).unwrap();
        let got: Vec<_> = written.iter().map(|w| (w.key_str().unwrap(), w.topic.as_str())).collect();
        assert_eq!(
            got,
            [
                ("1", "orders-eu"),
                ("2", "orders-us"),
                ("3", "orders-other"),
                ("4", "orders-other"),
                ("5", "orders-other")
            ]
        );
    }

    /// `key_field` re-keys (strings as text, numbers as JSON); records without it keep their
    /// key; the value and headers pass unchanged.
    #[test]
    fn rekeying() {
        let mut h = harness(&[("key_field", "customer.id"), ("default", "orders-other")]);
        let written = h
            .process(&[
                TestRecord::new().key("old").value(r#"{"region":"eu","customer":{"id":"c-7"}}"#).header("h", "1"),
                TestRecord::new().key("old").value(r#"{"region":"us","customer":{"id":42}}"#),
                TestRecord::new().key("old").value(r#"{"region":"us"}"#),
            ])
            .unwrap();
        assert_eq!(written[0].key_str(), Some("c-7"));
        assert_eq!(written[0].header("h"), Some(&b"1"[..]));
        assert_eq!(written[0].value_str(), Some(r#"{"region":"eu","customer":{"id":"c-7"}}"#));
        assert_eq!(written[1].key_str(), Some("42"));
        assert_eq!(written[2].key_str(), Some("old"));
    }

    /// Non-string route values match by their JSON text.
    #[test]
    fn numeric_route_values() {
        let mut h = Harness::<Router>::new(&[("route_field", "prio"), ("route.1", "orders-eu")], &OUTPUTS).unwrap();
        let written =
            h.process(&[TestRecord::new().value(r#"{"prio":1}"#), TestRecord::new().value(r#"{"prio":2}"#)]).unwrap();
        assert_eq!(written.len(), 1);
        assert_eq!(written[0].topic, "orders-eu");
    }

    /// Routes to topics that are not outputs, or no routes at all, fail init.
    #[test]
    fn bad_parameters() {
        let err = |p: &[(&str, &str)]| Harness::<Router>::new(p, &OUTPUTS).err().unwrap().message().to_string();
        assert!(err(&[("route_field", "r"), ("route.x", "nope")]).contains("`nope` is not an output topic"));
        assert!(err(&[("route_field", "r"), ("default", "nope")]).contains("`default`"));
        assert!(err(&[("route_field", "r")]).contains("no routes"));
        assert!(err(&[("default", "orders-eu")]).contains("`route_field`"));
    }
}
