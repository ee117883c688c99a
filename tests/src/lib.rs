//! Integration-test support for Wisp.
//!
//! - [`apiserver`]: an in-process Kubernetes API server speaking the real list/watch protocol,
//!   with fault knobs, for driving a real `kube::Client` in tests.
//!
//! The integration tests themselves live in `tests/`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod apiserver;

pub use apiserver::{
    DEFAULT_BOOKMARK_INTERVAL, DEFAULT_HISTORY_LIMIT, DEFAULT_TOO_LARGE_RV_WAIT, EndlessList,
    Faults, RecordedRequest, TestApiServer, Verb, config_map, pod,
};
