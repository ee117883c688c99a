//! Wisp: a Kubernetes informer host whose event listeners are sandboxed WebAssembly components.
//!
//! Layout:
//! - [`abi`]: the byte layout of plugin ABI 0.2 (objects, batches, object lists).
//! - [`informer`]: the client-go informer pipeline (reflector, DeltaFIFO, indexer, shared
//!   informer, processor and listeners). Knows nothing of wasm, HTTP or kube.
//! - [`app`]: the host assembled from a config.
//! - [`actions`]: automation actions plugins ask for: grants, rate limit, dry-run, sending,
//!   audit log.
//! - [`admin`]: the admin HTTP server (health, readiness, metrics, plugin status).
//! - [`config`]: the YAML config file and its validation.
//! - [`demo`]: the built-in demo on an in-memory cluster.
//! - [`oci`]: plugin modules pulled from (and pushed to) OCI registries, signatures checked.
//! - [`plugin`]: wasm plugins (wasmtime): engine, sandbox, host API, failure policy.
//! - [`policy`]: plugins' current verdicts on cached objects.
//! - [`record`]: recorded notifications (record / replay).
//! - [`reloader`]: live config and module changes (watcher, admin trigger, SIGHUP).
//! - [`rbac`]: least-privilege RBAC for a config.
//! - [`source`]: `ListerWatcher` implementations (the Kubernetes API through `kube`).
#![deny(unsafe_code)]

pub mod abi;
pub mod actions;
pub mod admin;
pub mod app;
pub mod config;
pub mod demo;
pub mod fixture;
pub mod informer;
pub mod kinds;
pub mod oci;
pub mod plugin;
pub mod policy;
pub mod rbac;
pub mod record;
pub mod reloader;
pub mod reports;
pub mod scale;
pub mod source;
pub mod sync;
pub mod units;
