//! Wisp plugin SDK.
//!
//! The guest bindings, the plugin trait and the export macro arrive with the WIT contract
//! (`wit/`); until then this crate is an empty placeholder so the workspace builds.
#![forbid(unsafe_code)]
