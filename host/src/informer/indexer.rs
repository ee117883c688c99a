//! The indexer: a thread-safe object cache with the namespace index built in and named custom
//! indexes (client-go's `threadSafeMap` + `Indexer`).
//!
//! [`Indexer`] is the single writer (owned by the informer's process loop); [`Cache`] is a cheap,
//! clonable read handle given to listeners, plugins and the DeltaFIFO (as its known objects).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use super::key::{deleted_object_key, object_key};
use super::object::{DeletedObject, Object, Tombstone};
use crate::sync::{read, write};

/// Name of the built-in index of objects by namespace.
pub const NAMESPACE_INDEX: &str = "namespace";

/// An index function: the index values of an object (several, or none).
pub type IndexFunc = Arc<dyn Fn(&Object) -> Vec<String> + Send + Sync>;

/// Errors of index operations.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IndexError {
    /// A query named an index that does not exist.
    #[error("index {0:?} does not exist")]
    UnknownIndex(String),
    /// An index with this name is already registered.
    #[error("index {0:?} already exists")]
    Conflict(String),
}

/// Index by the value of a label; objects without the label are not indexed.
pub fn index_by_label(label: impl Into<String>) -> IndexFunc {
    let label = label.into();
    Arc::new(move |o: &Object| {
        o.meta()
            .label(&label)
            .map(|v| vec![v.to_owned()])
            .unwrap_or_default()
    })
}

/// Index by the uid of every owner reference.
pub fn index_by_owner_uid() -> IndexFunc {
    Arc::new(|o: &Object| {
        o.meta()
            .owner_references()
            .map(|r| r.uid.to_owned())
            .collect()
    })
}

/// Index by a string field of the object, given as a JSON pointer (e.g. `/spec/nodeName`).
/// This parses the object's JSON, so prefer metadata indexes on hot paths.
pub fn index_by_json_pointer(pointer: impl Into<String>) -> IndexFunc {
    let pointer = pointer.into();
    Arc::new(move |o: &Object| {
        let v = o.to_value();
        match v.pointer(&pointer) {
            Some(serde_json::Value::String(s)) if !s.is_empty() => vec![s.clone()],
            _ => Vec::new(),
        }
    })
}

fn index_by_namespace() -> IndexFunc {
    Arc::new(|o: &Object| vec![o.meta().namespace().map(str::to_owned).unwrap_or_default()])
}

#[derive(Default)]
struct Inner {
    items: HashMap<String, Arc<Object>>,
    funcs: HashMap<String, IndexFunc>,
    /// index name -> index value -> keys.
    indices: HashMap<String, HashMap<String, HashSet<String>>>,
    /// The last resourceVersion the store has seen (client-go's `LastStoreSyncResourceVersion`):
    /// of each object stored or deleted, of each list replacing the content, of each bookmark.
    resource_version: String,
}

/// A listed object and its previous state, if it was cached.
pub type Replacement = (Option<Arc<Object>>, Arc<Object>);

/// How one index changes for one key: its name, the values to leave, the values to join.
type IndexChange = (String, Vec<String>, Vec<String>);

impl Inner {
    /// Every index function's values for `old` and `new`, computed before anything changes: a
    /// panicking index function leaves the cache as it was (the informer then fails, and a
    /// relist finds the object missing or stale, not half-indexed).
    fn index_changes(&self, old: Option<&Object>, new: Option<&Object>) -> Vec<IndexChange> {
        self.funcs
            .iter()
            .filter_map(|(name, f)| {
                let old_values = old.map(|o| f(o)).unwrap_or_default();
                let new_values = new.map(|o| f(o)).unwrap_or_default();
                (old_values != new_values).then(|| (name.clone(), old_values, new_values))
            })
            .collect()
    }

    fn apply_index_changes(&mut self, key: &str, changes: Vec<IndexChange>) {
        for (name, old_values, new_values) in changes {
            let index = self.indices.entry(name).or_default();
            for v in &old_values {
                if let Some(set) = index.get_mut(v) {
                    set.remove(key);
                    if set.is_empty() {
                        index.remove(v);
                    }
                }
            }
            for v in new_values {
                index.entry(v).or_default().insert(key.to_owned());
            }
        }
    }

    fn saw(&mut self, resource_version: &str) {
        if !resource_version.is_empty() {
            resource_version.clone_into(&mut self.resource_version);
        }
    }

    fn put(&mut self, key: String, obj: Arc<Object>) {
        let changes = self.index_changes(self.items.get(&key).map(|o| &**o), Some(&obj));
        self.saw(obj.resource_version());
        self.items.insert(key.clone(), obj);
        self.apply_index_changes(&key, changes);
    }

    fn remove(&mut self, key: &str) {
        let Some(old) = self.items.get(key) else {
            return;
        };
        let changes = self.index_changes(Some(old), None);
        self.items.remove(key);
        self.apply_index_changes(key, changes);
    }

    /// Replaces every item and rebuilds every index; the new indexes are built before anything
    /// is swapped in, so a panicking index function leaves the cache as it was.
    fn replace_all(&mut self, items: HashMap<String, Arc<Object>>) {
        let mut indices: HashMap<String, HashMap<String, HashSet<String>>> = HashMap::new();
        for (name, f) in &self.funcs {
            let index = indices.entry(name.clone()).or_default();
            for (key, obj) in &items {
                for v in f(obj) {
                    index.entry(v).or_default().insert(key.clone());
                }
            }
        }
        self.items = items;
        self.indices = indices;
    }
}

type Shared = Arc<RwLock<Inner>>;

/// The writer of the cache. Not `Clone`: one informer owns it. It derefs to [`Cache`] for reads.
pub struct Indexer {
    cache: Cache,
}

/// A cheap, clonable read handle on the cache.
#[derive(Clone)]
pub struct Cache {
    shared: Shared,
}

impl Default for Indexer {
    fn default() -> Self {
        Self::new()
    }
}

impl std::ops::Deref for Indexer {
    type Target = Cache;
    fn deref(&self) -> &Cache {
        &self.cache
    }
}

impl Indexer {
    /// An empty cache with the namespace index.
    pub fn new() -> Self {
        let mut inner = Inner::default();
        inner
            .funcs
            .insert(NAMESPACE_INDEX.to_owned(), index_by_namespace());
        Self {
            cache: Cache {
                shared: Arc::new(RwLock::new(inner)),
            },
        }
    }

    /// A read handle on this cache.
    pub fn cache(&self) -> Cache {
        self.cache.clone()
    }

    /// Registers indexes; existing items are indexed at once. A name clash is an error and
    /// registers none of them.
    pub fn add_indexers(
        &self,
        funcs: impl IntoIterator<Item = (String, IndexFunc)>,
    ) -> Result<(), IndexError> {
        let funcs: Vec<(String, IndexFunc)> = funcs.into_iter().collect();
        let mut inner = write(&self.cache.shared);
        let mut seen = HashSet::new();
        for (name, _) in &funcs {
            if inner.funcs.contains_key(name) || !seen.insert(name.clone()) {
                return Err(IndexError::Conflict(name.clone()));
            }
        }
        let items: Vec<(String, Arc<Object>)> = inner
            .items
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (name, f) in funcs {
            let mut index: HashMap<String, HashSet<String>> = HashMap::new();
            for (key, obj) in &items {
                for v in f(obj) {
                    index.entry(v).or_default().insert(key.clone());
                }
            }
            inner.indices.insert(name.clone(), index);
            inner.funcs.insert(name, f);
        }
        Ok(())
    }

    /// Inserts or replaces an object under its key.
    pub fn add(&self, obj: Arc<Object>) {
        write(&self.cache.shared).put(object_key(&obj), obj);
    }

    /// Same as [`Indexer::add`].
    pub fn update(&self, obj: Arc<Object>) {
        self.add(obj);
    }

    /// Removes the object (or the tombstone's key).
    pub fn delete(&self, obj: &DeletedObject) {
        let mut inner = write(&self.cache.shared);
        inner.remove(&deleted_object_key(obj));
        // As client-go's DeleteWithObject: the deleted object's version; a tombstone carries the
        // last state known, not the deletion's, so it does not count.
        if let DeletedObject::Object(o) = obj {
            inner.saw(o.resource_version());
        }
    }

    /// Replaces the whole content and rebuilds every index.
    pub fn replace(&self, objs: Vec<Arc<Object>>) {
        let items = objs.into_iter().map(|o| (object_key(&o), o)).collect();
        write(&self.cache.shared).replace_all(items);
    }

    /// client-go's atomic `ReplacedAll` (`processReplacedAllInfo`): replaces the whole content
    /// with `objs` at once, under one write lock, so no reader sees a half-applied list, and
    /// returns what listeners must be told: a tombstone for every cached object missing from
    /// the list (in key order), then each listed object with its previous state, if any, in
    /// list order.
    pub fn replace_all_reconciled(
        &self,
        objs: Vec<Arc<Object>>,
        resource_version: &str,
    ) -> (Vec<Tombstone>, Vec<Replacement>) {
        let mut inner = write(&self.cache.shared);
        let mut items: HashMap<String, Arc<Object>> = HashMap::with_capacity(objs.len());
        let mut replacements = Vec::with_capacity(objs.len());
        for o in objs {
            let key = object_key(&o);
            replacements.push((inner.items.get(&key).cloned(), o.clone()));
            items.insert(key, o);
        }
        let mut deletions: Vec<Tombstone> = inner
            .items
            .iter()
            .filter(|(k, _)| !items.contains_key(*k))
            .map(|(k, o)| Tombstone {
                key: k.clone(),
                obj: o.clone(),
            })
            .collect();
        deletions.sort_by(|a, b| a.key.cmp(&b.key));
        inner.replace_all(items);
        inner.saw(resource_version);
        (deletions, replacements)
    }

    /// client-go's `Bookmark`: the store has seen everything up to `resource_version`.
    pub fn bookmark(&self, resource_version: &str) {
        write(&self.cache.shared).saw(resource_version);
    }
}

impl Cache {
    /// The object stored under `key`.
    pub fn get_by_key(&self, key: &str) -> Option<Arc<Object>> {
        read(&self.shared).items.get(key).cloned()
    }

    /// The stored object with the same key as `obj`.
    pub fn get(&self, obj: &Object) -> Option<Arc<Object>> {
        self.get_by_key(&object_key(obj))
    }

    /// Every stored object, in no particular order.
    pub fn list(&self) -> Vec<Arc<Object>> {
        read(&self.shared).items.values().cloned().collect()
    }

    /// Every stored key, in no particular order.
    pub fn list_keys(&self) -> Vec<String> {
        read(&self.shared).items.keys().cloned().collect()
    }

    /// Every stored (key, object) pair, taken atomically.
    pub fn snapshot(&self) -> Vec<(String, Arc<Object>)> {
        read(&self.shared)
            .items
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The last resourceVersion the store has seen (client-go `LastStoreSyncResourceVersion`):
    /// of the last object stored or deleted, list that replaced the content, or bookmark.
    pub fn resource_version(&self) -> String {
        read(&self.shared).resource_version.clone()
    }

    /// Number of stored objects.
    pub fn len(&self) -> usize {
        read(&self.shared).items.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Objects whose index `index` contains `value`.
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<Object>>, IndexError> {
        let inner = read(&self.shared);
        let keys = Self::keys_in(&inner, index, value)?;
        Ok(keys.filter_map(|k| inner.items.get(k).cloned()).collect())
    }

    /// Keys whose index `index` contains `value`.
    pub fn index_keys(&self, index: &str, value: &str) -> Result<Vec<String>, IndexError> {
        let inner = read(&self.shared);
        Ok(Self::keys_in(&inner, index, value)?.cloned().collect())
    }

    /// Every value currently present in index `index`.
    pub fn list_index_values(&self, index: &str) -> Result<Vec<String>, IndexError> {
        let inner = read(&self.shared);
        if !inner.funcs.contains_key(index) {
            return Err(IndexError::UnknownIndex(index.to_owned()));
        }
        Ok(inner
            .indices
            .get(index)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default())
    }

    /// Objects sharing at least one value of index `index` with `obj` (client-go `Index`).
    pub fn index(&self, index: &str, obj: &Object) -> Result<Vec<Arc<Object>>, IndexError> {
        let inner = read(&self.shared);
        let f = inner
            .funcs
            .get(index)
            .ok_or_else(|| IndexError::UnknownIndex(index.to_owned()))?;
        let mut keys: HashSet<&String> = HashSet::new();
        if let Some(idx) = inner.indices.get(index) {
            for v in f(obj) {
                if let Some(set) = idx.get(&v) {
                    keys.extend(set.iter());
                }
            }
        }
        Ok(keys
            .into_iter()
            .filter_map(|k| inner.items.get(k).cloned())
            .collect())
    }

    /// Names of the registered indexes.
    pub fn index_names(&self) -> Vec<String> {
        read(&self.shared).funcs.keys().cloned().collect()
    }

    fn keys_in<'a>(
        inner: &'a Inner,
        index: &str,
        value: &str,
    ) -> Result<impl Iterator<Item = &'a String> + 'a, IndexError> {
        if !inner.funcs.contains_key(index) {
            return Err(IndexError::UnknownIndex(index.to_owned()));
        }
        Ok(inner
            .indices
            .get(index)
            .and_then(|m| m.get(value))
            .into_iter()
            .flatten())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::object::Tombstone;
    use crate::informer::object::test_util::{labelled, obj};

    fn names(mut v: Vec<Arc<Object>>) -> Vec<String> {
        v.sort_by(|a, b| a.meta().name().cmp(b.meta().name()));
        v.into_iter().map(|o| o.meta().name().to_owned()).collect()
    }

    #[test]
    fn namespace_index_is_built_in() {
        let ix = Indexer::new();
        ix.add(obj(Some("a"), "p1", "1"));
        ix.add(obj(Some("a"), "p2", "1"));
        ix.add(obj(Some("b"), "p3", "1"));
        assert_eq!(
            names(ix.by_index(NAMESPACE_INDEX, "a").unwrap()),
            ["p1", "p2"]
        );
    }

    #[test]
    fn index_functions_may_return_several_values_and_empty_sets_are_removed() {
        let ix = Indexer::new();
        let multi: IndexFunc =
            Arc::new(|o: &Object| o.meta().labels().map(|(k, _)| k.to_owned()).collect());
        ix.add_indexers([("labelKeys".to_owned(), multi)]).unwrap();
        ix.add(labelled("ns", "p1", "1", &[("x", "1"), ("y", "1")]));
        assert_eq!(names(ix.by_index("labelKeys", "x").unwrap()), ["p1"]);
        assert_eq!(names(ix.by_index("labelKeys", "y").unwrap()), ["p1"]);
        ix.update(labelled("ns", "p1", "2", &[("y", "1")]));
        assert!(ix.by_index("labelKeys", "x").unwrap().is_empty());
        let mut values = ix.list_index_values("labelKeys").unwrap();
        values.sort();
        assert_eq!(
            values,
            ["y"],
            "a value with no keys left is removed from the index"
        );
        ix.delete(&DeletedObject::Tombstone(Tombstone {
            key: "ns/p1".into(),
            obj: obj(Some("ns"), "p1", "2"),
        }));
        assert!(ix.list_index_values("labelKeys").unwrap().is_empty());
    }

    #[test]
    fn unknown_index_name_is_an_error() {
        let ix = Indexer::new();
        assert_eq!(
            ix.by_index("nope", "x").unwrap_err(),
            IndexError::UnknownIndex("nope".into())
        );
        assert_eq!(
            ix.index_keys("nope", "x").unwrap_err(),
            IndexError::UnknownIndex("nope".into())
        );
        assert_eq!(
            ix.index("nope", &obj(None, "a", "1")).unwrap_err(),
            IndexError::UnknownIndex("nope".into())
        );
    }

    #[test]
    fn adding_an_index_indexes_existing_items_and_a_name_clash_is_an_error() {
        let ix = Indexer::new();
        ix.add(labelled("ns", "p1", "1", &[("app", "web")]));
        ix.add_indexers([("app".to_owned(), index_by_label("app"))])
            .unwrap();
        assert_eq!(names(ix.by_index("app", "web").unwrap()), ["p1"]);
        assert_eq!(
            ix.add_indexers([("app".to_owned(), index_by_label("app"))])
                .unwrap_err(),
            IndexError::Conflict("app".into())
        );
        assert_eq!(
            ix.add_indexers([(NAMESPACE_INDEX.to_owned(), index_by_label("x"))])
                .unwrap_err(),
            IndexError::Conflict(NAMESPACE_INDEX.into())
        );
    }

    #[test]
    fn replace_rebuilds_every_index() {
        let ix = Indexer::new();
        ix.add_indexers([("app".to_owned(), index_by_label("app"))])
            .unwrap();
        ix.add(labelled("a", "old", "1", &[("app", "web")]));
        ix.replace(vec![labelled("b", "new", "2", &[("app", "db")])]);
        assert!(ix.by_index("app", "web").unwrap().is_empty());
        assert!(ix.by_index(NAMESPACE_INDEX, "a").unwrap().is_empty());
        assert_eq!(names(ix.by_index("app", "db").unwrap()), ["new"]);
        assert_eq!(names(ix.by_index(NAMESPACE_INDEX, "b").unwrap()), ["new"]);
        assert_eq!(ix.len(), 1);
    }

    #[test]
    fn index_returns_objects_sharing_a_value_and_readers_see_writes() {
        let ix = Indexer::new();
        let reader = ix.cache();
        ix.add(obj(Some("a"), "p1", "1"));
        ix.add(obj(Some("a"), "p2", "1"));
        ix.add(obj(Some("b"), "p3", "1"));
        assert_eq!(
            names(
                reader
                    .index(NAMESPACE_INDEX, &obj(Some("a"), "zz", "1"))
                    .unwrap()
            ),
            ["p1", "p2"]
        );
        assert_eq!(reader.get_by_key("b/p3").unwrap().meta().name(), "p3");
    }
}
