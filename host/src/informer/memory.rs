//! An in-process source: objects held in memory, with resourceVersions, an event history and
//! live watches. Used by the built-in demo and the benchmarks' pure pipeline figures, and handy
//! for embedding Wisp without a cluster.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::informer::key::object_key;
use crate::informer::lister_watcher::{
    ListOptions, ListPage, ListerWatcher, SourceError, WatchEvent, WatchOptions, WatchStream,
};
use crate::informer::object::{Object, ObjectError};
use crate::sync::lock;

#[derive(Clone)]
enum Change {
    Added(Arc<Object>),
    Modified(Arc<Object>),
    Deleted(Arc<Object>),
}

impl Change {
    fn to_event(&self) -> WatchEvent {
        match self {
            Change::Added(o) => WatchEvent::Added(o.clone()),
            Change::Modified(o) => WatchEvent::Modified(o.clone()),
            Change::Deleted(o) => WatchEvent::Deleted(o.clone()),
        }
    }
}

#[derive(Default)]
struct State {
    rv: u64,
    uid: u64,
    objects: BTreeMap<String, Arc<Object>>,
    /// Every change since the start, by resourceVersion.
    log: Vec<(u64, Change)>,
    watchers: Vec<mpsc::UnboundedSender<WatchEvent>>,
}

/// An in-memory set of objects that can be listed and watched.
#[derive(Clone, Default)]
pub struct MemorySource {
    state: Arc<Mutex<State>>,
}

impl MemorySource {
    /// An empty source.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Creates or replaces the object, giving it the next resourceVersion (and a uid when new).
    pub fn apply(&self, mut value: Value) -> Result<Arc<Object>, ObjectError> {
        let mut st = self.lock();
        st.rv += 1;
        let rv = st.rv;
        let probe = Object::from_value(value.clone(), true)?;
        let key = object_key(&probe);
        let existing = st.objects.get(&key).cloned();
        let uid = match &existing {
            Some(o) => o.meta().uid().to_owned(),
            None => {
                st.uid += 1;
                format!("mem-{:08}", st.uid)
            }
        };
        if let Some(md) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            md.insert("resourceVersion".into(), Value::from(rv.to_string()));
            md.insert("uid".into(), Value::from(uid));
        }
        let obj = Arc::new(Object::from_value(value, true)?);
        st.objects.insert(key, obj.clone());
        let change = if existing.is_some() {
            Change::Modified(obj.clone())
        } else {
            Change::Added(obj.clone())
        };
        publish(&mut st, rv, change);
        Ok(obj)
    }

    /// Creates or replaces the object with the resourceVersion `rv` and uid `uid` a cluster of
    /// several sources gave it (see `dir`): every informer that keeps the object sees the same
    /// ones. `rv` must be above every resourceVersion this source has seen.
    pub fn apply_at(
        &self,
        mut value: Value,
        rv: u64,
        uid: &str,
    ) -> Result<Arc<Object>, ObjectError> {
        if let Some(md) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            md.insert("resourceVersion".into(), Value::from(rv.to_string()));
            md.insert("uid".into(), Value::from(uid));
        }
        let obj = Arc::new(Object::from_value(value, true)?);
        let mut st = self.lock();
        st.rv = st.rv.max(rv);
        let key = object_key(&obj);
        let change = if st.objects.insert(key, obj.clone()).is_some() {
            Change::Modified(obj.clone())
        } else {
            Change::Added(obj.clone())
        };
        publish(&mut st, rv, change);
        Ok(obj)
    }

    /// Deletes the object stored under `key` (`namespace/name` or `name`).
    pub fn delete(&self, key: &str) -> Option<Arc<Object>> {
        let rv = self.lock().rv + 1;
        self.delete_at(key, rv)
    }

    /// [`MemorySource::delete`] at the resourceVersion `rv` a cluster of several sources gave the
    /// deletion (see [`MemorySource::apply_at`]).
    pub fn delete_at(&self, key: &str, rv: u64) -> Option<Arc<Object>> {
        let mut st = self.lock();
        let old = st.objects.remove(key)?;
        st.rv = st.rv.max(rv);
        let mut meta = old.meta().to_owned();
        meta.resource_version = rv.to_string();
        let mut v = old.to_value();
        v["metadata"]["resourceVersion"] = Value::from(rv.to_string());
        let json = serde_json::to_string(&v).unwrap_or_else(|_| old.json().to_owned());
        let gone = Arc::new(Object::from_parts(&meta, json));
        publish(&mut st, rv, Change::Deleted(gone.clone()));
        Some(gone)
    }

    /// The current objects, by key.
    pub fn objects(&self) -> BTreeMap<String, Arc<Object>> {
        self.lock().objects.clone()
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }
}

fn publish(st: &mut State, rv: u64, change: Change) {
    let ev = change.to_event();
    st.watchers.retain(|w| w.send(ev.clone()).is_ok());
    st.log.push((rv, change));
}

impl ListerWatcher for MemorySource {
    fn list(&self, _opts: ListOptions) -> BoxFuture<'_, Result<ListPage, SourceError>> {
        let st = self.lock();
        let page = ListPage {
            resource_version: st.rv.to_string(),
            continue_token: None,
            items: st.objects.values().cloned().collect(),
        };
        async move { Ok(page) }.boxed()
    }

    fn watch(&self, opts: WatchOptions) -> BoxFuture<'_, Result<WatchStream, SourceError>> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut st = self.lock();
        let from: Option<u64> = match opts.resource_version.as_str() {
            "" | "0" => None,
            rv => match rv.parse() {
                Ok(n) => Some(n),
                Err(_) => {
                    let msg = format!("invalid resourceVersion {rv:?}");
                    return async move { Err(SourceError::Request(msg)) }.boxed();
                }
            },
        };
        let initial: Vec<WatchEvent> = match from {
            None => st
                .objects
                .values()
                .cloned()
                .map(WatchEvent::Added)
                .collect(),
            Some(n) => st
                .log
                .iter()
                .filter(|(rv, _)| *rv > n)
                .map(|(_, c)| c.to_event())
                .collect(),
        };
        let mut initial = initial;
        if opts.send_initial_events {
            initial = st
                .objects
                .values()
                .cloned()
                .map(WatchEvent::Added)
                .collect();
            initial.push(WatchEvent::Bookmark {
                resource_version: st.rv.to_string(),
                initial_events_end: true,
            });
        }
        for ev in initial {
            let _ = tx.send(ev);
        }
        st.watchers.push(tx);
        drop(st);
        let stream = tokio_stream_from(rx).map(Ok).boxed();
        async move { Ok(stream) }.boxed()
    }

    fn describe(&self) -> String {
        "in-memory objects".to_owned()
    }
}

fn tokio_stream_from(
    mut rx: mpsc::UnboundedReceiver<WatchEvent>,
) -> impl futures::Stream<Item = WatchEvent> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, app: &str) -> Value {
        serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "demo", "labels": {"app": app}}})
    }

    #[tokio::test]
    async fn watch_from_a_resource_version_replays_later_changes_then_follows() {
        let src = MemorySource::new();
        src.apply(pod("a", "x")).unwrap();
        let rv = src.resource_version().to_string();
        src.apply(pod("a", "y")).unwrap();
        let mut w = src
            .watch(WatchOptions {
                resource_version: rv,
                ..Default::default()
            })
            .await
            .unwrap();
        src.delete("demo/a");
        let first = w.next().await.unwrap().unwrap();
        assert!(matches!(first, WatchEvent::Modified(o) if o.meta().label("app") == Some("y")));
        let second = w.next().await.unwrap().unwrap();
        assert!(matches!(second, WatchEvent::Deleted(o) if o.resource_version() == "3"));
    }
}
