//! Per-partition log configuration under Kafka's topic config names and defaults.

use std::collections::BTreeMap;

use super::batch::{Compression, TimestampType};

/// Kafka's `compression.gzip.level` default: the codec's own (6).
pub const GZIP_DEFAULT_LEVEL: i32 = -1;
/// Kafka's `compression.zstd.level` default and floor (zstd's negative fast levels).
pub const ZSTD_DEFAULT_LEVEL: i32 = 3;
const ZSTD_MIN_LEVEL: i32 = -131_072;
/// Kafka's `compression.lz4.level` default, the only one Runnel accepts.
const LZ4_DEFAULT_LEVEL: i32 = 9;

/// `cleanup.policy`: delete old segments, compact by key, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    pub delete: bool,
    pub compact: bool,
}

impl CleanupPolicy {
    pub const DELETE: CleanupPolicy = CleanupPolicy { delete: true, compact: false };
    pub const COMPACT: CleanupPolicy = CleanupPolicy { delete: false, compact: true };

    /// Neither: Kafka 4 accepts an empty list, which keeps everything (no deletion, no
    /// compaction).
    pub const NONE: CleanupPolicy = CleanupPolicy { delete: false, compact: false };

    /// Kafka's `ValidList.in("compact", "delete")`: a comma-separated list of those words, or
    /// an empty one.
    fn parse(value: &str) -> Option<CleanupPolicy> {
        let mut policy = CleanupPolicy::NONE;
        if value.trim().is_empty() {
            return Some(policy);
        }
        for part in value.split(',').map(str::trim) {
            match part {
                "delete" => policy.delete = true,
                "compact" => policy.compact = true,
                _ => return None,
            }
        }
        Some(policy)
    }

    fn name(self) -> &'static str {
        match (self.compact, self.delete) {
            (true, true) => "compact,delete",
            (true, false) => "compact",
            (false, true) => "delete",
            (false, false) => "",
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

/// A topic config value that is unknown or out of range (Kafka answers INVALID_CONFIG for
/// both). The messages are Kafka's `ConfigException` / `InvalidConfigurationException` ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("Unknown topic config name: {name}")]
    Unknown { name: String },
    #[error("Invalid value {value} for configuration {name}: {reason}")]
    Invalid { name: String, value: String, reason: InvalidReason },
    /// Two values that are each valid but contradict each other (Kafka's `LogConfig.validate`).
    #[error("conflict topic config setting min.compaction.lag.ms ({min}) > max.compaction.lag.ms ({max})")]
    CompactionLagConflict { min: i64, max: i64 },
}

/// Why a value was refused, in the words of Kafka's `ConfigDef` validators.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidReason {
    #[error("Not a number of type {kind}")]
    NotANumber { kind: &'static str },
    #[error("Value must be at least {min}")]
    AtLeast { min: i64 },
    #[error("Value must be no more than {max}")]
    NoMoreThan { max: i64 },
    #[error("String must be one of: {allowed}")]
    NotOneOf { allowed: &'static str },
    /// Kafka's BOOLEAN type: `true` or `false`, any case, surrounding spaces ignored.
    #[error("Expected value to be either true or false")]
    NotABoolean,
    /// Refused for a reason of its own: a range with a hole, or a valid Kafka value of
    /// something Runnel does not do (accepting it would pretend).
    #[error("{why}")]
    Refused { why: &'static str },
}

/// `min.cleanable.dirty.ratio`, a fraction in [0, 1] (Kafka's DOUBLE), compared by value.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct DirtyRatio(pub f64);

impl Eq for DirtyRatio {}

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
    /// `max.compaction.lag.ms`: a record stays uncompacted at most about this long (the log is
    /// cleaned whatever its dirty ratio once its oldest dirty record is older, and a compacted
    /// log's active segment rolls at this age).
    pub max_compaction_lag_ms: i64,
    /// `min.cleanable.dirty.ratio`: a compacted log is cleaned once the bytes written since its
    /// last cleaning are at least this fraction of its cleanable bytes.
    pub min_cleanable_dirty_ratio: DirtyRatio,
    /// `max.message.bytes`: the largest batch a producer may append.
    pub max_message_bytes: u32,
    /// `flush.messages`: fsync after this many appended records.
    pub flush_messages: i64,
    /// `flush.ms`: fsync when the last flush is this old.
    pub flush_ms: i64,
    /// `message.timestamp.type`.
    pub message_timestamp_type: TimestampType,
    /// `message.timestamp.before.max.ms`: with CreateTime, how far a record's timestamp may lie
    /// before the broker's clock.
    pub message_timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`: with CreateTime, how far it may lie after it.
    pub message_timestamp_after_max_ms: i64,
    /// `compression.type`.
    pub compression_type: TopicCompression,
    /// `min.insync.replicas`: used by the partition layer for acks=all.
    pub min_insync_replicas: u32,
    /// `unclean.leader.election.enable`: whether the controller may elect a replica outside the
    /// ISR when no ISR member is live (losing what only the ISR had).
    pub unclean_leader_election_enable: bool,
    /// `segment.jitter.ms`: up to this much is taken off `segment.ms` for each segment (a
    /// different amount per partition and segment), so partitions created together do not all
    /// roll at once.
    pub segment_jitter_ms: i64,
    /// `file.delete.delay.ms`: Kafka renames a deleted segment and unlinks it this much later,
    /// for readers still in it. Runnel unlinks at once: a reader holds the open file, which
    /// stays readable until it lets go (POSIX), so any delay is met. Kept to be described and
    /// copied like Kafka's.
    pub file_delete_delay_ms: i64,
    /// `compression.gzip.level`: the level a topic with `compression.type=gzip` recompresses
    /// at (-1: the codec's default, 6).
    pub compression_gzip_level: i32,
    /// `compression.zstd.level`: the same for `compression.type=zstd` (default 3).
    pub compression_zstd_level: i32,
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
            max_compaction_lag_ms: i64::MAX,
            min_cleanable_dirty_ratio: DirtyRatio(0.5),
            max_message_bytes: 1_048_588,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
            message_timestamp_type: TimestampType::CreateTime,
            // Kafka 4.0's defaults: no bound.
            message_timestamp_before_max_ms: i64::MAX,
            message_timestamp_after_max_ms: i64::MAX,
            compression_type: TopicCompression::Producer,
            min_insync_replicas: 1,
            unclean_leader_election_enable: false,
            segment_jitter_ms: 0,
            file_delete_delay_ms: 60_000,
            compression_gzip_level: GZIP_DEFAULT_LEVEL,
            compression_zstd_level: ZSTD_DEFAULT_LEVEL,
        }
    }
}

impl LogConfig {
    /// Names of every config this struct understands, in Kafka's spelling.
    pub const NAMES: [&'static str; 26] = [
        "cleanup.policy",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.type",
        "compression.zstd.level",
        "delete.retention.ms",
        "file.delete.delay.ms",
        "flush.messages",
        "flush.ms",
        "index.interval.bytes",
        "max.compaction.lag.ms",
        "max.message.bytes",
        "message.timestamp.after.max.ms",
        "message.timestamp.before.max.ms",
        "message.timestamp.type",
        "min.cleanable.dirty.ratio",
        "min.compaction.lag.ms",
        "min.insync.replicas",
        "preallocate",
        "retention.bytes",
        "retention.ms",
        "segment.bytes",
        "segment.index.bytes",
        "segment.jitter.ms",
        "segment.ms",
        "unclean.leader.election.enable",
    ];

    /// Sets one config by its Kafka name, validating the value as Kafka 4's `LogConfig` does
    /// (types, `atLeast` ranges, valid lists). Every value accepted here is one the log handles.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), ConfigError> {
        let invalid = |reason| ConfigError::Invalid { name: name.to_string(), value: value.to_string(), reason };
        // Kafka's LONG and INT types, then `atLeast(min)` (`None`: no validator).
        let long = |min: Option<i64>| -> Result<i64, ConfigError> {
            let v: i64 = value.trim().parse().map_err(|_| invalid(InvalidReason::NotANumber { kind: "LONG" }))?;
            match min {
                Some(min) if v < min => Err(invalid(InvalidReason::AtLeast { min })),
                _ => Ok(v),
            }
        };
        let boolean = || -> Result<bool, ConfigError> {
            match value.trim() {
                v if v.eq_ignore_ascii_case("true") => Ok(true),
                v if v.eq_ignore_ascii_case("false") => Ok(false),
                _ => Err(invalid(InvalidReason::NotABoolean)),
            }
        };
        let signed_int = || -> Result<i32, ConfigError> {
            value.trim().parse().map_err(|_| invalid(InvalidReason::NotANumber { kind: "INT" }))
        };
        let between = |min: i32, max: i32| -> Result<i32, ConfigError> {
            let v = signed_int()?;
            if v < min {
                return Err(invalid(InvalidReason::AtLeast { min: min as i64 }));
            }
            if v > max {
                return Err(invalid(InvalidReason::NoMoreThan { max: max as i64 }));
            }
            Ok(v)
        };
        let int = |min: i32| -> Result<u32, ConfigError> {
            let v: i32 = value.trim().parse().map_err(|_| invalid(InvalidReason::NotANumber { kind: "INT" }))?;
            if v < min {
                return Err(invalid(InvalidReason::AtLeast { min: min as i64 }));
            }
            Ok(v as u32)
        };
        match name {
            // Kafka 4 raised the floor to 1 MiB (KIP-1030).
            "segment.bytes" => self.segment_bytes = int(1024 * 1024)?,
            // Kafka's internal twin for tests, with the floor of older releases (the smallest
            // legacy record); not listed in `NAMES`, so never described.
            "internal.segment.bytes" => self.segment_bytes = int(14)?,
            "segment.ms" => self.segment_ms = long(Some(1))?,
            "segment.index.bytes" => self.segment_index_bytes = int(4)?,
            "index.interval.bytes" => self.index_interval_bytes = int(0)?,
            "retention.ms" => self.retention_ms = long(Some(-1))?,
            // Any negative value means no size limit, as in Kafka (no validator).
            "retention.bytes" => self.retention_bytes = long(None)?,
            "cleanup.policy" => {
                self.cleanup_policy = CleanupPolicy::parse(value)
                    .ok_or_else(|| invalid(InvalidReason::NotOneOf { allowed: "[compact, delete]" }))?
            }
            "delete.retention.ms" => self.delete_retention_ms = long(Some(0))?,
            "min.compaction.lag.ms" => self.min_compaction_lag_ms = long(Some(0))?,
            "max.compaction.lag.ms" => self.max_compaction_lag_ms = long(Some(1))?,
            "min.cleanable.dirty.ratio" => {
                // Kafka's DOUBLE with `between(0, 1)`.
                let v: f64 = value.trim().parse().map_err(|_| invalid(InvalidReason::NotANumber { kind: "DOUBLE" }))?;
                if v.is_nan() {
                    return Err(invalid(InvalidReason::NotANumber { kind: "DOUBLE" }));
                }
                if v < 0.0 {
                    return Err(invalid(InvalidReason::AtLeast { min: 0 }));
                }
                if v > 1.0 {
                    return Err(invalid(InvalidReason::NoMoreThan { max: 1 }));
                }
                self.min_cleanable_dirty_ratio = DirtyRatio(v);
            }
            "max.message.bytes" => self.max_message_bytes = int(0)?,
            "flush.messages" => self.flush_messages = long(Some(1))?,
            "flush.ms" => self.flush_ms = long(Some(0))?,
            "message.timestamp.type" => {
                self.message_timestamp_type = match value {
                    "CreateTime" => TimestampType::CreateTime,
                    "LogAppendTime" => TimestampType::LogAppendTime,
                    _ => return Err(invalid(InvalidReason::NotOneOf { allowed: "CreateTime, LogAppendTime" })),
                }
            }
            "message.timestamp.before.max.ms" => self.message_timestamp_before_max_ms = long(Some(0))?,
            "message.timestamp.after.max.ms" => self.message_timestamp_after_max_ms = long(Some(0))?,
            "compression.type" => {
                // Kafka's `BrokerCompressionType` names ("none" is a producer setting only).
                self.compression_type = match value {
                    "producer" => TopicCompression::Producer,
                    "uncompressed" => TopicCompression::Uncompressed,
                    "gzip" => TopicCompression::Codec(Compression::Gzip),
                    "snappy" => TopicCompression::Codec(Compression::Snappy),
                    "lz4" => TopicCompression::Codec(Compression::Lz4),
                    "zstd" => TopicCompression::Codec(Compression::Zstd),
                    _ => {
                        return Err(invalid(InvalidReason::NotOneOf {
                            allowed: "uncompressed, zstd, lz4, snappy, gzip, producer",
                        }))
                    }
                }
            }
            "min.insync.replicas" => self.min_insync_replicas = int(1)?,
            "unclean.leader.election.enable" => self.unclean_leader_election_enable = boolean()?,
            "segment.jitter.ms" => self.segment_jitter_ms = long(Some(0))?,
            "file.delete.delay.ms" => self.file_delete_delay_ms = long(Some(0))?,
            // Kafka's ranges (`GzipCompression.LevelValidator`, `ZstdCompression.MIN_LEVEL..MAX_LEVEL`).
            "compression.gzip.level" => {
                let level = signed_int()?;
                if level != GZIP_DEFAULT_LEVEL && !(1..=9).contains(&level) {
                    return Err(invalid(InvalidReason::Refused { why: "Value must be -1 or between 1 and 9" }));
                }
                self.compression_gzip_level = level;
            }
            "compression.zstd.level" => self.compression_zstd_level = between(ZSTD_MIN_LEVEL, 22)?,
            // Runnel's lz4 encoder has one level: only Kafka's default is accepted.
            "compression.lz4.level" => {
                if between(1, 17)? != LZ4_DEFAULT_LEVEL {
                    return Err(invalid(InvalidReason::Refused {
                        why: "Runnel compresses lz4 at one level (lz4's fast mode); only the default 9 is accepted",
                    }));
                }
            }
            "preallocate" => {
                if boolean()? {
                    return Err(invalid(InvalidReason::Refused {
                        why: "Runnel does not preallocate segment files; only false is accepted",
                    }));
                }
            }
            _ => return Err(ConfigError::Unknown { name: name.to_string() }),
        }
        Ok(())
    }

    /// The codec a producer's batches are recompressed to and that codec's level
    /// (`compression.gzip.level` / `compression.zstd.level`; 0 for a codec without levels), or
    /// `None` for `compression.type=producer` (batches kept as sent).
    pub fn recompression(&self) -> Option<(Compression, i32)> {
        let codec = match self.compression_type {
            TopicCompression::Producer => return None,
            TopicCompression::Uncompressed => Compression::None,
            TopicCompression::Codec(codec) => codec,
        };
        let level = match codec {
            Compression::Gzip => self.compression_gzip_level,
            Compression::Zstd => self.compression_zstd_level,
            _ => 0,
        };
        Some((codec, level))
    }

    /// Builds a config from defaults plus overrides.
    pub fn with_overrides<'a>(
        mut self,
        overrides: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<LogConfig, ConfigError> {
        for (name, value) in overrides {
            self.set(name, value)?;
        }
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms {
            return Err(ConfigError::CompactionLagConflict {
                min: self.min_compaction_lag_ms,
                max: self.max_compaction_lag_ms,
            });
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
            "max.compaction.lag.ms" => self.max_compaction_lag_ms.to_string(),
            "min.cleanable.dirty.ratio" => format_double(self.min_cleanable_dirty_ratio.0),
            "max.message.bytes" => self.max_message_bytes.to_string(),
            "flush.messages" => self.flush_messages.to_string(),
            "flush.ms" => self.flush_ms.to_string(),
            "message.timestamp.before.max.ms" => self.message_timestamp_before_max_ms.to_string(),
            "message.timestamp.after.max.ms" => self.message_timestamp_after_max_ms.to_string(),
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
            "segment.jitter.ms" => self.segment_jitter_ms.to_string(),
            "file.delete.delay.ms" => self.file_delete_delay_ms.to_string(),
            "compression.gzip.level" => self.compression_gzip_level.to_string(),
            "compression.zstd.level" => self.compression_zstd_level.to_string(),
            "compression.lz4.level" => LZ4_DEFAULT_LEVEL.to_string(),
            "preallocate" => "false".to_string(),
            "unclean.leader.election.enable" => self.unclean_leader_election_enable.to_string(),
            _ => return None,
        })
    }

    /// Every config and its value, sorted by name.
    pub fn entries(&self) -> BTreeMap<&'static str, String> {
        Self::NAMES.iter().map(|n| (*n, self.get(n).expect("every listed name has a value"))).collect()
    }
}

/// A DOUBLE as Java's `Double.toString` prints the usual values: always with a fraction ("0.5",
/// "1.0", "0.01").
fn format_double(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.1}")
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_round_trips_through_set_and_get() {
        // Proves `get` prints what `set` accepts, for every config this struct knows.
        let config = LogConfig::default();
        let mut copy = LogConfig {
            segment_bytes: 1,
            cleanup_policy: CleanupPolicy::COMPACT,
            unclean_leader_election_enable: true,
            ..LogConfig::default()
        };
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

    #[test]
    fn validation_follows_kafka_4_ranges_and_lists() {
        // Proves each config's floor, type and valid list are Kafka 4's `LogConfig` ones, and
        // that the values at the floor are accepted.
        let mut config = LogConfig::default();
        let accepted = [
            ("segment.bytes", "1048576"),
            ("internal.segment.bytes", "14"),
            ("segment.ms", "1"),
            ("segment.index.bytes", "4"),
            ("index.interval.bytes", "0"),
            ("index.interval.bytes", "2147483647"),
            ("retention.ms", "-1"),
            ("retention.bytes", "-5"),
            ("delete.retention.ms", "0"),
            ("min.compaction.lag.ms", "0"),
            ("max.compaction.lag.ms", "1"),
            ("min.cleanable.dirty.ratio", "0"),
            ("min.cleanable.dirty.ratio", "1"),
            ("min.cleanable.dirty.ratio", "0.01"),
            ("max.message.bytes", "0"),
            ("flush.messages", "1"),
            ("flush.ms", "0"),
            ("message.timestamp.before.max.ms", "0"),
            ("message.timestamp.after.max.ms", "0"),
            ("cleanup.policy", ""),
            ("cleanup.policy", "delete, compact"),
            ("compression.type", "uncompressed"),
            ("min.insync.replicas", "1"),
            ("unclean.leader.election.enable", "TRUE"),
            ("unclean.leader.election.enable", " false "),
            ("unclean.leader.election.enable", "True"),
            ("segment.jitter.ms", "0"),
            ("file.delete.delay.ms", "0"),
            ("compression.gzip.level", "-1"),
            ("compression.gzip.level", "1"),
            ("compression.gzip.level", "9"),
            ("compression.zstd.level", "-131072"),
            ("compression.zstd.level", "22"),
            ("compression.lz4.level", "9"),
            ("preallocate", "false"),
        ];
        for (name, value) in accepted {
            config.set(name, value).unwrap_or_else(|e| panic!("{name}={value}: {e}"));
        }
        assert_eq!(config.cleanup_policy, CleanupPolicy { delete: true, compact: true });
        assert!(config.unclean_leader_election_enable, "the last accepted value, any case");
        let refused = [
            ("segment.bytes", "1048575", "Value must be at least 1048576"),
            ("segment.ms", "0", "Value must be at least 1"),
            ("segment.index.bytes", "3", "Value must be at least 4"),
            ("segment.index.bytes", "2147483648", "Not a number of type INT"),
            ("index.interval.bytes", "-1", "Value must be at least 0"),
            ("retention.ms", "-2", "Value must be at least -1"),
            ("retention.bytes", "1.5", "Not a number of type LONG"),
            ("flush.messages", "0", "Value must be at least 1"),
            ("max.compaction.lag.ms", "0", "Value must be at least 1"),
            ("min.cleanable.dirty.ratio", "-0.1", "Value must be at least 0"),
            ("min.cleanable.dirty.ratio", "1.5", "Value must be no more than 1"),
            ("min.cleanable.dirty.ratio", "half", "Not a number of type DOUBLE"),
            ("min.cleanable.dirty.ratio", "NaN", "Not a number of type DOUBLE"),
            ("message.timestamp.before.max.ms", "-1", "Value must be at least 0"),
            ("message.timestamp.after.max.ms", "-1", "Value must be at least 0"),
            ("compression.type", "none", "String must be one of"),
            ("message.timestamp.type", "createtime", "String must be one of"),
            ("min.insync.replicas", "0", "Value must be at least 1"),
            ("unclean.leader.election.enable", "yes", "Expected value to be either true or false"),
            ("unclean.leader.election.enable", "1", "Expected value to be either true or false"),
            ("unclean.leader.election.enable", "", "Expected value to be either true or false"),
            ("segment.jitter.ms", "-1", "Value must be at least 0"),
            ("file.delete.delay.ms", "-1", "Value must be at least 0"),
            ("compression.gzip.level", "0", "Value must be -1 or between 1 and 9"),
            ("compression.gzip.level", "10", "Value must be -1 or between 1 and 9"),
            ("compression.zstd.level", "23", "Value must be no more than 22"),
            ("compression.zstd.level", "-131073", "Value must be at least -131072"),
            ("compression.lz4.level", "18", "Value must be no more than 17"),
            // Valid in Kafka, but not something Runnel does: refused rather than pretended.
            ("compression.lz4.level", "12", "Runnel compresses lz4 at one level"),
            ("preallocate", "true", "Runnel does not preallocate segment files"),
        ];
        for (name, value, reason) in refused {
            let err = config.set(name, value).unwrap_err().to_string();
            assert!(err.starts_with(&format!("Invalid value {value} for configuration {name}: {reason}")), "{err}");
        }
        assert_eq!(
            config.set("message.timestamp.difference.max.ms", "1").unwrap_err().to_string(),
            "Unknown topic config name: message.timestamp.difference.max.ms",
            "removed in Kafka 4.0"
        );
        config.set("cleanup.policy", "").unwrap();
        assert_eq!(config.get("cleanup.policy").as_deref(), Some(""));
        assert_eq!(config.get("min.cleanable.dirty.ratio").as_deref(), Some("0.01"));
        assert_eq!(LogConfig::default().get("min.cleanable.dirty.ratio").as_deref(), Some("0.5"));
        let conflict = LogConfig::default()
            .with_overrides([("min.compaction.lag.ms", "10"), ("max.compaction.lag.ms", "5")])
            .unwrap_err();
        assert_eq!(
            conflict.to_string(),
            "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"
        );
    }
}
