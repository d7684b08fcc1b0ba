//! The [`Runtime`]: one wasmtime engine per process, its epoch ticker, the linkers of the three
//! worlds, and loading of uploaded modules (validation, compilation, the precompiled cache).
//!
//! Invariants:
//! - A module is compiled at most once per engine configuration: the artifact is stored in
//!   `cache_dir` under `<sha256 of the module>-<engine compatibility hash>.cwasm`, written to a
//!   temporary file and renamed, so a reader sees a whole artifact or none. A file that fails to
//!   load (corrupt, or from another wasmtime) is recompiled and replaced, never an error.
//! - Only this module decides what a valid upload is: a component (not a core module) whose
//!   exports name exactly one of the three worlds and whose imports are only `logging` and WASI.
//! - The ticker advances the engine's epoch every [`EPOCH_TICK`]; it holds only a weak
//!   reference, so it stops once the runtime and every module built from it are dropped.

use std::fmt;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, ComponentExportIndex, HasSelf, Linker};
use wasmtime::{Config, Engine};

use crate::assignor::AssignorModule;
use crate::bindings;
use crate::host::{HostState, EPOCH_TICK};
use crate::transform::TransformModule;
use crate::validator::ValidatorModule;
use crate::RuntimeError;

/// Versions of the contract this host serves, newest first: a component built against any of
/// them loads (0.2.0 added the transforms' `state` import).
const VERSIONS: &[&str] = &["0.2.0", "0.1.0"];
const PACKAGE: &str = "runnel:transform";
pub(crate) const TRANSFORMER_EXPORT: &str = "runnel:transform/transformer@0.2.0";
pub(crate) const ASSIGNOR_EXPORT: &str = "runnel:transform/group-assignor@0.2.0";
/// The first assignor form (0.1.0 and 0.2.0): members and topics by name.
pub(crate) const NAME_ASSIGNOR_INTERFACE: &str = "partition-assignor";
pub(crate) const VALIDATION_EXPORT: &str = "runnel:transform/validation@0.2.0";
/// The transforms' state import: a component importing it is stateful.
pub(crate) const STATE_IMPORT: &str = "runnel:transform/state@0.2.0";
/// Runnel interfaces a guest may import: `logging`, `state`, and the record-only interfaces
/// its exports `use` (a component imports those too, as type-only instances).
const RUNNEL_IMPORTS: &[&str] = &["logging", "types", "assignment", "group-assignment", "state"];
const TRANSFORMER_FUNCS: &[&str] = &["init", "process"];
const ASSIGNOR_FUNCS: &[&str] = &["name", "assign"];
const VALIDATION_FUNCS: &[&str] = &["init", "validate"];
/// What each world exports (the interface, in any of the `VERSIONS`) and the functions its
/// export must have.
const WORLDS: &[(ModuleKind, &str, &[&str])] = &[
    (ModuleKind::Transform, "transformer", TRANSFORMER_FUNCS),
    (ModuleKind::Assignor, "group-assignor", ASSIGNOR_FUNCS),
    (ModuleKind::Assignor, NAME_ASSIGNOR_INTERFACE, ASSIGNOR_FUNCS),
    (ModuleKind::Validator, "validation", VALIDATION_FUNCS),
];

/// The interface name and version of a Runnel import or export name
/// (`runnel:transform/logging@0.1.0` → `("logging", "0.1.0")`).
fn runnel_name(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix(PACKAGE)?.strip_prefix('/')?;
    rest.split_once('@')
}

/// Where precompiled artifacts go and how big an upload may be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeConfig {
    pub cache_dir: PathBuf,
    pub max_module_bytes: usize,
}

impl RuntimeConfig {
    pub const DEFAULT_MAX_MODULE_BYTES: usize = 16 * 1024 * 1024;

    pub fn new(cache_dir: impl Into<PathBuf>) -> Self {
        RuntimeConfig { cache_dir: cache_dir.into(), max_module_bytes: Self::DEFAULT_MAX_MODULE_BYTES }
    }
}

/// What an upload is, as [`Runtime::inspect`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleInfo {
    pub kind: ModuleKind,
    /// Hex SHA-256 of the module bytes (its identity in the cache and in metadata).
    pub sha256: String,
    pub size: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModuleKind {
    Transform,
    Assignor,
    Validator,
}

impl ModuleKind {
    /// "a transform", "an assignor", "a validator".
    fn with_article(self) -> &'static str {
        match self {
            ModuleKind::Transform => "a transform",
            ModuleKind::Assignor => "an assignor",
            ModuleKind::Validator => "a validator",
        }
    }

    fn export(self) -> &'static str {
        match self {
            ModuleKind::Transform => TRANSFORMER_EXPORT,
            ModuleKind::Assignor => ASSIGNOR_EXPORT,
            ModuleKind::Validator => VALIDATION_EXPORT,
        }
    }
}

impl fmt::Display for ModuleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ModuleKind::Transform => "transform",
            ModuleKind::Assignor => "assignor",
            ModuleKind::Validator => "validator",
        })
    }
}

/// The WebAssembly host. Cheap to clone (an `Arc`); create one per process.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<RuntimeInner>,
}

pub(crate) struct RuntimeInner {
    pub(crate) engine: Engine,
    pub(crate) transform_linker: Linker<HostState>,
    pub(crate) assignor_linker: Linker<HostState>,
    pub(crate) validator_linker: Linker<HostState>,
    cache_dir: PathBuf,
    max_module_bytes: usize,
    /// Hex digest of `Engine::precompile_compatibility_hash`: part of every cache file name.
    compatibility: String,
    /// Compilations running now, at most [`COMPILES_AT_ONCE`] (each uses every core).
    compiling: (std::sync::Mutex<usize>, std::sync::Condvar),
}

/// Modules compiled at once by one runtime. A compilation uses every core (wasmtime's parallel
/// compilation) and memory in proportion to the module; uploads beyond this wait their turn
/// instead of piling up on the machine.
const COMPILES_AT_ONCE: usize = 1;

/// A compilation's turn, given back when dropped.
struct CompileTurn<'a>(&'a (std::sync::Mutex<usize>, std::sync::Condvar));

impl<'a> CompileTurn<'a> {
    fn take(slots: &'a (std::sync::Mutex<usize>, std::sync::Condvar)) -> CompileTurn<'a> {
        let (running, freed) = slots;
        let mut running = running.lock().unwrap_or_else(|p| p.into_inner());
        while *running >= COMPILES_AT_ONCE {
            running = freed.wait(running).unwrap_or_else(|p| p.into_inner());
        }
        *running += 1;
        CompileTurn(slots)
    }
}

impl Drop for CompileTurn<'_> {
    fn drop(&mut self) {
        let (running, freed) = self.0;
        *running.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
        freed.notify_one();
    }
}

/// A compiled (or deserialized) component and what it is.
pub(crate) struct Loaded {
    pub(crate) component: Component,
    pub(crate) kind: ModuleKind,
    /// The world export the component has (`runnel:transform/transformer@0.1.0`).
    pub(crate) export: String,
    pub(crate) sha256: String,
    pub(crate) from_cache: bool,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime").field("cache_dir", &self.inner.cache_dir).finish_non_exhaustive()
    }
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> Result<Runtime, RuntimeError> {
        let mut wasm = Config::new();
        wasm.strategy(wasmtime::Strategy::Cranelift)
            .wasm_component_model(true)
            .epoch_interruption(true)
            // Guests are built stripped (profile.wasm), so backtraces would name nothing; the
            // trap message quotes the guest's own panic output instead.
            .wasm_backtrace_max_frames(None)
            .parallel_compilation(true);
        // `RUNNEL_WASM_PERFMAP=1`: guest functions by name in `perf report` (/tmp/perf-<pid>.map).
        if std::env::var_os("RUNNEL_WASM_PERFMAP").is_some_and(|v| v == "1") {
            wasm.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        // On-demand allocation, not the pooling allocator: instances are long-lived (one per
        // transform partition, reused across batches), so instantiation cost does not matter,
        // while the pool would reserve address space for its maximum up front.
        let engine =
            Engine::new(&wasm).map_err(|e| RuntimeError::Compile(format!("cannot create the engine: {e:#}")))?;

        fs::create_dir_all(&config.cache_dir).map_err(|e| cache_error(&config.cache_dir, e))?;

        let mut transform_linker = Linker::new(&engine);
        let mut assignor_linker = Linker::new(&engine);
        let mut validator_linker = Linker::new(&engine);
        for linker in [&mut transform_linker, &mut assignor_linker, &mut validator_linker] {
            wasmtime_wasi::p2::add_to_linker_sync(linker).map_err(link_error)?;
            crate::host::shadow_sleeps(linker).map_err(link_error)?;
        }
        // Each world in every served version (0.1.0 components import `logging@0.1.0`).
        use bindings::{assignor, name_assignor, transform, v0_1, validator};
        type Own = HasSelf<HostState>;
        transform::Transform::add_to_linker::<HostState, Own>(&mut transform_linker, |s| s).map_err(link_error)?;
        v0_1::transform::Transform::add_to_linker::<HostState, Own>(&mut transform_linker, |s| s)
            .map_err(link_error)?;
        assignor::Assignor::add_to_linker::<HostState, Own>(&mut assignor_linker, |s| s).map_err(link_error)?;
        // The first assignor form of 0.2.0: its record interface (`logging@0.2.0` is linked).
        name_assignor::runnel::transform::assignment::add_to_linker::<HostState, Own>(&mut assignor_linker, |s| s)
            .map_err(link_error)?;
        v0_1::assignor::Assignor::add_to_linker::<HostState, Own>(&mut assignor_linker, |s| s).map_err(link_error)?;
        validator::Validator::add_to_linker::<HostState, Own>(&mut validator_linker, |s| s).map_err(link_error)?;
        v0_1::validator::Validator::add_to_linker::<HostState, Own>(&mut validator_linker, |s| s)
            .map_err(link_error)?;

        let compatibility = {
            let mut hasher = Sha256Hasher(Sha256::new());
            engine.precompile_compatibility_hash().hash(&mut hasher);
            hex(&hasher.0.finalize()[..8])
        };

        let weak = engine.weak();
        std::thread::Builder::new()
            .name("runnel-wasm-epoch".into())
            .spawn(move || loop {
                std::thread::sleep(EPOCH_TICK);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            })
            .map_err(|e| RuntimeError::Compile(format!("cannot start the epoch ticker thread: {e}")))?;

        Ok(Runtime {
            inner: Arc::new(RuntimeInner {
                engine,
                transform_linker,
                assignor_linker,
                validator_linker,
                cache_dir: config.cache_dir,
                max_module_bytes: config.max_module_bytes,
                compatibility,
                compiling: Default::default(),
            }),
        })
    }

    /// Validates an upload: size, a component, one of the three worlds. Compiles it (or loads it
    /// from the cache), so a later [`Runtime::transform`] or [`Runtime::assignor`] of the same
    /// bytes is a cache hit. Compiling takes up to seconds: call it off the async executor.
    pub fn inspect(&self, bytes: &[u8]) -> Result<ModuleInfo, RuntimeError> {
        let loaded = self.load(bytes)?;
        Ok(ModuleInfo { kind: loaded.kind, sha256: loaded.sha256, size: bytes.len() })
    }

    /// Loads a transform, compiling it only when the cache has no artifact for it.
    pub fn transform(&self, bytes: &[u8]) -> Result<TransformModule, RuntimeError> {
        let loaded = self.load(bytes)?;
        expect_kind(&loaded, ModuleKind::Transform)?;
        TransformModule::new(self.inner.clone(), loaded)
    }

    /// Loads an assignor, compiling it only when the cache has no artifact for it.
    pub fn assignor(&self, bytes: &[u8]) -> Result<AssignorModule, RuntimeError> {
        let loaded = self.load(bytes)?;
        expect_kind(&loaded, ModuleKind::Assignor)?;
        AssignorModule::new(self.inner.clone(), loaded)
    }

    /// Loads a validator, compiling it only when the cache has no artifact for it.
    pub fn validator(&self, bytes: &[u8]) -> Result<ValidatorModule, RuntimeError> {
        let loaded = self.load(bytes)?;
        expect_kind(&loaded, ModuleKind::Validator)?;
        ValidatorModule::new(self.inner.clone(), loaded)
    }

    pub(crate) fn load(&self, bytes: &[u8]) -> Result<Loaded, RuntimeError> {
        // Only a component of one of the three worlds is cached: the cache holds what can be
        // deployed, not every upload that was refused.
        let of_a_world = |component: &Component| classify_world(&self.inner.engine, component).map(|_| ());
        let (component, sha256, from_cache) = self.compile_or_load(bytes, of_a_world)?;
        let (kind, export) = classify_world(&self.inner.engine, &component)?;
        Ok(Loaded { component, kind, export, sha256, from_cache })
    }

    /// The component for `bytes` and its hex SHA-256, from the cache when possible (`true`). A
    /// compiled component is cached only if `cacheable` accepts it.
    fn compile_or_load(
        &self,
        bytes: &[u8],
        cacheable: impl FnOnce(&Component) -> Result<(), RuntimeError>,
    ) -> Result<(Component, String, bool), RuntimeError> {
        let max = self.inner.max_module_bytes;
        if bytes.len() > max {
            return Err(RuntimeError::TooLarge { size: bytes.len(), max });
        }
        check_component_header(bytes)?;
        let sha256 = hex(&Sha256::digest(bytes));
        let path = self.inner.cache_dir.join(format!("{sha256}-{}.cwasm", self.inner.compatibility));
        if let Some(component) = self.load_cached(&path) {
            return Ok((component, sha256, true));
        }
        let component = {
            let _turn = CompileTurn::take(&self.inner.compiling);
            // Another upload of the same bytes may have compiled it while this one waited.
            if let Some(component) = self.load_cached(&path) {
                return Ok((component, sha256, true));
            }
            crate::footprint::check(bytes, crate::footprint::MAX_INSTANCE_FOOTPRINT_BYTES)?;
            Component::new(&self.inner.engine, bytes).map_err(|e| RuntimeError::Compile(format!("{e:#}")))?
        };
        cacheable(&component)?;
        let artifact = component.serialize().map_err(|e| RuntimeError::Compile(format!("{e:#}")))?;
        write_atomically(&path, &artifact).map_err(|e| cache_error(&path, e))?;
        Ok((component, sha256, false))
    }

    /// Deletes the cached artifacts `keep` does not want (it is given each one's module hex
    /// SHA-256), those of another engine configuration, and temporary files a crash left,
    /// unless written less than `grace` ago (an upload checked before its deployment lands).
    /// Without it the cache grows by one artifact per module version ever deployed. A module
    /// already loaded keeps working: its artifact is only read when a module is loaded.
    /// Returns how many files were deleted.
    pub fn retain_cached(&self, keep: impl Fn(&str) -> bool, grace: std::time::Duration) -> io::Result<usize> {
        let now = std::time::SystemTime::now();
        let mut deleted = 0;
        for entry in fs::read_dir(&self.inner.cache_dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let wanted = match name.strip_suffix(".cwasm").and_then(|stem| stem.split_once('-')) {
                Some((sha256, compatibility)) if !name.starts_with('.') => {
                    compatibility == self.inner.compatibility && keep(sha256)
                }
                // A temporary file of `write_atomically` (`.<name>.<pid>.<n>.tmp`).
                _ if name.starts_with('.') && name.ends_with(".tmp") => false,
                _ => continue,
            };
            let age = entry.metadata()?.modified().ok().and_then(|modified| now.duration_since(modified).ok());
            if wanted || age.is_none_or(|age| age < grace) {
                continue;
            }
            match fs::remove_file(entry.path()) {
                Ok(()) => deleted += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(deleted)
    }

    fn load_cached(&self, path: &Path) -> Option<Component> {
        if !path.exists() {
            return None;
        }
        // SAFETY: `deserialize_file` trusts the file to be an artifact this wasmtime produced.
        // Only this runtime writes `cache_dir`, and only whole files (temp file + rename);
        // wasmtime itself rejects files from another version or engine configuration (the
        // compatibility hash in the name makes that rare anyway), which we then recompile.
        match unsafe { Component::deserialize_file(&self.inner.engine, path) } {
            Ok(component) => Some(component),
            Err(error) => {
                tracing::warn!(path = %path.display(), error = %format!("{error:#}"), "recompiling an unusable cached module");
                None
            }
        }
    }
}

fn expect_kind(loaded: &Loaded, wanted: ModuleKind) -> Result<(), RuntimeError> {
    if loaded.kind == wanted {
        return Ok(());
    }
    Err(RuntimeError::WrongWorld(format!(
        "this component is {} (it exports `{}`), not {}: it does not export `{}`",
        loaded.kind.with_article(),
        loaded.kind.export(),
        wanted.with_article(),
        wanted.export()
    )))
}

/// Tells a component from a core module, text or garbage before the compiler sees it, so the
/// message says what to do instead of a parser error.
fn check_component_header(bytes: &[u8]) -> Result<(), RuntimeError> {
    const MAGIC: &[u8] = b"\0asm";
    const CORE_VERSION: [u8; 4] = [1, 0, 0, 0];
    const COMPONENT_VERSION: [u8; 4] = [0x0d, 0, 1, 0];
    let not = |message: &str| Err(RuntimeError::NotAComponent(message.to_string()));
    if bytes.first().is_some_and(|&b| b == b'(') || bytes.trim_ascii_start().starts_with(b"(") {
        return not("this is WebAssembly text (WAT); upload the binary component");
    }
    if bytes.len() < 8 || &bytes[..4] != MAGIC {
        return not("not a WebAssembly binary (it does not start with the `\\0asm` magic bytes)");
    }
    match <[u8; 4]>::try_from(&bytes[4..8]) {
        Ok(CORE_VERSION) => not("this is a core WebAssembly module; Runnel needs a component: build with \
             `--target wasm32-wasip2` (or wrap the module with `wasm-tools component new`)"),
        Ok(COMPONENT_VERSION) => Ok(()),
        _ => not(&format!("unsupported WebAssembly binary version/layer {:02x?}", &bytes[4..8])),
    }
}

/// Which world a component implements (and the export naming it), from its type: exactly one
/// of the worlds' exports in a served version, each with its functions, and no imports besides
/// Runnel's and WASI (the linker then type-checks).
fn classify_world(engine: &Engine, component: &Component) -> Result<(ModuleKind, String), RuntimeError> {
    let ty = component.component_type();
    for (name, _) in ty.imports(engine) {
        let runnel = runnel_name(name);
        let served = runnel
            .is_some_and(|(interface, version)| RUNNEL_IMPORTS.contains(&interface) && VERSIONS.contains(&version));
        if !served && !name.starts_with("wasi:") {
            let hint = if runnel.is_some() { " (built against another version of the Runnel WIT?)" } else { "" };
            return Err(RuntimeError::WrongWorld(format!(
                "unexpected import `{name}`{hint}: a Runnel module may import only Runnel's `logging` and `state` \
                 (and the types its exports use) in version {}, and WASI 0.2 interfaces",
                VERSIONS.join(" or ")
            )));
        }
    }
    let ty_ref = &ty;
    let found: Vec<(ModuleKind, String, &[&str], ComponentItem)> = WORLDS
        .iter()
        .flat_map(|&(kind, interface, funcs)| {
            let ty = ty_ref;
            VERSIONS.iter().filter_map(move |version| {
                let export = format!("{PACKAGE}/{interface}@{version}");
                ty.get_export(engine, &export).map(|e| (kind, export, funcs, e.ty))
            })
        })
        .collect();
    match found.as_slice() {
        [(kind, export, funcs, item)] => check_functions(engine, export, item, funcs).map(|()| (*kind, export.clone())),
        [] => {
            let exports: Vec<&str> = ty.exports(engine).map(|(name, _)| name).collect();
            let found = if exports.is_empty() { "nothing".to_string() } else { exports.join(", ") };
            Err(RuntimeError::WrongWorld(format!(
                "missing export: a transform exports `{TRANSFORMER_EXPORT}`, an assignor `{ASSIGNOR_EXPORT}`, \
                 a validator `{VALIDATION_EXPORT}` (or the earlier forms and versions); this component exports {found}"
            )))
        }
        several => {
            let names: Vec<String> = several.iter().map(|(_, export, ..)| format!("`{export}`")).collect();
            Err(RuntimeError::WrongWorld(format!(
                "the component exports {}; a module is one kind: upload them separately",
                names.join(" and ")
            )))
        }
    }
}

fn check_functions(engine: &Engine, export: &str, item: &ComponentItem, funcs: &[&str]) -> Result<(), RuntimeError> {
    let ComponentItem::ComponentInstance(instance) = item else {
        return Err(RuntimeError::WrongWorld(format!("export `{export}` is not an interface instance")));
    };
    for func in funcs {
        match instance.get_export(engine, func).map(|e| e.ty) {
            Some(ComponentItem::ComponentFunc(_)) => {}
            _ => return Err(RuntimeError::WrongWorld(format!("export `{export}` lacks the function `{func}`"))),
        }
    }
    Ok(())
}

/// The export index of function `func` of the component's world export (whichever version it
/// was built against): exports are called as typed functions through these, with types that
/// match every served version.
pub(crate) fn export_func(loaded: &Loaded, func: &str) -> Result<ComponentExportIndex, RuntimeError> {
    loaded
        .component
        .get_export_index(None, &loaded.export)
        .and_then(|interface| loaded.component.get_export_index(Some(&interface), func))
        .ok_or_else(|| RuntimeError::WrongWorld(format!("`{}` lacks the function `{func}`", loaded.export)))
}

/// Writes `bytes` to `path` so that concurrent readers see the old file, nothing, or the whole
/// new file: a unique temporary name in the same directory, then a rename.
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("artifact");
    let temp = path.with_file_name(format!(
        ".{file_name}.{}.{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut file = fs::File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

fn cache_error(path: &Path, error: io::Error) -> RuntimeError {
    RuntimeError::Cache(io::Error::new(error.kind(), format!("{}: {error}", path.display())))
}

fn link_error(error: wasmtime::Error) -> RuntimeError {
    // Defining host functions fails only on a programming error (a duplicate definition).
    RuntimeError::Compile(format!("cannot define the host functions: {error:#}"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Feeds `Hash` output into SHA-256, giving a digest that is stable across processes (unlike
/// `DefaultHasher`, whose algorithm is unspecified).
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        u64::from_le_bytes([digest[0], digest[1], digest[2], digest[3], digest[4], digest[5], digest[6], digest[7]])
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest valid component: header only, no imports or exports.
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\x00\x01\x00";
    /// The smallest valid core module.
    const EMPTY_CORE_MODULE: &[u8] = b"\0asm\x01\x00\x00\x00";

    fn runtime(dir: &Path) -> Runtime {
        Runtime::new(RuntimeConfig::new(dir)).unwrap()
    }

    fn not_a_component(result: Result<ModuleInfo, RuntimeError>) -> String {
        match result {
            Err(RuntimeError::NotAComponent(message)) => message,
            other => panic!("expected NotAComponent, got {other:?}"),
        }
    }

    /// Garbage, text and core modules are rejected before compilation with a message saying why.
    #[test]
    fn inspect_rejects_what_is_not_a_component() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = runtime(dir.path());
        assert!(not_a_component(runtime.inspect(b"")).contains("magic"));
        assert!(not_a_component(runtime.inspect(b"hello, world")).contains("magic"));
        assert!(not_a_component(runtime.inspect(b"  (component)")).contains("WAT"));
        assert!(not_a_component(runtime.inspect(EMPTY_CORE_MODULE)).contains("wasm32-wasip2"));
        assert!(not_a_component(runtime.inspect(b"\0asm\x0e\x00\x01\x00")).contains("version"));
        // Nothing was compiled, so nothing was cached.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    /// Artifacts of modules no longer wanted, of another engine and stale temporary files
    /// are deleted once past the grace period; wanted and recent ones stay, and a deleted
    /// artifact is compiled again on the next load.
    #[test]
    fn retain_cached_deletes_what_is_no_longer_wanted() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = runtime(dir.path());
        runtime.compile_or_load(EMPTY_COMPONENT, any).unwrap();
        let sha256 = hex(&Sha256::digest(EMPTY_COMPONENT));
        for stray in ["ab12-0123456789abcdef.cwasm", ".x.cwasm.1.2.tmp", "README"] {
            fs::write(dir.path().join(stray), b"x").unwrap();
        }
        let count = || fs::read_dir(dir.path()).unwrap().count();
        let hour = std::time::Duration::from_secs(3600);
        assert_eq!(runtime.retain_cached(|_| false, hour).unwrap(), 0, "everything is younger than the grace");
        assert_eq!(count(), 4);
        let zero = std::time::Duration::ZERO;
        assert_eq!(
            runtime.retain_cached(|s| s == sha256, zero).unwrap(),
            2,
            "another engine's artifact, the temp file"
        );
        assert_eq!(count(), 2, "the wanted artifact and an unrelated file stay");
        assert_eq!(runtime.retain_cached(|_| false, zero).unwrap(), 1);
        assert_eq!(count(), 1, "only the unrelated file");
        assert!(!runtime.compile_or_load(EMPTY_COMPONENT, any).unwrap().2, "compiled again");
    }

    /// Uploads above the configured maximum are refused by size alone.
    #[test]
    fn inspect_rejects_oversized_modules() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = Runtime::new(RuntimeConfig { cache_dir: dir.path().into(), max_module_bytes: 4 }).unwrap();
        match runtime.inspect(EMPTY_COMPONENT) {
            Err(RuntimeError::TooLarge { size: 8, max: 4 }) => {}
            other => panic!("expected TooLarge, got {other:?}"),
        }
    }

    /// A component that exports neither world is a WrongWorld naming both expected exports;
    /// asking for the wrong kind is refused the same way.
    #[test]
    fn inspect_names_the_missing_export() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = runtime(dir.path());
        match runtime.inspect(EMPTY_COMPONENT) {
            Err(RuntimeError::WrongWorld(message)) => {
                assert!(message.contains(TRANSFORMER_EXPORT) && message.contains(ASSIGNOR_EXPORT), "{message}");
                assert!(message.contains("exports nothing"), "{message}");
            }
            other => panic!("expected WrongWorld, got {other:?}"),
        }
        assert!(matches!(runtime.transform(EMPTY_COMPONENT), Err(RuntimeError::WrongWorld(_))));
        assert!(matches!(runtime.assignor(EMPTY_COMPONENT), Err(RuntimeError::WrongWorld(_))));
    }

    /// Caches any component (the cache tests use one of no world).
    fn any(_: &Component) -> Result<(), RuntimeError> {
        Ok(())
    }

    /// An upload of no known world is refused and leaves nothing in the cache.
    #[test]
    fn a_refused_component_is_not_cached() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = runtime(dir.path());
        assert!(matches!(runtime.inspect(EMPTY_COMPONENT), Err(RuntimeError::WrongWorld(_))));
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    /// The cache key is the module hash plus the engine's compatibility hash; a second load is a
    /// cache hit, also from a second runtime; a corrupt artifact is recompiled and replaced.
    #[test]
    fn cache_hits_and_recovers_from_corrupt_artifacts() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = runtime(dir.path());
        assert!(!runtime.compile_or_load(EMPTY_COMPONENT, any).unwrap().2);

        let files: Vec<PathBuf> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(files.len(), 1, "one artifact, no temporary files left: {files:?}");
        let name = files[0].file_name().unwrap().to_str().unwrap().to_string();
        let sha256 = hex(&Sha256::digest(EMPTY_COMPONENT));
        assert_eq!(name, format!("{sha256}-{}.cwasm", runtime.inner.compatibility));
        assert_eq!(runtime.inner.compatibility.len(), 16);

        assert!(runtime.compile_or_load(EMPTY_COMPONENT, any).unwrap().2);
        let second = self::runtime(dir.path());
        assert_eq!(second.inner.compatibility, runtime.inner.compatibility, "the key is stable across runtimes");
        assert!(second.compile_or_load(EMPTY_COMPONENT, any).unwrap().2);

        for corrupt in [&b""[..], b"garbage", b"\x7fELF\x02\x01\x01\0truncated"] {
            fs::write(&files[0], corrupt).unwrap();
            assert!(!second.compile_or_load(EMPTY_COMPONENT, any).unwrap().2, "{corrupt:?}");
            assert!(second.compile_or_load(EMPTY_COMPONENT, any).unwrap().2, "rewritten after {corrupt:?}");
        }
    }

    /// A different module gets a different cache entry.
    #[test]
    fn cache_key_depends_on_the_module() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = runtime(dir.path());
        // A component with one custom section: different bytes, same (empty) meaning.
        let other = [EMPTY_COMPONENT, b"\x00\x02\x01x"].concat();
        assert!(!runtime.compile_or_load(EMPTY_COMPONENT, any).unwrap().2);
        assert!(!runtime.compile_or_load(&other, any).unwrap().2);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2);
    }
}
