//! `runnel-sdk`: the guest side of Runnel's WebAssembly contract.
//!
//! The WIT files in `sdk/wit/` will be the single source of truth for the host/guest contract;
//! this crate will wrap the generated bindings. Nothing lives here yet (roadmap step 4).
