//! The fuzz checks: each takes the fuzzer's bytes, runs the host code on them and asserts its
//! properties (no panic, refusals are errors, results agree with a reference). The fuzz targets
//! call them; `tests/tests/integration/fuzz_corpus.rs` runs them on stable over the seeds and regressions.

pub mod config;
pub mod host_api;
pub mod watch_event;
