//! Wisp: a Kubernetes informer host whose event listeners are sandboxed WebAssembly components.
//!
//! Layout:
//! - [`informer`]: the client-go informer pipeline (reflector, DeltaFIFO, indexer, shared
//!   informer, processor and listeners). Knows nothing of wasm, HTTP or kube.
//! - [`admin`]: the admin HTTP server (health, readiness, metrics, plugin status).
//! - [`config`]: the YAML config file and its validation.
//! - [`demo`]: the built-in demo on an in-memory cluster.
//! - [`plugin`]: wasm plugins (wasmtime): engine, sandbox, host API, failure policy.
//! - [`source`]: `ListerWatcher` implementations (the Kubernetes API through `kube`).
#![deny(unsafe_code)]

pub mod admin;
pub mod config;
pub mod demo;
pub mod informer;
pub mod plugin;
pub mod source;
