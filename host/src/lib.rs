//! Wisp: a Kubernetes informer host whose event listeners are sandboxed WebAssembly components.
//!
//! Layout:
//! - [`informer`]: the client-go informer pipeline (reflector, DeltaFIFO, indexer, shared
//!   informer, processor and listeners). Knows nothing of wasm, HTTP or kube.
//! - [`demo`]: the built-in demo on an in-memory cluster.
//! - [`source`]: `ListerWatcher` implementations (the Kubernetes API through `kube`).
#![forbid(unsafe_code)]

pub mod demo;
pub mod informer;
pub mod source;
