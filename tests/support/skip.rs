//! Skipped tests (included by `support` and by `kafka_tools`, which some test binaries take
//! alone).
/// Reports the running test as skipped (what it needs cannot be had here): prints SKIP and
/// appends it to `$RUNNEL_SKIP_LOG`, which `scripts/test.sh` counts apart from the passes (a
/// test that cannot run is skipped, never passed). The caller returns at once.
pub fn skip(reason: impl std::fmt::Display) {
    let test = std::thread::current().name().unwrap_or("?").to_string();
    eprintln!("SKIP: {test}: {reason}");
    if let Some(path) = std::env::var_os("RUNNEL_SKIP_LOG") {
        use std::io::Write;
        let log = std::fs::OpenOptions::new().append(true).create(true).open(path);
        if let Err(e) = log.and_then(|mut log| writeln!(log, "{test}: {reason}")) {
            eprintln!("could not record the skip in RUNNEL_SKIP_LOG: {e}");
        }
    }
}
