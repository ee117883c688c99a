//! Wisp: a Kubernetes informer host whose event listeners are sandboxed WebAssembly components.
//!
//! # Layers
//!
//! Beneath this crate, three of the workspace's: [`wisp_kinds`] (host/kinds: facts about
//! Kubernetes' kinds: scope, name rules, where a kind lives on an API server, label and field
//! selectors, shard hash ranges, YAML as kubectl reads it), [`wisp_abi`] (plugin-sdk/abi: the
//! byte layout of plugin ABI 0.2, encoder and decoder, shared with the Rust SDK) and, for the
//! `dir:` source alone, [`wisp_apiserver`] (tests/apiserver: an API server's write path,
//! emulated: decode, defaults, validation, conversion).
//!
//! Each module imports only from the layers below it (and its own layer's modules listed
//! before it); nothing imports upward, so there is no import cycle between top-level modules
//! (`.ci/layers.py` fails CI on one). Lowest first:
//!
//! 1. Leaves, importing nothing of the crate but what is listed before them: in tests,
//!    `test_time` (how long a unit test waits before giving up, scaled by
//!    `WISP_TEST_TIME_SCALE`); [`sync`] (locks that survive a panic), [`units`] (durations and
//!    sizes as written in a config), [`files`] (reading a file someone else named: regular files
//!    of bounded size only), [`tasks`] (background work started inside a layer, run under the
//!    supervisor: named, joined at shutdown within the grace period, a panic reported).
//! 2. [`informer`]: the client-go informer pipeline (reflector, queues, indexer, shared
//!    informer, processor and listeners, an in-memory source). Knows nothing of wasm or HTTP.
//! 3. [`source`]: `ListerWatcher`s (the Kubernetes API through `kube`, a directory of
//!    manifests) and the shard ranges a replica serves; [`policy`]: plugins' current
//!    verdicts on cached objects, and the policy-report writer's status.
//! 4. [`actions`]: automation actions plugins ask for: grants, rate limit, dry-run, sending,
//!    audit log. [`demo`]: the built-in demo on an in-memory cluster.
//! 5. [`plugin`]: wasm plugins (wasmtime): engine, sandbox, host API, failure policy, the
//!    batches they receive. [`scale`]: Leases (leader election, shard membership) and the fence
//!    on actions.
//! 6. [`oci`]: modules pulled from (and pushed to) OCI registries, signatures checked; it
//!    returns what it pulled and knows nothing of the config. [`reports`]: verdicts written as
//!    policy reports. [`record`]: recorded notifications (record / replay).
//! 7. [`config`]: the YAML config, validated into the specs of everything below (the outer
//!    layer of settings: each module owns its own settings type, the config holds them).
//! 8. [`reloader`]: live config and module changes (file watch, admin trigger, SIGHUP, OCI
//!    tag polls); [`fixture`] (`wisp test`); [`rbac`]: least-privilege RBAC for a config;
//!    [`build`]: plugins from source (`wisp new`, `wisp build`, the pinned toolchains).
//! 9. [`admin`]: the admin and metrics HTTP servers (health, readiness, metrics, plugins).
//! 10. [`app`]: the host assembled from a config, its tasks and threads owned by one
//!     supervisor ([`app::supervisor`]), started as named steps and stopped in phases; the
//!     reconciler of plugins from custom resources ([`app::custom`]).
#![deny(unsafe_code)]

pub mod actions;
pub mod admin;
pub mod app;
pub mod build;
pub mod config;
pub mod demo;
pub mod files;
pub mod fixture;
pub mod informer;
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
pub mod tasks;
#[cfg(test)]
pub(crate) mod test_time;
pub mod units;
