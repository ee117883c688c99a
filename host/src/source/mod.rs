//! Sources the reflector lists and watches through.

pub mod dir;
pub mod filter;
pub mod kube;
pub mod memory;
pub mod multi;
