//! Runs real guest components (examples/ and tests/guests/, built for wasm32-wasip2 with the
//! `wasm` profile) through the runtime: the data round trip, validators' verdicts, every
//! containment path (deadline,
//! memory cap, trap, panic, invalid and oversized output, failed init, poisoning), the
//! precompiled cache and log capture.
//!
//! The guests are built once per test run by one `cargo build` into `target/wasm`. A guest
//! that is missing, or does not build, fails its tests.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use runnel_runtime::{
    GuestError, InputBatch, InstanceSetup, KeyedState, Level, Limits, LogSink, Member, ModuleKind, OutputBatch,
    Runtime, RuntimeConfig, RuntimeError, TopicMetadata, TopicPartitions, TransformInstance, TransformModule,
    ValidatorModule, ValidatorSetup,
};

/// (crate name, directory relative to the workspace root)
const GUESTS: &[(&str, &str)] = &[
    ("runnel-example-identity", "examples/identity"),
    ("runnel-example-assignor", "examples/assignor"),
    ("runnel-example-filter", "examples/filter"),
    ("runnel-guest-spin", "tests/guests/spin"),
    ("runnel-guest-sleep", "tests/guests/sleep"),
    ("runnel-guest-membomb", "tests/guests/membomb"),
    ("runnel-guest-trap", "tests/guests/trap"),
    ("runnel-guest-panic", "tests/guests/panic"),
    ("runnel-guest-badtopic", "tests/guests/badtopic"),
    ("runnel-guest-oversized", "tests/guests/oversized"),
    ("runnel-guest-failinit", "tests/guests/failinit"),
    ("runnel-example-schema", "examples/schema"),
    ("runnel-guest-badvalidator", "tests/guests/badvalidator"),
    ("runnel-example-revenue", "examples/revenue"),
    ("runnel-guest-v01", "tests/guests/v01"),
    ("runnel-guest-nameassignor", "tests/guests/nameassignor"),
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("runtime/ has a parent").to_path_buf()
}

fn is_present(dir: &str) -> bool {
    let lib = workspace_root().join(dir).join("src/lib.rs");
    match std::fs::read_to_string(lib) {
        Ok(source) => source.trim() != "//! stub",
        Err(_) => false,
    }
}

/// Builds every present guest with one cargo command (the first test to get here waits for it;
/// the others wait on the lock) and returns each one's bytes.
fn guest_bytes() -> &'static HashMap<&'static str, Vec<u8>> {
    static GUEST_BYTES: OnceLock<HashMap<&'static str, Vec<u8>>> = OnceLock::new();
    GUEST_BYTES.get_or_init(|| {
        let present: Vec<&str> = GUESTS.iter().filter(|(_, dir)| is_present(dir)).map(|(name, _)| *name).collect();
        if present.is_empty() {
            return HashMap::new();
        }
        let root = workspace_root();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut command = Command::new(cargo);
        command.current_dir(&root).args(["build", "--profile", "wasm", "--target", "wasm32-wasip2", "--target-dir"]);
        command.arg(root.join("target/wasm"));
        for name in &present {
            command.args(["-p", name]);
        }
        let started = Instant::now();
        let status = command.status().expect("run cargo build for the guests");
        assert!(status.success(), "building the guests failed: {command:?}");
        eprintln!("built {} guest(s) in {:?}", present.len(), started.elapsed());
        present
            .into_iter()
            .map(|name| {
                let path = root.join("target/wasm/wasm32-wasip2/wasm").join(format!("{}.wasm", name.replace('-', "_")));
                let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
                (name, bytes)
            })
            .collect()
    })
}

/// The guest's bytes (`Some` always: a guest crate that is missing fails the test, it is not
/// skipped).
fn guest(name: &str) -> Option<Vec<u8>> {
    let bytes = guest_bytes().get(name).cloned();
    assert!(bytes.is_some(), "guest crate `{name}` is missing from tests/guests");
    bytes
}

struct Fixture {
    _dir: tempfile::TempDir,
    runtime: Runtime,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(RuntimeConfig::new(dir.path())).unwrap();
    Fixture { _dir: dir, runtime }
}

type Lines = Arc<Mutex<Vec<(Level, String)>>>;

fn capture() -> (LogSink, Lines) {
    let lines: Lines = Arc::default();
    let sink_lines = lines.clone();
    (Arc::new(move |level, line: &str| sink_lines.lock().unwrap().push((level, line.to_string()))), lines)
}

fn setup(limits: Limits, log: LogSink) -> InstanceSetup {
    InstanceSetup {
        parameters: vec![("greeting".into(), "hello".into())],
        output_topics: vec!["out-a".into(), "out-b".into()],
        limits,
        log,
        state: None,
    }
}

fn small_batch() -> InputBatch {
    let mut batch = InputBatch::new(0);
    batch.push(0, 1_000, Some(b"k"), Some(b"v"), &[("h", Some(b"x"))]);
    batch
}

fn transform(fixture: &Fixture, bytes: &[u8]) -> TransformModule {
    fixture.runtime.transform(bytes).unwrap()
}

/// Instantiates and processes one small batch: whichever step fails is the guest's failure.
fn first_batch(module: &TransformModule, limits: Limits) -> (Result<OutputBatch, GuestError>, Lines) {
    let (log, lines) = capture();
    let result = module.instantiate(setup(limits, log)).and_then(|mut instance| instance.process(&small_batch()));
    (result, lines)
}

fn instance(module: &TransformModule, limits: Limits) -> (TransformInstance, Lines) {
    let (log, lines) = capture();
    (module.instantiate(setup(limits, log)).unwrap(), lines)
}

/// Every field of every record, nulls and empty values included, survives the trip through the
/// identity guest; the instance is reused across batches.
#[test]
fn identity_round_trips_records() {
    let Some(bytes) = guest("runnel-example-identity") else { return };
    let fixture = fixture();
    let info = fixture.runtime.inspect(&bytes).unwrap();
    assert_eq!(info.kind, ModuleKind::Transform);
    assert_eq!(info.size, bytes.len());
    let module = transform(&fixture, &bytes);
    assert!(module.from_cache(), "inspect compiled and cached it");
    let (mut instance, _) = instance(&module, Limits::default());

    type Rec = (Option<&'static [u8]>, Option<&'static [u8]>, Vec<(&'static str, Option<&'static [u8]>)>);
    let records: Vec<Rec> = vec![
        (Some(b"k1"), Some(b"v1"), vec![("h1", Some(b"x")), ("null", None), ("empty", Some(b""))]),
        (None, Some(b""), vec![]),
        (Some(b""), None, vec![("\u{e9}t\u{e9}", Some(&[0, 255, 1]))]),
        (None, None, vec![]),
    ];
    let mut batch = InputBatch::new(7);
    for round in 0..3 {
        batch.clear();
        for (i, (key, value, headers)) in records.iter().enumerate() {
            batch.push(100 + i as i64, 1_700_000_000_000 + i as i64, *key, *value, headers);
        }
        let output = instance.process(&batch).unwrap();
        assert_eq!(output.records.len(), records.len(), "round {round}");
        for (record, (key, value, headers)) in output.records.iter().zip(&records) {
            assert_eq!(record.topic, 0);
            assert_eq!(output.key(record), *key);
            assert_eq!(output.value(record), *value);
            assert_eq!(output.headers(record).collect::<Vec<_>>(), *headers);
        }
        let timestamps: Vec<i64> = output.records.iter().map(|r| r.timestamp).collect();
        assert!(
            timestamps == [1_700_000_000_000, 1_700_000_000_001, 1_700_000_000_002, 1_700_000_000_003]
                || timestamps.iter().all(|&t| t == -1),
            "timestamps are copied or left to the broker: {timestamps:?}"
        );
    }
    // A large batch goes through in one call too.
    batch.clear();
    let value = vec![7u8; 1000];
    for i in 0..5_000 {
        batch.push(i, 0, None, Some(&value), &[]);
    }
    let output = instance.process(&batch).unwrap();
    assert_eq!(output.records.len(), 5_000);
    assert!(output.records.iter().all(|r| output.value(r) == Some(&value[..])));
    assert!(instance.memory_bytes() > 0);
    eprintln!("identity instance memory after a 5 MB batch: {} bytes", instance.memory_bytes());
}

/// The second runtime on the same cache directory loads the artifact instead of compiling it.
#[test]
fn second_runtime_loads_from_the_cache() {
    let Some(bytes) = guest("runnel-example-identity") else { return };
    let dir = tempfile::tempdir().unwrap();
    let first = Runtime::new(RuntimeConfig::new(dir.path())).unwrap();
    let started = Instant::now();
    let compiled = first.transform(&bytes).unwrap();
    let compile_time = started.elapsed();
    assert!(!compiled.from_cache());

    let second = Runtime::new(RuntimeConfig::new(dir.path())).unwrap();
    let started = Instant::now();
    let loaded = second.transform(&bytes).unwrap();
    let load_time = started.elapsed();
    assert!(loaded.from_cache());
    assert_eq!(loaded.sha256(), compiled.sha256());
    eprintln!("identity ({} bytes): compile {compile_time:?}, load from cache {load_time:?}", bytes.len());
    // The cached module works.
    let (mut instance, _) = instance(&loaded, Limits::default());
    assert_eq!(instance.process(&small_batch()).unwrap().records.len(), 1);
}

/// An infinite loop is stopped at the call deadline, and the instance is poisoned afterwards.
#[test]
fn spin_hits_the_deadline_and_poisons_the_instance() {
    let Some(bytes) = guest("runnel-guest-spin") else { return };
    let fixture = fixture();
    let module = transform(&fixture, &bytes);
    let timeout = Duration::from_millis(300);
    let limits = Limits { call_timeout: timeout, ..Limits::default() };
    let (mut instance, _) = instance(&module, limits);
    let started = Instant::now();
    let error = instance.process(&small_batch()).unwrap_err();
    let elapsed = started.elapsed();
    assert_eq!(error, GuestError::Deadline { timeout });
    assert!(elapsed >= timeout, "stopped early: {elapsed:?}");
    // Slack for a loaded CI machine; a guest the deadline missed would run for an hour.
    assert!(elapsed < timeout + Duration::from_secs(5), "stopped late: {elapsed:?}");
    eprintln!("spin stopped after {elapsed:?} (deadline {timeout:?})");
    match instance.process(&small_batch()) {
        Err(GuestError::Trap(message)) => assert!(message.contains("poisoned"), "{message}"),
        other => panic!("expected the poisoned-instance error, got {other:?}"),
    }
    // A fresh instance of the same module is usable again (and spins again).
    let (mut fresh, _) = self::instance(&module, limits);
    assert_eq!(fresh.process(&small_batch()).unwrap_err(), GuestError::Deadline { timeout });
}

/// A guest that sleeps (a host wait the epoch cannot interrupt) still meets its deadline: WASI
/// sleeps end at once, so it spins in wasm until the deadline stops it.
#[test]
fn sleep_hits_the_deadline_instead_of_blocking_in_the_host() {
    let Some(bytes) = guest("runnel-guest-sleep") else { return };
    let fixture = fixture();
    let module = transform(&fixture, &bytes);
    let timeout = Duration::from_millis(300);
    let limits = Limits { call_timeout: timeout, ..Limits::default() };
    let (mut instance, _) = instance(&module, limits);
    // On a thread: if sleeps blocked in the host, the call would not return for an hour.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let started = Instant::now();
        let result = instance.process(&small_batch());
        let _ = tx.send((result, started.elapsed()));
    });
    let (result, elapsed) = rx.recv_timeout(Duration::from_secs(30)).expect("the sleeping guest was not stopped");
    assert_eq!(result.unwrap_err(), GuestError::Deadline { timeout });
    // Slack for a loaded CI machine; a guest the deadline missed would run for an hour.
    assert!(elapsed < timeout + Duration::from_secs(5), "stopped late: {elapsed:?}");
    eprintln!("sleep stopped after {elapsed:?} (deadline {timeout:?})");
}

/// A guest that allocates without bound is stopped at the memory cap, reported as such.
#[test]
fn membomb_hits_the_memory_limit() {
    let Some(bytes) = guest("runnel-guest-membomb") else { return };
    let fixture = fixture();
    let module = transform(&fixture, &bytes);
    let limit = 32 * 1024 * 1024;
    let limits = Limits { memory_bytes: limit, ..Limits::default() };
    let (result, _) = first_batch(&module, limits);
    assert_eq!(result.unwrap_err(), GuestError::MemoryLimit { limit });
}

/// A guest trap (unreachable/abort) is a Trap and poisons the instance.
#[test]
fn trap_is_reported() {
    let Some(bytes) = guest("runnel-guest-trap") else { return };
    let fixture = fixture();
    let module = transform(&fixture, &bytes);
    let (mut instance, _) = instance(&module, Limits::default());
    let error = instance.process(&small_batch()).unwrap_err();
    assert!(matches!(error, GuestError::Trap(_)), "{error:?}");
    eprintln!("trap: {error}");
    let again = instance.process(&small_batch()).unwrap_err();
    assert!(matches!(&again, GuestError::Trap(m) if m.contains("poisoned")), "{again:?}");
}

/// A guest panic is a Trap whose message quotes the panic message (from the guest's stderr),
/// and the panic output also reaches the log sink.
#[test]
fn panic_message_reaches_the_error_and_the_log() {
    let Some(bytes) = guest("runnel-guest-panic") else { return };
    let fixture = fixture();
    let module = transform(&fixture, &bytes);
    let (result, lines) = first_batch(&module, Limits::default());
    let error = result.unwrap_err();
    eprintln!("panic: {error}");
    match &error {
        GuestError::Trap(message) => assert!(message.contains("boom"), "{message}"),
        other => panic!("expected a Trap, got {other:?}"),
    }
    let lines = lines.lock().unwrap();
    assert!(lines.iter().any(|(_, line)| line.contains("boom")), "log lines: {lines:?}");
}

/// Writing to an output topic index that does not exist is invalid output; the instance stays
/// usable because the guest itself returned normally.
#[test]
fn badtopic_is_invalid_output() {
    let Some(bytes) = guest("runnel-guest-badtopic") else { return };
    let fixture = fixture();
    let module = transform(&fixture, &bytes);
    let (mut instance, _) = instance(&module, Limits::default());
    for _ in 0..2 {
        match instance.process(&small_batch()) {
            Err(GuestError::InvalidOutput(message)) => assert!(message.contains("topic index 99"), "{message}"),
            other => panic!("expected InvalidOutput, got {other:?}"),
        }
    }
}

/// More output data than the limit is OutputTooLarge.
#[test]
fn oversized_output_is_refused() {
    let Some(bytes) = guest("runnel-guest-oversized") else { return };
    let fixture = fixture();
    let module = transform(&fixture, &bytes);
    let limits = Limits { memory_bytes: 128 * 1024 * 1024, ..Limits::default() };
    let (result, _) = first_batch(&module, limits);
    match result {
        Err(GuestError::OutputTooLarge { size, limit }) => {
            assert_eq!(limit, limits.output_bytes);
            assert!(size > limit);
        }
        other => panic!("expected OutputTooLarge, got {other:?}"),
    }
}

/// An `init` that returns an error fails instantiation with that message.
#[test]
fn failinit_fails_instantiation() {
    let Some(bytes) = guest("runnel-guest-failinit") else { return };
    let fixture = fixture();
    let module = transform(&fixture, &bytes);
    let (log, lines) = capture();
    match module.instantiate(setup(Limits::default(), log)) {
        Err(GuestError::Init(message)) => eprintln!("failinit: {message}"),
        other => panic!("expected Init, got {other:?}"),
    }
    eprintln!("failinit log: {:?}", lines.lock().unwrap());
}

/// The example assignor is recognised as one, refused as a transform, and produces an
/// assignment that passes the host's checks.
#[test]
fn assignor_assigns_every_partition() {
    let Some(bytes) = guest("runnel-example-assignor") else { return };
    let fixture = fixture();
    assert_eq!(fixture.runtime.inspect(&bytes).unwrap().kind, ModuleKind::Assignor);
    match fixture.runtime.transform(&bytes) {
        Err(RuntimeError::WrongWorld(message)) => {
            assert!(message.contains("transformer"), "{message}");
            eprintln!("assignor as a transform: {message}");
        }
        other => panic!("expected WrongWorld, got {other:?}"),
    }
    let module = fixture.runtime.assignor(&bytes).unwrap();
    let (log, _) = capture();
    let mut instance = module.instantiate(Limits::default(), log).unwrap();
    let name = instance.name().unwrap();
    assert!(!name.is_empty());
    let members: Vec<Member> = (0..3)
        .map(|i| Member {
            member_id: format!("m{i}"),
            rack: Some(format!("r{}", i % 2)),
            subscriptions: vec!["a".into(), "b".into()],
            owned: if i == 0 { vec![TopicPartitions { topic: "a".into(), partitions: vec![0] }] } else { vec![] },
        })
        .collect();
    let topics = vec![
        TopicMetadata {
            name: "a".into(),
            partition_sizes: vec![10, 20, 30, 40],
            partition_racks: vec![vec!["r0".into()], vec!["r1".into()], vec![], vec!["r0".into(), "r1".into()]],
        },
        TopicMetadata { name: "b".into(), partition_sizes: vec![5; 5], partition_racks: vec![] },
    ];
    let assignment = instance.assign(&members, &topics).unwrap();
    assert_eq!(assignment.len(), 3);
    let assigned: usize = assignment.iter().flat_map(|m| &m.partitions).map(|tp| tp.partitions.len()).sum();
    assert_eq!(assigned, 9);
    eprintln!("assignor `{name}`: {assignment:?}");

    // The host's compact form (racks interned, topics by index) reaches the guest intact: its
    // plan is the one the same code computes natively on the group built by names.
    use runnel_sdk::assign::{Assignor, Group};
    let group = Group::builder()
        .topic_in_racks("a", &[10, 20, 30, 40], &[&["r0"], &["r1"], &[], &["r0", "r1"]])
        .topic("b", &[5; 5])
        .member_in_rack("m0", "r0", &["a", "b"])
        .owning("a", &[0])
        .member_in_rack("m1", "r1", &["a", "b"])
        .member_in_rack("m2", "r0", &["a", "b"])
        .build();
    let native = group.plan(&runnel_example_assignor::RackAwareSize::assign(&group).unwrap());
    let guest: std::collections::BTreeMap<String, std::collections::BTreeMap<String, Vec<i32>>> = assignment
        .into_iter()
        .map(|m| (m.member_id, m.partitions.into_iter().map(|tp| (tp.topic, tp.partitions)).collect()))
        .collect();
    assert_eq!(guest, native);
}

/// An assignor of the first form (`partition-assignor`: members and topics by name), built with
/// wit-bindgen alone as assignors were before the SDK moved to `group-assignor`, still loads,
/// logs and assigns.
#[test]
fn an_assignor_of_the_first_form_still_loads_and_assigns() {
    let Some(bytes) = guest("runnel-guest-nameassignor") else { return };
    let fixture = fixture();
    assert_eq!(fixture.runtime.inspect(&bytes).unwrap().kind, ModuleKind::Assignor);
    let module = fixture.runtime.assignor(&bytes).unwrap();
    let (log, lines) = capture();
    let mut instance = module.instantiate(Limits::default(), log).unwrap();
    assert_eq!(instance.name().unwrap(), "name-round-robin");
    let member = |id: &str, topics: &[&str]| Member {
        member_id: id.into(),
        rack: None,
        subscriptions: topics.iter().map(|t| t.to_string()).collect(),
        owned: vec![],
    };
    let members = vec![member("m2", &["a", "b"]), member("m0", &["a"]), member("m1", &["a"])];
    let topic = |name: &str, n: usize| TopicMetadata {
        name: name.into(),
        partition_sizes: vec![1; n],
        partition_racks: vec![],
    };
    let assignment = instance.assign(&members, &[topic("a", 4), topic("b", 2)]).unwrap();
    let of = |id: &str, t: &str| -> Vec<i32> {
        let a = assignment.iter().find(|a| a.member_id == id).unwrap();
        a.partitions.iter().filter(|tp| tp.topic == t).flat_map(|tp| tp.partitions.clone()).collect()
    };
    assert_eq!(
        [of("m0", "a"), of("m1", "a"), of("m2", "a"), of("m2", "b")],
        [vec![0, 3], vec![1], vec![2], vec![0, 1]]
    );
    let lines = lines.lock().unwrap();
    assert!(lines.iter().any(|(_, l)| l == "assigning 2 topics to 3 members"), "{lines:?}");
}

/// A transform uploaded where an assignor is expected is refused, naming the missing export.
#[test]
fn transform_is_not_an_assignor() {
    let Some(bytes) = guest("runnel-example-identity") else { return };
    let fixture = fixture();
    match fixture.runtime.assignor(&bytes) {
        Err(RuntimeError::WrongWorld(message)) => assert!(message.contains("group-assignor"), "{message}"),
        other => panic!("expected WrongWorld, got {other:?}"),
    }
}

/// A guest's `log` import calls reach the log sink with their level, during the call.
#[test]
fn guest_log_calls_reach_the_log_sink() {
    let Some(bytes) = guest("runnel-example-filter") else { return };
    let fixture = fixture();
    let module = transform(&fixture, &bytes);
    let (log, lines) = capture();
    let setup = InstanceSetup {
        parameters: vec![("field".into(), "a".into()), ("op".into(), "exists".into())],
        output_topics: vec!["out".into()],
        limits: Limits::default(),
        log,
        state: None,
    };
    let mut instance = module.instantiate(setup).unwrap();
    let mut batch = InputBatch::new(0);
    batch.push(41, 0, None, Some(b"not json"), &[]);
    batch.push(42, 0, None, Some(br#"{"a": 1}"#), &[]);
    let output = instance.process(&batch).unwrap();
    assert_eq!(output.records.len(), 1);
    let lines = lines.lock().unwrap();
    assert!(
        lines.iter().any(|(level, line)| *level == Level::Warn && line.contains("not JSON") && line.contains("41")),
        "log lines: {lines:?}"
    );
}

fn validator_setup(parameters: &[(&str, &str)], limits: Limits, log: LogSink) -> ValidatorSetup {
    ValidatorSetup { parameters: parameters.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), limits, log }
}

fn values_batch(values: &[&str]) -> InputBatch {
    let mut batch = InputBatch::new(2);
    for (i, value) in values.iter().enumerate() {
        batch.push(i as i64, 1_000, None, Some(value.as_bytes()), &[]);
    }
    batch
}

/// The schema example accepts a batch of well-formed orders and refuses one with bad records,
/// naming each by index with the guest's reason; one instance serves batch after batch.
#[test]
fn schema_validator_accepts_and_rejects_batches() {
    let Some(bytes) = guest("runnel-example-schema") else { return };
    let fixture = fixture();
    assert_eq!(fixture.runtime.inspect(&bytes).unwrap().kind, ModuleKind::Validator);
    let module: ValidatorModule = fixture.runtime.validator(&bytes).unwrap();
    let setup = validator_setup(&[("required", "id,amount"), ("types", "amount:number")], Limits::default(), discard());
    let mut instance = module.instantiate(setup).unwrap();
    let good = values_batch(&[r#"{"id":"a","amount":1}"#, r#"{"id":"b","amount":2.5}"#]);
    assert_eq!(instance.validate(&good), Ok(Ok(())));
    let bad = values_batch(&[r#"{"id":"a","amount":1}"#, r#"{"id":"b"}"#, r#"{"id":"c","amount":"x"}"#]);
    let rejection = instance.validate(&bad).unwrap().unwrap_err();
    let named: Vec<(u32, &str)> = rejection.records.iter().map(|e| (e.index, e.message.as_str())).collect();
    assert_eq!(named, [(1, "missing required field `amount`"), (2, "field `amount` is a string, expected number")]);
    assert!(rejection.message.starts_with("record 1: missing required field `amount`"), "{}", rejection.message);
    assert_eq!(instance.validate(&good), Ok(Ok(())), "a rejection leaves the instance usable");
    // Not a transform, and a transform is not a validator.
    assert!(matches!(fixture.runtime.transform(&bytes), Err(RuntimeError::WrongWorld(m)) if m.contains("a validator")));
    let Some(identity) = guest("runnel-example-identity") else { return };
    assert!(
        matches!(fixture.runtime.validator(&identity), Err(RuntimeError::WrongWorld(m)) if m.contains("a transform"))
    );
}

/// A validator that traps, spins or bombs memory fails with that error and is poisoned; a
/// failing init is an Init error; the guest's log calls reach the sink; a rejection whose
/// entries share memory is lifted no further than the guest's memory cap.
#[test]
fn hostile_validators_are_contained() {
    let Some(bytes) = guest("runnel-guest-badvalidator") else { return };
    let fixture = fixture();
    let module = fixture.runtime.validator(&bytes).unwrap();
    let limits = Limits { memory_bytes: 16 << 20, call_timeout: Duration::from_millis(200), ..Limits::default() };
    let (log, lines) = capture();
    let mut instance = module.instantiate(validator_setup(&[], limits, log)).unwrap();
    assert_eq!(instance.validate(&values_batch(&["ok"])), Ok(Ok(())));
    let rejected = instance.validate(&values_batch(&["ok", "reject"])).unwrap().unwrap_err();
    assert_eq!(rejected.records.len(), 1);
    assert_eq!(rejected.records[0].index, 1);
    assert!(lines.lock().unwrap().iter().any(|(level, line)| *level == Level::Warn && line.contains("rejecting")));
    for (command, expected) in [("trap", "trap"), ("spin", "deadline"), ("membomb", "memory")] {
        let mut instance = module.instantiate(validator_setup(&[], limits, discard())).unwrap();
        let started = Instant::now();
        let error = instance.validate(&values_batch(&["ok", command])).unwrap_err();
        let matched = match expected {
            "trap" => matches!(error, GuestError::Trap(_)),
            "deadline" => matches!(error, GuestError::Deadline { .. }),
            _ => matches!(error, GuestError::MemoryLimit { .. }),
        };
        assert!(matched, "{command}: {error:?}");
        assert!(started.elapsed() < Duration::from_secs(10), "{command} took {:?}", started.elapsed());
        assert!(instance.is_poisoned(), "{command}");
        assert!(instance.validate(&values_batch(&["ok"])).is_err(), "{command}: a poisoned instance is not called");
    }
    match module.instantiate(validator_setup(&[("fail_init", "true")], limits, discard())) {
        Err(GuestError::Init(message)) => assert!(message.contains("init refused"), "{message}"),
        other => panic!("expected an Init error, got {other:?}"),
    }
    // 20 record errors sharing one 4 MiB string: lifted, 80 MiB, five times the guest's 16 MiB
    // memory (and under wasmtime's default bound of 128 MiB). The lift stops at the memory cap
    // and the call fails, poisoned, instead of the host copying the string 20 times.
    let mut instance = module.instantiate(validator_setup(&[], limits, discard())).unwrap();
    match instance.validate(&values_batch(&["ok", "alias"])) {
        Err(GuestError::Trap(message)) => assert!(message.contains("too much data"), "{message}"),
        // (Record errors counted, not printed: each message is 4 MiB.)
        other => panic!(
            "expected the lift to stop at the memory cap, got {:?}",
            other.map(|r| r.map_err(|e| e.records.len()))
        ),
    }
    assert!(instance.is_poisoned());
}

fn discard() -> LogSink {
    runnel_runtime::discard_logs()
}

fn orders(orders: &[(&str, f64)]) -> InputBatch {
    let mut batch = InputBatch::new(0);
    for (i, (customer, amount)) in orders.iter().enumerate() {
        let value = format!(r#"{{"customer":"{customer}","amount":{amount}}}"#);
        batch.push(i as i64, 0, None, Some(value.as_bytes()), &[]);
    }
    batch
}

/// The stateful example's state lives in the handle the host gives each instance: a batch's
/// changes are visible to it, kept across instances (an instance replaced after a trap sees the
/// same state), and a put past the limit fails the batch with the reason.
#[test]
fn a_stateful_transform_keeps_its_state_in_the_handle_across_instances() {
    let (Some(revenue), Some(identity)) = (guest("runnel-example-revenue"), guest("runnel-example-identity")) else {
        return;
    };
    let fixture = fixture();
    let module = transform(&fixture, &revenue);
    assert!(module.is_stateful(), "revenue imports state");
    assert!(!transform(&fixture, &identity).is_stateful(), "identity does not import state");
    assert_eq!(module.export(), "runnel:transform/transformer@0.2.0");

    let state = KeyedState::shared(1 << 20);
    let with_state =
        || InstanceSetup { state: Some(state.clone()), ..setup(Limits::default(), runnel_runtime::discard_logs()) };
    let mut first = module.instantiate(with_state()).unwrap();
    let output = first.process(&orders(&[("a", 10.0), ("a", 2.5), ("b", 1.0)])).unwrap();
    assert_eq!(output.records.len(), 3);
    let changes = state.lock().unwrap().batch_changes().count();
    assert_eq!(changes, 2, "one change per key");
    state.lock().unwrap().keep_batch();
    state.lock().unwrap().commit();
    drop(first);

    let mut second = module.instantiate(with_state()).unwrap();
    let output = second.process(&orders(&[("a", 1.0)])).unwrap();
    let value = output.value(&output.records[0]).unwrap();
    let totals: serde_json::Value = serde_json::from_slice(value).unwrap();
    assert_eq!(totals, serde_json::json!({"key": "a", "count": 3, "sum": 13.5}));

    let tiny = KeyedState::shared(20);
    let setup = InstanceSetup { state: Some(tiny.clone()), ..setup(Limits::default(), runnel_runtime::discard_logs()) };
    let mut bounded = module.instantiate(setup).unwrap();
    match bounded.process(&orders(&[("a-customer-with-a-long-name", 1.0)])) {
        Err(GuestError::Failed(message)) => assert!(message.contains("state_bytes_max of 20"), "{message}"),
        other => panic!("expected the guest to fail the batch: {other:?}"),
    }
    assert_eq!(tiny.lock().unwrap().size_bytes(), 0, "the refused put changed nothing");
}

/// A component built against the frozen 0.1.0 contract (wit-bindgen alone, before `state`
/// existed) still loads, logs through `logging@0.1.0` and runs.
#[test]
fn a_component_built_against_0_1_0_still_loads_and_runs() {
    let Some(bytes) = guest("runnel-guest-v01") else { return };
    let fixture = fixture();
    let info = fixture.runtime.inspect(&bytes).unwrap();
    assert_eq!(info.kind, ModuleKind::Transform);
    let module = transform(&fixture, &bytes);
    assert_eq!(module.export(), "runnel:transform/transformer@0.1.0");
    assert!(!module.is_stateful());
    let (result, lines) = first_batch(&module, Limits::default());
    let output = result.unwrap();
    assert_eq!(output.records.len(), 1);
    assert_eq!(output.value(&output.records[0]), Some(&b"v"[..]));
    let lines = lines.lock().unwrap();
    assert!(lines.iter().any(|(_, l)| l == "v0.1 guest writing to out-a,out-b"), "{lines:?}");
}

/// A component whose instances would cost the host hundreds of megabytes outside any memory
/// (a core module declaring 300,000 globals, instantiated 64 times: wasmtime allocates each
/// instance's globals in its VMContext, which no memory limit counts) is refused at upload with
/// what to shrink, before it is compiled or cached. Before, nothing bounded it: given a world's
/// exports it compiled, and every instance a node made of it took about 300 MiB.
#[test]
fn a_component_whose_instances_need_huge_host_memory_is_refused_at_upload() {
    use wasm_encoder::{
        Component, ConstExpr, GlobalSection, GlobalType, InstanceSection, Module, ModuleSection, ValType,
    };
    let mut globals = GlobalSection::new();
    for _ in 0..300_000 {
        globals.global(GlobalType { val_type: ValType::I32, mutable: false, shared: false }, &ConstExpr::i32_const(0));
    }
    let mut module = Module::new();
    module.section(&globals);
    let mut component = Component::new();
    component.section(&ModuleSection(&module));
    let mut instances = InstanceSection::new();
    for _ in 0..64 {
        instances.instantiate(0, Vec::<(&str, wasm_encoder::ModuleArg)>::new());
    }
    component.section(&instances);
    let bytes = component.finish();
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(RuntimeConfig::new(dir.path())).unwrap();
    match runtime.transform(&bytes) {
        Err(e @ RuntimeError::InstanceTooLarge { .. }) => {
            let message = e.to_string();
            assert!(message.contains("300000 globals") && message.contains("fewer globals"), "{message}");
        }
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("a component needing ~300 MiB per instance was accepted"),
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing was cached");
}
