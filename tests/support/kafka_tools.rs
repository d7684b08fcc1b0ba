//! Apache Kafka's own tools for the tests that run them (`kafka_cli`, `kafka_format`): the jars
//! `scripts/kafka-jars.sh` fetched (the version pinned in `scripts/kafka-version`) run through
//! `scripts/kafka-tool.sh`.
//!
//! Where the jars are: `RUNNEL_KAFKA_LIB` (set by `scripts/test.sh`), else
//! `target/kafka/<version>/lib` of this repository. Once they are there the tests that need them
//! are required: a missing `java` or a broken jar directory fails the test instead of skipping it.
//! Only where the jars were never fetched do those tests are skipped (scripts/test.sh counts them so).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The repository root (the tests belong to `broker/`).
fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A usable Kafka tool wrapper and its jar directory.
pub struct KafkaTools {
    script: PathBuf,
    lib: PathBuf,
}

/// What a tool run gave back.
pub struct ToolOutput {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl ToolOutput {
    /// stdout and stderr together, for assertions on either and for failure messages.
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// The Kafka tools, or why they are absent (the caller prints SKIP). Panics where the jars were
/// fetched (or `RUNNEL_KAFKA_LIB` names a directory) but cannot be used.
pub fn kafka_tools() -> Result<KafkaTools, String> {
    let root = repo_root();
    let script = root.join("scripts/kafka-tool.sh");
    let version = include_str!("../../scripts/kafka-version").trim();
    let (lib, required) = match std::env::var_os("RUNNEL_KAFKA_LIB") {
        Some(lib) => (PathBuf::from(lib), true),
        None => {
            let lib = root.join("target/kafka").join(version).join("lib");
            let fetched = lib.join("COMPLETE").is_file();
            (lib, fetched)
        }
    };
    if !required {
        return Err(format!("no Kafka {version} jars in {} (run scripts/kafka-jars.sh)", lib.display()));
    }
    assert!(
        lib.join("COMPLETE").is_file(),
        "Kafka's jars are required (RUNNEL_KAFKA_LIB is set) but {} holds no complete fetch",
        lib.display()
    );
    let java = Command::new("java").arg("-version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    assert!(
        java.is_ok_and(|s| s.success()),
        "Kafka's jars are in {} so these tests are required, but `java` does not run",
        lib.display()
    );
    Ok(KafkaTools { script, lib })
}

impl KafkaTools {
    /// The jar directory (a classpath of `<lib>/*`).
    pub fn lib(&self) -> &std::path::Path {
        &self.lib
    }

    /// Compiles the Java program `tests/java/<file>` against the jars into `classes`.
    pub fn javac(&self, file: &str, classes: &std::path::Path) {
        let source = repo_root().join("tests/java").join(file);
        let status = Command::new("javac")
            .arg("-cp")
            .arg(format!("{}/*", self.lib.display()))
            .arg("-d")
            .arg(classes)
            .arg(&source)
            .status()
            .expect("javac runs");
        assert!(status.success(), "javac {}", source.display());
    }

    /// Runs `scripts/kafka-tool.sh <tool> <args>` with `stdin` fed to it, and kills it after a
    /// deadline (a tool waiting on a broker that never answers must not hang the suite).
    pub fn run(&self, tool: &str, args: &[&str], stdin: Option<&str>) -> ToolOutput {
        let mut child = Command::new("bash")
            .arg(&self.script)
            .arg(tool)
            .args(args)
            .env("RUNNEL_KAFKA_LIB", &self.lib)
            .env("KAFKA_HEAP_OPTS", "-Xmx256M")
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn scripts/kafka-tool.sh");
        if let Some(input) = stdin {
            use std::io::Write;
            child.stdin.take().expect("piped").write_all(input.as_bytes()).expect("write stdin");
        }
        // Drain both pipes on their own threads so a chatty tool never blocks on a full pipe.
        let mut stdout = child.stdout.take().expect("piped");
        let mut stderr = child.stderr.take().expect("piped");
        let out_reader = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
            text
        });
        let err_reader = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
            text
        });
        let deadline = Instant::now() + Duration::from_secs(90);
        let status = loop {
            if let Some(status) = child.try_wait().expect("poll the tool") {
                break Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::park_timeout(Duration::from_millis(50));
        };
        let stdout = out_reader.join().expect("stdout reader");
        let mut stderr = err_reader.join().expect("stderr reader");
        if status.is_none() {
            stderr.push_str("\n(killed: still running after 90 s)");
        }
        ToolOutput { success: status.is_some_and(|s| s.success()), stdout, stderr }
    }
}

#[path = "skip.rs"]
mod skip_file;
#[allow(unused_imports)] // (test binaries that skip nothing)
pub use skip_file::skip;
