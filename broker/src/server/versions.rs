//! The API versions this broker implements: what ApiVersions advertises and what dispatch
//! accepts. One table, so the two cannot disagree.

use kafka_protocol::messages::ApiKey;

/// (api, min version, max version). Maxima stop before versions whose semantics are not
/// implemented yet (Produce v13 and Fetch v13+ address topics by id).
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    // Transactions with KIP-890: AddPartitionsToTxn v4-5 is the leaders' verification batch
    // (part 1); Produce v12, EndTxn v5 and TxnOffsetCommit v5 are transaction version 2
    // (part 2); the v4/v5 bumps before them only allow TRANSACTION_ABORTABLE answers.
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::TxnOffsetCommit, 0, 5),
    (ApiKey::WriteTxnMarkers, 1, 1),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 2),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    // The consumer group protocol (KIP-848; v1: client-generated member ids, KIP-1082).
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    // SASL (KIP-152; SaslAuthenticate v1 tells the session lifetime, KIP-368). SaslHandshake v0
    // (raw tokens after the handshake) is not served, as Kafka 4 no longer does.
    (ApiKey::SaslHandshake, 1, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    // No quotas are enforced: always an empty answer (kafka-configs.sh describes users with it).
    (ApiKey::DescribeClientQuotas, 0, 1),
    // ACLs (v1+: pattern types, KIP-290; v2+ flexible).
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    // KIP-590: requests one broker forwards for its client (the HTTP API's); between brokers
    // only, so ApiVersions does not advertise it (as Kafka's broker listeners do not).
    (ApiKey::Envelope, 0, 0),
];

/// The supported range of `api`, if it is implemented.
pub fn range(api: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED.iter().find(|(k, _, _)| *k == api).map(|(_, min, max)| (*min, *max))
}

/// What ApiVersions advertises for `api`. The one exception to "advertise what dispatch
/// accepts": Kafka 4.0 removed Produce v0-2 yet still advertises Produce from v0 (KAFKA-18659),
/// because librdkafka (2.12 and older) sends gzip, snappy and lz4 batches uncompressed unless
/// the Produce range includes v0. Dispatch still refuses Produce v0-2 by closing the
/// connection, as Kafka does.
pub fn advertised(api: ApiKey, min: i16, max: i16) -> (i16, i16) {
    if api == ApiKey::Produce {
        (0, max)
    } else {
        (min, max)
    }
}

pub fn is_supported(api: ApiKey, version: i16) -> bool {
    range(api).is_some_and(|(min, max)| (min..=max).contains(&version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_advertised_range_is_within_what_the_codec_supports() {
        // Proves we never advertise a version the kafka-protocol crate cannot decode.
        for (api, min, max) in SUPPORTED {
            let codec = api.valid_versions();
            assert!(codec.min <= *min && *max <= codec.max, "{api:?} {min}..={max} vs {codec:?}");
        }
    }
}
