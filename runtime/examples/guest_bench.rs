//! Transform host benchmark, on one thread, without a broker: what a transform worker pays per
//! batch in the runtime, native redaction next to the same function in WASM, and the cost of
//! loading a module at restart (precompiled cache) against compiling it.
//!
//! ```text
//! cargo run --release -p runnel-runtime --example guest_bench
//! cargo run --release -p runnel-runtime --example guest_bench -- --seconds 3 --restarts 20
//! cargo run --release -p runnel-runtime --example guest_bench -- --wasm-dir target/wasm/wasm32-wasip2/wasm
//! ```
//!
//! Options: `--seconds S` per throughput run (default 3), `--batch R` records per `process`
//! call (default 1000, the broker's `batch_records_max` default), `--restarts N` cached loads
//! per module (default 20), `--wasm-dir DIR` to use already built components instead of running
//! `cargo build --profile wasm --target wasm32-wasip2 ... --target-dir target/wasm` first;
//! `--only assignors` runs section 5 alone, `--only validator` section 4;
//! `--validator-baseline FILE` compares section 4 with another build of the schema component
//! (10 alternating runs, medians: the machine's noise hits both alike).
//! `RUNNEL_WASM_PERFMAP=1` names guest functions in `perf report`.
//!
//! Runs and the goals they check:
//! 1. identity transform, 100 B and 1 KiB values (no key, no headers): records/s and ns/record
//!    of `TransformInstance::process` on a prebuilt batch (copy into the guest, the guest's loop,
//!    copy out, output validation). Goal: at least 1 M records/s on one core.
//! 2. redaction of JSON values with PII (~100 B and ~1 KiB, every record has an email, a card
//!    number and a phone number): the redact component through `process` against
//!    `runnel_example_redact::redact_json` called natively on the same values. Goal: WASM at
//!    most 2x the native cost per record. The identity guest on the same values is printed too:
//!    it is the boundary's share of the WASM figure. Outputs are checked equal first.
//! 3. restart with a cached module: `Runtime::transform` on a fresh cache directory (compile)
//!    once, then a new `Runtime` on the same directory, `transform` (loads the artifact) and
//!    `instantiate`, `--restarts` times; the median per module. Goal: under 100 ms per transform.
//!    `Runtime::new` (once per process, not per transform) is printed separately.
//!
//! 4. validator: the schema example's ns/record on ~100 B JSON orders.
//! 5. assignors: one `assign` of the two assignor examples (rack-aware-size, sticky-range) for
//!    a group of 100 members over 10 topics of 100 partitions (sizes and racks random, members
//!    in 3 racks), the instance reused as the broker does, against the same code called
//!    natively (the plans are checked equal first). The broker's 1 s default deadline is the
//!    budget: ms per assignment and what share of it one takes.
//!
//! Run it on a quiet machine: throughput runs are single-threaded, but compiling uses every core.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use runnel_runtime::{discard_logs, InputBatch, InstanceSetup, Limits, Runtime, RuntimeConfig, TransformModule};

const IDENTITY: &str = "runnel-example-identity";
const REDACT: &str = "runnel-example-redact";
const SCHEMA: &str = "runnel-example-schema";
const BIG: &str = "runnel-guest-big";
const RACK_AWARE: &str = "runnel-example-assignor";
const STICKY_RANGE: &str = "runnel-example-sticky-range";

struct Options {
    seconds: f64,
    batch: usize,
    restarts: usize,
    wasm_dir: Option<PathBuf>,
    /// `--only assignors` or `--only validator`: that section alone (for profiling it).
    only: Option<String>,
    /// `--validator-baseline FILE`: another schema component to compare section 4 with.
    validator_baseline: Option<PathBuf>,
}

fn parse_args() -> Options {
    let mut options =
        Options { seconds: 3.0, batch: 1000, restarts: 20, wasm_dir: None, only: None, validator_baseline: None };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--seconds" => options.seconds = value.parse().expect("--seconds S"),
            "--batch" => options.batch = value.parse().expect("--batch R"),
            "--restarts" => options.restarts = value.parse().expect("--restarts N"),
            "--wasm-dir" => options.wasm_dir = Some(PathBuf::from(value)),
            "--only" => {
                assert!(
                    value == "assignors" || value == "validator",
                    "--only takes `assignors` (section 5) or `validator` (section 4), not {value}"
                );
                options.only = Some(value);
            }
            "--validator-baseline" => options.validator_baseline = Some(PathBuf::from(value)),
            other => panic!("unknown flag {other} (see the header of runtime/examples/guest_bench.rs)"),
        }
    }
    assert!(options.batch > 0 && options.restarts > 0 && options.seconds > 0.0);
    options
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("runtime/ has a parent").to_path_buf()
}

/// The components' bytes, built first unless `--wasm-dir` names where they are.
fn components(options: &Options) -> Vec<(&'static str, Vec<u8>)> {
    let crates = [IDENTITY, REDACT, BIG, SCHEMA, RACK_AWARE, STICKY_RANGE];
    let dir = match &options.wasm_dir {
        Some(dir) => dir.clone(),
        None => {
            let root = workspace_root();
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut command = Command::new(cargo);
            command.current_dir(&root).args(["build", "--profile", "wasm", "--target", "wasm32-wasip2"]);
            command.arg("--target-dir").arg(root.join("target/wasm"));
            for name in crates {
                command.args(["-p", name]);
            }
            let status = command.status().expect("run cargo build for the guests");
            assert!(status.success(), "building the guests failed: {command:?}");
            root.join("target/wasm/wasm32-wasip2/wasm")
        }
    };
    crates
        .into_iter()
        .map(|name| {
            let path = dir.join(format!("{}.wasm", name.replace('-', "_")));
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            (name, bytes)
        })
        .collect()
}

/// Deterministic generator (xorshift64): the same records on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    fn digits(&mut self, n: usize) -> String {
        (0..n).map(|_| char::from(b'0' + self.below(10) as u8)).collect()
    }
}

const FIRST: &[&str] = &["alice", "bob", "chloe", "dmitri", "emma", "farid", "grace", "hiro", "ines", "jonas"];
const LAST: &[&str] = &["smith", "garcia", "muller", "rossi", "novak", "tanaka", "okafor", "larsen", "dubois"];
const DOMAINS: &[&str] = &["example.com", "mail.example.org", "corp.example.co.uk", "ex-ample.net"];
const CITIES: &[&str] = &["London", "Lyon", "Berlin", "Osaka", "Lagos", "Oslo", "Porto", "Austin"];
const PRODUCTS: &[&str] = &["USB-C cable 2m", "Espresso beans 1kg", "Desk lamp", "Notebook A5", "Headphones"];

/// A 16-digit card number that passes the Luhn check, grouped by four.
fn card(rng: &mut Rng) -> String {
    let mut digits: Vec<u32> = std::iter::once(4).chain((0..14).map(|_| rng.below(10) as u32)).collect();
    // The check digit makes the doubled-from-the-right sum a multiple of ten.
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| if i % 2 == 0 { (d * 2) - if d >= 5 { 9 } else { 0 } } else { d })
        .sum();
    digits.push((10 - sum % 10) % 10);
    let text: String = digits.iter().map(|d| char::from_digit(*d, 10).expect("a digit")).collect();
    format!("{} {} {} {}", &text[..4], &text[4..8], &text[8..12], &text[12..])
}

fn phone(rng: &mut Rng) -> String {
    match rng.below(3) {
        0 => format!("+44 20 {} {}", rng.digits(4), rng.digits(4)),
        1 => format!("+1 ({}) {}-{}", 200 + rng.below(800), rng.digits(3), rng.digits(4)),
        _ => format!("{}-{}-{}", 200 + rng.below(800), rng.digits(3), rng.digits(4)),
    }
}

fn email(rng: &mut Rng) -> String {
    format!("{}.{}{}@{}", rng.pick(FIRST), rng.pick(LAST), rng.below(100), rng.pick(DOMAINS))
}

/// About 100 B: a user record with an email, a card and a phone number.
fn small_json(rng: &mut Rng, id: usize) -> String {
    format!(r#"{{"id":{id},"email":"{}","card":"{}","tel":"{}"}}"#, email(rng), card(rng), phone(rng))
}

/// About 1 KiB: an order event; PII in fields and in free text, the rest plain values.
fn large_json(rng: &mut Rng, id: usize) -> String {
    let (first, last) = (rng.pick(FIRST), rng.pick(LAST));
    let mut items = String::new();
    let mut json = String::new();
    for i in 0.. {
        json = format!(
            concat!(
                r#"{{"event":"order_placed","order_id":"ord-{id:08}","ts":"2024-05-{day:02}T12:{min:02}:07Z","#,
                r#""customer":{{"id":{cid},"name":"{first} {last}","email":"{email}","phone":"{phone}","#,
                r#""address":{{"street":"{num} High Street","city":"{city}","postcode":"SW1A 1AA"}}}},"#,
                r#""payment":{{"method":"card","card":"{card}","expiry":"08/27","amount":{amount}.99,"#,
                r#""currency":"EUR"}},"items":[{items}],"#,
                r#""notes":"Please call {phone2} or write to {email2} before delivery, gate code 4411.","#,
                r#""channel":"web","user_agent":"Mozilla/5.0 (X11; Linux x86_64; rv:126.0) Gecko/20100101 Firefox/126.0"}}"#
            ),
            id = id,
            day = 1 + id % 28,
            min = id % 60,
            cid = 100_000 + rng.below(900_000),
            first = first,
            last = last,
            email = email(rng),
            phone = phone(rng),
            num = 1 + rng.below(200),
            city = rng.pick(CITIES),
            card = card(rng),
            amount = 10 + rng.below(990),
            items = items,
            phone2 = phone(rng),
            email2 = email(rng),
        );
        if json.len() >= 960 {
            break;
        }
        if i > 0 {
            items.push(',');
        }
        items.push_str(&format!(
            r#"{{"sku":"SKU-{:05}","name":"{}","qty":{},"price":{}.50}}"#,
            rng.below(100_000),
            rng.pick(PRODUCTS),
            1 + rng.below(5),
            1 + rng.below(300)
        ));
    }
    json
}

fn batch_of(values: &[Vec<u8>]) -> InputBatch {
    let mut batch = InputBatch::new(0);
    for (offset, value) in values.iter().enumerate() {
        batch.push(offset as i64, 1_714_563_000_000 + offset as i64, None, Some(value), &[]);
    }
    batch
}

fn setup() -> InstanceSetup {
    InstanceSetup {
        parameters: Vec::new(),
        output_topics: vec!["out".into()],
        limits: Limits::default(),
        log: discard_logs(),
        state: None,
    }
}

/// Runs `step` (which handles `per_step` records) for about `seconds` after a short warm-up;
/// returns nanoseconds per record.
/// Section 5: each assignor example through the runtime and natively on one large group.
fn assignors(runtime: &Runtime, rack_aware: &[u8], sticky_range: &[u8], seconds: f64) {
    use runnel_sdk::assign::{Assignor, Group};
    use std::collections::BTreeMap;
    const MEMBERS: usize = 100;
    const TOPICS: usize = 10;
    const PARTITIONS: usize = 100;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let racks = ["r1", "r2", "r3"];
    let topic_names: Vec<String> = (0..TOPICS).map(|t| format!("topic-{t}")).collect();
    let topics: Vec<runnel_runtime::TopicMetadata> = topic_names
        .iter()
        .map(|name| runnel_runtime::TopicMetadata {
            name: name.clone(),
            partition_sizes: (0..PARTITIONS).map(|_| rng.below(1 << 30) as u64).collect(),
            partition_racks: (0..PARTITIONS)
                .map(|p| vec![racks[p % 3].to_string(), racks[(p + 1) % 3].to_string()])
                .collect(),
        })
        .collect();
    let members: Vec<runnel_runtime::Member> = (0..MEMBERS)
        .map(|m| runnel_runtime::Member {
            member_id: format!("member-{m:03}"),
            rack: Some(racks[m % 3].to_string()),
            subscriptions: topic_names.clone(),
            owned: Vec::new(),
        })
        .collect();
    // The same group by names for the native runs (the SDK's compact form, as the guest sees it).
    let mut builder = Group::builder();
    for t in &topics {
        let racks: Vec<Vec<&str>> = t.partition_racks.iter().map(|r| r.iter().map(String::as_str).collect()).collect();
        let racks: Vec<&[&str]> = racks.iter().map(Vec::as_slice).collect();
        builder = builder.topic_in_racks(&t.name, &t.partition_sizes, &racks);
    }
    for m in &members {
        let subscriptions: Vec<&str> = m.subscriptions.iter().map(String::as_str).collect();
        builder = builder.member_in_rack(&m.member_id, m.rack.as_deref().unwrap_or_default(), &subscriptions);
    }
    let group = builder.build();
    println!(
        "\n5. assignors: one assignment of {MEMBERS} members x {TOPICS} topics x {PARTITIONS} partitions \
         (budget: the 1 s default deadline)"
    );
    for (name, bytes, native) in [
        (RACK_AWARE, rack_aware, runnel_example_assignor::RackAwareSize::assign as fn(&Group) -> _),
        (STICKY_RANGE, sticky_range, runnel_example_sticky_range::StickyRange::assign),
    ] {
        let module = runtime.assignor(bytes).expect("assignor component");
        let mut instance = module.instantiate(Limits::default(), discard_logs()).expect("instantiate assignor");
        let guest = instance.assign(&members, &topics).expect("guest assignment");
        let guest_plan: BTreeMap<String, BTreeMap<String, Vec<i32>>> = guest
            .into_iter()
            .map(|a| (a.member_id, a.partitions.into_iter().map(|tp| (tp.topic, tp.partitions)).collect()))
            .collect();
        let native_plan = group.plan(&native(&group).expect("native assignment"));
        assert!(guest_plan == native_plan, "{name}: the guest's plan differs from the native one");
        let wasm_ns = measure(seconds, 1, || {
            black_box(instance.assign(black_box(&members), black_box(&topics)).expect("assign"));
        });
        let native_ns = measure(seconds, 1, || {
            black_box(native(black_box(&group)).expect("assign"));
        });
        println!(
            "   {name}: WASM {:>7.2} ms per assignment (host checks included), native {:>7.2} ms; \
             WASM/native {:.2}x; {:.2} % of the 1 s deadline",
            wasm_ns / 1e6,
            native_ns / 1e6,
            wasm_ns / native_ns,
            wasm_ns / 1e7
        );
    }
}

fn measure(seconds: f64, per_step: usize, mut step: impl FnMut()) -> f64 {
    let warm_up = Instant::now();
    while warm_up.elapsed() < Duration::from_secs_f64((seconds / 10.0).min(0.5)) {
        step();
    }
    let (start, mut steps) = (Instant::now(), 0u64);
    while start.elapsed() < Duration::from_secs_f64(seconds) {
        step();
        steps += 1;
    }
    start.elapsed().as_nanos() as f64 / (steps as f64 * per_step as f64)
}

/// ns/record of `process` on `batch`, after checking it returns one output per input.
fn wasm_ns(module: &TransformModule, batch: &InputBatch, seconds: f64) -> f64 {
    let mut instance = module.instantiate(setup()).expect("instantiate");
    let records = instance.process(batch).expect("process").records.len();
    assert_eq!(records, batch.len(), "one output record per input record");
    measure(seconds, batch.len(), || {
        black_box(instance.process(black_box(batch)).expect("process"));
    })
}

/// Section 4: the schema validator's ns/record on ~100 B orders; with `--validator-baseline`,
/// that component and this one measured in turn, 10 rounds, and the medians compared.
fn validator(runtime: &Runtime, schema: &[u8], identity: &TransformModule, options: &Options) {
    println!("\n4. validator: the schema example on ~100 B JSON orders (every record valid)");
    let values: Vec<Vec<u8>> = (0..options.batch)
        .map(|n| {
            format!(
                r#"{{"id":"o-{n:09}","amount":{}.5,"customer":"c-{}","pad":"xxxxxxxxxxxxxxxxxxxxxx"}}"#,
                n % 1000,
                n % 97
            )
            .into_bytes()
        })
        .collect();
    let batch = batch_of(&values);
    let instance = |bytes: &[u8]| {
        let parameters = [("required", "id,amount,customer"), ("types", "id:string,amount:number,customer:string")];
        let mut instance = runtime
            .validator(bytes)
            .expect("schema component")
            .instantiate(runnel_runtime::ValidatorSetup {
                parameters: parameters.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                limits: Limits::default(),
                log: discard_logs(),
            })
            .expect("instantiate schema");
        assert_eq!(instance.validate(&batch), Ok(Ok(())), "every order is valid");
        instance
    };
    let mut current = instance(schema);
    let run = |instance: &mut runnel_runtime::ValidatorInstance, seconds: f64| {
        measure(seconds, batch.len(), || {
            black_box(instance.validate(black_box(&batch)).expect("validate")).expect("accepted");
        })
    };
    let Some(path) = &options.validator_baseline else {
        let wasm = run(&mut current, options.seconds);
        let boundary = wasm_ns(identity, &batch, options.seconds);
        println!(
            "   mean {:>4} B: validate {wasm:>7.1} ns/record (identity transform on the same batch {boundary:>6.1})",
            mean_len(&values)
        );
        return;
    };
    let baseline_bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let mut baseline = instance(&baseline_bytes);
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        theirs.push(run(&mut baseline, options.seconds / 10.0));
        ours.push(run(&mut current, options.seconds / 10.0));
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (ours, theirs) = (median(ours), median(theirs));
    println!(
        "   mean {:>4} B, medians of 10 alternating runs: validate {ours:>7.1} ns/record, baseline {} \
         {theirs:>7.1} ns/record ({:.2}x)",
        mean_len(&values),
        path.display(),
        ours / theirs
    );
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

fn mean_len(values: &[Vec<u8>]) -> usize {
    values.iter().map(Vec::len).sum::<usize>() / values.len().max(1)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let options = parse_args();
    let components = components(&options);
    let bytes = |name: &str| &components.iter().find(|(n, _)| *n == name).expect("built above").1;
    let cache = tempfile::tempdir().expect("temp dir");
    let runtime = Runtime::new(RuntimeConfig::new(cache.path())).expect("runtime");
    if options.only.as_deref() == Some("assignors") {
        assignors(&runtime, bytes(RACK_AWARE), bytes(STICKY_RANGE), options.seconds);
        return;
    }
    let identity = runtime.transform(bytes(IDENTITY)).expect("identity component");
    if options.only.as_deref() == Some("validator") {
        validator(&runtime, bytes(SCHEMA), &identity, &options);
        return;
    }
    let redact = runtime.transform(bytes(REDACT)).expect("redact component");
    let seconds = options.seconds;
    println!("one thread, batches of {} records, {seconds} s per run", options.batch);

    println!("\n1. identity transform (goal: >= 1 M records/s on one core)");
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    for size in [100usize, 1024] {
        let values: Vec<Vec<u8>> =
            (0..options.batch).map(|_| (0..size).map(|_| b' ' + rng.below(95) as u8).collect()).collect();
        let ns = wasm_ns(&identity, &batch_of(&values), seconds);
        let per_sec = 1e9 / ns;
        println!(
            "   {size:>4} B values: {:>6.2} M records/s ({ns:>6.1} ns/record, {:>7.1} MiB/s); {:.2}x goal: {}",
            per_sec / 1e6,
            per_sec * size as f64 / (1 << 20) as f64,
            per_sec / 1e6,
            verdict(per_sec >= 1e6)
        );
    }

    println!("\n2. redaction, WASM vs native on the same records (goal: WASM <= 2x native cost)");
    for (label, large) in [("~100 B", false), ("~1 KiB", true)] {
        let values: Vec<Vec<u8>> = (0..options.batch)
            .map(|id| if large { large_json(&mut rng, id) } else { small_json(&mut rng, id) }.into_bytes())
            .collect();
        let batch = batch_of(&values);
        // Same work on both sides: every record has PII, and the guest's output is the native one.
        let expected: Vec<Vec<u8>> = values.iter().map(|v| runnel_example_redact::redact_json(v)).collect();
        let has_all = |e: &Vec<u8>| {
            let text = String::from_utf8_lossy(e);
            ["[EMAIL]", "[CARD]", "[PHONE]"].iter().all(|kind| text.contains(kind))
        };
        assert!(expected.iter().all(has_all), "every generated record has an email, a card and a phone");
        let mut instance = redact.instantiate(setup()).expect("instantiate redact");
        let output = instance.process(&batch).expect("process");
        let got: Vec<&[u8]> = output.records.iter().map(|r| output.value(r).unwrap_or_default()).collect();
        assert!(got.len() == expected.len() && got.iter().zip(&expected).all(|(g, e)| g == e), "WASM != native");
        drop(instance);

        let native = measure(seconds, values.len(), || {
            for value in &values {
                black_box(runnel_example_redact::redact_json(black_box(value)));
            }
        });
        let wasm = wasm_ns(&redact, &batch, seconds);
        let boundary = wasm_ns(&identity, &batch, seconds);
        let ratio = wasm / native;
        println!(
            "   {label} JSON (mean {:>4} B): native {native:>7.1} ns/record, WASM {wasm:>7.1} ns/record \
             (identity guest on the same batch {boundary:>6.1}); WASM/native {ratio:.2}x, goal <= 2x: {}",
            mean_len(&values),
            verdict(ratio <= 2.0)
        );
    }
    validator(&runtime, bytes(SCHEMA), &identity, &options);
    assignors(&runtime, bytes(RACK_AWARE), bytes(STICKY_RANGE), seconds);
    drop((identity, redact, runtime, cache));

    println!(
        "\n3. restart with a cached module: new Runtime, transform() + instantiate(), median of {} \
         (goal: < 100 ms per transform)",
        options.restarts
    );
    for (name, module_bytes) in components.iter().filter(|(name, _)| [IDENTITY, REDACT, BIG].contains(name)) {
        let cache = tempfile::tempdir().expect("temp dir");
        let config = RuntimeConfig::new(cache.path());
        let runtime = Runtime::new(config.clone()).expect("runtime");
        let started = Instant::now();
        let module = runtime.transform(module_bytes).expect("compile");
        let compile = started.elapsed();
        assert!(!module.from_cache(), "a fresh cache directory compiles");
        let started = Instant::now();
        drop(module.instantiate(setup()).expect("instantiate"));
        let first_instantiate = started.elapsed();
        drop((module, runtime));

        let (mut news, mut loads, mut instantiates, mut totals) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..options.restarts {
            let started = Instant::now();
            let runtime = Runtime::new(config.clone()).expect("runtime");
            news.push(started.elapsed());
            let started = Instant::now();
            let module = runtime.transform(module_bytes).expect("cached load");
            let loaded = started.elapsed();
            assert!(module.from_cache(), "the second runtime on the directory loads the artifact");
            let instance = module.instantiate(setup()).expect("instantiate");
            let total = started.elapsed();
            drop(instance);
            loads.push(loaded);
            instantiates.push(total - loaded);
            totals.push(total);
        }
        let total = median(totals.clone());
        println!(
            "   {name} ({} KiB): compile {:.1} ms + instantiate {:.1} ms; cached: load {:.2} ms + instantiate {:.2} ms \
             = {:.2} ms (max {:.2}); Runtime::new {:.2} ms per process; {:.3}x of 100 ms: {}",
            module_bytes.len() / 1024,
            ms(compile),
            ms(first_instantiate),
            ms(median(loads)),
            ms(median(instantiates)),
            ms(total),
            ms(totals.iter().copied().max().unwrap_or_default()),
            ms(median(news)),
            ms(total) / 100.0,
            verdict(total < Duration::from_millis(100))
        );
    }
}
