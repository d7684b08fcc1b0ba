//! The host memory an instance of a component costs outside its linear memories and tables,
//! estimated from its core modules before it is compiled.
//!
//! Linear memories and tables are bounded while a guest runs (the store's limiter). What is
//! not: each core instance's `VMContext`, which wasmtime sizes from the module's globals,
//! functions, imports, tables and memories, and allocates at instantiation. A module of a few
//! megabytes can declare a million globals; a component can instantiate a core module many
//! times; a node instantiates a transform once per input partition. So the estimate for one
//! instance of the component (its largest core module's footprint times its core
//! instantiations) is bounded at upload, with a message that says what to shrink. It is an
//! upper estimate, in the spirit of the pooling allocator's `max_core_instance_size`, not
//! wasmtime's exact layout.

use wasmparser::{Encoding, Parser, Payload};

use crate::error::RuntimeError;

/// The most host memory one instance of a component may need outside its memories and tables
/// (estimated): 16 MiB. Real guests need a small fraction of it (a Rust guest with thousands of
/// functions is well under 1 MiB).
pub const MAX_INSTANCE_FOOTPRINT_BYTES: u64 = 16 << 20;

/// Estimated bytes per declared item of a core module's `VMContext`.
const BYTES_PER_GLOBAL: u64 = 16;
const BYTES_PER_FUNCTION: u64 = 32;
const BYTES_PER_IMPORT: u64 = 32;
const BYTES_PER_TABLE_OR_MEMORY: u64 = 64;

/// What one core module declares that its instances pay for.
#[derive(Debug, Default)]
struct CoreModule {
    globals: u64,
    functions: u64,
    imports: u64,
    tables_and_memories: u64,
}

impl CoreModule {
    fn bytes(&self) -> u64 {
        self.globals * BYTES_PER_GLOBAL
            + self.functions * BYTES_PER_FUNCTION
            + self.imports * BYTES_PER_IMPORT
            + self.tables_and_memories * BYTES_PER_TABLE_OR_MEMORY
    }
}

/// The estimated footprint of one instance of the component in `bytes`, or the reason it
/// cannot be read (left for the compiler to report in its own words: `None`).
fn estimate(bytes: &[u8]) -> Option<(u64, CoreModule)> {
    // Core modules being read (nested ones are flattened by `parse_all`: a `Version` opens one,
    // its `End` closes it).
    let mut open: Vec<Option<CoreModule>> = Vec::new();
    let mut largest = CoreModule::default();
    let mut instantiations: u64 = 0;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.ok()? {
            Payload::Version { encoding: Encoding::Module, .. } => open.push(Some(CoreModule::default())),
            Payload::Version { .. } => open.push(None),
            Payload::End(_) => {
                if let Some(Some(module)) = open.pop() {
                    if module.bytes() > largest.bytes() {
                        largest = module;
                    }
                }
            }
            payload => {
                let Some(Some(module)) = open.last_mut() else {
                    if let Payload::InstanceSection(section) = payload {
                        instantiations += u64::from(section.count());
                    }
                    continue;
                };
                match payload {
                    Payload::GlobalSection(s) => module.globals += u64::from(s.count()),
                    Payload::FunctionSection(s) => module.functions += u64::from(s.count()),
                    Payload::ImportSection(s) => module.imports += u64::from(s.count()),
                    Payload::TableSection(s) => module.tables_and_memories += u64::from(s.count()),
                    Payload::MemorySection(s) => module.tables_and_memories += u64::from(s.count()),
                    _ => {}
                }
            }
        }
    }
    Some((largest.bytes().saturating_mul(instantiations.max(1)), largest))
}

/// Refuses a component whose instances would need more than `max` bytes of host memory outside
/// their memories and tables (see the module docs).
pub fn check(bytes: &[u8], max: u64) -> Result<(), RuntimeError> {
    let Some((estimate, module)) = estimate(bytes) else { return Ok(()) };
    if estimate <= max {
        return Ok(());
    }
    Err(RuntimeError::InstanceTooLarge {
        estimate,
        max,
        detail: format!(
            "its largest core module declares {} globals, {} functions and {} imports",
            module.globals, module.functions, module.imports
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_encoder::{
        Component, ConstExpr, GlobalSection, GlobalType, InstanceSection, Module, ModuleSection, ValType,
    };

    /// A component that instantiates, `instances` times, a core module declaring `globals`.
    fn component_with_globals(globals: u32, instances: u32) -> Vec<u8> {
        let mut section = GlobalSection::new();
        let ty = GlobalType { val_type: ValType::I32, mutable: false, shared: false };
        for _ in 0..globals {
            section.global(ty, &ConstExpr::i32_const(0));
        }
        let mut module = Module::new();
        module.section(&section);
        let mut component = Component::new();
        component.section(&ModuleSection(&module));
        let mut instantiated = InstanceSection::new();
        for _ in 0..instances {
            instantiated.instantiate(0, Vec::<(&str, wasm_encoder::ModuleArg)>::new());
        }
        component.section(&instantiated);
        component.finish()
    }

    #[test]
    fn globals_and_instantiations_multiply_into_the_estimate() {
        let (small, _) = estimate(&component_with_globals(10, 1)).expect("parses");
        assert_eq!(small, 10 * BYTES_PER_GLOBAL);
        let (many, module) = estimate(&component_with_globals(1000, 64)).expect("parses");
        assert_eq!((many, module.globals), (1000 * BYTES_PER_GLOBAL * 64, 1000));
        assert!(check(&component_with_globals(1000, 1), MAX_INSTANCE_FOOTPRINT_BYTES).is_ok());
        let refused = check(&component_with_globals(20_000, 64), MAX_INSTANCE_FOOTPRINT_BYTES).unwrap_err();
        assert!(refused.to_string().contains("20000 globals"), "{refused}");
        assert!(check(b"not wasm", MAX_INSTANCE_FOOTPRINT_BYTES).is_ok(), "left to the compiler");
    }
}
