//! Per-partition log configuration under Kafka's topic config names and defaults.

use std::collections::BTreeMap;

use super::batch::{Compression, TimestampType};

/// `cleanup.policy`: delete old segments, compact by key, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    pub delete: bool,
    pub compact: bool,
}

impl CleanupPolicy {
    pub const DELETE: CleanupPolicy = CleanupPolicy { delete: true, compact: false };
    pub const COMPACT: CleanupPolicy = CleanupPolicy { delete: false, compact: true };

    fn parse(value: &str) -> Option<CleanupPolicy> {
        let mut policy = CleanupPolicy { delete: false, compact: false };
        for part in value.split(',').map(str::trim) {
            match part {
                "delete" => policy.delete = true,
                "compact" => policy.compact = true,
                _ => return None,
            }
        }
        (policy.delete || policy.compact).then_some(policy)
    }

    fn name(self) -> &'static str {
        match (self.compact, self.delete) {
            (true, true) => "compact,delete",
            (true, false) => "compact",
            _ => "delete",
        }
    }
}

/// `compression.type` of a topic: keep what the producer sent, or recompress to one codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicCompression {
    Producer,
    Uncompressed,
    Codec(Compression),
}

/// A topic config value that is unknown or out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown topic config {name}")]
    Unknown { name: String },
    #[error("invalid value {value:?} for config {name}: {reason}")]
    Invalid { name: String, value: String, reason: &'static str },
}

/// Settings of one partition log. Field names are Kafka's config names with `.` → `_`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// `segment.bytes`: roll the active segment when the next batch would pass this size.
    pub segment_bytes: u32,
    /// `segment.ms`: roll the active segment when it is this old.
    pub segment_ms: i64,
    /// `segment.index.bytes`: preallocated size of each index file.
    pub segment_index_bytes: u32,
    /// `index.interval.bytes`: log bytes between two offset index entries.
    pub index_interval_bytes: u32,
    /// `retention.ms`: delete closed segments whose newest timestamp is older; -1 keeps all.
    pub retention_ms: i64,
    /// `retention.bytes`: delete oldest closed segments while the log is larger; -1 keeps all.
    pub retention_bytes: i64,
    pub cleanup_policy: CleanupPolicy,
    /// `delete.retention.ms`: how long tombstones survive compaction.
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms`: records younger than this are never compacted away.
    pub min_compaction_lag_ms: i64,
    /// `max.message.bytes`: the largest batch a producer may append.
    pub max_message_bytes: u32,
    /// `flush.messages`: fsync after this many appended records.
    pub flush_messages: i64,
    /// `flush.ms`: fsync when the last flush is this old.
    pub flush_ms: i64,
    /// `message.timestamp.type`.
    pub message_timestamp_type: TimestampType,
    /// `compression.type`.
    pub compression_type: TopicCompression,
    /// `min.insync.replicas`: used by the partition layer for acks=all.
    pub min_insync_replicas: u32,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 60 * 60 * 1000,
            segment_index_bytes: 10 << 20,
            index_interval_bytes: 4096,
            retention_ms: 7 * 24 * 60 * 60 * 1000,
            retention_bytes: -1,
            cleanup_policy: CleanupPolicy::DELETE,
            delete_retention_ms: 24 * 60 * 60 * 1000,
            min_compaction_lag_ms: 0,
            max_message_bytes: 1_048_588,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
            message_timestamp_type: TimestampType::CreateTime,
            compression_type: TopicCompression::Producer,
            min_insync_replicas: 1,
        }
    }
}

impl LogConfig {
    /// Names of every config this struct understands, in Kafka's spelling.
    pub const NAMES: [&'static str; 15] = [
        "cleanup.policy",
        "compression.type",
        "delete.retention.ms",
        "flush.messages",
        "flush.ms",
        "index.interval.bytes",
        "max.message.bytes",
        "message.timestamp.type",
        "min.compaction.lag.ms",
        "min.insync.replicas",
        "retention.bytes",
        "retention.ms",
        "segment.bytes",
        "segment.index.bytes",
        "segment.ms",
    ];

    /// Sets one config by its Kafka name, validating the value as Kafka does.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), ConfigError> {
        let invalid = |reason| ConfigError::Invalid { name: name.to_string(), value: value.to_string(), reason };
        let long = |min: i64| -> Result<i64, ConfigError> {
            let v: i64 = value.trim().parse().map_err(|_| invalid("not an integer"))?;
            if v < min {
                return Err(invalid("below the minimum"));
            }
            Ok(v)
        };
        let int = |min: i64| -> Result<u32, ConfigError> {
            let v = long(min)?;
            u32::try_from(v).ok().filter(|v| *v <= i32::MAX as u32).ok_or_else(|| invalid("above the maximum"))
        };
        match name {
            "segment.bytes" => self.segment_bytes = int(14)?,
            "segment.ms" => self.segment_ms = long(1)?,
            "segment.index.bytes" => self.segment_index_bytes = int(4)?,
            "index.interval.bytes" => self.index_interval_bytes = int(0)?,
            "retention.ms" => self.retention_ms = long(-1)?,
            "retention.bytes" => self.retention_bytes = long(-1)?,
            "cleanup.policy" => {
                self.cleanup_policy =
                    CleanupPolicy::parse(value).ok_or_else(|| invalid("expected delete, compact or both"))?
            }
            "delete.retention.ms" => self.delete_retention_ms = long(0)?,
            "min.compaction.lag.ms" => self.min_compaction_lag_ms = long(0)?,
            "max.message.bytes" => self.max_message_bytes = int(0)?,
            "flush.messages" => self.flush_messages = long(1)?,
            "flush.ms" => self.flush_ms = long(0)?,
            "message.timestamp.type" => {
                self.message_timestamp_type = match value {
                    "CreateTime" => TimestampType::CreateTime,
                    "LogAppendTime" => TimestampType::LogAppendTime,
                    _ => return Err(invalid("expected CreateTime or LogAppendTime")),
                }
            }
            "compression.type" => {
                self.compression_type = match value {
                    "producer" => TopicCompression::Producer,
                    "uncompressed" | "none" => TopicCompression::Uncompressed,
                    "gzip" => TopicCompression::Codec(Compression::Gzip),
                    "snappy" => TopicCompression::Codec(Compression::Snappy),
                    "lz4" => TopicCompression::Codec(Compression::Lz4),
                    "zstd" => TopicCompression::Codec(Compression::Zstd),
                    _ => return Err(invalid("expected producer, uncompressed, gzip, snappy, lz4 or zstd")),
                }
            }
            "min.insync.replicas" => self.min_insync_replicas = int(1)?,
            _ => return Err(ConfigError::Unknown { name: name.to_string() }),
        }
        Ok(())
    }

    /// Builds a config from defaults plus overrides.
    pub fn with_overrides<'a>(
        mut self,
        overrides: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<LogConfig, ConfigError> {
        for (name, value) in overrides {
            self.set(name, value)?;
        }
        Ok(self)
    }

    /// The value of one config in Kafka's text form.
    pub fn get(&self, name: &str) -> Option<String> {
        Some(match name {
            "segment.bytes" => self.segment_bytes.to_string(),
            "segment.ms" => self.segment_ms.to_string(),
            "segment.index.bytes" => self.segment_index_bytes.to_string(),
            "index.interval.bytes" => self.index_interval_bytes.to_string(),
            "retention.ms" => self.retention_ms.to_string(),
            "retention.bytes" => self.retention_bytes.to_string(),
            "cleanup.policy" => self.cleanup_policy.name().to_string(),
            "delete.retention.ms" => self.delete_retention_ms.to_string(),
            "min.compaction.lag.ms" => self.min_compaction_lag_ms.to_string(),
            "max.message.bytes" => self.max_message_bytes.to_string(),
            "flush.messages" => self.flush_messages.to_string(),
            "flush.ms" => self.flush_ms.to_string(),
            "message.timestamp.type" => match self.message_timestamp_type {
                TimestampType::CreateTime => "CreateTime".to_string(),
                TimestampType::LogAppendTime => "LogAppendTime".to_string(),
            },
            "compression.type" => match self.compression_type {
                TopicCompression::Producer => "producer".to_string(),
                TopicCompression::Uncompressed => "uncompressed".to_string(),
                TopicCompression::Codec(c) => c.name().to_string(),
            },
            "min.insync.replicas" => self.min_insync_replicas.to_string(),
            _ => return None,
        })
    }

    /// Every config and its value, sorted by name.
    pub fn entries(&self) -> BTreeMap<&'static str, String> {
        Self::NAMES.iter().map(|n| (*n, self.get(n).expect("every listed name has a value"))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_round_trips_through_set_and_get() {
        // Proves `get` prints what `set` accepts, for every config this struct knows.
        let config = LogConfig::default();
        let mut copy = LogConfig { segment_bytes: 1, ..LogConfig::default() };
        for (name, value) in config.entries() {
            copy.set(name, &value).unwrap();
        }
        assert_eq!(copy, config);
    }

    #[test]
    fn invalid_values_are_rejected_with_the_config_name() {
        // Proves validation rejects unknown names and out-of-range values.
        let mut config = LogConfig::default();
        assert!(matches!(config.set("retention.ms", "-2"), Err(ConfigError::Invalid { .. })));
        assert!(matches!(config.set("segment.bytes", "3000000000"), Err(ConfigError::Invalid { .. })));
        assert!(matches!(config.set("cleanup.policy", "compact,nope"), Err(ConfigError::Invalid { .. })));
        assert!(matches!(config.set("no.such", "1"), Err(ConfigError::Unknown { .. })));
        config.set("cleanup.policy", "compact,delete").unwrap();
        assert_eq!(config.cleanup_policy, CleanupPolicy { delete: true, compact: true });
    }
}
