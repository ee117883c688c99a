//! Integration-test support for Wisp.
//!
//! - [`apiserver`]: the in-process Kubernetes API server every test runs against
//!   (`wisp_apiserver::server`, re-exported): the real list/watch protocol, with fault knobs,
//!   for driving a real `kube::Client`.
//! - [`view`]: the server's pods as the test-faults plugin's view of them.
//!
//! The integration tests themselves live in `tests/`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod view;

pub use wisp_apiserver::server as apiserver;
pub use wisp_apiserver::{
    DEFAULT_BOOKMARK_INTERVAL, DEFAULT_HISTORY_LIMIT, DEFAULT_TOO_LARGE_RV_WAIT, EndlessList,
    Faults, RecordedRequest, TestApiServer, Verb, config_map, pod,
};
