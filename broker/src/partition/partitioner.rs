//! Kafka's default partitioner for keyed records (the Java client's and librdkafka's
//! `murmur2` partitioner), shared by every path that picks a partition for a client: HTTP
//! produce and transform outputs.

/// Kafka's murmur2 (the Java client's `Utils.murmur2`), so HTTP and Java/librdkafka producers
/// put a key in the same partition.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = SEED ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= (rest[2] as u32) << 16;
    }
    if rest.len() >= 2 {
        h ^= (rest[1] as u32) << 8;
    }
    if !rest.is_empty() {
        h ^= rest[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The Java client's default partition of a keyed record: `toPositive(murmur2(key)) % n`.
pub fn partition_for_key(key: &[u8], partitions: u32) -> i32 {
    ((murmur2(key) & 0x7fff_ffff) as u32 % partitions.max(1)) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafkas_test_vectors() {
        // Proves our murmur2 is Kafka's (vectors from Kafka's UtilsTest.testMurmur2).
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
            (b"abc", 479470107),
        ];
        for (data, hash) in cases {
            assert_eq!(murmur2(data), hash, "{:?}", String::from_utf8_lossy(data));
        }
    }
}
