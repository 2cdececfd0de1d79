//! Why operator code could not be made into instances ([`LoadError`]): a component that cannot
//! be read, is not a component, implements another world, was changed after upload or imports
//! what Weir does not provide, or an engine that cannot start. The error of every
//! [`super::AggregateCode`] and [`super::EnrichCode`].
//!
//! Depends on nothing of the crate. wasmtime's errors cross into it as their messages (the
//! `message` fields, [`LoadError::Engine`]): the trait layer names no Wasm type.

use std::path::PathBuf;

/// Why a component could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read operator module {path}: {source}")]
    Read {
        /// The module's path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The bytes are not a WebAssembly component (a core module, or not Wasm at all).
    #[error(
        "operator module {path} is not a WebAssembly component: {message}. Build it for the wasm32-wasip2 target (cargo build --release --target wasm32-wasip2)"
    )]
    NotAComponent {
        /// The module's path.
        path: PathBuf,
        /// What wasmtime reported.
        message: String,
    },
    /// The component does not export the interface of the world the spec asks for.
    #[error(
        "operator module {path} does not implement the `{expected}` world of weir:operator (0.3.0, 0.2.0 or 0.1.0; it exports: {exports}); {hint}"
    )]
    WrongWorld {
        /// The module's path.
        path: PathBuf,
        /// The world the spec needs.
        expected: &'static str,
        /// What the component exports instead.
        exports: String,
        /// How to fix it.
        hint: &'static str,
    },
    /// A stored component's bytes are not the ones that were uploaded.
    #[error(
        "operator module {path} does not match its recorded digest {expected} (it is now \
         {actual}): the file was changed after upload; upload the operator again as a new version"
    )]
    DigestMismatch {
        /// The module's path.
        path: PathBuf,
        /// The digest recorded at upload.
        expected: String,
        /// The digest of the file now.
        actual: String,
    },
    /// The component imports something Weir does not provide.
    #[error(
        "operator module {path} cannot be linked: {message}. Operators may import only weir:operator/state and WASI"
    )]
    Link {
        /// The module's path.
        path: PathBuf,
        /// What wasmtime reported.
        message: String,
    },
    /// The engine could not be set up. wasmtime's message, not its error: this layer names no
    /// Wasm type (and the engine's failure is kept for every later load, so it is shared).
    #[error("cannot set up the WebAssembly engine: {0}")]
    Engine(String),
}
