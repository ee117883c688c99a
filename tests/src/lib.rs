//! Integration-test support for Wisp.
//!
//! - [`apiserver`]: an in-process Kubernetes API server speaking the real list/watch protocol,
//!   with fault knobs, for driving a real `kube::Client` in tests.
//! - [`view`]: the server's pods as the test-faults plugin's view of them.
//!
//! The integration tests themselves live in `tests/`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod apiserver;
pub mod view;

pub use apiserver::{
    DEFAULT_BOOKMARK_INTERVAL, DEFAULT_HISTORY_LIMIT, DEFAULT_TOO_LARGE_RV_WAIT, EndlessList,
    Faults, RecordedRequest, TestApiServer, Verb, config_map, pod,
};
