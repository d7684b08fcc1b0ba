//! `runnel-sdk`: write Runnel data transforms, consumer group assignors and produce-path
//! validators in Rust, compiled to WebAssembly components (`wasm32-wasip2`).
//!
//! This crate owns the guest side of the host/guest contract in `sdk/wit/runnel.wit`: it wraps
//! the wit-bindgen bindings (wasm32 only) in a small API, and implements the same API natively
//! so transforms are unit-tested with plain `cargo test` ([`testing`]). It never depends on the
//! broker or the runtime; the WIT file is the only thing shared with them.
//!
//! A transform is called once per input batch; records cross the boundary as one byte buffer
//! plus fixed-size descriptors, and [`Record`] and [`Output`] read and write that buffer in
//! place (no allocation per record).
//!
//! ```
//! use runnel_sdk::testing::{Harness, TestRecord};
//! use runnel_sdk::{Config, Error, Output, Record, Transform};
//!
//! /// Routes records whose value contains `needle` to the `matches` output, the rest to `rest`.
//! struct Grep {
//!     needle: String,
//! }
//!
//! impl Transform for Grep {
//!     fn init(config: &Config) -> Result<Self, Error> {
//!         Ok(Grep { needle: config.require("needle")?.to_string() })
//!     }
//!
//!     fn process(&mut self, record: &Record<'_>, out: &mut Output<'_>) -> Result<(), Error> {
//!         let hit = record.value_str().and_then(Result::ok).is_some_and(|v| v.contains(&self.needle));
//!         out.write_to(if hit { "matches" } else { "rest" }, record.key(), record.value())
//!     }
//! }
//!
//! // Generates the component exports when built for wasm32; nothing natively.
//! runnel_sdk::export_transform!(Grep);
//!
//! let mut harness = Harness::<Grep>::new(&[("needle", "error")], &["matches", "rest"])?;
//! let written = harness.process(&[
//!     TestRecord::new().value("disk error"),
//!     TestRecord::new().value("all good"),
//! ])?;
//! assert_eq!(written[0].topic, "matches");
//! assert_eq!(written[1].topic, "rest");
//! # Ok::<(), Error>(())
//! ```
//!
//! Build a component with
//! `cargo build --profile wasm --target wasm32-wasip2 -p <crate> --target-dir target/wasm`
//! (the crate has `crate-type = ["cdylib", "rlib"]`) and deploy it with `runnel transform deploy`.

// The generated bindings and the export macros name this crate by its absolute path, which
// must also resolve inside the crate itself.
extern crate self as runnel_sdk;

pub mod assign;
mod config;
mod error;
pub mod log;
mod output;
mod raw;
mod record;
pub mod state;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;
mod transform;
pub mod validate;

#[cfg(target_arch = "wasm32")]
mod guest;

pub use assign::Assignor;
pub use config::Config;
pub use error::{Error, Result};
pub use output::{Output, RecordBuilder};
pub use raw::Headers;
pub use record::{Batch, Payload, Record};
pub use transform::Transform;
pub use validate::{Rejection, Validator};

/// wit-bindgen output, one module per world. `pub_export_macro` keeps each world's exports out
/// of this crate's component metadata until a user crate invokes the export macro, so a
/// transform component does not also claim to export the assignor interface (and vice versa).
#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod bindings {
    pub mod transform {
        wit_bindgen::generate!({
            path: "wit",
            world: "transform",
            pub_export_macro: true,
            export_macro_name: "export_transform_world",
            runtime_path: "::runnel_sdk::__private::wit_bindgen::rt",
        });
    }

    pub mod assignor {
        wit_bindgen::generate!({
            path: "wit",
            world: "assignor",
            pub_export_macro: true,
            export_macro_name: "export_assignor_world",
            runtime_path: "::runnel_sdk::__private::wit_bindgen::rt",
        });
    }

    /// Shares the transform world's `types` and `logging` bindings, so an input batch is the
    /// same Rust type for transforms and validators.
    pub mod validator {
        wit_bindgen::generate!({
            path: "wit",
            world: "validator",
            pub_export_macro: true,
            export_macro_name: "export_validator_world",
            runtime_path: "::runnel_sdk::__private::wit_bindgen::rt",
            with: {
                "runnel:transform/types@0.2.0": crate::bindings::transform::runnel::transform::types,
                "runnel:transform/logging@0.2.0": crate::bindings::transform::runnel::transform::logging,
            },
        });
    }
}

/// Used by the export macros; not a stable API.
#[doc(hidden)]
pub mod __private {
    #[cfg(target_arch = "wasm32")]
    pub use crate::bindings::{
        assignor as assignor_bindings, transform as transform_bindings, validator as validator_bindings,
    };
    #[cfg(target_arch = "wasm32")]
    pub use crate::guest::{AssignorExport, TransformExport, ValidatorExport};
    #[cfg(target_arch = "wasm32")]
    pub use wit_bindgen;

    pub fn assert_transform<T: crate::Transform>() {}
    pub fn assert_assignor<A: crate::Assignor>() {}
    pub fn assert_validator<V: crate::Validator>() {}
}

/// Makes a [`Transform`] the component's `transformer` export (once per crate).
///
/// On wasm32 this emits the component exports; natively it only checks that the type is a
/// `Transform`, so the crate's unit tests build unchanged. See [`Transform`] for an example.
#[macro_export]
macro_rules! export_transform {
    ($ty:ty) => {
        const _: () = {
            #[allow(dead_code)]
            fn __runnel_assert_transform() {
                $crate::__private::assert_transform::<$ty>();
            }
            #[cfg(target_arch = "wasm32")]
            type __RunnelTransformExport = $crate::__private::TransformExport<$ty>;
            #[cfg(target_arch = "wasm32")]
            $crate::__private::transform_bindings::export_transform_world!(
                __RunnelTransformExport with_types_in $crate::__private::transform_bindings
            );
        };
    };
}

/// Makes an [`Assignor`] the component's `group-assignor` export (once per crate).
///
/// On wasm32 this emits the component exports; natively it only checks that the type is an
/// `Assignor`. See [`Assignor`] for an example.
#[macro_export]
macro_rules! export_assignor {
    ($ty:ty) => {
        const _: () = {
            #[allow(dead_code)]
            fn __runnel_assert_assignor() {
                $crate::__private::assert_assignor::<$ty>();
            }
            #[cfg(target_arch = "wasm32")]
            type __RunnelAssignorExport = $crate::__private::AssignorExport<$ty>;
            #[cfg(target_arch = "wasm32")]
            $crate::__private::assignor_bindings::export_assignor_world!(
                __RunnelAssignorExport with_types_in $crate::__private::assignor_bindings
            );
        };
    };
}

/// Makes a [`Validator`] the component's `validation` export (once per crate).
///
/// On wasm32 this emits the component exports; natively it only checks that the type is a
/// `Validator`. See [`Validator`] for an example.
#[macro_export]
macro_rules! export_validator {
    ($ty:ty) => {
        const _: () = {
            #[allow(dead_code)]
            fn __runnel_assert_validator() {
                $crate::__private::assert_validator::<$ty>();
            }
            #[cfg(target_arch = "wasm32")]
            type __RunnelValidatorExport = $crate::__private::ValidatorExport<$ty>;
            #[cfg(target_arch = "wasm32")]
            $crate::__private::validator_bindings::export_validator_world!(
                __RunnelValidatorExport with_types_in $crate::__private::validator_bindings
            );
        };
    };
}
