//! The event log: every change since the compaction floor, with the object before it, so that
//! watches can replay from a resourceVersion and lists can rebuild the state at one.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use super::object::{Obj, ObjectKey};
use super::resource::ResourceKey;

/// What a logged change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventKind {
    Added,
    Modified,
    Deleted,
}

/// One change in the history.
#[derive(Debug)]
pub(crate) struct LoggedEvent {
    /// The resourceVersion this change took.
    pub rv: u64,
    /// Its collection.
    pub resource: ResourceKey,
    /// Its object key.
    pub key: ObjectKey,
    /// Added, modified or deleted.
    pub kind: EventKind,
    /// The object after the change; for a delete, the last state stamped with the delete's RV.
    pub object: Obj,
    /// The object before the change: undoes it, and tells selector transitions apart.
    pub prev: Option<Obj>,
}

/// All collections' events in RV order, from just after `floor`.
#[derive(Debug)]
pub(crate) struct History {
    events: VecDeque<Arc<LoggedEvent>>,
    /// Compaction floor: every event after it is kept; RVs below it are expired.
    floor: u64,
    /// Events beyond this many are compacted away, oldest first.
    limit: usize,
}

impl History {
    /// An empty history whose floor is `floor`.
    pub fn new(floor: u64, limit: usize) -> Self {
        Self {
            events: VecDeque::new(),
            floor,
            limit: limit.max(1),
        }
    }

    /// The compaction floor.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// Appends an event (RVs must increase), compacting the oldest beyond the limit.
    pub fn push(&mut self, event: Arc<LoggedEvent>) {
        self.events.push_back(event);
        self.enforce_limit();
    }

    /// Keeps at most `limit` (at least 1) events from now on.
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit.max(1);
        self.enforce_limit();
    }

    fn enforce_limit(&mut self) {
        while self.events.len() > self.limit {
            if let Some(oldest) = self.events.pop_front() {
                self.floor = oldest.rv;
            }
        }
    }

    /// Forgets everything; RVs below `rv` become expired.
    pub fn compact_to(&mut self, rv: u64) {
        self.events.clear();
        self.floor = rv;
    }

    /// The events of `resource` after `rv`, in order.
    pub fn after(&self, resource: &ResourceKey, rv: u64) -> Vec<Arc<LoggedEvent>> {
        let start = self.events.partition_point(|e| e.rv <= rv);
        self.events
            .range(start..)
            .filter(|e| e.resource == *resource)
            .cloned()
            .collect()
    }

    /// Turns `objects` (the current objects of `resource` that pass `keep`) into their state at
    /// `rv` by undoing every later event; `rv` must not be below the floor.
    pub fn rewind(
        &self,
        objects: &mut BTreeMap<ObjectKey, Obj>,
        resource: &ResourceKey,
        keep: impl Fn(&ObjectKey) -> bool,
        rv: u64,
    ) {
        for event in self.events.iter().rev().take_while(|e| e.rv > rv) {
            if event.resource != *resource || !keep(&event.key) {
                continue;
            }
            match (event.kind, &event.prev) {
                (EventKind::Added, _) => {
                    objects.remove(&event.key);
                }
                (EventKind::Modified | EventKind::Deleted, Some(prev)) => {
                    objects.insert(event.key.clone(), Arc::clone(prev));
                }
                (_, None) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::object::StoredObject;
    use serde_json::json;

    fn pods() -> ResourceKey {
        ResourceKey::for_kind("v1", "Pod")
    }

    fn event(
        rv: u64,
        name: &str,
        kind: EventKind,
        version: u64,
        prev: Option<u64>,
    ) -> Arc<LoggedEvent> {
        let obj = |v: u64| StoredObject::new(&json!({"metadata": {"name": name, "v": v}}));
        Arc::new(LoggedEvent {
            rv,
            resource: pods(),
            key: (String::new(), name.to_string()),
            kind,
            object: obj(version),
            prev: prev.map(obj),
        })
    }

    #[test]
    fn rewinding_undoes_adds_modifications_and_deletes_after_the_rv() {
        let mut history = History::new(1, 100);
        history.push(event(2, "a", EventKind::Added, 1, None));
        history.push(event(3, "b", EventKind::Added, 1, None));
        history.push(event(4, "a", EventKind::Modified, 2, Some(1)));
        history.push(event(5, "b", EventKind::Deleted, 1, Some(1)));
        history.push(event(6, "c", EventKind::Added, 1, None));
        // Current state: a@2, c@1.
        let current: BTreeMap<ObjectKey, Obj> = [("a", 2), ("c", 1)]
            .into_iter()
            .map(|(n, v)| {
                (
                    (String::new(), n.to_string()),
                    StoredObject::new(&json!({"metadata": {"name": n, "v": v}})),
                )
            })
            .collect();
        let mut at3 = current.clone();
        history.rewind(&mut at3, &pods(), |_| true, 3);
        let state: Vec<_> = at3
            .values()
            .map(|o| {
                (
                    o.value()["metadata"]["name"].clone(),
                    o.value()["metadata"]["v"].clone(),
                )
            })
            .collect();
        assert_eq!(state, [(json!("a"), json!(1)), (json!("b"), json!(1))]);
        assert_eq!(
            history
                .after(&pods(), 4)
                .iter()
                .map(|e| e.rv)
                .collect::<Vec<_>>(),
            [5, 6]
        );
    }

    #[test]
    fn the_limit_compacts_the_oldest_events_and_raises_the_floor() {
        let mut history = History::new(1, 2);
        for rv in 2..=5 {
            history.push(event(rv, "a", EventKind::Added, rv, None));
        }
        assert_eq!(history.floor(), 3);
        assert_eq!(history.after(&pods(), 0).len(), 2);
        history.compact_to(9);
        assert_eq!((history.floor(), history.after(&pods(), 0).len()), (9, 0));
    }
}
