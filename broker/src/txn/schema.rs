//! Kafka's `__transaction_state` records: key `TransactionLogKey` v0 (version i16, transactional
//! id string), value `TransactionLogValue` v0 (version i16, producer id i64, producer epoch i16,
//! transaction timeout ms i32, status i8, partitions as a nullable array of (topic string,
//! partition ids []i32), last update timestamp i64, start timestamp i64), as Kafka 4 writes
//! them for transaction version 1, so Kafka's tools can read the topic. A null value is the
//! tombstone of an expired transactional id.

use std::collections::BTreeSet;

/// Kafka's `TransactionState` ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
    PrepareEpochFence,
}

impl TxnState {
    pub fn id(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<TxnState> {
        Some(match id {
            0 => TxnState::Empty,
            1 => TxnState::Ongoing,
            2 => TxnState::PrepareCommit,
            3 => TxnState::PrepareAbort,
            4 => TxnState::CompleteCommit,
            5 => TxnState::CompleteAbort,
            6 => TxnState::Dead,
            7 => TxnState::PrepareEpochFence,
            _ => return None,
        })
    }

    pub const ALL: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
        TxnState::PrepareEpochFence,
    ];

    /// The state Kafka names `name` ([`TxnState::name`]).
    pub fn from_name(name: &str) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Ongoing or being ended (its markers not all written): it holds last stable offsets back.
    pub fn is_open(self) -> bool {
        matches!(
            self,
            TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence
        )
    }

    /// Kafka's names (`kafka-transactions.sh`, ListTransactions state filters).
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }
}

/// The stored form of one transactional id's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnLogValue {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<(String, i32)>,
    pub last_update_ms: i64,
    pub start_ms: i64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TxnSchemaError {
    #[error("truncated __transaction_state record")]
    Truncated,
    #[error("unsupported __transaction_state record version {0}")]
    Version(i16),
    #[error("unknown transaction state {0}")]
    State(i8),
    #[error("string too long for Kafka's STRING")]
    TooLong,
}

pub fn encode_key(transactional_id: &str) -> Result<Vec<u8>, TxnSchemaError> {
    let mut out = Vec::with_capacity(4 + transactional_id.len());
    out.extend_from_slice(&0i16.to_be_bytes());
    put_string(&mut out, transactional_id)?;
    Ok(out)
}

pub fn decode_key(bytes: &[u8]) -> Result<String, TxnSchemaError> {
    let mut r = Reader(bytes);
    match r.i16()? {
        0 => r.string(),
        v => Err(TxnSchemaError::Version(v)),
    }
}

pub fn encode_value(value: &TxnLogValue) -> Result<Vec<u8>, TxnSchemaError> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&0i16.to_be_bytes());
    out.extend_from_slice(&value.producer_id.to_be_bytes());
    out.extend_from_slice(&value.producer_epoch.to_be_bytes());
    out.extend_from_slice(&value.timeout_ms.to_be_bytes());
    out.push(value.state.id() as u8);
    if value.state == TxnState::Empty {
        // Kafka writes no partition list for an empty transaction.
        out.extend_from_slice(&(-1i32).to_be_bytes());
    } else {
        let mut topics: Vec<(&str, Vec<i32>)> = Vec::new();
        for (topic, partition) in &value.partitions {
            match topics.last_mut() {
                Some((t, ids)) if t == topic => ids.push(*partition),
                _ => topics.push((topic, vec![*partition])),
            }
        }
        out.extend_from_slice(&(topics.len() as i32).to_be_bytes());
        for (topic, ids) in topics {
            put_string(&mut out, topic)?;
            out.extend_from_slice(&(ids.len() as i32).to_be_bytes());
            for id in ids {
                out.extend_from_slice(&id.to_be_bytes());
            }
        }
    }
    out.extend_from_slice(&value.last_update_ms.to_be_bytes());
    out.extend_from_slice(&value.start_ms.to_be_bytes());
    Ok(out)
}

pub fn decode_value(bytes: &[u8]) -> Result<TxnLogValue, TxnSchemaError> {
    let mut r = Reader(bytes);
    let version = r.i16()?;
    if version != 0 {
        return Err(TxnSchemaError::Version(version));
    }
    let producer_id = r.i64()?;
    let producer_epoch = r.i16()?;
    let timeout_ms = r.i32()?;
    let state_id = r.i8()?;
    let state = TxnState::from_id(state_id).ok_or(TxnSchemaError::State(state_id))?;
    let mut partitions = BTreeSet::new();
    let topics = r.i32()?;
    for _ in 0..topics.max(0) {
        let topic = r.string()?;
        let count = r.i32()?;
        for _ in 0..count.max(0) {
            partitions.insert((topic.clone(), r.i32()?));
        }
    }
    Ok(TxnLogValue {
        producer_id,
        producer_epoch,
        timeout_ms,
        state,
        partitions,
        last_update_ms: r.i64()?,
        start_ms: r.i64()?,
    })
}

fn put_string(out: &mut Vec<u8>, s: &str) -> Result<(), TxnSchemaError> {
    let len = i16::try_from(s.len()).map_err(|_| TxnSchemaError::TooLong)?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], TxnSchemaError> {
        if self.0.len() < n {
            return Err(TxnSchemaError::Truncated);
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn i8(&mut self) -> Result<i8, TxnSchemaError> {
        Ok(self.take(1)?[0] as i8)
    }
    fn i16(&mut self) -> Result<i16, TxnSchemaError> {
        Ok(i16::from_be_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn i32(&mut self) -> Result<i32, TxnSchemaError> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn i64(&mut self) -> Result<i64, TxnSchemaError> {
        Ok(i64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn string(&mut self) -> Result<String, TxnSchemaError> {
        let len = self.i16()?;
        let bytes = self.take(len.max(0) as usize)?;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_in_kafkas_layout() {
        let value = TxnLogValue {
            producer_id: 42,
            producer_epoch: 3,
            timeout_ms: 60_000,
            state: TxnState::Ongoing,
            partitions: [("a".to_string(), 1), ("a".to_string(), 0), ("b".to_string(), 7)].into_iter().collect(),
            last_update_ms: 1000,
            start_ms: 900,
        };
        let bytes = encode_value(&value).unwrap();
        // version, pid, epoch, timeout, status, 2 topics: "a" [0, 1], "b" [7], two timestamps.
        assert_eq!(bytes.len(), 2 + 8 + 2 + 4 + 1 + 4 + (2 + 1 + 4 + 8) + (2 + 1 + 4 + 4) + 16);
        assert_eq!(decode_value(&bytes).unwrap(), value);
        assert_eq!(decode_key(&encode_key("my-txn").unwrap()).unwrap(), "my-txn");
        let empty = TxnLogValue { state: TxnState::Empty, partitions: BTreeSet::new(), ..value };
        assert_eq!(decode_value(&encode_value(&empty).unwrap()).unwrap(), empty);
        assert_eq!(decode_value(&bytes[..10]), Err(TxnSchemaError::Truncated));
    }
}
