//! The per-instance host state (one wasmtime `Store` per instance) and everything a guest can
//! reach through it: the `logging` import, a WASI p2 context with nothing in it, the memory
//! limiter, and the translation of wasmtime failures into [`GuestError`]s.
//!
//! Invariants: a guest sees no files, no sockets, no arguments and an empty stdin; its
//! environment is its parameters. Everything it prints reaches the instance's [`LogSink`]
//! line by line (stdout as Info, stderr as Warn), each line at most [`MAX_LINE_BYTES`]. Its
//! linear memories together never exceed the instance's memory limit.
//!
//! Sleeps: the epoch deadline interrupts wasm code only, and the one blocking host call a guest
//! can reach is a WASI sleep (`monotonic-clock.subscribe-*` + `poll`). `shadow_sleeps` makes
//! every such wait end at once, so a guest that sleeps (even in a loop) keeps running wasm and
//! meets its call deadline instead of parking a broker thread.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, Trap};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::state::{KeyedState, StateHandle};
use crate::{GuestError, Level, Limits, LogSink};

/// Longer guest log lines are split: a guest must not make the broker hold unbounded text.
pub(crate) const MAX_LINE_BYTES: usize = 16 * 1024;
/// How much of the current call's stderr/error logs a trap message quotes (a panic message).
const MAX_DIAGNOSTIC_BYTES: usize = 2 * 1024;
/// The epoch ticker's period: the granularity of call deadlines.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    log: Arc<LogShared>,
    /// The partition state a transform's `state` import reaches; `None` for worlds without it.
    state: Option<StateHandle>,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// The most bytes one WASI random call returns (the guest asks again for more).
const RANDOM_BYTES_MAX: u64 = 64 << 10;

impl HostState {
    pub(crate) fn new(
        limits: &Limits,
        parameters: &[(String, String)],
        log: LogSink,
        state: Option<StateHandle>,
    ) -> Self {
        let log = Arc::new(LogShared::new(log));
        let mut wasi = WasiCtxBuilder::new();
        // The builder's defaults already deny files, sockets, name lookup and arguments; these
        // make the intent explicit should a default ever change.
        wasi.allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            // `get-random-bytes` fills host memory before the guest sees it: 64 KiB a call,
            // not wasmtime's 64 MiB default, whatever the guest's own memory limit.
            .max_random_size(RANDOM_BYTES_MAX)
            .envs(parameters)
            .stdout(LineStream::new(Level::Info, log.clone()))
            .stderr(LineStream::new(Level::Warn, log.clone()));
        HostState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limiter: MemoryLimiter { limit: limits.memory_bytes, used: 0, refused: false },
            log,
            state,
        }
    }

    /// Runs `f` on the instance's partition state (an empty one that takes nothing when the
    /// instance was given none).
    pub(crate) fn with_state<R>(&mut self, f: impl FnOnce(&mut KeyedState) -> R) -> R {
        let state = self.state.get_or_insert_with(|| KeyedState::shared(0));
        f(&mut state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The guest `log` import.
    pub(crate) fn log(&self, level: Level, message: &str) {
        for line in message.lines() {
            for chunk in split_at_char_boundaries(line, MAX_LINE_BYTES) {
                if self.log.exhausted() {
                    return;
                }
                self.log.emit(level, chunk);
            }
        }
    }
}

/// A new store for one instance, with its memory limiter installed.
pub(crate) fn new_store(engine: &wasmtime::Engine, state: HostState) -> Store<HostState> {
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.limiter);
    store
}

/// Arms the store for one guest call: a fresh deadline, a fresh refused-grow flag and an empty
/// diagnostic buffer (so a trap quotes only what this call printed).
pub(crate) fn begin_call(store: &mut Store<HostState>, timeout: Duration) {
    let ticks = timeout.as_nanos().div_ceil(EPOCH_TICK.as_nanos());
    // +1: the current tick may be about to end, which would cut the first tick short.
    store.set_epoch_deadline(u64::try_from(ticks).unwrap_or(u64::MAX / 2).saturating_add(1));
    store.data_mut().limiter.refused = false;
    store.data().log.lines_left.store(LOG_LINES_PER_CALL, Ordering::Relaxed);
    if let Ok(mut diagnostic) = store.data().log.diagnostic.lock() {
        diagnostic.clear();
    }
}

/// Translates a failed guest call. Memory is checked before the trap kind because a guest
/// whose `memory.grow` is refused usually aborts (Rust's allocation-failure handler), which
/// shows up as an ordinary `unreachable` trap.
pub(crate) fn classify(store: &Store<HostState>, limits: &Limits, error: wasmtime::Error) -> GuestError {
    let state = store.data();
    if let Some(Trap::Interrupt) = error.downcast_ref::<Trap>() {
        return GuestError::Deadline { timeout: limits.call_timeout };
    }
    if state.limiter.refused {
        return GuestError::MemoryLimit { limit: limits.memory_bytes };
    }
    let mut message = match error.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => format!("{error:#}"),
    };
    let diagnostic = state.log.diagnostic.lock().map(|d| d.trim_end().to_string()).unwrap_or_default();
    if !diagnostic.is_empty() {
        message.push_str("; the guest printed: ");
        message.push_str(&diagnostic);
    }
    GuestError::Trap(message)
}

/// Caps the sum of all linear memories of one store. Records a refusal so that the trap which
/// usually follows is reported as [`GuestError::MemoryLimit`] instead of a bare trap.
pub(crate) struct MemoryLimiter {
    limit: usize,
    pub(crate) used: usize,
    refused: bool,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        let grow = desired.saturating_sub(current);
        if self.used.saturating_add(grow) > self.limit {
            self.refused = true;
            return Ok(false);
        }
        self.used += grow;
        Ok(true)
    }

    fn table_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        // Tables hold function references (8 bytes or more each host-side): their growth is
        // charged to the same budget as memory, so many tables cannot add up past it.
        let grow = desired.saturating_sub(current).saturating_mul(TABLE_ELEMENT_BYTES);
        if desired > TABLE_ELEMENTS_MAX || self.used.saturating_add(grow) > self.limit {
            self.refused = true;
            return Ok(false);
        }
        self.used += grow;
        Ok(true)
    }

    // wasmtime's defaults are 10,000 of each per store; every memory reserves its address
    // space (gigabytes with guard regions), so a guest declaring thousands would exhaust the
    // broker's address space whatever the byte budget. A component of a transform, validator
    // or assignor needs a handful.
    fn instances(&self) -> usize {
        INSTANCES_MAX
    }

    fn memories(&self) -> usize {
        MEMORIES_MAX
    }

    fn tables(&self) -> usize {
        TABLES_MAX
    }
}

/// Core instances one store may hold (a component's modules and its adapters).
const INSTANCES_MAX: usize = 64;
/// Linear memories one store may hold.
const MEMORIES_MAX: usize = 16;
/// Tables one store may hold.
const TABLES_MAX: usize = 64;
/// Elements of one table.
const TABLE_ELEMENTS_MAX: usize = 1_000_000;
/// What one table element counts against the memory budget.
const TABLE_ELEMENT_BYTES: usize = 8;

/// Lines one guest call may log (stdout, stderr and the `log` import together). The sink's
/// work per line is host code, which the call's deadline does not interrupt: a message of a
/// million newlines would otherwise hold the call's thread long past it.
pub(crate) const LOG_LINES_PER_CALL: usize = 1_000;

/// Log plumbing shared by an instance's stdout, stderr and `log` import.
struct LogShared {
    sink: LogSink,
    /// stderr and error-level lines of the current call, quoted in trap messages.
    diagnostic: Mutex<String>,
    /// Lines the current call may still log ([`LOG_LINES_PER_CALL`] at its start).
    lines_left: AtomicUsize,
}

impl LogShared {
    fn new(sink: LogSink) -> LogShared {
        LogShared { sink, diagnostic: Mutex::new(String::new()), lines_left: AtomicUsize::new(LOG_LINES_PER_CALL) }
    }

    /// Whether the current call has used its lines up.
    fn exhausted(&self) -> bool {
        self.lines_left.load(Ordering::Relaxed) == 0
    }

    fn emit(&self, level: Level, line: &str) {
        match self.lines_left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| left.checked_sub(1)) {
            Err(_) => return,
            Ok(1) => {
                let notice = format!("the guest logged {LOG_LINES_PER_CALL} lines in one call: the rest is dropped");
                (self.sink)(Level::Warn, &notice);
                return;
            }
            Ok(_) => {}
        }
        // Rust's hint about RUST_BACKTRACE follows every panic message and means nothing here.
        if matches!(level, Level::Warn | Level::Error) && !line.starts_with("note: run with `RUST_BACKTRACE") {
            if let Ok(mut diagnostic) = self.diagnostic.lock() {
                if diagnostic.len() < MAX_DIAGNOSTIC_BYTES {
                    let room = MAX_DIAGNOSTIC_BYTES - diagnostic.len();
                    if !diagnostic.is_empty() {
                        diagnostic.push('\n');
                    }
                    diagnostic.push_str(split_at_char_boundaries(line, room).next().unwrap_or(""));
                }
            }
        }
        (self.sink)(level, line);
    }
}

/// Splits `text` into pieces of at most `max` bytes without cutting a UTF-8 character.
fn split_at_char_boundaries(text: &str, max: usize) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = rest.len().min(max.max(4));
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (head, tail) = rest.split_at(end);
        rest = tail;
        Some(head)
    })
}

/// A guest's stdout or stderr: bytes are cut into lines and each line goes to the log sink.
/// Writes complete synchronously, so a line printed during a call reaches the sink before the
/// call returns.
#[derive(Clone)]
struct LineStream {
    inner: Arc<Mutex<LineBuffer>>,
}

struct LineBuffer {
    level: Level,
    pending: Vec<u8>,
    log: Arc<LogShared>,
}

impl LineStream {
    fn new(level: Level, log: Arc<LogShared>) -> Self {
        LineStream { inner: Arc::new(Mutex::new(LineBuffer { level, pending: Vec::new(), log })) }
    }

    fn write_bytes(&self, bytes: &[u8]) {
        let Ok(mut buffer) = self.inner.lock() else { return };
        if buffer.log.exhausted() {
            buffer.pending.clear();
            return;
        }
        buffer.pending.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(newline) = buffer.pending[start..].iter().position(|&b| b == b'\n') {
            let end = start + newline;
            buffer.emit(start, end);
            start = end + 1;
        }
        // A line without its newline yet waits, unless it is already too long.
        while buffer.pending.len() - start >= MAX_LINE_BYTES {
            buffer.emit(start, start + MAX_LINE_BYTES);
            start += MAX_LINE_BYTES;
        }
        buffer.pending.drain(..start);
    }
}

impl LineBuffer {
    fn emit(&self, start: usize, end: usize) {
        let line = &self.pending[start..end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        self.log.emit(self.level, &String::from_utf8_lossy(line));
    }
}

impl Drop for LineBuffer {
    fn drop(&mut self) {
        // The last line of a guest that never printed its newline.
        if !self.pending.is_empty() {
            self.emit(0, self.pending.len());
        }
    }
}

impl IsTerminal for LineStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LineStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LineStream {
    async fn ready(&mut self) {}
}

impl OutputStream for LineStream {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.write_bytes(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always ready; the line cap bounds what is buffered.
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for LineStream {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.write_bytes(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Lines = Arc<Mutex<Vec<(Level, String)>>>;

    fn capture() -> (LogSink, Lines) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink_lines = lines.clone();
        let sink: LogSink =
            Arc::new(move |level, line: &str| sink_lines.lock().unwrap().push((level, line.to_string())));
        (sink, lines)
    }

    /// Output written in arbitrary pieces reaches the sink as whole lines; long lines are split.
    #[test]
    fn line_stream_emits_whole_lines() {
        let (sink, lines) = capture();
        let shared = Arc::new(LogShared::new(sink));
        let stream = LineStream::new(Level::Info, shared.clone());
        stream.write_bytes(b"hel");
        stream.write_bytes(b"lo\r\nwor");
        stream.write_bytes(b"ld\n");
        assert_eq!(lines.lock().unwrap().clone(), vec![(Level::Info, "hello".into()), (Level::Info, "world".into())]);
        stream.write_bytes(&vec![b'x'; MAX_LINE_BYTES + 10]);
        assert_eq!(lines.lock().unwrap().len(), 3);
        drop(stream);
        let lines = lines.lock().unwrap();
        assert_eq!(lines.len(), 4, "the unterminated tail is flushed on drop");
        assert_eq!(lines[3].1.len(), 10);
    }

    /// A call logs at most LOG_LINES_PER_CALL lines, then one notice; the budget is per call.
    #[test]
    fn a_call_logs_a_bounded_number_of_lines() {
        let (sink, lines) = capture();
        let shared = Arc::new(LogShared::new(sink));
        let stream = LineStream::new(Level::Info, shared.clone());
        stream.write_bytes(&b"x\n".repeat(LOG_LINES_PER_CALL * 3));
        stream.write_bytes(b"more\n");
        {
            let lines = lines.lock().unwrap();
            assert_eq!(lines.len(), LOG_LINES_PER_CALL);
            assert!(lines.last().unwrap().1.contains("the rest is dropped"), "{:?}", lines.last());
        }
        shared.lines_left.store(LOG_LINES_PER_CALL, Ordering::Relaxed); // as begin_call does
        stream.write_bytes(b"next call\n");
        assert_eq!(lines.lock().unwrap().last().unwrap().1, "next call");
    }

    /// Splitting never cuts a multi-byte character.
    #[test]
    fn split_respects_char_boundaries() {
        let pieces: Vec<&str> = split_at_char_boundaries("ééé", 5).collect();
        assert_eq!(pieces, vec!["éé", "é"]);
    }
}

/// The WASI clock interface whose `subscribe-*` functions `shadow_sleeps` replaces (the version
/// wasmtime-wasi 48 defines; guests importing older 0.2.x versions are linked to it).
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// Replaces `subscribe-duration` and `subscribe-instant` with versions whose pollable is ready
/// at once: a transform or assignor has nothing to wait for, and a host wait would outlive the
/// call deadline (which only interrupts wasm code).
pub(crate) fn shadow_sleeps(linker: &mut wasmtime::component::Linker<HostState>) -> wasmtime::Result<()> {
    use wasmtime_wasi::clocks::{WasiClocksCtxView, WasiClocksView};
    use wasmtime_wasi::p2::bindings::clocks::monotonic_clock::Host;
    linker.allow_shadowing(true);
    let mut clock = linker.instance(MONOTONIC_CLOCK)?;
    clock.func_wrap("subscribe-duration", |mut store: wasmtime::StoreContextMut<'_, HostState>, (_,): (u64,)| {
        let mut view: WasiClocksCtxView<'_> = store.data_mut().clocks();
        Ok((view.subscribe_duration(0)?,))
    })?;
    clock.func_wrap("subscribe-instant", |mut store: wasmtime::StoreContextMut<'_, HostState>, (_,): (u64,)| {
        let mut view: WasiClocksCtxView<'_> = store.data_mut().clocks();
        Ok((view.subscribe_duration(0)?,))
    })?;
    linker.allow_shadowing(false);
    Ok(())
}
