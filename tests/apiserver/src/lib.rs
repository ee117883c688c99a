//! A Kubernetes API server's write path, emulated, and (feature `server`) an in-process test API
//! server that serves it over HTTP.
//!
//! What an API server does to an object it is given, in its order: decoding ([`decode`]: type
//! errors refuse it, unknown fields are dropped), defaulting ([`defaults`]), validation
//! ([`validation`]; custom resources by their CRD's structural schema, [`schema`]) and serving it
//! in another version of its group ([`convert`]). The facts these build on (kinds, scope, name
//! rules, selectors) are [`wisp_kinds`]'.
//!
//! Two users: Wisp's `dir:` source, which stands in for an API server over a directory of
//! manifests (it depends on this crate without `server`), and the tests, which run
//! [`server::TestApiServer`] as the API server of every integration test. The emulator's own
//! tests (tests/ of this crate) check it against the API server's rules and against kubectl and
//! the Python client as peers; Wisp's tests live in `wisp-tests`.

#![forbid(unsafe_code)]

pub mod convert;
pub mod decode;
pub mod defaults;
pub mod schema;
pub mod validation;

#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "server")]
pub mod test_support;

#[cfg(feature = "server")]
pub use server::{
    DEFAULT_BOOKMARK_INTERVAL, DEFAULT_HISTORY_LIMIT, DEFAULT_TOO_LARGE_RV_WAIT, EndlessList,
    Faults, RecordedRequest, TestApiServer, Verb, config_map, pod,
};
