//! Sources the reflector lists and watches through.

pub mod dir;
pub mod filter;
pub mod kube;
/// The in-memory source lives with the informer (its tests use it); here for the sources' paths.
pub use crate::informer::memory;
pub mod multi;
pub mod shard;
