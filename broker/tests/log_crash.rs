//! Crash-recovery tests of the partition log (`runnel::log::Log`), driven by a seeded PRNG.
//!
//! Each iteration builds a log of many batches over a few small segments, sometimes flushing
//! (which moves the recovery point), then "crashes" (drops the log without `close`) and damages
//! the files the way a crash or a bad disk would. Reopening must follow the recovery rule: every
//! fully written, valid batch before the damage is still there byte for byte, nothing at or after
//! the damaged batch is ever returned, the log end offset follows the last intact batch, new
//! appends continue from it, and a clean restart keeps everything.
//!
//! A failing iteration prints its seed; replay it with
//! `RUNNEL_CRASH_SEED=<seed> cargo test -p runnel-broker --test log_crash <test name>`, or search
//! longer with `RUNNEL_CRASH_ITERATIONS=2000`.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use runnel::log::batch::{BatchIter, RecordBatch};
use runnel::log::records::BatchBuilder;
use runnel::log::{
    AppendOrigin, CleanupPolicy, Compression, DirtyRatio, Log, LogConfig, LogContext, LogError, ManualClock,
};

const T0: i64 = 1_700_000_000_000;

const CHECKPOINT_FILE: &str = "runnel.checkpoint";
const CLEANED_DIR: &str = ".cleaned";
const CLEANED_COMMIT: &str = "COMMIT";

/// A temp dir on tmpfs when there is one: these tests fsync thousands of times, which only
/// costs time on a real disk and proves nothing more (a process crash keeps the page cache).
/// `RUNNEL_TEST_TMPDIR` picks another place.
fn temp_dir() -> tempfile::TempDir {
    let dir = std::env::var_os("RUNNEL_TEST_TMPDIR")
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from("/dev/shm")).filter(|d| d.is_dir()))
        .unwrap_or_else(std::env::temp_dir);
    tempfile::Builder::new().prefix("runnel-log-").tempdir_in(dir).expect("temp dir")
}

// ---------------------------------------------------------------------------------------------
// Seeds and randomness
// ---------------------------------------------------------------------------------------------

/// SplitMix64: tiny, fast and good enough to drive test scenarios.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `[lo, hi)`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        assert!(lo < hi, "empty range {lo}..{hi}");
        lo + (self.next_u64() % (hi - lo) as u64) as i64
    }
    fn index(&mut self, len: usize) -> usize {
        self.range(0, len as i64) as usize
    }
    fn chance(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}

/// Prints the seed of an iteration that panics, with the command that replays it.
struct SeedGuard {
    test: &'static str,
    seed: u64,
}

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "\n{} failed with seed {}; replay: RUNNEL_CRASH_SEED={} cargo test -p runnel-broker --test log_crash {}\n",
                self.test, self.seed, self.seed, self.test
            );
        }
    }
}

/// Runs `scenario` for `iterations` seeds starting at `base_seed` (`RUNNEL_CRASH_ITERATIONS`
/// overrides the count for a longer search), or only for the seed in `RUNNEL_CRASH_SEED`.
fn for_each_seed(test: &'static str, base_seed: u64, iterations: u64, scenario: impl Fn(u64)) {
    let seeds: Vec<u64> = match std::env::var("RUNNEL_CRASH_SEED") {
        Ok(seed) => vec![seed.trim().parse().expect("RUNNEL_CRASH_SEED is a u64")],
        Err(_) => {
            let iterations = std::env::var("RUNNEL_CRASH_ITERATIONS")
                .map_or(iterations, |n| n.trim().parse().expect("RUNNEL_CRASH_ITERATIONS is a count"));
            (0..iterations).map(|i| base_seed + i).collect()
        }
    };
    for seed in seeds {
        let _guard = SeedGuard { test, seed };
        scenario(seed);
    }
}

// ---------------------------------------------------------------------------------------------
// Building a crashed log
// ---------------------------------------------------------------------------------------------

/// A batch as the log must return it, with its records' offsets, timestamps, keys and values.
#[derive(Clone, Debug)]
struct Expected {
    base: i64,
    last: i64,
    bytes: Bytes,
    records: Vec<(i64, i64, Option<Bytes>, Option<Bytes>)>,
}

/// Builds a random producer batch. With `keys`, every record has one of that many keys and a
/// tenth are tombstones (a compacted topic).
fn random_batch(rng: &mut Rng, now_ms: i64, keys: Option<u64>) -> Bytes {
    let codec =
        [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd][rng.index(5)];
    let mut builder = BatchBuilder::new(codec);
    for _ in 0..rng.range(1, 9) {
        let timestamp = now_ms + rng.range(-5_000, 1);
        let key = match keys {
            Some(n) => Some(format!("key-{}", rng.range(0, n as i64)).into_bytes()),
            None if rng.chance(0.3) => None,
            None => Some(format!("k{}", rng.range(0, 20)).into_bytes()),
        };
        let len = rng.range(0, 150) as usize;
        let value = if keys.is_some() && rng.chance(0.1) {
            None
        } else if rng.chance(0.5) {
            Some(rng.bytes(len))
        } else {
            Some(vec![b'a' + rng.range(0, 26) as u8; len])
        };
        builder.push(timestamp, key.as_deref(), value.as_deref(), &[]);
    }
    builder.build().expect("valid batch").into_bytes()
}

/// Appends one random batch and returns what the log must hold for it.
fn append_random(log: &mut Log, rng: &mut Rng, keys: Option<u64>) -> Expected {
    let now = log.clock().now_ms();
    let bytes = random_batch(rng, now, keys);
    let epoch = rng.range(0, 3) as i32;
    let info = log.append_as_leader(&bytes, epoch, AppendOrigin::Client).expect("append");
    let mut stored = bytes.to_vec();
    stored[0..8].copy_from_slice(&info.first_offset.to_be_bytes());
    stored[12..16].copy_from_slice(&epoch.to_be_bytes());
    let expected = expected_from_bytes(Bytes::from(stored));
    assert_eq!((expected.base, expected.last), (info.first_offset, info.last_offset));
    expected
}

fn expected_from_bytes(bytes: Bytes) -> Expected {
    let batch = RecordBatch::parse(bytes.clone()).expect("a valid batch");
    let records = batch.records().expect("records decode").into_iter().map(|r| (r.offset, r.timestamp, r.key, r.value));
    Expected { base: batch.base_offset(), last: batch.last_offset(), bytes, records: records.collect() }
}

fn small_config(rng: &mut Rng) -> LogConfig {
    LogConfig {
        // Large enough for any random batch (at most 8 records of 150 bytes).
        segment_bytes: rng.range(1536, 4097) as u32,
        index_interval_bytes: rng.range(0, 513) as u32,
        segment_index_bytes: if rng.chance(0.25) { rng.range(48, 400) as u32 } else { 10 << 20 },
        ..LogConfig::default()
    }
}

/// Where one batch sits on disk.
#[derive(Clone, Copy, Debug)]
struct Placement {
    segment: usize,
    start: u64,
    end: u64,
}

/// A log that was written and then dropped without `close`.
struct Crashed {
    tmp: tempfile::TempDir,
    dir: PathBuf,
    config: LogConfig,
    clock: Arc<ManualClock>,
    batches: Vec<Expected>,
    bases: Vec<i64>,
    recovery_point: i64,
    placements: Vec<Placement>,
    segment_sizes: Vec<u64>,
}

impl Crashed {
    fn build(rng: &mut Rng) -> Crashed {
        let tmp = temp_dir();
        let dir = tmp.path().join("topic-0");
        let clock = ManualClock::new(T0);
        let config = small_config(rng);
        let mut log = Log::open(&dir, config.clone(), LogContext::standalone(clock.clone())).expect("open");
        let mut batches = Vec::new();
        for _ in 0..rng.range(20, 80) {
            batches.push(append_random(&mut log, rng, None));
            if rng.chance(0.08) {
                log.flush().expect("flush");
            }
            if rng.chance(0.04) {
                log.roll().expect("roll");
            }
            if rng.chance(0.1) {
                clock.advance(rng.range(0, 2_000));
            }
        }
        let bases = log.segment_base_offsets();
        let recovery_point = log.recovery_point();
        drop(log); // The crash: no close, no final flush or checkpoint.

        let mut placements = Vec::new();
        let mut segment_sizes = vec![0u64; bases.len()];
        for b in &batches {
            let segment = bases.iter().rposition(|base| *base <= b.base).expect("a segment holds every batch");
            let start = segment_sizes[segment];
            segment_sizes[segment] += b.bytes.len() as u64;
            placements.push(Placement { segment, start, end: segment_sizes[segment] });
        }
        let crashed = Crashed { tmp, dir, config, clock, batches, bases, recovery_point, placements, segment_sizes };
        for (i, size) in crashed.segment_sizes.iter().enumerate() {
            let len = fs::metadata(crashed.log_path(i)).expect("segment file").len();
            assert_eq!(len, *size, "segment {} holds exactly the appended batches", crashed.bases[i]);
        }
        crashed
    }

    fn log_path(&self, segment: usize) -> PathBuf {
        self.dir.join(format!("{:020}.log", self.bases[segment]))
    }
    fn index_path(&self, segment: usize, suffix: &str) -> PathBuf {
        self.dir.join(format!("{:020}{suffix}", self.bases[segment]))
    }

    /// Losing the checkpoint makes recovery validate every segment (a stale checkpoint is always
    /// safe: it only makes recovery do more). The log start offset is 0 here, so nothing else
    /// is lost with it.
    fn lose_checkpoint(&mut self) {
        fs::remove_file(self.dir.join(CHECKPOINT_FILE)).expect("remove checkpoint");
        self.recovery_point = 0;
    }

    /// Segments recovery validates: those that may hold offsets at or after the recovery point.
    fn recovered_segments(&self) -> Vec<usize> {
        (0..self.bases.len())
            .filter(|&i| i + 1 == self.bases.len() || self.bases[i + 1] > self.recovery_point)
            .collect()
    }

    fn batches_in(&self, segment: usize) -> Vec<usize> {
        (0..self.batches.len()).filter(|&i| self.placements[i].segment == segment).collect()
    }

    /// The number of leading batches that survive damage at byte `position` of `segment`: every
    /// batch of an earlier segment, and those of `segment` that end at or before `position`.
    fn intact_before(&self, segment: usize, position: u64) -> usize {
        self.placements
            .iter()
            .take_while(|p| p.segment < segment || (p.segment == segment && p.end <= position))
            .count()
    }

    fn open(&self) -> Log {
        Log::open(&self.dir, self.config.clone(), LogContext::standalone(self.clock.clone())).expect("reopen")
    }
}

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

/// Every batch readable from the log start offset, following reads across segments.
fn read_everything(log: &Log, max_bytes: usize) -> Vec<RecordBatch> {
    let mut out: Vec<RecordBatch> = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let bytes = log.read(next, max_bytes, i64::MAX).expect("read");
        if bytes.is_empty() {
            break;
        }
        for batch in BatchIter::new(bytes) {
            let batch = batch.expect("reads return valid batches");
            assert!(batch.last_offset() >= next, "a read never returns batches before the offset asked for");
            next = batch.last_offset() + 1;
            out.push(batch);
        }
    }
    out
}

/// The log holds exactly `expected`: same batches, same bytes, ending at the right offset.
fn assert_holds(log: &Log, expected: &[Expected], log_end_offset: i64, what: &str) {
    assert_eq!(log.log_end_offset(), log_end_offset, "{what}: log end offset");
    for max_bytes in [1usize, 700, 1 << 20] {
        let got = read_everything(log, max_bytes);
        let got_ranges: Vec<(i64, i64)> = got.iter().map(|b| (b.base_offset(), b.last_offset())).collect();
        let want_ranges: Vec<(i64, i64)> = expected.iter().map(|b| (b.base, b.last)).collect();
        assert_eq!(got_ranges, want_ranges, "{what}: batches read back (max_bytes {max_bytes})");
        for (g, w) in got.iter().zip(expected) {
            assert!(g.bytes() == &w.bytes, "{what}: batch {}..={} bytes differ", w.base, w.last);
        }
    }
    assert!(log.read(log_end_offset, 1 << 20, i64::MAX).expect("read at the end").is_empty());
    assert!(
        matches!(log.read(log_end_offset + 1, 1 << 20, i64::MAX), Err(LogError::OffsetOutOfRange { .. })),
        "{what}: nothing is readable past the log end offset"
    );
    // ListOffsets by timestamp uses the (possibly rebuilt) time index; it must agree too.
    let records: Vec<(i64, i64)> = expected.iter().flat_map(|b| b.records.iter().map(|r| (r.0, r.1))).collect();
    let step = (records.len() / 6).max(1);
    let mut probes: Vec<i64> = records.iter().step_by(step).flat_map(|r| [r.1, r.1 + 1]).collect();
    probes.extend([-1, T0 - 10_000, i64::MAX]);
    for ts in probes {
        let want = records.iter().find(|r| r.1 >= ts).copied();
        assert_eq!(log.offset_for_timestamp(ts).expect("offset_for_timestamp"), want, "{what}: timestamp {ts}");
    }
}

/// After damage was applied to a crashed log: reopen and check the recovery rule, then that the
/// log keeps working (appends, another crash, a clean restart).
/// `cut_expected` says whether recovery must report cut bytes.
fn check_recovery(crashed: &Crashed, rng: &mut Rng, intact: usize, cut_expected: bool, what: &str) {
    let mut log = crashed.open();
    let report = log.open_report().clone();
    assert!(!report.clean_shutdown, "{what}: a crash is not a clean shutdown");
    assert!(report.segments_recovered >= 1, "{what}: the active segment is always validated after a crash");
    assert_eq!(report.bytes_truncated > 0, cut_expected, "{what}: bytes cut ({report:?})");
    let mut expected: Vec<Expected> = crashed.batches[..intact].to_vec();
    let end = expected.last().map_or(crashed.bases[0], |b| b.last + 1);
    assert_holds(&log, &expected, end, &format!("{what}, after recovery ({report:?})"));
    assert_eq!(log.log_start_offset(), 0, "{what}: log start offset");
    assert_eq!(log.recovery_point(), end, "{what}: recovery validated everything, so it is all durable now");
    let bases = log.segment_base_offsets();
    assert!(bases.iter().all(|b| *b <= end), "{what}: no segment starts past the log end: {bases:?}");

    // New appends continue from the log end offset.
    for _ in 0..rng.range(1, 6) {
        let appended = append_random(&mut log, rng, None);
        assert_eq!(appended.base, expected.last().map_or(end, |b| b.last + 1), "{what}: appends continue");
        expected.push(appended);
    }
    let end = expected.last().expect("appended").last + 1;
    assert_holds(&log, &expected, end, &format!("{what}, after appending"));

    if rng.chance(0.5) {
        drop(log); // A second crash right after recovery loses nothing either.
        log = crashed.open();
        assert_eq!(log.open_report().bytes_truncated, 0, "{what}: second recovery cut nothing");
        assert_holds(&log, &expected, end, &format!("{what}, after a second crash"));
    }
    log.close().expect("close");
    let log = crashed.open();
    assert!(log.open_report().clean_shutdown, "{what}: clean close is recorded");
    assert_eq!(log.open_report().segments_recovered, 0, "{what}: a clean open scans nothing");
    assert_holds(&log, &expected, end, &format!("{what}, after a clean restart"));
    log.close().expect("close");
}

// ---------------------------------------------------------------------------------------------
// Damage
// ---------------------------------------------------------------------------------------------

/// Damage to a `.log` file: where it lands decides what must survive.
#[derive(Debug, Clone, Copy)]
enum LogDamage {
    /// The file is cut at a byte position (a torn write that lost the tail).
    Cut,
    /// A few bytes inside a batch change (a bad sector, a torn page).
    Flip,
    /// Bytes after the last batch that are not a whole valid batch (a torn append).
    Garbage,
}

/// What damage to a `.log` file must leave.
struct Survivors {
    /// How many of the appended batches survive (always a prefix).
    intact: usize,
    /// Whether recovery must cut bytes (false when the damage itself left whole batches only).
    cut_expected: bool,
    what: String,
}

/// Applies `damage` to a random segment that recovery validates; returns what must survive, or
/// `None` if the layout offers no place for it.
fn damage_log(crashed: &Crashed, rng: &mut Rng, damage: LogDamage) -> Option<Survivors> {
    let mut candidates = crashed.recovered_segments();
    if !matches!(damage, LogDamage::Garbage) {
        candidates.retain(|&i| crashed.segment_sizes[i] > 0);
    }
    if candidates.is_empty() {
        return None;
    }
    let segment = candidates[rng.index(candidates.len())];
    let last = segment + 1 == crashed.bases.len();
    let path = crashed.log_path(segment);
    let size = crashed.segment_sizes[segment];
    let in_segment = crashed.batches_in(segment);
    match damage {
        LogDamage::Cut => {
            // A cut exactly at a batch boundary of a closed segment leaves a shorter but valid
            // segment, which no reader of the format can tell apart from one that ended there
            // (see `closed_segment_cut_at_a_batch_boundary_...` below); closed segments get cuts
            // inside a batch. The active segment may be cut anywhere.
            let position = if last {
                rng.range(0, size as i64) as u64
            } else {
                let b = crashed.placements[in_segment[rng.index(in_segment.len())]];
                rng.range(b.start as i64 + 1, b.end as i64) as u64
            };
            let file = fs::OpenOptions::new().write(true).open(&path).expect("open segment");
            file.set_len(position).expect("cut");
            let boundary = position == 0 || in_segment.iter().any(|&i| crashed.placements[i].end == position);
            Some(Survivors {
                intact: crashed.intact_before(segment, position),
                cut_expected: !boundary,
                what: format!("cut segment {} at {position}/{size}", crashed.bases[segment]),
            })
        }
        LogDamage::Flip => {
            let b = crashed.placements[in_segment[rng.index(in_segment.len())]];
            let len = b.end - b.start;
            // Base offset (0..8) and partition leader epoch (12..16) sit outside the CRC in
            // Kafka's format, so a change there is undetectable by design; everything else of a
            // batch is covered by the length, magic and CRC checks.
            let within = loop {
                let at = rng.range(8, len as i64) as u64;
                if !(12..16).contains(&at) {
                    break at;
                }
            };
            let position = b.start + within;
            let mut bytes = fs::read(&path).expect("read segment");
            let count = rng.range(1, 5) as u64;
            for at in position..(position + count).min(size) {
                bytes[at as usize] ^= rng.range(1, 256) as u8;
            }
            fs::write(&path, bytes).expect("write segment");
            Some(Survivors {
                intact: crashed.intact_before(segment, b.start),
                cut_expected: true,
                what: format!(
                    "flipped {count} bytes at {position} (batch at {}) of segment {}",
                    b.start, crashed.bases[segment]
                ),
            })
        }
        LogDamage::Garbage => {
            let len = rng.range(1, 300) as usize;
            let kind = rng.index(3);
            let garbage = match kind {
                0 => rng.bytes(len),
                1 => vec![0u8; len],
                _ => {
                    // A torn append: the start of a real next batch, cut short.
                    let next = in_segment.last().map_or(crashed.bases[segment], |&i| crashed.batches[i].last + 1);
                    let mut batch = random_batch(rng, T0, None).to_vec();
                    batch[0..8].copy_from_slice(&next.to_be_bytes());
                    batch.truncate(rng.range(1, batch.len() as i64) as usize);
                    batch
                }
            };
            let mut bytes = fs::read(&path).expect("read segment");
            bytes.extend_from_slice(&garbage);
            fs::write(&path, bytes).expect("write segment");
            Some(Survivors {
                intact: crashed.intact_before(segment, size),
                cut_expected: true,
                what: format!("{} garbage bytes (kind {kind}) after segment {}", garbage.len(), crashed.bases[segment]),
            })
        }
    }
}

/// Ways an index file can be damaged. None of them may lose data: indexes are rebuilt.
#[derive(Debug, Clone, Copy)]
enum IndexDamage {
    Delete,
    /// Zeros over the whole file, keeping its length.
    ZeroFill,
    /// Zeros up to the preallocated size (what a crash leaves for an active segment).
    Preallocated,
    /// Random bytes over the whole file, keeping its length.
    Garbage,
    /// A torn write: the file cut (or extended) to a length inside an entry.
    Torn,
}

// Not here: an index cut at an entry boundary or with one entry changed to other plausible
// values. Both are well-formed indexes that only reading every batch could tell from the real
// ones (Kafka does not either); recovery rebuilds indexes whose form is wrong, and checks the
// last entries against their batches.
const INDEX_DAMAGE: [IndexDamage; 5] =
    [IndexDamage::Delete, IndexDamage::ZeroFill, IndexDamage::Preallocated, IndexDamage::Garbage, IndexDamage::Torn];

fn damage_index(crashed: &Crashed, rng: &mut Rng, kinds: &[IndexDamage]) -> String {
    let segment = rng.index(crashed.bases.len());
    let suffixes: &[&str] = match rng.index(3) {
        0 => &[".index"],
        1 => &[".timeindex"],
        _ => &[".index", ".timeindex"],
    };
    let mut done = Vec::new();
    for suffix in suffixes {
        let path = crashed.index_path(segment, suffix);
        let damage = kinds[rng.index(kinds.len())];
        let len = fs::metadata(&path).map_or(0, |m| m.len()) as usize;
        match damage {
            IndexDamage::Delete => {
                let _ = fs::remove_file(&path);
            }
            IndexDamage::ZeroFill => fs::write(&path, vec![0u8; len]).expect("write index"),
            IndexDamage::Preallocated => fs::write(&path, vec![0u8; len.max(1200)]).expect("write index"),
            IndexDamage::Garbage => fs::write(&path, rng.bytes(len)).expect("write index"),
            IndexDamage::Torn => {
                let entry: i64 = if *suffix == ".index" { 8 } else { 12 };
                let torn = entry * rng.range(0, len as i64 / entry + 1) + rng.range(1, entry);
                let file = fs::OpenOptions::new().write(true).create(true).truncate(false).open(&path).expect("open");
                file.set_len(torn as u64).expect("cut index");
            }
        }
        done.push(format!("{damage:?} {suffix} ({len} bytes)"));
    }
    format!("segment {}: {}", crashed.bases[segment], done.join(", "))
}

fn index_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .expect("list dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "index" || e == "timeindex"))
        .map(|p| (p.file_name().expect("name").to_string_lossy().into_owned(), fs::read(&p).expect("read index")))
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("create copy");
    for entry in fs::read_dir(from).expect("list") {
        let entry = entry.expect("entry");
        if entry.file_type().expect("type").is_file() {
            fs::copy(entry.path(), to.join(entry.file_name())).expect("copy");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

fn data_damage_scenario(seed: u64, damage: LogDamage) {
    let mut rng = Rng::new(seed);
    let mut crashed = Crashed::build(&mut rng);
    if rng.chance(0.3) {
        crashed.lose_checkpoint();
    }
    let Some(survivors) = damage_log(&crashed, &mut rng, damage) else { return };
    let mut what = format!(
        "seed {seed}: {}; segments {:?}, recovery point {}",
        survivors.what, crashed.bases, crashed.recovery_point
    );
    if rng.chance(0.2) {
        what += &format!("; and {}", damage_index(&crashed, &mut rng, &INDEX_DAMAGE));
    }
    check_recovery(&crashed, &mut rng, survivors.intact, survivors.cut_expected, &what);
}

#[test]
fn torn_tail_cut_keeps_every_whole_batch_before_the_cut() {
    // Proves a segment cut at any byte keeps every batch that ended before the cut and nothing after it.
    for_each_seed("torn_tail_cut_keeps_every_whole_batch_before_the_cut", 1_000, 50, |seed| {
        data_damage_scenario(seed, LogDamage::Cut)
    });
}

#[test]
fn flipped_bytes_cut_the_log_at_the_damaged_batch() {
    // Proves a corrupted batch and everything after it (later segments too) are dropped, and all before it kept.
    for_each_seed("flipped_bytes_cut_the_log_at_the_damaged_batch", 2_000, 50, |seed| {
        data_damage_scenario(seed, LogDamage::Flip)
    });
}

#[test]
fn garbage_after_the_last_batch_is_removed() {
    // Proves a torn append (garbage, zeros or a partial batch past the end) is cut and every batch kept.
    for_each_seed("garbage_after_the_last_batch_is_removed", 3_000, 30, |seed| {
        data_damage_scenario(seed, LogDamage::Garbage)
    });
}

#[test]
fn damaged_index_files_are_rebuilt_without_losing_data() {
    // Proves deleted, zeroed, cut or corrupt .index/.timeindex files of any segment are rebuilt, losing nothing.
    for_each_seed("damaged_index_files_are_rebuilt_without_losing_data", 4_000, 40, |seed| {
        let mut rng = Rng::new(seed);
        let mut crashed = Crashed::build(&mut rng);
        if rng.chance(0.3) {
            crashed.lose_checkpoint();
        }
        // The same crash without the index damage, recovered and closed: the index files a
        // rebuild must reproduce.
        let reference = crashed.tmp.path().join("reference");
        copy_dir(&crashed.dir, &reference);
        Log::open(&reference, crashed.config.clone(), LogContext::standalone(crashed.clock.clone()))
            .expect("open reference")
            .close()
            .expect("close");
        let mut what = format!("seed {seed}: segments {:?}, recovery point {}", crashed.bases, crashed.recovery_point);
        for _ in 0..rng.range(1, 3) {
            what += &format!("; {}", damage_index(&crashed, &mut rng, &INDEX_DAMAGE));
        }
        let intact = crashed.batches.len();
        let log = crashed.open();
        let end = crashed.batches.last().expect("batches").last + 1;
        assert_eq!(log.open_report().bytes_truncated, 0, "{what}: index damage cuts no data");
        assert_holds(&log, &crashed.batches, end, &format!("{what}, after recovery"));
        log.close().expect("close");
        assert_eq!(index_files(&crashed.dir), index_files(&reference), "{what}: rebuilt index files");
        check_recovery_after_close(&crashed, &mut rng, intact, &what);
    });
}

/// Like [`check_recovery`] for a log that was closed cleanly after recovering.
fn check_recovery_after_close(crashed: &Crashed, rng: &mut Rng, intact: usize, what: &str) {
    let mut log = crashed.open();
    assert!(log.open_report().clean_shutdown, "{what}");
    let mut expected = crashed.batches[..intact].to_vec();
    expected.push(append_random(&mut log, rng, None));
    let end = expected.last().expect("appended").last + 1;
    drop(log);
    let log = crashed.open();
    assert_holds(&log, &expected, end, &format!("{what}, after appending and crashing"));
    log.close().expect("close");
}

#[test]
fn damage_in_a_closed_segment_deletes_the_segments_after_it() {
    // Proves that when recovery cuts a closed segment, no batch of the later segments is ever returned.
    for_each_seed("damage_in_a_closed_segment_deletes_the_segments_after_it", 5_000, 20, |seed| {
        let mut rng = Rng::new(seed);
        let mut crashed = Crashed::build(&mut rng);
        if crashed.bases.len() < 2 {
            return;
        }
        crashed.lose_checkpoint();
        // Damage a closed segment: everything after it goes, its earlier batches stay.
        let segment = rng.index(crashed.bases.len() - 1);
        let in_segment = crashed.batches_in(segment);
        let b = crashed.placements[in_segment[rng.index(in_segment.len())]];
        let path = crashed.log_path(segment);
        let mut bytes = fs::read(&path).expect("read");
        let at = b.start as usize + rng.range(21, (b.end - b.start) as i64) as usize;
        bytes[at] ^= 0x5a;
        fs::write(&path, bytes).expect("write");
        let intact = crashed.intact_before(segment, b.start);
        let what = format!(
            "seed {seed}: flipped byte {at} of segment {} (batch at {}), segments {:?}",
            crashed.bases[segment], b.start, crashed.bases
        );
        {
            let log = crashed.open();
            assert_eq!(
                log.segment_base_offsets(),
                crashed.bases[..=segment].to_vec(),
                "{what}: later segments deleted"
            );
            assert!(log.open_report().bytes_truncated > 0, "{what}: {:?}", log.open_report());
            for later in &crashed.batches[intact..] {
                assert!(
                    log.read(later.base, 1 << 20, i64::MAX).map_or(true, |b| b.is_empty()),
                    "{what}: batch {} after the damage is readable",
                    later.base
                );
            }
        }
        // Recovered already: the second open (after this crash) has nothing left to cut.
        check_recovery(&crashed, &mut rng, intact, false, &what);
    });
}

#[test]
fn closed_segment_cut_at_a_batch_boundary_is_indistinguishable_from_a_shorter_segment() {
    // Proves (and documents) what recovery does when a closed segment loses whole batches at its end.
    // A segment that ends on a batch boundary is valid in Kafka's format; compaction makes gaps
    // between segments legal, so recovery cannot tell this damage from a segment that really
    // ended there. Batches before the cut must survive; the later segments stay readable.
    // Recovery itself never leaves this state: `Log::open` deletes the segments after a damaged
    // one (newest first, then fsyncs the directory) before it cuts the damaged segment.
    let mut rng = Rng::new(6_000);
    let dir = temp_dir();
    let clock = ManualClock::new(T0);
    let config = LogConfig { segment_bytes: 2048, ..LogConfig::default() };
    let mut log = Log::open(dir.path(), config.clone(), LogContext::standalone(clock.clone())).unwrap();
    let batches: Vec<Expected> = (0..30).map(|_| append_random(&mut log, &mut rng, None)).collect();
    let bases = log.segment_base_offsets();
    assert!(bases.len() >= 3, "{bases:?}");
    drop(log);
    fs::remove_file(dir.path().join(CHECKPOINT_FILE)).unwrap();
    // Cut the first segment after its first batch.
    let first_len = batches[0].bytes.len() as u64;
    fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join(format!("{:020}.log", 0)))
        .unwrap()
        .set_len(first_len)
        .unwrap();
    let log = Log::open(dir.path(), config, LogContext::standalone(clock)).unwrap();
    let mut expected = vec![batches[0].clone()];
    expected.extend(batches.iter().filter(|b| b.base >= bases[1]).cloned());
    assert_holds(&log, &expected, batches.last().unwrap().last + 1, "boundary cut");
    assert_eq!(log.segment_base_offsets(), bases);
}

// ---------------------------------------------------------------------------------------------
// Compaction crashes
// ---------------------------------------------------------------------------------------------

/// Where a crash interrupts the installation of a compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CompactionCrash {
    /// The cleaned files are written but not committed.
    BeforeCommit,
    /// Not committed and one cleaned file is torn or missing (a crash while writing them).
    TornBeforeCommit,
    /// `COMMIT` is written but no file is moved yet.
    CommittedNothingMoved,
    /// `COMMIT` is written and some files are moved into place.
    CommittedSomeMoved,
    /// Every file is moved, the `.cleaned` directory (with `COMMIT`) is still there.
    CommittedAllMoved,
    /// Installation finished.
    Installed,
}

const COMPACTION_CRASHES: [CompactionCrash; 6] = [
    CompactionCrash::BeforeCommit,
    CompactionCrash::TornBeforeCommit,
    CompactionCrash::CommittedNothingMoved,
    CompactionCrash::CommittedSomeMoved,
    CompactionCrash::CommittedAllMoved,
    CompactionCrash::Installed,
];

fn batches_of_file(path: &Path) -> Vec<Expected> {
    let bytes = Bytes::from(fs::read(path).expect("read cleaned segment"));
    BatchIter::new(bytes).map(|b| expected_from_bytes(b.expect("cleaned batch is valid").into_bytes())).collect()
}

fn compaction_scenario(seed: u64) {
    let mut rng = Rng::new(seed);
    let tmp = temp_dir();
    let dir = tmp.path().join("compacted-0");
    let clock = ManualClock::new(T0);
    let config = LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        delete_retention_ms: i64::MAX / 2,
        // Any dirty byte makes a cleaning due: the scenario wants a job whenever there is one.
        min_cleanable_dirty_ratio: DirtyRatio(0.0),
        ..small_config(&mut rng)
    };
    let keys = rng.range(2, 10) as u64;
    let mut log = Log::open(&dir, config.clone(), LogContext::standalone(clock.clone())).unwrap();
    for _ in 0..rng.range(30, 80) {
        append_random(&mut log, &mut rng, Some(keys));
    }
    let compacted_before = rng.chance(0.5);
    if compacted_before {
        // An earlier compaction leaves offset gaps for this one to work over.
        clock.advance(10_000);
        log.compact().unwrap();
        for _ in 0..rng.range(5, 30) {
            append_random(&mut log, &mut rng, Some(keys));
        }
    }
    if rng.chance(0.7) {
        log.roll().unwrap();
    }
    clock.advance(10_000);
    let bases = log.segment_base_offsets();
    let end = log.log_end_offset();
    let old: Vec<Expected> =
        read_everything(&log, 1 << 20).into_iter().map(|b| expected_from_bytes(b.into_bytes())).collect();
    let Some(job) = log.compaction_job(log.log_end_offset()) else {
        // After an earlier compaction, only segments closed since are dirty (there may be none).
        assert!(bases.len() == 1 || compacted_before, "seed {seed}: closed segments are cleanable once old enough");
        return;
    };
    let result = job.run(usize::MAX).unwrap();
    let cleaned_dir = dir.join(CLEANED_DIR);
    let mut cleaned_files: Vec<PathBuf> =
        fs::read_dir(&cleaned_dir).unwrap().map(|e| e.unwrap().path()).collect::<Vec<_>>();
    cleaned_files.sort();
    let cleaned_bases: Vec<i64> = cleaned_files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .map(|p| p.file_stem().unwrap().to_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(cleaned_bases, bases[..cleaned_bases.len()].to_vec(), "seed {seed}: the oldest segments are cleaned");
    let cleaned_end = bases[cleaned_bases.len()];
    let mut new: Vec<Expected> = Vec::new();
    for base in &cleaned_bases {
        new.extend(batches_of_file(&cleaned_dir.join(format!("{base:020}.log"))));
    }
    check_compacted(&old, &new, cleaned_end, seed);
    new.extend(old.iter().filter(|b| b.base >= cleaned_end).cloned());

    let crash = COMPACTION_CRASHES[rng.index(COMPACTION_CRASHES.len())];
    let what = format!("seed {seed}: crash {crash:?}, segments {bases:?}, cleaned {cleaned_bases:?}");
    match crash {
        CompactionCrash::Installed => {
            assert!(log.install_compaction(result).unwrap(), "{what}: nothing changed meanwhile");
            drop(log);
        }
        _ => {
            drop(result);
            drop(log);
        }
    }
    let movable: Vec<&PathBuf> = cleaned_files.iter().filter(|p| !p.ends_with(CLEANED_COMMIT)).collect();
    match crash {
        CompactionCrash::BeforeCommit | CompactionCrash::Installed => {}
        CompactionCrash::TornBeforeCommit => {
            let victim = movable[rng.index(movable.len())];
            if rng.chance(0.5) {
                fs::remove_file(victim).unwrap();
            } else {
                let len = fs::metadata(victim).unwrap().len();
                fs::OpenOptions::new().write(true).open(victim).unwrap().set_len(len / 2).unwrap();
            }
        }
        CompactionCrash::CommittedNothingMoved
        | CompactionCrash::CommittedSomeMoved
        | CompactionCrash::CommittedAllMoved => {
            fs::File::create(cleaned_dir.join(CLEANED_COMMIT)).unwrap();
            let moved = match crash {
                CompactionCrash::CommittedNothingMoved => 0,
                CompactionCrash::CommittedSomeMoved => rng.range(1, movable.len() as i64) as usize,
                _ => movable.len(),
            };
            let mut order: Vec<&PathBuf> = movable.clone();
            for i in (1..order.len()).rev() {
                order.swap(i, rng.index(i + 1));
            }
            for path in &order[..moved] {
                fs::rename(path, dir.join(path.file_name().unwrap())).unwrap();
            }
        }
    }
    if rng.chance(0.3) {
        fs::remove_file(dir.join(CHECKPOINT_FILE)).unwrap();
    }
    let committed = !matches!(crash, CompactionCrash::BeforeCommit | CompactionCrash::TornBeforeCommit);
    let expected = if committed { &new } else { &old };

    let mut log = Log::open(&dir, config.clone(), LogContext::standalone(clock.clone())).unwrap();
    assert!(!cleaned_dir.exists(), "{what}: .cleaned is finished or discarded on open");
    assert_eq!(log.open_report().bytes_truncated, 0, "{what}: no data damage");
    assert_eq!(log.segment_base_offsets(), bases, "{what}: segments keep their base offsets");
    assert_holds(&log, expected, end, &format!("{what}, after reopening"));
    let mut expected = expected.clone();
    expected.push(append_random(&mut log, &mut rng, Some(keys)));
    log.close().unwrap();
    let log = Log::open(&dir, config, LogContext::standalone(clock)).unwrap();
    assert!(log.open_report().clean_shutdown);
    let end = expected.last().unwrap().last + 1;
    assert_holds(&log, &expected, end, &format!("{what}, after restart"));
}

/// The cleaned batches hold exactly the newest record of each key among the cleaned segments
/// (tombstones kept: delete.retention.ms is long), at their original offsets.
fn check_compacted(old: &[Expected], new: &[Expected], cleaned_end: i64, seed: u64) {
    let in_range: Vec<_> =
        old.iter().filter(|b| b.base < cleaned_end).flat_map(|b| b.records.iter().cloned()).collect();
    let mut latest: HashMap<Option<Bytes>, i64> = HashMap::new();
    for r in &in_range {
        latest.insert(r.2.clone(), r.0);
    }
    let want: Vec<_> = in_range.iter().filter(|r| latest[&r.2] == r.0).cloned().collect();
    let got: Vec<_> = new.iter().flat_map(|b| b.records.iter().cloned()).collect();
    assert_eq!(got, want, "seed {seed}: compaction keeps the newest record per key");
}

#[test]
fn compaction_interrupted_by_a_crash_installs_all_or_nothing() {
    // Proves a crash at any point of installing a compaction leaves either the old or the new segments, never a mix.
    for_each_seed("compaction_interrupted_by_a_crash_installs_all_or_nothing", 7_000, 30, compaction_scenario);
}
