//! The integration tests, one module per subject, in one test binary.
//!
//! One binary, not one per file: each test binary links wisp-host, wasmtime and kube, and 27 of
//! them took most of the test command's build. Tests that read process-wide figures (memory,
//! threads) or load the machine for minutes keep binaries of their own: `hostile`,
//! `many_plugins` and `polyglot`, beside this directory.
//!
//! Run one subject with a filter on its module: `cargo test -p wisp-tests --test integration
//! reflector::`.

#[path = "../common/mod.rs"]
mod common;

mod actions_rig;

mod abi;
mod admin;
mod admin_auth;
mod admin_limits;
mod automation;
mod custom_resources;
mod faults;
mod field_mask;
mod first_load_tier;
mod fuzz_corpus;
mod hostile_actions;
mod informer_conformance;
mod informer_e2e;
mod kube_source;
mod lifecycle;
mod module_cache;
mod multi_namespace;
mod oci;
mod plugins;
mod policy_reports;
mod queue_pressure;
mod real_fifo;
mod reflector;
mod reload;
mod scale_out;
mod size_caps;
