//! Sources the reflector lists and watches through.

pub mod kube;
pub mod memory;
