//! Running plugins: how each is called (failure policy, retries, fresh instances, quarantine),
//! loaded, started on its informers, reloaded and put on probation. Lowest first:
//!
//! - [`module_file`]: the one reader of module files (regular files under a size cap).
//! - [`state`]: what a plugin's runtime holds ([`PluginRuntime`], [`VersionInfo`]).
//! - [`probation`]: keep the old version until the new one proves itself, roll back if not.
//! - [`loader`]: read, compile, link, instantiate, `describe` and `init` a module, the one way
//!   every module enters the host (start, reload, `wisp check`/`replay`/`test`).
//! - [`calls`]: calls into a plugin, its failure policy and retries; the informer handler.
//!   [`admit`]: admission calls, on an instance of their own.
//! - [`reload`]: swap a new version in; [`manager`]: attach checked plugins to their
//!   informers, move first-load plugins onto their optimized code; [`set`]: the running set.

pub mod admit;
pub mod calls;
pub mod loader;
pub mod manager;
pub mod module_file;
pub mod probation;
pub mod reload;
pub mod set;
pub mod state;

pub use admit::AdmitFailure;
pub use calls::{MAX_RETRY_WAIT, WasmHandler};
pub use state::{PluginRuntime, VersionInfo};
