//! The sandbox of one plugin instance: its store and what the store holds, its limits, and the
//! link to the host. Knows nothing of compiles, queues or failure policy. Lowest first:
//!
//! - [`clock`]: what a call's deadline is measured in (CPU time plus time blocked in the host);
//!   [`output`]: the plugin's stdout/stderr to the log; [`wit_batch`]: a batch in the 0.1 WIT
//!   form.
//! - [`state`]: the store's data (WASI context with nothing granted, memory limiter, the host
//!   API's grants, the call clock).
//! - [`linker`]: a component linked against the host, in the world it is a plugin of.
//! - [`instance`]: one store + instance with deadline, memory cap and fuel.

pub mod clock;
pub mod instance;
pub mod linker;
pub mod output;
pub mod state;
pub mod wit_batch;
