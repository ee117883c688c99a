//! The client-go informer pipeline in Rust (`k8s.io/client-go/tools/cache`).
//!
//! Data flows one way:
//!
//! ```text
//! ListerWatcher -> Reflector -> RealFifo | DeltaFifo -> process loop (handle_deltas) -> Indexer
//!                                                                    \-> SharedProcessor -> Listener queue -> EventHandler
//! ```
//!
//! - [`key`]: store keys.
//! - [`object`]: the cached object (extracted metadata + JSON) and tombstones.
//! - [`indexer`]: the thread-safe cache with indexes.
//! - [`delta_fifo`]: the DeltaFIFO.
//! - [`real_fifo`]: the RealFIFO (events in arrival order), and the [`Queue`] seam that lets
//!   an informer use either ([`QueueKind`]).
//! - [`lister_watcher`]: the source trait the reflector lists and watches through.
//! - [`reflector`]: list and watch into the FIFO.
//! - [`handler`]: the listener trait (native now, wasm later) and notifications.
//! - [`listener`] / [`processor`]: per-listener queues (unbounded, or bounded with an overflow
//!   policy: [`listener::queue`]) and fan-out.
//! - [`executor`]: the fixed pool of workers that runs the listeners whose handlers ask for it
//!   (plugins), fairly and a group at a time; other handlers have a thread each.
//! - [`shared_informer`]: wires it together.
//! - Label and field selectors are `wisp_kinds::selector`'s, one parser of each for the workspace.
//!
//! Nothing here knows about wasm, HTTP or kube: sources implement [`lister_watcher::ListerWatcher`].

pub mod backoff;
pub mod delta_fifo;
pub mod executor;
pub mod handler;
pub mod indexer;
pub mod key;
pub mod latency;
pub mod listener;
pub mod lister_watcher;
pub mod mask;
pub mod memory;
pub mod object;
pub mod processor;
pub mod real_fifo;
pub mod reflector;
pub mod shared_informer;

pub use delta_fifo::{Delta, DeltaFifo, DeltaType};
pub use executor::{Executor, ExecutorError, GroupId, Placement};
pub use handler::{Delivery, EventHandler, Notification, handle_each};
pub use indexer::{Cache, IndexFunc, Indexer};
pub use listener::{Overflow, OverflowObserver, QueueBound};
pub use object::{DeletedObject, Object, ObjectMeta, Tombstone};
pub use real_fifo::{Queue, QueueKind, RealFifo};
pub use shared_informer::{HandlerOptions, HandlerRegistration, RelistResyncs, SharedInformer};
