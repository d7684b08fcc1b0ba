//! The one place where typed errors become Kafka error codes.

use kafka_protocol::ResponseError;

use crate::controller::election::ReassignmentError;
use crate::controller::ControllerError;
use crate::group::offsets::OffsetError;
use crate::log::producer_state::ProducerError;
use crate::log::{BatchError, LogError, RecordError};
use crate::partition::PartitionError;

pub fn log_error_code(error: &LogError) -> ResponseError {
    match error {
        LogError::CorruptBatch(batch) => match batch {
            BatchError::UnknownCompression { .. } => ResponseError::UnsupportedCompressionType,
            BatchError::InvalidRecordCount { .. } | BatchError::MalformedRecords { .. } => ResponseError::InvalidRecord,
            BatchError::Compression { .. } => ResponseError::UnknownServerError,
            // Kafka's ProduceRequest.validateRecords: from Produce v3 only magic 2 batches
            // ("are only allowed to contain record batches with magic version 2").
            BatchError::BadMagic { .. } => ResponseError::InvalidRecord,
            BatchError::Truncated { .. }
            | BatchError::LengthTooSmall { .. }
            | BatchError::CrcMismatch { .. }
            | BatchError::Decompression { .. } => ResponseError::CorruptMessage,
        },
        LogError::InvalidRecord { .. } => ResponseError::InvalidRecord,
        // Kafka's `processRecordErrors`: any timestamp error makes the batch INVALID_TIMESTAMP.
        LogError::InvalidRecords { invalid_timestamp: true, .. } => ResponseError::InvalidTimestamp,
        LogError::InvalidRecords { invalid_timestamp: false, .. } => ResponseError::InvalidRecord,
        LogError::MessageTooLarge { .. } => ResponseError::MessageTooLarge,
        LogError::RecordBatchTooLarge { .. } => ResponseError::RecordListTooLarge,
        LogError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        LogError::OffsetOverflow { .. } | LogError::NonMonotonicOffsets { .. } => ResponseError::UnknownServerError,
        LogError::Io { .. } | LogError::Offline { .. } => ResponseError::KafkaStorageError,
        LogError::Producer(e) => match e {
            ProducerError::InvalidProducerEpoch { .. } => ResponseError::InvalidProducerEpoch,
            ProducerError::OutOfOrderSequence { .. } => ResponseError::OutOfOrderSequenceNumber,
            ProducerError::InvalidTxnState { .. } | ProducerError::UnverifiedTransaction { .. } => {
                ResponseError::InvalidTxnState
            }
            ProducerError::CoordinatorFenced { .. } => ResponseError::TransactionCoordinatorFenced,
            ProducerError::TooManyProducers { .. } => ResponseError::PolicyViolation,
        },
    }
}

/// The records a Produce response names in `record_errors` (KIP-467): empty unless the log
/// rejected individual records.
pub fn record_errors(error: &PartitionError) -> &[RecordError] {
    match error {
        PartitionError::Log(LogError::InvalidRecords { record_errors, .. }) => record_errors,
        _ => &[],
    }
}

pub fn partition_error_code(error: &PartitionError) -> ResponseError {
    match error {
        PartitionError::Log(e) => log_error_code(e),
        PartitionError::NotEnoughReplicas { .. } => ResponseError::NotEnoughReplicas,
        PartitionError::FencedLeaderEpoch { .. } => ResponseError::FencedLeaderEpoch,
        PartitionError::UnknownLeaderEpoch { .. } => ResponseError::UnknownLeaderEpoch,
        PartitionError::Closed { .. } => ResponseError::NotLeaderOrFollower,
        PartitionError::InconsistentTopicId { .. } => ResponseError::InconsistentTopicId,
        PartitionError::NotLeaderOrFollower { .. } => ResponseError::NotLeaderOrFollower,
        PartitionError::NotEnoughReplicasAfterAppend { .. } => ResponseError::NotEnoughReplicasAfterAppend,
        PartitionError::ReplicationTimeout { .. } => ResponseError::RequestTimedOut,
        PartitionError::InvalidReplicaFetch(_) => ResponseError::UnknownServerError,
    }
}

/// A failed metadata proposal. Retriable codes where the client should try again (the record
/// may even have committed after a timeout or a failed forward; a retry then sees the result).
pub fn controller_error_code(error: &ControllerError) -> ResponseError {
    match error {
        ControllerError::NotLeader { .. } | ControllerError::Shutdown => ResponseError::NotController,
        ControllerError::Timeout | ControllerError::Forward { .. } => ResponseError::RequestTimedOut,
        // Too big for one metadata log entry (e.g. a CreateAcls of very many ACLs): the
        // request as sent can never be applied.
        ControllerError::RecordTooLarge { .. } => ResponseError::PolicyViolation,
        ControllerError::DuplicateBrokerRegistration { .. } => ResponseError::DuplicateBrokerRegistration,
        ControllerError::Io { .. }
        | ControllerError::Bind { .. }
        | ControllerError::DataDirLocked { .. }
        | ControllerError::Corrupt { .. }
        | ControllerError::NotAVoter { .. }
        | ControllerError::ObserverIsAVoter { .. }
        | ControllerError::ObserverAddrUnspecified { .. }
        | ControllerError::InvalidConfig(_)
        | ControllerError::Raft(_) => ResponseError::UnknownServerError,
    }
}

/// A failed `__consumer_offsets` operation, as Kafka's group coordinator maps append errors:
/// storage or leadership problems send the client to find the coordinator again.
pub fn offset_error_code(error: &OffsetError) -> ResponseError {
    match error {
        OffsetError::NotCoordinator { .. } => ResponseError::NotCoordinator,
        OffsetError::LoadInProgress { .. } => ResponseError::CoordinatorLoadInProgress,
        OffsetError::Partition(e) => match e {
            PartitionError::NotEnoughReplicas { .. }
            | PartitionError::NotEnoughReplicasAfterAppend { .. }
            | PartitionError::ReplicationTimeout { .. } => ResponseError::CoordinatorNotAvailable,
            PartitionError::NotLeaderOrFollower { .. } => ResponseError::NotCoordinator,
            PartitionError::Closed { .. } => ResponseError::NotCoordinator,
            PartitionError::Log(LogError::MessageTooLarge { .. } | LogError::RecordBatchTooLarge { .. }) => {
                ResponseError::InvalidCommitOffsetSize
            }
            PartitionError::Log(LogError::Io { .. } | LogError::Offline { .. }) => ResponseError::NotCoordinator,
            other => partition_error_code(other),
        },
        OffsetError::Batch { .. } => ResponseError::UnknownServerError,
        OffsetError::Encode(_) => ResponseError::InvalidRequest,
    }
}

/// A refused partition reassignment (AlterPartitionReassignments).
pub fn reassignment_error_code(error: &ReassignmentError) -> ResponseError {
    match error {
        ReassignmentError::InvalidReplicaAssignment(_) => ResponseError::InvalidReplicaAssignment,
        ReassignmentError::ReplicationFactorChange { .. } => ResponseError::InvalidReplicationFactor,
        ReassignmentError::NoReassignmentInProgress => ResponseError::NoReassignmentInProgress,
    }
}
