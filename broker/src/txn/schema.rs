//! Kafka's `__transaction_state` records: key `TransactionLogKey` v0 (version i16, transactional
//! id string), value `TransactionLogValue` v0 (version i16, producer id i64, producer epoch i16,
//! transaction timeout ms i32, status i8, partitions as a nullable array of (topic string,
//! partition ids []i32), last update timestamp i64, start timestamp i64), as Kafka 4 writes
//! them for transaction version 1, so Kafka's tools can read the topic. A transaction of a
//! client on transaction version 2 (KIP-890) is written as value v1, Kafka's first flexible
//! version: compact strings and arrays, and the tagged fields PreviousProducerId (tag 0),
//! NextProducerId (tag 1) and ClientTransactionVersion (tag 2), each written only when not its
//! default. A null value is the tombstone of an expired transactional id.

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
    /// The producer id of the last transaction before an epoch overflow moved the id to a new
    /// producer id (-1: none).
    pub previous_producer_id: i64,
    /// The producer id a transaction ending at an exhausted epoch moves to on completion (-1:
    /// none).
    pub next_producer_id: i64,
    /// The client's transaction version: 2 when it ended its transactions with EndTxn v5+
    /// (an epoch bump on every commit and abort), else 0.
    pub client_version: i16,
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
    put_string(&mut out, transactional_id, false)?;
    Ok(out)
}

pub fn decode_key(bytes: &[u8]) -> Result<String, TxnSchemaError> {
    let mut r = Reader(bytes);
    match r.i16()? {
        0 => r.string(false),
        v => Err(TxnSchemaError::Version(v)),
    }
}

/// Value v0, or v1 when a transaction version 2 field is not its default.
pub fn encode_value(value: &TxnLogValue) -> Result<Vec<u8>, TxnSchemaError> {
    let flexible = value.previous_producer_id != -1 || value.next_producer_id != -1 || value.client_version != 0;
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&i16::from(flexible).to_be_bytes());
    out.extend_from_slice(&value.producer_id.to_be_bytes());
    out.extend_from_slice(&value.producer_epoch.to_be_bytes());
    out.extend_from_slice(&value.timeout_ms.to_be_bytes());
    out.push(value.state.id() as u8);
    let mut topics: Vec<(&str, Vec<i32>)> = Vec::new();
    for (topic, partition) in &value.partitions {
        match topics.last_mut() {
            Some((t, ids)) if t == topic => ids.push(*partition),
            _ => topics.push((topic, vec![*partition])),
        }
    }
    // Kafka writes no partition list (null) for an empty transaction.
    let count = if value.state == TxnState::Empty { None } else { Some(topics.len()) };
    put_array_len(&mut out, count, flexible);
    for (topic, ids) in topics.iter().take(count.unwrap_or(0)) {
        put_string(&mut out, topic, flexible)?;
        put_array_len(&mut out, Some(ids.len()), flexible);
        for id in ids {
            out.extend_from_slice(&id.to_be_bytes());
        }
        if flexible {
            put_uvarint(&mut out, 0); // the partition entry's tagged fields
        }
    }
    out.extend_from_slice(&value.last_update_ms.to_be_bytes());
    out.extend_from_slice(&value.start_ms.to_be_bytes());
    if flexible {
        let mut tagged: Vec<(u32, Vec<u8>)> = Vec::new();
        if value.previous_producer_id != -1 {
            tagged.push((0, value.previous_producer_id.to_be_bytes().to_vec()));
        }
        if value.next_producer_id != -1 {
            tagged.push((1, value.next_producer_id.to_be_bytes().to_vec()));
        }
        if value.client_version != 0 {
            tagged.push((2, value.client_version.to_be_bytes().to_vec()));
        }
        put_uvarint(&mut out, tagged.len() as u32);
        for (tag, data) in tagged {
            put_uvarint(&mut out, tag);
            put_uvarint(&mut out, data.len() as u32);
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}

pub fn decode_value(bytes: &[u8]) -> Result<TxnLogValue, TxnSchemaError> {
    let mut r = Reader(bytes);
    let version = r.i16()?;
    if !(0..=1).contains(&version) {
        return Err(TxnSchemaError::Version(version));
    }
    let flexible = version == 1;
    let producer_id = r.i64()?;
    let producer_epoch = r.i16()?;
    let timeout_ms = r.i32()?;
    let state_id = r.i8()?;
    let state = TxnState::from_id(state_id).ok_or(TxnSchemaError::State(state_id))?;
    let mut partitions = BTreeSet::new();
    let topics = r.array_len(flexible)?;
    for _ in 0..topics.unwrap_or(0) {
        let topic = r.string(flexible)?;
        let count = r.array_len(flexible)?;
        for _ in 0..count.unwrap_or(0) {
            partitions.insert((topic.clone(), r.i32()?));
        }
        if flexible {
            r.skip_tagged_fields(|_, _| Ok(()))?;
        }
    }
    let mut value = TxnLogValue {
        producer_id,
        producer_epoch,
        timeout_ms,
        state,
        partitions,
        last_update_ms: r.i64()?,
        start_ms: r.i64()?,
        previous_producer_id: -1,
        next_producer_id: -1,
        client_version: 0,
    };
    if flexible {
        r.skip_tagged_fields(|tag, data| {
            let mut field = Reader(data);
            match tag {
                0 => value.previous_producer_id = field.i64()?,
                1 => value.next_producer_id = field.i64()?,
                2 => value.client_version = field.i16()?,
                _ => {}
            }
            Ok(())
        })?;
    }
    Ok(value)
}

fn put_uvarint(out: &mut Vec<u8>, mut value: u32) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// An array's length: INT32 (-1 for null), or a compact array's length + 1 (0 for null).
fn put_array_len(out: &mut Vec<u8>, len: Option<usize>, flexible: bool) {
    match (len, flexible) {
        (None, false) => out.extend_from_slice(&(-1i32).to_be_bytes()),
        (Some(n), false) => out.extend_from_slice(&(n as i32).to_be_bytes()),
        (None, true) => put_uvarint(out, 0),
        (Some(n), true) => put_uvarint(out, n as u32 + 1),
    }
}

/// STRING (i16 length), or COMPACT_STRING (length + 1 as an unsigned varint) when flexible;
/// Kafka's bound of i16::MAX bytes either way.
fn put_string(out: &mut Vec<u8>, s: &str, flexible: bool) -> Result<(), TxnSchemaError> {
    let len = i16::try_from(s.len()).map_err(|_| TxnSchemaError::TooLong)?;
    if flexible {
        put_uvarint(out, len as u32 + 1);
    } else {
        out.extend_from_slice(&len.to_be_bytes());
    }
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
    fn uvarint(&mut self) -> Result<u32, TxnSchemaError> {
        let mut value = 0u32;
        for shift in (0..35).step_by(7) {
            let byte = self.take(1)?[0];
            value |= u32::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(TxnSchemaError::Truncated)
    }
    fn string(&mut self, flexible: bool) -> Result<String, TxnSchemaError> {
        let len = if flexible { self.uvarint()?.saturating_sub(1) as usize } else { self.i16()?.max(0) as usize };
        let bytes = self.take(len)?;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
    /// An array's length (`None`: null).
    fn array_len(&mut self, flexible: bool) -> Result<Option<usize>, TxnSchemaError> {
        if flexible {
            Ok(self.uvarint()?.checked_sub(1).map(|n| n as usize))
        } else {
            Ok(usize::try_from(self.i32()?).ok())
        }
    }
    /// A tagged-field section: each field's tag and bytes to `field`.
    fn skip_tagged_fields(
        &mut self,
        mut field: impl FnMut(u32, &[u8]) -> Result<(), TxnSchemaError>,
    ) -> Result<(), TxnSchemaError> {
        for _ in 0..self.uvarint()? {
            let tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            field(tag, self.take(size)?)?;
        }
        Ok(())
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
            previous_producer_id: -1,
            next_producer_id: -1,
            client_version: 0,
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

    #[test]
    fn transaction_version_2_values_are_flexible_v1_with_their_tagged_fields() {
        // Proves a TV2 value is v1 in Kafka's flexible layout (compact topic string and arrays,
        // a tagged-field section per partition entry, then the tags set), round-trips, and an
        // empty one writes a null partition list.
        let value = TxnLogValue {
            producer_id: 42,
            producer_epoch: 7,
            timeout_ms: 60_000,
            state: TxnState::PrepareCommit,
            partitions: [("a".to_string(), 0), ("a".to_string(), 1)].into_iter().collect(),
            last_update_ms: 1000,
            start_ms: 900,
            previous_producer_id: -1,
            next_producer_id: 43,
            client_version: 2,
        };
        let bytes = encode_value(&value).unwrap();
        assert_eq!(&bytes[..2], &1i16.to_be_bytes());
        // version, pid, epoch, timeout, status, [1 topic: "a" [0, 1] tags], timestamps,
        // 2 tags: NextProducerId (i64) and ClientTransactionVersion (i16).
        assert_eq!(bytes.len(), 2 + 8 + 2 + 4 + 1 + 1 + (1 + 1 + 1 + 8 + 1) + 16 + 1 + (2 + 8) + (2 + 2));
        assert_eq!(&bytes[bytes.len() - 4..], &[2, 2, 0, 2]);
        assert_eq!(decode_value(&bytes).unwrap(), value);
        let empty = TxnLogValue { state: TxnState::Empty, partitions: BTreeSet::new(), next_producer_id: -1, ..value };
        let bytes = encode_value(&empty).unwrap();
        assert_eq!(bytes[17], 0, "a null compact array");
        assert_eq!(decode_value(&bytes).unwrap(), empty);
    }
}
