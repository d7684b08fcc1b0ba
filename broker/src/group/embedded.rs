//! Kafka's embedded consumer protocol: the bytes a classic member puts in JoinGroup
//! (`ConsumerProtocolSubscription`) and gets back from SyncGroup (`ConsumerProtocolAssignment`),
//! each a big-endian i16 version followed by the message. The coordinator reads them when a
//! classic member joins a consumer-protocol group or a classic group converts (KIP-848's
//! online migration); the HTTP consumer instances write them as classic members.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment;
use kafka_protocol::messages::{ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// The protocol type of groups whose members speak the embedded consumer protocol.
pub const PROTOCOL_TYPE: &str = "consumer";

/// The highest embedded version Runnel reads and writes (both messages have versions 0-3).
const VERSION_MAX: i16 = 3;

/// A member's subscription as its JoinGroup metadata carries it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subscription {
    /// The embedded version the member wrote (its assignment is answered in the same one).
    pub version: i16,
    pub topics: Vec<String>,
    /// Partitions the member still owns (v1+: cooperative members report them on rejoin).
    pub owned: BTreeMap<String, BTreeSet<i32>>,
    /// v3+.
    pub rack: Option<String>,
}

/// Reads a `ConsumerProtocolSubscription` (versions above 3 are read as 3, as Kafka's
/// `ConsumerProtocol` does: later versions only add fields).
pub fn decode_subscription(bytes: &[u8]) -> Result<Subscription, String> {
    let (read, mut buf) = versioned(bytes, "subscription")?;
    let decoded = ConsumerProtocolSubscription::decode(&mut buf, read)
        .map_err(|e| format!("malformed embedded consumer protocol subscription: {e}"))?;
    let mut owned: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    for tp in decoded.owned_partitions {
        owned.entry(tp.topic.0.to_string()).or_default().extend(tp.partitions);
    }
    Ok(Subscription {
        version: read,
        topics: decoded.topics.into_iter().map(|t| t.to_string()).collect(),
        owned,
        rack: decoded.rack_id.map(|r| r.to_string()).filter(|r| !r.is_empty()),
    })
}

/// Writes a `ConsumerProtocolSubscription` of `topics` at `version`.
pub fn encode_subscription(topics: &[String], version: i16) -> Bytes {
    let subscription = ConsumerProtocolSubscription::default()
        .with_topics(topics.iter().map(|t| StrBytes::from_string(t.clone())).collect());
    encode_versioned(&subscription, version.clamp(0, VERSION_MAX))
}

/// Reads a `ConsumerProtocolAssignment`: partitions by topic name. Empty bytes (a member that
/// never synced) are an empty assignment.
pub fn decode_assignment(bytes: &[u8]) -> Result<BTreeMap<String, BTreeSet<i32>>, String> {
    if bytes.is_empty() {
        return Ok(BTreeMap::new());
    }
    let (read, mut buf) = versioned(bytes, "assignment")?;
    let decoded = ConsumerProtocolAssignment::decode(&mut buf, read)
        .map_err(|e| format!("malformed embedded consumer protocol assignment: {e}"))?;
    let mut assignment: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    for tp in decoded.assigned_partitions {
        assignment.entry(tp.topic.0.to_string()).or_default().extend(tp.partitions);
    }
    Ok(assignment)
}

/// Writes a `ConsumerProtocolAssignment` at `version` (the member's subscription version, as
/// Kafka answers).
pub fn encode_assignment<'a>(partitions: impl IntoIterator<Item = (&'a str, Vec<i32>)>, version: i16) -> Bytes {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, ps) in partitions {
        by_topic.entry(topic).or_default().extend(ps);
    }
    let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(
        by_topic
            .into_iter()
            .map(|(topic, ps)| {
                consumer_protocol_assignment::TopicPartition::default()
                    .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                    .with_partitions(ps)
            })
            .collect(),
    );
    encode_versioned(&assignment, version.clamp(0, VERSION_MAX))
}

/// The version prefix of an embedded `what` (read as at most [`VERSION_MAX`]) and its body.
fn versioned(bytes: &[u8], what: &str) -> Result<(i16, Bytes), String> {
    let mut buf = Bytes::copy_from_slice(bytes);
    if buf.remaining() < 2 {
        return Err(format!("the embedded consumer protocol {what} is shorter than its version"));
    }
    let version = buf.get_i16();
    if version < 0 {
        return Err(format!("embedded consumer protocol {what} version {version} is invalid"));
    }
    Ok((version.min(VERSION_MAX), buf))
}

fn encode_versioned<M: Encodable>(message: &M, version: i16) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    if message.encode(&mut buf, version).is_err() {
        return Bytes::new();
    }
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::consumer_protocol_subscription::TopicPartition;

    #[test]
    fn subscriptions_and_assignments_round_trip_at_every_version() {
        // Proves what a cooperative member's rejoin carries (owned partitions, rack) is read,
        // and that an assignment is written in the member's version.
        for version in 0..=3i16 {
            let mut subscription = ConsumerProtocolSubscription::default()
                .with_topics(vec![StrBytes::from_static_str("a"), StrBytes::from_static_str("b")]);
            if version >= 1 {
                subscription = subscription.with_owned_partitions(vec![TopicPartition::default()
                    .with_topic(TopicName(StrBytes::from_static_str("a")))
                    .with_partitions(vec![2, 0])]);
            }
            if version >= 3 {
                subscription = subscription.with_rack_id(Some(StrBytes::from_static_str("r1")));
            }
            let bytes = encode_versioned(&subscription, version);
            let decoded = decode_subscription(&bytes).unwrap();
            assert_eq!(decoded.version, version);
            assert_eq!(decoded.topics, vec!["a".to_string(), "b".to_string()]);
            assert_eq!(decoded.owned.get("a").cloned().unwrap_or_default().len(), if version >= 1 { 2 } else { 0 });
            assert_eq!(decoded.rack.as_deref(), if version >= 3 { Some("r1") } else { None });
            let assignment = encode_assignment([("a", vec![1, 0]), ("b", vec![3])], version);
            assert_eq!(i16::from_be_bytes([assignment[0], assignment[1]]), version);
            let back = decode_assignment(&assignment).unwrap();
            assert_eq!(back["a"], BTreeSet::from([0, 1]));
            assert_eq!(back["b"], BTreeSet::from([3]));
        }
        assert!(decode_subscription(&[0]).is_err());
        assert!(decode_subscription(&[0, 0, 0xff]).is_err());
        assert!(decode_assignment(&[0, 1, 0, 0, 0, 9]).is_err());
        assert_eq!(decode_assignment(&[]).unwrap(), BTreeMap::new());
    }
}
