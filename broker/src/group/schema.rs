//! Kafka's `__consumer_offsets` key/value schemas, byte for byte, so Kafka's tools could read
//! our records: OffsetCommit key v1 / value v3 (v1 decoded too), GroupMetadata key v2 /
//! value v3. Big-endian; a Kafka STRING is an i16 length then UTF-8 (-1 = null where nullable);
//! BYTES is an i32 length. A record with a null value is a tombstone.
//!
//! Invariant: decoding never panics; anything malformed is a [`SchemaError`]. No I/O here.

/// Why a key or value could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("truncated: needed {needed} more bytes at position {position}")]
    Truncated { position: usize, needed: usize },
    #[error("unknown {what} version {version}")]
    UnknownVersion { what: &'static str, version: i16 },
    #[error("invalid UTF-8 in a string at position {position}")]
    InvalidUtf8 { position: usize },
    #[error("negative length {length} at position {position}")]
    NegativeLength { position: usize, length: i32 },
    #[error("{trailing} trailing bytes")]
    TrailingBytes { trailing: usize },
    #[error("a varint longer than 5 bytes at position {position}")]
    VarintTooLong { position: usize },
    #[error("a record with no key")]
    MissingKey,
    #[error("a {what} value of {size} bytes does not fit its length field")]
    TooLong { what: &'static str, size: usize },
}

/// A committed offset as stored (OffsetCommit value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetValue {
    pub offset: i64,
    /// -1 when unknown (value v1 has none).
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp: i64,
}

/// One member of a group as stored (GroupMetadata value v3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberMetadata {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub subscription: Vec<u8>,
    pub assignment: Vec<u8>,
}

/// A group's state as stored after a rebalance (GroupMetadata value v3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadataValue {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub current_state_timestamp: i64,
    pub members: Vec<MemberMetadata>,
}

/// A decoded `__consumer_offsets` record; `value: None` is a tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetsRecord {
    Commit {
        group: String,
        topic: String,
        partition: i32,
        value: Option<OffsetValue>,
    },
    Group {
        group: String,
        value: Option<GroupMetadataValue>,
    },
    /// A consumer-protocol (KIP-848) group's record.
    Consumer {
        group: String,
        record: ConsumerRecord,
    },
}

/// Partitions by topic id, as the consumer group records store them.
pub type StoredPartitions = Vec<([u8; 16], Vec<i32>)>;

/// Kafka's consumer group records (key type = record type; values at version 0, flexible:
/// compact strings and arrays, a tagged-field buffer after each struct). `None` values are
/// tombstones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsumerRecord {
    /// Type 3, ConsumerGroupMetadata: the group epoch and the hash of its subscribed topics'
    /// metadata.
    GroupEpoch(Option<GroupEpochValue>),
    /// Type 5, ConsumerGroupMemberMetadata.
    Member { member_id: String, value: Option<ConsumerMemberValue> },
    /// Type 6, ConsumerGroupTargetAssignmentMetadata: the target assignment's epoch.
    TargetEpoch(Option<i32>),
    /// Type 7, ConsumerGroupTargetAssignmentMember.
    TargetMember { member_id: String, value: Option<StoredPartitions> },
    /// Type 8, ConsumerGroupCurrentMemberAssignment.
    CurrentAssignment { member_id: String, value: Option<CurrentAssignmentValue> },
}

/// ConsumerGroupMetadataValue v0: the epoch and, in tagged field 0 (`MetadataHash`, Kafka 4.1,
/// KIP-1101), a hash of the metadata of the topics the group subscribes to when the epoch was
/// stored (0: not known). Runnel's hash is its own (`consumer::topics_hash`): a coordinator
/// compares it only with hashes it computes itself, after a failover, to see whether topics
/// changed while nobody coordinated the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupEpochValue {
    pub epoch: i32,
    pub metadata_hash: i64,
}

impl ConsumerRecord {
    /// Whether the record deletes its key (a null value).
    pub fn is_tombstone(&self) -> bool {
        match self {
            ConsumerRecord::GroupEpoch(v) => v.is_none(),
            ConsumerRecord::TargetEpoch(v) => v.is_none(),
            ConsumerRecord::Member { value, .. } => value.is_none(),
            ConsumerRecord::TargetMember { value, .. } => value.is_none(),
            ConsumerRecord::CurrentAssignment { value, .. } => value.is_none(),
        }
    }

    fn record_type(&self) -> i16 {
        match self {
            ConsumerRecord::GroupEpoch(_) => 3,
            ConsumerRecord::Member { .. } => 5,
            ConsumerRecord::TargetEpoch(_) => 6,
            ConsumerRecord::TargetMember { .. } => 7,
            ConsumerRecord::CurrentAssignment { .. } => 8,
        }
    }
}

/// ConsumerGroupMemberMetadataValue v0.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerMemberValue {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
    /// Tagged field 0: set for a member on the classic protocol inside a consumer group.
    pub classic: Option<ClassicMemberMetadata>,
}

/// ConsumerGroupMemberMetadataValue's `ClassicMemberMetadata`: what a classic member sent in
/// its JoinGroup (the session timeout it asked for, its protocols in order of preference).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClassicMemberMetadata {
    pub session_timeout_ms: i32,
    /// (name, metadata): the metadata is an embedded ConsumerProtocolSubscription.
    pub protocols: Vec<(String, Vec<u8>)>,
}

/// ConsumerGroupCurrentMemberAssignmentValue v0. `state`: 0 stable, 1 unrevoked partitions,
/// 2 unreleased partitions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CurrentAssignmentValue {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: i8,
    pub assigned: StoredPartitions,
    pub revoking: StoredPartitions,
}

const OFFSET_COMMIT_KEY_VERSION: i16 = 1;
const OFFSET_COMMIT_VALUE_VERSION: i16 = 3;
const GROUP_METADATA_KEY_VERSION: i16 = 2;
const GROUP_METADATA_VALUE_VERSION: i16 = 3;

impl OffsetsRecord {
    /// The group the record belongs to.
    pub fn group(&self) -> &str {
        match self {
            OffsetsRecord::Commit { group, .. } | OffsetsRecord::Group { group, .. } => group,
            OffsetsRecord::Consumer { group, .. } => group,
        }
    }

    /// (key bytes, value bytes or `None` for a tombstone).
    pub fn encode(&self) -> Result<(Vec<u8>, Option<Vec<u8>>), SchemaError> {
        let mut key = Writer::default();
        match self {
            OffsetsRecord::Commit { group, topic, partition, value } => {
                key.i16(OFFSET_COMMIT_KEY_VERSION);
                key.string(group)?;
                key.string(topic)?;
                key.i32(*partition);
                let value = match value {
                    Some(v) => {
                        let mut w = Writer::default();
                        w.i16(OFFSET_COMMIT_VALUE_VERSION);
                        w.i64(v.offset);
                        w.i32(v.leader_epoch);
                        w.string(&v.metadata)?;
                        w.i64(v.commit_timestamp);
                        Some(w.0)
                    }
                    None => None,
                };
                Ok((key.0, value))
            }
            OffsetsRecord::Group { group, value } => {
                key.i16(GROUP_METADATA_KEY_VERSION);
                key.string(group)?;
                let value = match value {
                    Some(v) => Some(encode_group_value(v)?),
                    None => None,
                };
                Ok((key.0, value))
            }
            OffsetsRecord::Consumer { group, record } => {
                key.i16(record.record_type());
                key.string(group)?;
                let mut w = Writer::default();
                w.i16(0);
                let present = match record {
                    ConsumerRecord::GroupEpoch(value) => match value {
                        Some(v) if v.metadata_hash != 0 => {
                            w.i32(v.epoch);
                            w.uvarint(1);
                            w.uvarint(0);
                            w.uvarint(8);
                            w.i64(v.metadata_hash);
                            return Ok((key.0, Some(w.0)));
                        }
                        Some(v) => Some(w.i32(v.epoch)),
                        None => None,
                    },
                    ConsumerRecord::TargetEpoch(epoch) => epoch.map(|e| w.i32(e)),
                    ConsumerRecord::Member { member_id, value } => {
                        key.string(member_id)?;
                        match value {
                            Some(v) => {
                                encode_member_value(&mut w, v)?;
                                // The tagged-field buffer, written here: it may carry tag 0.
                                let mut tagged = Writer::default();
                                encode_member_tags(&mut tagged, v);
                                return Ok((key.0, Some([w.0, tagged.0].concat())));
                            }
                            None => None,
                        }
                    }
                    ConsumerRecord::TargetMember { member_id, value } => {
                        key.string(member_id)?;
                        match value {
                            Some(v) => Some(w.partitions(v)?),
                            None => None,
                        }
                    }
                    ConsumerRecord::CurrentAssignment { member_id, value } => {
                        key.string(member_id)?;
                        match value {
                            Some(v) => {
                                w.i32(v.member_epoch);
                                w.i32(v.previous_member_epoch);
                                w.0.push(v.state as u8);
                                w.partitions(&v.assigned)?;
                                w.partitions(&v.revoking)?;
                                Some(())
                            }
                            None => None,
                        }
                    }
                };
                // Every flexible struct ends with its (empty) tagged-field buffer.
                let value = present.map(|()| {
                    w.uvarint(0);
                    w.0
                });
                Ok((key.0, value))
            }
        }
    }

    /// Decodes a record's key and value. Keys of versions 0 and 1 are offset commits (same
    /// layout), 2 is group metadata; anything else is an error the loader skips.
    pub fn decode(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<OffsetsRecord, SchemaError> {
        let key = key.ok_or(SchemaError::MissingKey)?;
        let mut r = Reader::new(key);
        let version = r.i16()?;
        match version {
            0 | 1 => {
                let group = r.string()?;
                let topic = r.string()?;
                let partition = r.i32()?;
                r.finish()?;
                let value = value.map(decode_offset_value).transpose()?;
                Ok(OffsetsRecord::Commit { group, topic, partition, value })
            }
            2 => {
                let group = r.string()?;
                r.finish()?;
                let value = value.map(decode_group_value).transpose()?;
                Ok(OffsetsRecord::Group { group, value })
            }
            record_type @ (3 | 5 | 6 | 7 | 8) => {
                let group = r.string()?;
                let member_id = if matches!(record_type, 5 | 7 | 8) { Some(r.string()?) } else { None };
                r.finish()?;
                let record = decode_consumer_record(record_type, member_id, value)?;
                Ok(OffsetsRecord::Consumer { group, record })
            }
            version => Err(SchemaError::UnknownVersion { what: "key", version }),
        }
    }
}

fn encode_member_value(w: &mut Writer, v: &ConsumerMemberValue) -> Result<(), SchemaError> {
    w.compact_string(v.instance_id.as_deref());
    w.compact_string(v.rack_id.as_deref());
    w.compact_string(Some(&v.client_id));
    w.compact_string(Some(&v.client_host));
    w.uvarint(v.subscribed_topic_names.len() as u32 + 1);
    for name in &v.subscribed_topic_names {
        w.compact_string(Some(name));
    }
    w.compact_string(v.subscribed_topic_regex.as_deref());
    w.i32(v.rebalance_timeout_ms);
    w.compact_string(v.server_assignor.as_deref());
    Ok(())
}

/// The member value's tagged fields: tag 0 (`ClassicMemberMetadata`) when the member is on the
/// classic protocol, else none.
fn encode_member_tags(w: &mut Writer, v: &ConsumerMemberValue) {
    let Some(classic) = &v.classic else {
        w.uvarint(0);
        return;
    };
    let mut field = Writer::default();
    field.i32(classic.session_timeout_ms);
    field.uvarint(classic.protocols.len() as u32 + 1);
    for (name, metadata) in &classic.protocols {
        field.compact_string(Some(name));
        field.uvarint(metadata.len() as u32 + 1);
        field.0.extend_from_slice(metadata);
        field.uvarint(0);
    }
    field.uvarint(0);
    w.uvarint(1);
    w.uvarint(0);
    w.uvarint(field.0.len() as u32);
    w.0.extend_from_slice(&field.0);
}

fn decode_classic_member(bytes: &[u8]) -> Result<ClassicMemberMetadata, SchemaError> {
    let mut r = Reader::new(bytes);
    let session_timeout_ms = r.i32()?;
    let count = r.compact_len()?;
    let mut protocols = Vec::with_capacity(count.min(r.remaining()));
    for _ in 0..count {
        let name = r.compact_string()?.unwrap_or_default();
        let len = r.compact_len()?;
        let metadata = r.take(len)?.to_vec();
        r.skip_tagged_fields()?;
        protocols.push((name, metadata));
    }
    r.skip_tagged_fields()?;
    r.finish()?;
    Ok(ClassicMemberMetadata { session_timeout_ms, protocols })
}

/// A consumer group record's value (`None` for a tombstone): version 0, tagged fields skipped
/// (newer Kafka versions add some; their defaults are what Runnel assumes).
fn decode_consumer_record(
    record_type: i16,
    member_id: Option<String>,
    value: Option<&[u8]>,
) -> Result<ConsumerRecord, SchemaError> {
    let member_id = member_id.unwrap_or_default();
    let Some(bytes) = value else {
        return Ok(match record_type {
            3 => ConsumerRecord::GroupEpoch(None),
            5 => ConsumerRecord::Member { member_id, value: None },
            6 => ConsumerRecord::TargetEpoch(None),
            7 => ConsumerRecord::TargetMember { member_id, value: None },
            _ => ConsumerRecord::CurrentAssignment { member_id, value: None },
        });
    };
    let mut r = Reader::new(bytes);
    let version = r.i16()?;
    if version != 0 {
        return Err(SchemaError::UnknownVersion { what: "consumer group value", version });
    }
    let record = match record_type {
        3 => {
            let epoch = r.i32()?;
            let metadata_hash = match r.tagged_field(0)? {
                Some(bytes) => Reader::new(bytes).i64()?,
                None => 0,
            };
            r.finish()?;
            return Ok(ConsumerRecord::GroupEpoch(Some(GroupEpochValue { epoch, metadata_hash })));
        }
        6 => ConsumerRecord::TargetEpoch(Some(r.i32()?)),
        5 => {
            let instance_id = r.compact_string()?;
            let rack_id = r.compact_string()?;
            let client_id = r.compact_string()?.unwrap_or_default();
            let client_host = r.compact_string()?.unwrap_or_default();
            let count = r.compact_len()?;
            let mut subscribed_topic_names = Vec::with_capacity(count.min(r.remaining()));
            for _ in 0..count {
                subscribed_topic_names.push(r.compact_string()?.unwrap_or_default());
            }
            let value = ConsumerMemberValue {
                instance_id,
                rack_id,
                client_id,
                client_host,
                subscribed_topic_names,
                subscribed_topic_regex: r.compact_string()?,
                rebalance_timeout_ms: r.i32()?,
                server_assignor: r.compact_string()?,
                classic: None,
            };
            let classic = r.tagged_field(0)?.map(decode_classic_member).transpose()?;
            r.finish()?;
            return Ok(ConsumerRecord::Member { member_id, value: Some(ConsumerMemberValue { classic, ..value }) });
        }
        7 => ConsumerRecord::TargetMember { member_id, value: Some(r.partitions()?) },
        _ => {
            let value = CurrentAssignmentValue {
                member_epoch: r.i32()?,
                previous_member_epoch: r.i32()?,
                state: r.take(1)?[0] as i8,
                assigned: r.partitions()?,
                revoking: r.partitions()?,
            };
            ConsumerRecord::CurrentAssignment { member_id, value: Some(value) }
        }
    };
    r.skip_tagged_fields()?;
    r.finish()?;
    Ok(record)
}

fn decode_offset_value(bytes: &[u8]) -> Result<OffsetValue, SchemaError> {
    let mut r = Reader::new(bytes);
    let version = r.i16()?;
    let value = match version {
        // v0: offset, metadata, timestamp; v1 adds expire_timestamp (ignored).
        0 | 1 => {
            let offset = r.i64()?;
            let metadata = r.string()?;
            let commit_timestamp = r.i64()?;
            if version == 1 {
                let _expire_timestamp = r.i64()?;
            }
            OffsetValue { offset, leader_epoch: -1, metadata, commit_timestamp }
        }
        3 => {
            let offset = r.i64()?;
            let leader_epoch = r.i32()?;
            let metadata = r.string()?;
            let commit_timestamp = r.i64()?;
            OffsetValue { offset, leader_epoch, metadata, commit_timestamp }
        }
        version => return Err(SchemaError::UnknownVersion { what: "offset commit value", version }),
    };
    // Newer (flexible) versions may carry tagged fields we do not read; v0-3 must end here.
    r.finish()?;
    Ok(value)
}

fn encode_group_value(v: &GroupMetadataValue) -> Result<Vec<u8>, SchemaError> {
    let mut w = Writer::default();
    w.i16(GROUP_METADATA_VALUE_VERSION);
    w.string(&v.protocol_type)?;
    w.i32(v.generation);
    w.nullable_string(v.protocol.as_deref())?;
    w.nullable_string(v.leader.as_deref())?;
    w.i64(v.current_state_timestamp);
    let count =
        i32::try_from(v.members.len()).map_err(|_| SchemaError::TooLong { what: "members", size: v.members.len() })?;
    w.i32(count);
    for m in &v.members {
        w.string(&m.member_id)?;
        w.nullable_string(m.group_instance_id.as_deref())?;
        w.string(&m.client_id)?;
        w.string(&m.client_host)?;
        w.i32(m.rebalance_timeout_ms);
        w.i32(m.session_timeout_ms);
        w.bytes(&m.subscription)?;
        w.bytes(&m.assignment)?;
    }
    Ok(w.0)
}

fn decode_group_value(bytes: &[u8]) -> Result<GroupMetadataValue, SchemaError> {
    let mut r = Reader::new(bytes);
    let version = r.i16()?;
    if version != GROUP_METADATA_VALUE_VERSION {
        return Err(SchemaError::UnknownVersion { what: "group metadata value", version });
    }
    let protocol_type = r.string()?;
    let generation = r.i32()?;
    let protocol = r.nullable_string()?;
    let leader = r.nullable_string()?;
    let current_state_timestamp = r.i64()?;
    let count = r.i32()?;
    if count < 0 {
        return Err(SchemaError::NegativeLength { position: r.pos - 4, length: count });
    }
    // Each member takes at least 28 bytes: bound the allocation by what is there.
    let mut members = Vec::with_capacity((count as usize).min(r.remaining() / 28));
    for _ in 0..count {
        members.push(MemberMetadata {
            member_id: r.string()?,
            group_instance_id: r.nullable_string()?,
            client_id: r.string()?,
            client_host: r.string()?,
            rebalance_timeout_ms: r.i32()?,
            session_timeout_ms: r.i32()?,
            subscription: r.bytes()?,
            assignment: r.bytes()?,
        });
    }
    r.finish()?;
    Ok(GroupMetadataValue { protocol_type, generation, protocol, leader, current_state_timestamp, members })
}

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn i16(&mut self, v: i16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn string(&mut self, s: &str) -> Result<(), SchemaError> {
        let len = i16::try_from(s.len()).map_err(|_| SchemaError::TooLong { what: "string", size: s.len() })?;
        self.i16(len);
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
    fn nullable_string(&mut self, s: Option<&str>) -> Result<(), SchemaError> {
        match s {
            Some(s) => self.string(s),
            None => {
                self.i16(-1);
                Ok(())
            }
        }
    }
    fn bytes(&mut self, b: &[u8]) -> Result<(), SchemaError> {
        let len = i32::try_from(b.len()).map_err(|_| SchemaError::TooLong { what: "bytes", size: b.len() })?;
        self.i32(len);
        self.0.extend_from_slice(b);
        Ok(())
    }
    fn uvarint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    /// A COMPACT_(NULLABLE_)STRING: length + 1 as an unsigned varint (0 = null), then UTF-8.
    fn compact_string(&mut self, s: Option<&str>) {
        match s {
            Some(s) => {
                self.uvarint(s.len() as u32 + 1);
                self.0.extend_from_slice(s.as_bytes());
            }
            None => self.uvarint(0),
        }
    }
    /// `[]TopicPartitions` of the consumer group records: topic id, compact int32 array, tags.
    fn partitions(&mut self, topics: &StoredPartitions) -> Result<(), SchemaError> {
        self.uvarint(topics.len() as u32 + 1);
        for (topic_id, partitions) in topics {
            self.0.extend_from_slice(topic_id);
            self.uvarint(partitions.len() as u32 + 1);
            for p in partitions {
                self.i32(*p);
            }
            self.uvarint(0);
        }
        Ok(())
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], SchemaError> {
        if self.remaining() < n {
            return Err(SchemaError::Truncated { position: self.pos, needed: n - self.remaining() });
        }
        let slice = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(slice)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], SchemaError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
    fn i16(&mut self) -> Result<i16, SchemaError> {
        Ok(i16::from_be_bytes(self.array()?))
    }
    fn i32(&mut self) -> Result<i32, SchemaError> {
        Ok(i32::from_be_bytes(self.array()?))
    }
    fn i64(&mut self) -> Result<i64, SchemaError> {
        Ok(i64::from_be_bytes(self.array()?))
    }
    fn nullable_string(&mut self) -> Result<Option<String>, SchemaError> {
        let position = self.pos;
        let len = self.i16()?;
        if len == -1 {
            return Ok(None);
        }
        if len < 0 {
            return Err(SchemaError::NegativeLength { position, length: len as i32 });
        }
        let bytes = self.take(len as usize)?;
        String::from_utf8(bytes.to_vec()).map(Some).map_err(|_| SchemaError::InvalidUtf8 { position })
    }
    fn string(&mut self) -> Result<String, SchemaError> {
        let position = self.pos;
        self.nullable_string()?.ok_or(SchemaError::NegativeLength { position, length: -1 })
    }
    fn bytes(&mut self) -> Result<Vec<u8>, SchemaError> {
        let position = self.pos;
        let len = self.i32()?;
        if len < 0 {
            return Err(SchemaError::NegativeLength { position, length: len });
        }
        Ok(self.take(len as usize)?.to_vec())
    }
    fn uvarint(&mut self) -> Result<u32, SchemaError> {
        let mut value = 0u32;
        for shift in (0..35).step_by(7) {
            let byte = self.take(1)?[0];
            value |= u32::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(SchemaError::VarintTooLong { position: self.pos })
    }
    /// A compact array's element count (a null array reads as empty).
    fn compact_len(&mut self) -> Result<usize, SchemaError> {
        Ok((self.uvarint()? as usize).saturating_sub(1))
    }
    fn compact_string(&mut self) -> Result<Option<String>, SchemaError> {
        let position = self.pos;
        let len = self.uvarint()? as usize;
        if len == 0 {
            return Ok(None);
        }
        let bytes = self.take(len - 1)?;
        String::from_utf8(bytes.to_vec()).map(Some).map_err(|_| SchemaError::InvalidUtf8 { position })
    }
    fn partitions(&mut self) -> Result<StoredPartitions, SchemaError> {
        let count = self.compact_len()?;
        // Each topic takes at least 19 bytes: bound the allocation by what is there.
        let mut topics = Vec::with_capacity(count.min(self.remaining() / 19));
        for _ in 0..count {
            let topic_id: [u8; 16] = self.array()?;
            let n = self.compact_len()?;
            let mut partitions = Vec::with_capacity(n.min(self.remaining() / 4));
            for _ in 0..n {
                partitions.push(self.i32()?);
            }
            self.skip_tagged_fields()?;
            topics.push((topic_id, partitions));
        }
        Ok(topics)
    }
    /// Reads the tagged-field buffer, returning the bytes of tag `wanted` (others skipped).
    fn tagged_field(&mut self, wanted: u32) -> Result<Option<&'a [u8]>, SchemaError> {
        let count = self.uvarint()?;
        let mut found = None;
        for _ in 0..count {
            let tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            let bytes = self.take(size)?;
            if tag == wanted {
                found = Some(bytes);
            }
        }
        Ok(found)
    }
    fn skip_tagged_fields(&mut self) -> Result<(), SchemaError> {
        let count = self.uvarint()?;
        for _ in 0..count {
            let _tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            self.take(size)?;
        }
        Ok(())
    }
    fn finish(&self) -> Result<(), SchemaError> {
        match self.remaining() {
            0 => Ok(()),
            trailing => Err(SchemaError::TrailingBytes { trailing }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&(s.len() as i16).to_be_bytes());
        out.extend_from_slice(s.as_bytes());
    }

    #[test]
    fn offset_commit_golden_bytes() {
        // Proves the OffsetCommit key v1 / value v3 layout against bytes built by hand.
        let record = OffsetsRecord::Commit {
            group: "g".into(),
            topic: "t".into(),
            partition: 2,
            value: Some(OffsetValue { offset: 42, leader_epoch: 7, metadata: "m".into(), commit_timestamp: 1000 }),
        };
        let (key, value) = record.encode().unwrap();
        let expected_key = [0, 1, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 2];
        assert_eq!(key, expected_key);
        let mut expected_value = vec![0, 3];
        expected_value.extend_from_slice(&42i64.to_be_bytes());
        expected_value.extend_from_slice(&7i32.to_be_bytes());
        string(&mut expected_value, "m");
        expected_value.extend_from_slice(&1000i64.to_be_bytes());
        assert_eq!(value.as_deref(), Some(&expected_value[..]));
        assert_eq!(OffsetsRecord::decode(Some(&key), value.as_deref()).unwrap(), record);
    }

    #[test]
    fn offset_commit_value_v1_decodes() {
        // Proves values written by older Kafka (v1: offset, metadata, commit and expire timestamps) load.
        let key = [0, 1, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 0];
        let mut value = vec![0, 1];
        value.extend_from_slice(&5i64.to_be_bytes());
        string(&mut value, "");
        value.extend_from_slice(&9i64.to_be_bytes());
        value.extend_from_slice(&99i64.to_be_bytes());
        let decoded = OffsetsRecord::decode(Some(&key), Some(&value)).unwrap();
        assert_eq!(
            decoded,
            OffsetsRecord::Commit {
                group: "g".into(),
                topic: "t".into(),
                partition: 0,
                value: Some(OffsetValue { offset: 5, leader_epoch: -1, metadata: String::new(), commit_timestamp: 9 }),
            }
        );
    }

    #[test]
    fn group_metadata_golden_bytes() {
        // Proves the GroupMetadata key v2 / value v3 layout against bytes built by hand.
        let record = OffsetsRecord::Group {
            group: "g".into(),
            value: Some(GroupMetadataValue {
                protocol_type: "consumer".into(),
                generation: 3,
                protocol: Some("range".into()),
                leader: None,
                current_state_timestamp: 77,
                members: vec![MemberMetadata {
                    member_id: "m1".into(),
                    group_instance_id: None,
                    client_id: "c".into(),
                    client_host: "/h".into(),
                    rebalance_timeout_ms: 300,
                    session_timeout_ms: 45,
                    subscription: vec![1, 2],
                    assignment: vec![],
                }],
            }),
        };
        let (key, value) = record.encode().unwrap();
        assert_eq!(key, [0, 2, 0, 1, b'g']);
        let mut expected = vec![0, 3];
        string(&mut expected, "consumer");
        expected.extend_from_slice(&3i32.to_be_bytes());
        string(&mut expected, "range");
        expected.extend_from_slice(&(-1i16).to_be_bytes());
        expected.extend_from_slice(&77i64.to_be_bytes());
        expected.extend_from_slice(&1i32.to_be_bytes());
        string(&mut expected, "m1");
        expected.extend_from_slice(&(-1i16).to_be_bytes());
        string(&mut expected, "c");
        string(&mut expected, "/h");
        expected.extend_from_slice(&300i32.to_be_bytes());
        expected.extend_from_slice(&45i32.to_be_bytes());
        expected.extend_from_slice(&2i32.to_be_bytes());
        expected.extend_from_slice(&[1, 2]);
        expected.extend_from_slice(&0i32.to_be_bytes());
        assert_eq!(value.as_deref(), Some(&expected[..]));
        assert_eq!(OffsetsRecord::decode(Some(&key), value.as_deref()).unwrap(), record);
    }

    #[test]
    fn tombstones_round_trip() {
        // Proves a null value decodes as a tombstone for both key kinds.
        for record in [
            OffsetsRecord::Commit { group: "g".into(), topic: "t".into(), partition: 1, value: None },
            OffsetsRecord::Group { group: "g".into(), value: None },
        ] {
            let (key, value) = record.encode().unwrap();
            assert!(value.is_none());
            assert_eq!(OffsetsRecord::decode(Some(&key), None).unwrap(), record);
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        // Proves every prefix and some corruptions of valid records decode to errors, never panics.
        let (key, value) = OffsetsRecord::Commit {
            group: "group".into(),
            topic: "topic".into(),
            partition: 0,
            value: Some(OffsetValue { offset: 1, leader_epoch: 0, metadata: "x".into(), commit_timestamp: 0 }),
        }
        .encode()
        .unwrap();
        let value = value.unwrap();
        for cut in 0..key.len() {
            assert!(OffsetsRecord::decode(Some(&key[..cut]), Some(&value)).is_err());
        }
        for cut in 0..value.len() {
            assert!(OffsetsRecord::decode(Some(&key), Some(&value[..cut])).is_err());
        }
        assert!(OffsetsRecord::decode(None, Some(&value)).is_err());
        assert!(OffsetsRecord::decode(Some(&[0, 9, 0, 0]), None).is_err());
        assert!(OffsetsRecord::decode(Some(&[0, 1, 0x7f, 0xff]), None).is_err());
        assert!(OffsetsRecord::decode(Some(&[0, 2, 0, 2, 0xff, 0xfe]), None).is_err());
        // A huge member count with no members behind it.
        let mut group_value = vec![0, 3];
        string(&mut group_value, "consumer");
        group_value.extend_from_slice(&1i32.to_be_bytes());
        group_value.extend_from_slice(&(-1i16).to_be_bytes());
        group_value.extend_from_slice(&(-1i16).to_be_bytes());
        group_value.extend_from_slice(&0i64.to_be_bytes());
        group_value.extend_from_slice(&i32::MAX.to_be_bytes());
        assert!(OffsetsRecord::decode(Some(&[0, 2, 0, 1, b'g']), Some(&group_value)).is_err());
        let mut trailing = value.clone();
        trailing.push(0);
        assert!(OffsetsRecord::decode(Some(&key), Some(&trailing)).is_err());
    }

    #[test]
    fn consumer_group_records_use_kafkas_layout_and_round_trip() {
        // Proves the KIP-848 records: key = int16 record type + non-flexible key fields; value =
        // int16 version 0 + flexible fields + an empty tagged-field buffer; null = tombstone.
        let epoch_value = |epoch, metadata_hash| Some(GroupEpochValue { epoch, metadata_hash });
        let epoch =
            OffsetsRecord::Consumer { group: "g".into(), record: ConsumerRecord::GroupEpoch(epoch_value(5, 0)) };
        let (key, value) = epoch.encode().unwrap();
        assert_eq!(key, vec![0, 3, 0, 1, b'g']);
        assert_eq!(value.as_deref(), Some(&[0, 0, 0, 0, 0, 5, 0][..]));
        // With a metadata hash: Kafka 4.1's tagged field 0 (MetadataHash, int64).
        let hashed =
            OffsetsRecord::Consumer { group: "g".into(), record: ConsumerRecord::GroupEpoch(epoch_value(5, 42)) };
        let (_, value) = hashed.encode().unwrap();
        assert_eq!(value.as_deref(), Some(&[0, 0, 0, 0, 0, 5, 1, 0, 8, 0, 0, 0, 0, 0, 0, 0, 42][..]));
        let partitions = vec![([1; 16], vec![0, 2]), ([2; 16], vec![])];
        let records = vec![
            epoch,
            hashed,
            OffsetsRecord::Consumer { group: "g".into(), record: ConsumerRecord::GroupEpoch(None) },
            OffsetsRecord::Consumer { group: "g".into(), record: ConsumerRecord::TargetEpoch(Some(7)) },
            OffsetsRecord::Consumer {
                group: "g".into(),
                record: ConsumerRecord::Member {
                    member_id: "m".into(),
                    value: Some(ConsumerMemberValue {
                        instance_id: Some("i".into()),
                        rack_id: None,
                        client_id: "c".into(),
                        client_host: "/127.0.0.1".into(),
                        subscribed_topic_names: vec!["a".into(), "b".into()],
                        subscribed_topic_regex: Some("x.*".into()),
                        rebalance_timeout_ms: 300_000,
                        server_assignor: Some("range".into()),
                        classic: None,
                    }),
                },
            },
            OffsetsRecord::Consumer {
                group: "g".into(),
                record: ConsumerRecord::Member {
                    member_id: "classic".into(),
                    value: Some(ConsumerMemberValue {
                        client_id: "c".into(),
                        subscribed_topic_names: vec!["a".into()],
                        rebalance_timeout_ms: 60_000,
                        classic: Some(ClassicMemberMetadata {
                            session_timeout_ms: 10_000,
                            protocols: vec![("cooperative-sticky".into(), vec![0, 1, 2]), ("range".into(), vec![])],
                        }),
                        ..ConsumerMemberValue::default()
                    }),
                },
            },
            OffsetsRecord::Consumer {
                group: "g".into(),
                record: ConsumerRecord::TargetMember { member_id: "m".into(), value: Some(partitions.clone()) },
            },
            OffsetsRecord::Consumer {
                group: "g".into(),
                record: ConsumerRecord::CurrentAssignment {
                    member_id: "m".into(),
                    value: Some(CurrentAssignmentValue {
                        member_epoch: 4,
                        previous_member_epoch: 3,
                        state: 1,
                        assigned: partitions.clone(),
                        revoking: vec![([3; 16], vec![9])],
                    }),
                },
            },
            OffsetsRecord::Consumer {
                group: "g".into(),
                record: ConsumerRecord::CurrentAssignment { member_id: "m".into(), value: None },
            },
        ];
        for record in records {
            let (key, value) = record.encode().unwrap();
            assert_eq!(OffsetsRecord::decode(Some(&key), value.as_deref()).unwrap(), record);
            if let Some(value) = value {
                for cut in 0..value.len() {
                    assert!(OffsetsRecord::decode(Some(&key), Some(&value[..cut])).is_err(), "{record:?} cut {cut}");
                }
            }
        }
        // Other tagged fields (a newer Kafka's) are skipped.
        let other_tag = [0, 0, 0, 0, 0, 5, 1, 3, 2, 7, 7];
        let decoded = OffsetsRecord::decode(Some(&[0, 3, 0, 1, b'g']), Some(&other_tag)).unwrap();
        let expected = ConsumerRecord::GroupEpoch(epoch_value(5, 0));
        assert_eq!(decoded, OffsetsRecord::Consumer { group: "g".into(), record: expected });
    }
}
