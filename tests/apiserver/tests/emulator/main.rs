//! The emulator's own tests, one module per subject in one binary: the test API server against
//! the API server's rules (protocol, writes, CRDs, the cluster's behaviours, admission webhooks)
//! and against kubectl and the Python client as peers. Wisp's tests, which use the emulator as their API server,
//! are `wisp-tests`'.
//!
//! Run one subject with a filter on its module: `cargo test -p wisp-apiserver --test emulator
//! writes::`.

mod admission;
mod cluster;
mod crd;
mod peers;
mod protocol;
mod writes;
