//! What listeners receive: notifications, numbered per listener, and the handler trait that
//! native Rust handlers (and later wasm plugins) implement.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};

use super::object::{DeletedObject, Object};
use crate::sync::lock;

/// One notification for a listener (client-go's add / update / delete notifications).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notification {
    /// The object appeared; `initial_list` is set while the informer (or, for a late-added
    /// listener, its replay of the cache) is delivering the initial population.
    Add {
        /// The new object.
        obj: Arc<Object>,
        /// Part of the initial list.
        initial_list: bool,
    },
    /// The object changed. When both resourceVersions are equal this is a resync.
    Update {
        /// The state the listener saw before.
        old: Arc<Object>,
        /// The new state.
        new: Arc<Object>,
    },
    /// The object is gone; a tombstone when the deletion itself was missed.
    Delete {
        /// The final state or a tombstone.
        obj: DeletedObject,
    },
}

impl Notification {
    /// An update whose resourceVersion did not change: a periodic resync or a relist that found
    /// the object unchanged.
    pub fn is_resync(&self) -> bool {
        matches!(self, Notification::Update { old, new } if old.resource_version() == new.resource_version())
    }

    /// The object this notification is about (the new state for an update).
    pub fn object(&self) -> &Arc<Object> {
        match self {
            Notification::Add { obj, .. } => obj,
            Notification::Update { new, .. } => new,
            Notification::Delete { obj } => obj.object(),
        }
    }

    pub(crate) fn is_initial_list(&self) -> bool {
        matches!(
            self,
            Notification::Add {
                initial_list: true,
                ..
            }
        )
    }
}

/// A notification with its per-listener sequence number (1, 2, 3, ...), so loss or duplication
/// downstream is detectable: an unbounded queue leaves no gaps; a bounded one leaves a gap for
/// each notification it dropped or coalesced (see the listener's queue).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Position in this listener's stream, from 1.
    pub seq: u64,
    /// What happened.
    pub notification: Notification,
}

/// A listener's handler (client-go's `ResourceEventHandler`). Called one batch at a time, in
/// order, from the listener's own thread or from a worker of the shared executor (its
/// `HandlerOptions::placement`). A panic is caught per notification (client-go's listener
/// recovers per call, `TestEventPanics`): the panicking call is counted and logged, is not
/// counted as delivered, and the rest of the batch is delivered as usual. A handler that
/// overrides [`EventHandler::handle`] takes the batch at once: a panic there ends the whole
/// call, and none of that batch counts as delivered (call [`handle_each`] from it to keep the
/// per-notification catch).
pub trait EventHandler: Send + 'static {
    /// An object was added.
    fn on_add(&mut self, _obj: &Arc<Object>, _initial_list: bool) {}
    /// An object was updated (or resynced, when the resourceVersions are equal).
    fn on_update(&mut self, _old: &Arc<Object>, _new: &Arc<Object>) {}
    /// An object was deleted; a tombstone when the deletion was missed.
    fn on_delete(&mut self, _obj: &DeletedObject) {}

    /// Asked after each [`EventHandler::handle`] and [`EventHandler::resume`]: `Some(t)` when
    /// the batch is not finished and the handler wants [`EventHandler::resume`] called at `t`
    /// (a plugin waiting out a retry backoff, instead of sleeping on the thread). Until it is
    /// finished the batch stays in hand: no next batch, not counted delivered, its initial-list
    /// notifications keep HasSynced false. A stopped listener does not resume. Default: always
    /// finished.
    fn unfinished(&mut self) -> Option<std::time::Instant> {
        None
    }

    /// Goes on with the batch left unfinished (see [`EventHandler::unfinished`]).
    fn resume(&mut self) {}

    /// Handles a batch of consecutive deliveries. The default calls the three methods above in
    /// order, catching a panic per notification ([`handle_each`]); handlers with a per-call cost
    /// (wasm) override it to take the batch at once.
    fn handle(&mut self, batch: &[Delivery]) {
        handle_each(self, batch);
    }
}

/// Calls `handler`'s `on_add` / `on_update` / `on_delete` for each delivery of `batch` in order,
/// catching a panic per call: the rest of the batch is still handled, and the listener running
/// the handler counts each panicking call (not delivered) and logs it. No allocation unless a
/// call panics (`catch_unwind` costs nothing on the way through).
pub fn handle_each<H: EventHandler + ?Sized>(handler: &mut H, batch: &[Delivery]) {
    for d in batch {
        let call = catch_unwind(AssertUnwindSafe(|| match &d.notification {
            Notification::Add { obj, initial_list } => handler.on_add(obj, *initial_list),
            Notification::Update { old, new } => handler.on_update(old, new),
            Notification::Delete { obj } => handler.on_delete(obj),
        }));
        if call.is_err() {
            CAUGHT.with(|c| {
                let mut now = c.get();
                if now.panics == 0 {
                    now.first_seq = d.seq;
                }
                now.panics += 1;
                c.set(now);
            });
        }
    }
}

/// Panics [`handle_each`] caught on a thread since the listener last took them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Caught {
    /// Calls that panicked (each one notification, not delivered).
    pub panics: u64,
    /// Sequence number of the first of them.
    pub first_seq: u64,
}

thread_local! {
    /// How [`handle_each`] tells the listener that called `handle` on this thread which calls
    /// panicked, without changing `handle`'s signature: the listener takes it after each call.
    static CAUGHT: Cell<Caught> = const { Cell::new(Caught { panics: 0, first_seq: 0 }) };
}

/// Takes (and resets) what [`handle_each`] caught on this thread.
pub(crate) fn take_caught() -> Caught {
    CAUGHT.with(Cell::take)
}

/// A handler that records every delivery: for tests, debugging and the `record` tooling.
#[derive(Clone, Default)]
pub struct Recorder {
    seen: Arc<Mutex<Vec<Delivery>>>,
}

impl Recorder {
    /// A new, empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Everything delivered so far.
    pub fn deliveries(&self) -> Vec<Delivery> {
        lock(&self.seen).clone()
    }

    /// Number of deliveries so far.
    pub fn len(&self) -> usize {
        lock(&self.seen).len()
    }

    /// Whether nothing was delivered yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl EventHandler for Recorder {
    fn handle(&mut self, batch: &[Delivery]) {
        lock(&self.seen).extend_from_slice(batch);
    }
}
