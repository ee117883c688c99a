//! The listener's per-notification panic catch costs no allocation on the hot path: a handler
//! taking the default `handle` (`handle_each`, one `catch_unwind` per notification) over a
//! batch allocates nothing when no call panics.
//!
//! A test binary of its own (not a module of `integration`): it installs a counting global
//! allocator, which counts only the allocations of the thread that asks.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use wisp_host::informer::{Delivery, EventHandler, Notification, Object, handle_each};

thread_local! {
    /// Allocations made by this thread.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: forwards to the system allocator unchanged; only counts calls, in a const-initialized
// thread-local that itself never allocates.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is System's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// Counts its calls, allocating nothing.
#[derive(Default)]
struct Counter {
    adds: u64,
    updates: u64,
    deletes: u64,
}

impl EventHandler for Counter {
    fn on_add(&mut self, _obj: &Arc<Object>, _initial_list: bool) {
        self.adds += 1;
    }
    fn on_update(&mut self, _old: &Arc<Object>, _new: &Arc<Object>) {
        self.updates += 1;
    }
    fn on_delete(&mut self, _obj: &wisp_host::informer::DeletedObject) {
        self.deletes += 1;
    }
}

#[test]
fn the_per_notification_panic_catch_allocates_nothing_when_no_call_panics() {
    let obj = Arc::new(
        Object::from_json(
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns","resourceVersion":"1"}}"#,
            true,
        )
        .unwrap(),
    );
    let batch: Vec<Delivery> = (1..=1000u64)
        .map(|seq| Delivery {
            seq,
            notification: match seq % 3 {
                0 => Notification::Add {
                    obj: obj.clone(),
                    initial_list: false,
                },
                1 => Notification::Update {
                    old: obj.clone(),
                    new: obj.clone(),
                },
                _ => Notification::Delete {
                    obj: wisp_host::informer::DeletedObject::Object(obj.clone()),
                },
            },
        })
        .collect();
    let mut handler = Counter::default();
    // The counter counts (else the assertion below could not fail).
    let probe = allocations();
    let boxed = std::hint::black_box(Box::new(1u64));
    assert_eq!(allocations() - probe, 1, "the counting allocator counts");
    drop(boxed);
    // Through the trait's default `handle`, as the listener calls it.
    let before = allocations();
    handler.handle(&batch);
    handle_each(&mut handler, &batch);
    let after = allocations();
    assert_eq!(
        (handler.adds, handler.updates, handler.deletes),
        (666, 668, 666),
        "every notification handled, twice"
    );
    assert_eq!(
        after - before,
        0,
        "allocations while handling 2000 notifications"
    );
}
