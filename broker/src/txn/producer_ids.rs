//! Producer ids for InitProducerId, unique in the cluster and never reused: each broker takes
//! blocks of `PRODUCER_ID_BLOCK_SIZE` ids from the metadata quorum (Kafka's AllocateProducerIds,
//! KIP-730) and hands them out in order. A block lives only in memory: ids of a block not used
//! up before a restart are skipped, never handed out twice (the quorum's counter only grows).

use tokio::sync::Mutex;

use crate::controller::{ApplyOutcome, Controller, MetadataRecord};

/// Why no producer id could be given (Kafka answers COORDINATOR_LOAD_IN_PROGRESS: retriable).
#[derive(Debug, thiserror::Error)]
#[error("could not allocate a block of producer ids: {0}")]
pub struct AllocateError(String);

pub struct ProducerIds {
    node_id: u64,
    /// The rest of the current block: next id, end (exclusive).
    block: Mutex<(i64, i64)>,
}

impl ProducerIds {
    pub fn new(node_id: u64) -> ProducerIds {
        ProducerIds { node_id, block: Mutex::new((0, 0)) }
    }

    /// The next producer id; when the block is used up, proposes `AllocateProducerIds` for a
    /// new one (one proposal at a time: concurrent callers wait for it).
    pub async fn next(&self, controller: &Controller) -> Result<i64, AllocateError> {
        let mut block = self.block.lock().await;
        if block.0 >= block.1 {
            let broker_epoch = controller
                .image()
                .brokers
                .get(&self.node_id)
                .map(|b| b.broker_epoch)
                .ok_or_else(|| AllocateError("this broker is not registered".to_string()))?;
            let record = MetadataRecord::AllocateProducerIds { node_id: self.node_id, broker_epoch };
            match controller.propose(record).await {
                Ok(ApplyOutcome::ProducerIds { first, count }) if count > 0 => *block = (first, first + count),
                Ok(other) => return Err(AllocateError(format!("{other:?}"))),
                Err(e) => return Err(AllocateError(e.to_string())),
            }
        }
        let id = block.0;
        block.0 += 1;
        Ok(id)
    }
}
