//! `runnel-runtime`: the WebAssembly host for Runnel.
//!
//! Owns everything wasmtime: engine configuration, validation and precompilation of uploaded
//! modules, per-call deadlines and memory caps. The broker never names wasmtime types; it uses
//! the small API this crate will expose. Nothing lives here yet (roadmap step 4).
