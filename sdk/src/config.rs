//! A transform's deployment parameters and output topics, as `init` receives them.

use core::fmt::Display;
use core::str::FromStr;

use crate::Error;

/// The parameters of a deployment (`--param name=value`) and its output topics.
///
/// ```
/// use runnel_sdk::Config;
///
/// let config = Config::new(
///     vec![("field".into(), "status".into()), ("limit".into(), "10".into())],
///     vec!["errors".into()],
/// );
/// assert_eq!(config.get("field"), Some("status"));
/// assert_eq!(config.require("field").unwrap(), "status");
/// assert!(config.require("missing").is_err());
/// assert_eq!(config.parse::<u32>("limit").unwrap(), Some(10));
/// assert_eq!(config.parse::<u32>("other").unwrap(), None);
/// assert!(config.parse::<u32>("field").is_err()); // "status" is not a number
/// assert_eq!(config.output_topics(), ["errors"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    parameters: Vec<(String, String)>,
    output_topics: Vec<String>,
}

impl Config {
    /// A configuration from parameters and output topic names (index = output topic index).
    pub fn new(parameters: Vec<(String, String)>, output_topics: Vec<String>) -> Self {
        Config { parameters, output_topics }
    }

    /// The value of a parameter; the last one wins when a name repeats.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.parameters.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The value of a parameter the transform cannot do without.
    pub fn require(&self, name: &str) -> Result<&str, Error> {
        self.get(name).ok_or_else(|| Error::new(format_args!("missing required parameter `{name}`")))
    }

    /// A parameter parsed with `FromStr`: `Ok(None)` when absent, an error naming the parameter
    /// when the value does not parse.
    pub fn parse<T>(&self, name: &str) -> Result<Option<T>, Error>
    where
        T: FromStr,
        T::Err: Display,
    {
        match self.get(name) {
            None => Ok(None),
            Some(text) => text
                .parse()
                .map(Some)
                .map_err(|e| Error::new(format_args!("parameter `{name}`: invalid value `{text}`: {e}"))),
        }
    }

    /// A parsed parameter, or `default` when it is absent.
    ///
    /// ```
    /// # use runnel_sdk::Config;
    /// let config = Config::new(vec![("n".into(), "3".into())], vec![]);
    /// assert_eq!(config.parse_or("n", 1u8).unwrap(), 3);
    /// assert_eq!(config.parse_or("m", 1u8).unwrap(), 1);
    /// ```
    pub fn parse_or<T>(&self, name: &str, default: T) -> Result<T, Error>
    where
        T: FromStr,
        T::Err: Display,
    {
        Ok(self.parse(name)?.unwrap_or(default))
    }

    /// All parameters in deployment order.
    pub fn parameters(&self) -> impl Iterator<Item = (&str, &str)> {
        self.parameters.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// The parameters whose name starts with `prefix`, with the prefix removed (for families of
    /// parameters such as `route.<value>=<topic>`).
    ///
    /// ```
    /// # use runnel_sdk::Config;
    /// let config = Config::new(vec![("route.eu".into(), "orders-eu".into())], vec![]);
    /// assert_eq!(config.with_prefix("route.").collect::<Vec<_>>(), [("eu", "orders-eu")]);
    /// ```
    pub fn with_prefix<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.parameters().filter_map(move |(n, v)| n.strip_prefix(prefix).map(|rest| (rest, v)))
    }

    /// The output topic names; a name's position is its index in output records.
    pub fn output_topics(&self) -> &[String] {
        &self.output_topics
    }

    /// The index of an output topic by name.
    pub fn output_topic_index(&self, name: &str) -> Option<u32> {
        self.output_topics.iter().position(|t| t == name).and_then(|i| u32::try_from(i).ok())
    }
}
