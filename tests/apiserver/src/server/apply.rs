//! Server-side apply and `metadata.managedFields`.
//!
//! Every write through the HTTP API records who owns which fields, in the FieldsV1 format
//! (`f:<field>`, `k:<list-map keys>`, `v:<set value>`, `i:<index>`, `.` for a node that is owned
//! and has owned children). Creates, updates and non-apply patches record an `Update` entry for
//! their manager, taking the fields they changed away from other managers; an apply
//! (`application/apply-patch+yaml`) replaces its manager's `Apply` entry with the fields of its
//! configuration, merges the configuration into the object, removes the fields the manager
//! applied before and dropped now (unless another manager owns them), and fails with 409 when it
//! would change a field another manager owns, unless `force=true` moves the field to it. As on a
//! real server, updates of an object that has no managedFields record none, and applying to such
//! an object gives all its fields to `before-first-apply` first. An applied configuration must
//! not carry managedFields (400). Lists merge by the keys of [`super::patch::field`]; other
//! lists are atomic, as they are for custom resources without a schema.
//!
//! As on a real server, an apply by the manager `kubectl` (`kubectl apply --server-side`) takes
//! over without conflicts the fields of the object's client-side
//! `kubectl.kubernetes.io/last-applied-configuration`, and keeps that annotation in step with
//! what it applies.
//!
//! The manager of a write without `fieldManager` is its User-Agent up to the first `/`, empty
//! without one (kube-rs sends none), as on a real server.
//!
//! Objects written through the `TestApiServer` handle (`create`, `update`) are stored as given,
//! like a direct etcd write: no managedFields are recorded for them.
//!
//! Deliberate simplifications:
//! - no defaulting: list-map keys are the key fields present in each item (a real server
//!   defaults e.g. `protocol: TCP` of container ports first);
//! - an `Update` owns the maps and associative lists it creates themselves (`.` in FieldsV1),
//!   as structured-merge-diff's comparison does, except the nodes the zero value of a built-in
//!   type already has (`spec`, `status`, a pod template, ...: a short table, not Go's types);
//!   an `Apply` owns list items as nodes, maps through their leaves; an empty map or an atomic
//!   list is a leaf;
//! - `status` is tracked (and applied) only through the `status` subresource, the rest only
//!   through the main resource, for every kind that has that subresource (for custom resources
//!   without one, `status` is an ordinary field);
//! - `null` in an applied configuration is an ordinary value, not a removal.
//!
//! At most ten `Update` entries are kept: the oldest beyond are folded into `ancient-changes`.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::patch::{BuiltinKind, ListKind, Ty, field};
use super::resource::now_rfc3339;
use super::status::ApiError;

/// The manager that owns the fields of an object that had no managedFields when first applied.
pub(crate) const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Pe {
    /// A field of a map: `f:name`.
    Field(String),
    /// An item of a list map, by its keys as compact JSON with sorted keys: `k:{"name":"a"}`.
    Key(String),
    /// An item of a set, by its JSON value: `v:"a"`.
    Value(String),
    /// A list item by position: `i:0` (read from FieldsV1 sent by clients; never produced here).
    Index(usize),
}

/// A field path from the top of the object.
pub(crate) type Path = Vec<Pe>;

/// A set of owned fields.
pub(crate) type FieldSet = BTreeSet<Path>;

impl Pe {
    fn encode(&self) -> String {
        match self {
            Pe::Field(f) => format!("f:{f}"),
            Pe::Key(k) => format!("k:{k}"),
            Pe::Value(v) => format!("v:{v}"),
            Pe::Index(i) => format!("i:{i}"),
        }
    }

    fn decode(s: &str) -> Option<Self> {
        let (tag, rest) = s.split_once(':')?;
        Some(match tag {
            "f" => Pe::Field(rest.to_string()),
            "k" => Pe::Key(sorted_json(&serde_json::from_str(rest).ok()?)),
            "v" => Pe::Value(serde_json::from_str::<Value>(rest).ok()?.to_string()),
            "i" => Pe::Index(rest.parse().ok()?),
            _ => return None,
        })
    }
}

/// Compact JSON of an object with its keys sorted, as FieldsV1 keys and conflict paths show it.
fn sorted_json(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", Value::String((*k).clone()), sorted_json(&map[*k])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        other => other.to_string(),
    }
}

/// A path as conflict messages print it: `.spec.containers[name="app"].image`.
pub(crate) fn path_string(path: &[Pe]) -> String {
    let mut out = String::new();
    for pe in path {
        match pe {
            Pe::Field(f) => {
                out.push('.');
                out.push_str(f);
            }
            Pe::Key(k) => {
                let keys: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
                let mut parts: Vec<String> =
                    keys.iter().map(|(name, v)| format!("{name}={v}")).collect();
                parts.sort();
                out.push_str(&format!("[{}]", parts.join(",")));
            }
            Pe::Value(v) => out.push_str(&format!("[={v}]")),
            Pe::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Encodes a set as a FieldsV1 object.
pub(crate) fn encode_fields(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut node = &mut root;
        for pe in path {
            let child = node
                .entry(pe.encode())
                .or_insert_with(|| Value::Object(Map::new()));
            node = match child {
                Value::Object(map) => map,
                _ => unreachable!("FieldsV1 nodes are objects"),
            };
        }
        node.insert(".".into(), Value::Object(Map::new()));
    }
    fn tidy(node: &mut Map<String, Value>) {
        for child in node.values_mut() {
            if let Value::Object(map) = child {
                if map.len() == 1 && map.contains_key(".") {
                    map.clear();
                } else {
                    tidy(map);
                }
            }
        }
    }
    tidy(&mut root);
    Value::Object(root)
}

/// Decodes a FieldsV1 object; unreadable keys are skipped.
pub(crate) fn decode_fields(fields: &Value) -> FieldSet {
    fn walk(node: &Map<String, Value>, path: &mut Path, out: &mut FieldSet) {
        for (key, child) in node {
            if key == "." {
                out.insert(path.clone());
                continue;
            }
            let Some(pe) = Pe::decode(key) else { continue };
            path.push(pe);
            match child.as_object() {
                Some(map) if !map.is_empty() => walk(map, path, out),
                _ => {
                    out.insert(path.clone());
                }
            }
            path.pop();
        }
    }
    let mut out = FieldSet::new();
    if let Some(map) = fields.as_object() {
        walk(map, &mut Vec::new(), &mut out);
    }
    out
}

/// The part of an object whose fields are tracked: no apiVersion, kind or system metadata; only
/// `status` for the status subresource, everything but `status` otherwise.
#[cfg(test)]
pub(crate) fn tracked(obj: &Value, status: bool) -> Value {
    tracked_part(obj, status, true)
}

/// [`tracked`], where `separate_status` says whether the kind has a status subresource: without
/// one (a custom resource whose CRD has no `subresources.status`), `status` is an ordinary field.
fn tracked_part(obj: &Value, status: bool, separate_status: bool) -> Value {
    let Some(map) = obj.as_object() else {
        return json!({});
    };
    let mut out = Map::new();
    for (key, value) in map {
        let keep = match key.as_str() {
            "apiVersion" | "kind" => false,
            "status" => status || !separate_status,
            _ => !status,
        };
        if !keep {
            continue;
        }
        if key == "metadata" {
            let mut meta = value.as_object().cloned().unwrap_or_default();
            for system in [
                "name",
                "namespace",
                "uid",
                "resourceVersion",
                "generation",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "selfLink",
                "managedFields",
            ] {
                meta.remove(system);
            }
            if !meta.is_empty() {
                out.insert(key.clone(), Value::Object(meta));
            }
        } else {
            out.insert(key.clone(), value.clone());
        }
    }
    Value::Object(out)
}

/// The key of a list-map item: the key fields it has; `None` if it has none.
fn item_key(item: &Value, keys: &[&str]) -> Option<String> {
    let map = item.as_object()?;
    let mut out = Map::new();
    for key in keys {
        if let Some(v) = map.get(*key) {
            out.insert((*key).to_string(), v.clone());
        }
    }
    (!out.is_empty()).then(|| sorted_json(&Value::Object(out)))
}

/// Whether every item of a list map is an object with a key (else the list is treated as
/// atomic).
fn keyed(items: &[Value], keys: &[&str]) -> bool {
    items.iter().all(|i| item_key(i, keys).is_some())
}

/// The owned-field paths of `value` (already [`tracked`]).
pub(crate) fn field_set(value: &Value, ty: Ty) -> FieldSet {
    let mut out = FieldSet::new();
    if let Value::Object(map) = value {
        fields_of_map(map, ty, &mut Vec::new(), &mut out);
    }
    out
}

fn fields_of_map(map: &Map<String, Value>, ty: Ty, path: &mut Path, out: &mut FieldSet) {
    for (key, value) in map {
        let (child_ty, list) = field(ty, key);
        path.push(Pe::Field(key.clone()));
        fields_of_value(value, child_ty, list, path, out);
        path.pop();
    }
}

fn fields_of_value(value: &Value, ty: Ty, list: ListKind, path: &mut Path, out: &mut FieldSet) {
    match (value, list) {
        (Value::Object(map), _) if !map.is_empty() && ty != Ty::AtomicMap => {
            fields_of_map(map, ty, path, out)
        }
        (Value::Array(items), ListKind::Set) if !items.is_empty() => {
            for item in items {
                path.push(Pe::Value(item.to_string()));
                out.insert(path.clone());
                path.pop();
            }
        }
        (Value::Array(items), ListKind::Map(keys)) if !items.is_empty() && keyed(items, keys) => {
            for item in items {
                let key = item_key(item, keys).unwrap_or_default();
                path.push(Pe::Key(key));
                out.insert(path.clone());
                if let Value::Object(map) = item {
                    fields_of_map(map, ty, path, out);
                }
                path.pop();
            }
        }
        _ => {
            out.insert(path.clone());
        }
    }
}

/// The value at `path`, if there is one.
pub(crate) fn value_at<'a>(value: &'a Value, path: &[Pe]) -> Option<&'a Value> {
    let mut at = value;
    for pe in path {
        at = match (pe, at) {
            (Pe::Field(f), Value::Object(map)) => map.get(f)?,
            (Pe::Index(i), Value::Array(items)) => items.get(*i)?,
            (Pe::Value(v), Value::Array(items)) => items.iter().find(|i| i.to_string() == *v)?,
            (Pe::Key(k), Value::Array(items)) => items.iter().find(|i| {
                i.as_object().is_some_and(|m| {
                    let want: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
                    want.iter().all(|(name, v)| m.get(name) == Some(v))
                        && sorted_json(&Value::Object(want.clone())) == *k
                })
            })?,
            _ => return None,
        };
    }
    Some(at)
}

/// Removes the value at `path`; list items are removed from their list.
fn remove_at(value: &mut Value, path: &[Pe]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let mut at = value;
    for pe in parent {
        let next = match (pe, at) {
            (Pe::Field(f), Value::Object(map)) => map.get_mut(f),
            (Pe::Index(i), Value::Array(items)) => items.get_mut(*i),
            (pe @ (Pe::Key(_) | Pe::Value(_)), Value::Array(items)) => {
                let found = items.iter().position(|i| matches_item(i, pe));
                found.and_then(|i| items.get_mut(i))
            }
            _ => None,
        };
        match next {
            Some(n) => at = n,
            None => return,
        }
    }
    match (last, at) {
        (Pe::Field(f), Value::Object(map)) => {
            map.remove(f);
        }
        (Pe::Index(i), Value::Array(items)) if *i < items.len() => {
            items.remove(*i);
        }
        (pe @ (Pe::Key(_) | Pe::Value(_)), Value::Array(items)) => {
            items.retain(|i| !matches_item(i, pe));
        }
        _ => {}
    }
}

fn matches_item(item: &Value, pe: &Pe) -> bool {
    let wrapped = Value::Array(vec![item.clone()]);
    value_at(&wrapped, std::slice::from_ref(pe)).is_some()
}

/// A path of a field set whose value two writers can disagree on: every member but list items
/// (maps owned through their fields are never members).
fn is_leaf(path: &[Pe]) -> bool {
    !matches!(path.last(), Some(Pe::Key(_) | Pe::Value(_)))
}

/// One entry of `metadata.managedFields`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub subresource: Option<String>,
    pub fields: FieldSet,
}

impl Entry {
    fn to_json(&self) -> Value {
        let mut entry = json!({
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": encode_fields(&self.fields),
        });
        if !self.manager.is_empty() {
            entry["manager"] = Value::String(self.manager.clone());
        }
        if let Some(sub) = &self.subresource {
            entry["subresource"] = Value::String(sub.clone());
        }
        entry
    }

    fn from_json(entry: &Value) -> Option<Self> {
        let s = |name: &str| entry.get(name).and_then(Value::as_str).map(str::to_string);
        Some(Self {
            manager: s("manager").unwrap_or_default(),
            operation: s("operation")?,
            api_version: s("apiVersion").unwrap_or_default(),
            time: s("time").unwrap_or_default(),
            subresource: s("subresource").filter(|s| !s.is_empty()),
            fields: entry.get("fieldsV1").map(decode_fields).unwrap_or_default(),
        })
    }

    /// How conflict messages name this manager.
    fn display(&self) -> String {
        let mut out = format!("{:?}", self.manager);
        if let Some(sub) = &self.subresource {
            out.push_str(&format!(" with subresource {sub:?}"));
        }
        if self.operation == "Update" {
            out.push_str(&format!(" using {}", self.api_version));
        }
        out
    }
}

/// The managedFields of an object.
pub(crate) fn entries(obj: &Value) -> Vec<Entry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(Entry::from_json).collect())
        .unwrap_or_default()
}

/// Most `Update` entries kept; older ones are folded into `ancient-changes`.
const MAX_UPDATE_MANAGERS: usize = 10;

/// The manager the oldest `Update` entries beyond [`MAX_UPDATE_MANAGERS`] are folded into.
pub(crate) const ANCIENT_CHANGES: &str = "ancient-changes";

/// Folds the oldest `Update` entries into one `ancient-changes` entry per apiVersion until at
/// most [`MAX_UPDATE_MANAGERS`] remain, as kube-apiserver caps them: the oldest entry of a
/// version becomes the bucket (unless one exists), later ones are merged into it and give it
/// their time.
fn cap_update_managers(entries: &mut Vec<Entry>) {
    let mut updates: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].operation == "Update")
        .collect();
    let mut remaining = updates.len();
    if remaining <= MAX_UPDATE_MANAGERS {
        return;
    }
    updates.sort_by(|&a, &b| entries[a].time.cmp(&entries[b].time));
    let mut first_of_version: Vec<(String, usize)> = Vec::new();
    let mut folded = Vec::new();
    for i in updates {
        if remaining <= MAX_UPDATE_MANAGERS {
            break;
        }
        let version = entries[i].api_version.clone();
        let Some(&(_, first)) = first_of_version.iter().find(|(v, _)| *v == version) else {
            first_of_version.push((version, i));
            continue;
        };
        let bucket = entries
            .iter()
            .enumerate()
            .position(|(j, e)| {
                j != i
                    && !folded.contains(&j)
                    && e.manager == ANCIENT_CHANGES
                    && e.operation == "Update"
                    && e.api_version == version
            })
            .unwrap_or_else(|| {
                let e = &mut entries[first];
                e.manager = ANCIENT_CHANGES.to_string();
                e.subresource = None;
                first
            });
        let fields = std::mem::take(&mut entries[i].fields);
        let time = entries[i].time.clone();
        entries[bucket].fields.extend(fields);
        entries[bucket].time = time;
        folded.push(i);
        remaining -= 1;
    }
    folded.sort_unstable();
    for i in folded.into_iter().rev() {
        entries.remove(i);
    }
}

/// Writes the non-empty entries to `metadata.managedFields` in the real server's order:
/// operation (`Apply` first), time, manager, apiVersion, subresource; `Update` entries capped.
fn store_entries(obj: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.fields.is_empty());
    cap_update_managers(&mut entries);
    entries.sort_by(|p, q| {
        (
            &p.operation,
            &p.time,
            &p.manager,
            &p.api_version,
            &p.subresource,
        )
            .cmp(&(
                &q.operation,
                &q.time,
                &q.manager,
                &q.api_version,
                &q.subresource,
            ))
    });
    let list: Vec<Value> = entries.iter().map(Entry::to_json).collect();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// What a write does to managedFields: who and through which subresource.
#[derive(Debug, Clone)]
pub(crate) struct Writer<'a> {
    pub manager: &'a str,
    pub status: bool,
    /// Whether the kind has a status subresource, so that `status` is written only through it.
    pub separate_status: bool,
    pub ty: Ty,
}

impl Writer<'_> {
    /// The part of `obj` this writer's fields are tracked in.
    fn tracked(&self, obj: &Value) -> Value {
        tracked_part(obj, self.status, self.separate_status)
    }

    fn subresource(&self) -> Option<String> {
        self.status.then(|| "status".to_string())
    }
}

fn api_version_of(obj: &Value) -> String {
    obj.get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// Records an `Update` by `writer` that turns `old` (absent for a create) into `new`.
///
/// managedFields sent in `new` replace the old ones (an empty list clears them and records
/// nothing), as on a real server; an update of an object that has none records nothing.
pub(crate) fn record_update(old: Option<&Value>, new: &mut Value, writer: &Writer<'_>) {
    let sent = new.pointer("/metadata/managedFields").cloned();
    let previous = old.and_then(|o| o.pointer("/metadata/managedFields").cloned());
    let mut list = match &sent {
        Some(Value::Array(items)) if items.is_empty() => {
            store_entries(new, Vec::new());
            return;
        }
        Some(_) if sent != previous => entries(new),
        _ => old.map(entries).unwrap_or_default(),
    };
    if old.is_some() && list.is_empty() {
        // An object without managedFields stays without them until its first apply.
        return;
    }
    let old_t = old.map(|o| writer.tracked(o)).unwrap_or(json!({}));
    let new_t = writer.tracked(new);
    let old_set = field_set(&old_t, writer.ty);
    let new_set = field_set(&new_t, writer.ty);
    let mut changed: FieldSet = new_set
        .iter()
        .filter(|p| !old_set.contains(*p) || value_at(&old_t, p) != value_at(&new_t, p))
        .cloned()
        .collect();
    // The maps and associative lists the write creates are owned themselves (`.`).
    changed.extend(new_nodes(&old_t, &new_t, writer.ty));
    let mut removed: FieldSet = old_set.difference(&new_set).cloned().collect();
    removed.extend(new_nodes(&new_t, &old_t, writer.ty));
    let api_version = api_version_of(new);
    let sub = writer.subresource();
    let mine = |e: &Entry| {
        e.manager == writer.manager
            && e.operation == "Update"
            && e.api_version == api_version
            && e.subresource == sub
    };
    for entry in &mut list {
        entry.fields.retain(|p| !removed.contains(p));
        if !mine(entry) {
            entry.fields.retain(|p| !changed.contains(p));
        }
    }
    if !changed.is_empty() {
        match list.iter_mut().find(|e| mine(e)) {
            Some(entry) => {
                entry.fields.extend(changed);
                entry.time = now_rfc3339();
            }
            None => list.push(Entry {
                manager: writer.manager.to_string(),
                operation: "Update".into(),
                api_version,
                time: now_rfc3339(),
                subresource: sub,
                fields: changed,
            }),
        }
    }
    store_entries(new, list);
}

/// The nodes the zero value of a built-in type already has (structs that are not pointers,
/// lists without `omitempty`), which an Update therefore never creates; `metadata` is never
/// owned as a node.
fn zero_nodes(ty: Ty) -> &'static [&'static [&'static str]] {
    const TEMPLATE: [&[&str]; 4] = [
        &["spec", "template"],
        &["spec", "template", "metadata"],
        &["spec", "template", "spec"],
        &["spec", "template", "spec", "containers"],
    ];
    match ty {
        Ty::Root(BuiltinKind::Pod) => &[&["spec"], &["spec", "containers"], &["status"]],
        Ty::Root(BuiltinKind::Workload) => &[
            &["spec"],
            TEMPLATE[0],
            TEMPLATE[1],
            TEMPLATE[2],
            TEMPLATE[3],
            &["spec", "strategy"],
            &["spec", "updateStrategy"],
            &["status"],
        ],
        Ty::Root(BuiltinKind::CronJob) => &[
            &["spec"],
            &["spec", "jobTemplate"],
            &["spec", "jobTemplate", "metadata"],
            &["spec", "jobTemplate", "spec"],
            &["spec", "jobTemplate", "spec", "template"],
            &["spec", "jobTemplate", "spec", "template", "metadata"],
            &["spec", "jobTemplate", "spec", "template", "spec"],
            &[
                "spec",
                "jobTemplate",
                "spec",
                "template",
                "spec",
                "containers",
            ],
            &["status"],
        ],
        Ty::Root(BuiltinKind::PodTemplate) => &[
            &["template"],
            &["template", "metadata"],
            &["template", "spec"],
            &["template", "spec", "containers"],
        ],
        Ty::Root(BuiltinKind::Service) => &[&["spec"], &["status"], &["status", "loadBalancer"]],
        Ty::Root(BuiltinKind::Other) => &[&["spec"], &["status"]],
        _ => &[],
    }
}

/// The non-leaf nodes of `new` (maps with fields, associative lists with items, under the
/// root) that `old` does not have and the type's zero value does not have either: as
/// structured-merge-diff's comparison adds every new non-leaf node, an Update owns them
/// (FieldsV1 shows `.` for them). Atomic maps and lists, and empty ones, are leaves.
fn new_nodes(old: &Value, new: &Value, ty: Ty) -> FieldSet {
    fn walk(
        old: &Value,
        value: &Value,
        ty: Ty,
        list: ListKind,
        path: &mut Path,
        zero: &[&[&str]],
        out: &mut FieldSet,
    ) {
        let node = match (value, list) {
            (Value::Object(map), _) => !map.is_empty() && ty != Ty::AtomicMap,
            (Value::Array(items), ListKind::Set) => !items.is_empty(),
            (Value::Array(items), ListKind::Map(keys)) => !items.is_empty() && keyed(items, keys),
            _ => false,
        };
        if !node {
            return;
        }
        let named = |z: &&[&str]| {
            z.len() == path.len()
                && z.iter()
                    .zip(path.iter())
                    .all(|(a, b)| *b == Pe::Field(a.to_string()))
        };
        let metadata = path.len() == 1 && path[0] == Pe::Field("metadata".into());
        if !path.is_empty() && !metadata && !zero.iter().any(named) && value_at(old, path).is_none()
        {
            out.insert(path.clone());
        }
        match (value, list) {
            (Value::Object(map), _) => {
                for (key, child) in map {
                    let (child_ty, child_list) = field(ty, key);
                    path.push(Pe::Field(key.clone()));
                    walk(old, child, child_ty, child_list, path, zero, out);
                    path.pop();
                }
            }
            (Value::Array(items), ListKind::Map(keys)) => {
                for item in items {
                    path.push(Pe::Key(item_key(item, keys).unwrap_or_default()));
                    if let Value::Object(map) = item {
                        for (key, child) in map {
                            let (child_ty, child_list) = field(ty, key);
                            path.push(Pe::Field(key.clone()));
                            walk(old, child, child_ty, child_list, path, zero, out);
                            path.pop();
                        }
                    }
                    path.pop();
                }
            }
            _ => {}
        }
    }
    let mut out = FieldSet::new();
    walk(
        old,
        new,
        ty,
        ListKind::Atomic,
        &mut Vec::new(),
        zero_nodes(ty),
        &mut out,
    );
    out
}

/// An apply that cannot proceed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ApplyError {
    /// Fields owned by other managers would change: 409 with one cause per field.
    Conflict { message: String, causes: Vec<Value> },
    /// Any other error.
    Api(ApiError),
}

impl From<ApiError> for ApplyError {
    fn from(e: ApiError) -> Self {
        ApplyError::Api(e)
    }
}

fn conflict_error(conflicts: &[(String, Path)]) -> ApplyError {
    let causes = conflicts
        .iter()
        .map(|(manager, path)| {
            json!({
                "reason": "FieldManagerConflict",
                "message": format!("conflict with {manager}"),
                "field": path_string(path),
            })
        })
        .collect();
    let message = if let [(manager, path)] = conflicts {
        format!(
            "Apply failed with 1 conflict: conflict with {manager}: {}",
            path_string(path)
        )
    } else {
        let mut managers: Vec<&String> = conflicts.iter().map(|(m, _)| m).collect();
        managers.sort();
        managers.dedup();
        let mut lines = Vec::new();
        for manager in managers {
            lines.push(format!("conflicts with {manager}:"));
            for (_, path) in conflicts.iter().filter(|(m, _)| m == manager) {
                lines.push(format!("- {}", path_string(path)));
            }
        }
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    ApplyError::Conflict { message, causes }
}

/// Server-side apply of `config` by `writer` onto `live` (absent: create). Returns the new
/// object, managedFields included.
pub(crate) fn apply(
    live: Option<&Value>,
    config: &Value,
    writer: &Writer<'_>,
    force: bool,
) -> Result<Value, ApplyError> {
    if !config.is_object() {
        return Err(ApiError::bad_request(
            "error decoding YAML: the applied configuration must be an object",
        )
        .into());
    }
    if config
        .pointer("/metadata/managedFields")
        .is_some_and(|m| !m.is_null())
    {
        return Err(ApiError::bad_request("metadata.managedFields must be nil").into());
    }
    let sub = writer.subresource();
    let mut list = live.map(entries).unwrap_or_default();
    if let Some(live) = live
        && list.is_empty()
    {
        let fields = field_set(&writer.tracked(live), writer.ty);
        list.push(Entry {
            manager: BEFORE_FIRST_APPLY.into(),
            operation: "Update".into(),
            api_version: api_version_of(live),
            time: now_rfc3339(),
            subresource: sub.clone(),
            fields,
        });
    }
    let live_value = live.cloned().unwrap_or_else(|| json!({}));
    let live_t = writer.tracked(&live_value);
    let config_t = writer.tracked(config);
    let applied = field_set(&config_t, writer.ty);
    let mine =
        |e: &Entry| e.manager == writer.manager && e.operation == "Apply" && e.subresource == sub;

    let mut conflicts: Vec<(usize, Path)> = Vec::new();
    for path in &applied {
        let Some(wanted) = value_at(&config_t, path) else {
            continue;
        };
        if !is_leaf(path) {
            continue;
        }
        match value_at(&live_t, path) {
            Some(current) if current != wanted => {}
            _ => continue,
        }
        for (i, entry) in list.iter().enumerate() {
            if !mine(entry) && entry.fields.contains(path) {
                conflicts.push((i, path.clone()));
            }
        }
    }
    if !conflicts.is_empty() {
        // kubectl's own server-side apply takes over what its client-side apply applied.
        let allowed = live
            .map(|l| last_applied_fields(l, writer))
            .unwrap_or_default();
        let named: Vec<(String, Path)> = conflicts
            .iter()
            .filter(|(_, p)| !allowed.contains(p))
            .map(|(i, p)| (list[*i].display(), p.clone()))
            .collect();
        if !force && !named.is_empty() {
            return Err(conflict_error(&named));
        }
        for (i, path) in &conflicts {
            list[*i].fields.remove(path);
        }
    }

    let mut merged = live_value.clone();
    let mut config_part = config.clone();
    if let Some(map) = config_part.as_object_mut() {
        if writer.status {
            map.retain(|k, _| k == "status" || k == "apiVersion" || k == "kind" || k == "metadata");
            if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.retain(|k, _| matches!(k.as_str(), "name" | "namespace" | "resourceVersion"));
            }
        } else if writer.separate_status {
            map.remove("status");
        }
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
    }
    merge_applied(&mut merged, &config_part, writer.ty, ListKind::Atomic);

    let previous: FieldSet = list
        .iter()
        .filter(|e| mine(e))
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    let mut dropped: Vec<&Path> = previous.difference(&applied).collect();
    dropped.sort_by_key(|p| p.len());
    for path in dropped {
        let still_applied = applied.iter().any(|p| p.starts_with(path));
        let owned_elsewhere = list
            .iter()
            .filter(|e| !mine(e))
            .any(|e| e.fields.iter().any(|p| p.starts_with(path)));
        if !still_applied && !owned_elsewhere {
            remove_at(&mut merged, path);
        }
    }

    let api_version = api_version_of(config);
    let entry = Entry {
        manager: writer.manager.to_string(),
        operation: "Apply".into(),
        api_version,
        time: now_rfc3339(),
        subresource: sub.clone(),
        fields: applied,
    };
    match list.iter_mut().find(|e| mine(e)) {
        // The time moves only when what the manager owns changes.
        Some(existing) if existing.fields == entry.fields => {
            existing.api_version = entry.api_version;
        }
        Some(existing) => *existing = entry,
        None => list.push(entry),
    }
    if !merged.get("metadata").is_some_and(Value::is_object)
        && let Some(map) = merged.as_object_mut()
    {
        map.insert("metadata".into(), json!({}));
    }
    if writer.manager == KUBECTL
        && let Some(annotations) = merged
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        && annotations.contains_key(LAST_APPLIED)
    {
        let mut last = config.clone();
        if let Some(own) = last
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            own.remove(LAST_APPLIED);
        }
        annotations.insert(LAST_APPLIED.into(), Value::String(last.to_string()));
    }
    store_entries(&mut merged, list);
    Ok(merged)
}

/// The annotation of kubectl's client-side apply.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The manager name of `kubectl apply --server-side`, whose applies upgrade client-side applies.
const KUBECTL: &str = "kubectl";

/// The fields of the client-side applied configuration of `live`, which an apply by `kubectl`
/// may take over without conflicts (empty for any other manager).
fn last_applied_fields(live: &Value, writer: &Writer<'_>) -> FieldSet {
    if writer.manager != KUBECTL {
        return FieldSet::new();
    }
    live.pointer("/metadata/annotations")
        .and_then(|a| a.get(LAST_APPLIED))
        .and_then(Value::as_str)
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .map(|last| field_set(&writer.tracked(&last), writer.ty))
        .unwrap_or_default()
}

/// Merges an applied configuration into the object: maps field by field, list maps item by
/// item, sets by value; everything else is replaced.
fn merge_applied(live: &mut Value, config: &Value, ty: Ty, list: ListKind) {
    match (live, config) {
        (Value::Object(live), Value::Object(config)) if ty != Ty::AtomicMap => {
            for (key, value) in config {
                let (child_ty, child_list) = field(ty, key);
                match live.get_mut(key) {
                    Some(slot) => merge_applied(slot, value, child_ty, child_list),
                    None => {
                        live.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (Value::Array(live), Value::Array(config)) => match list {
            ListKind::Set => {
                for item in config {
                    if !live.contains(item) {
                        live.push(item.clone());
                    }
                }
            }
            ListKind::Map(keys) if keyed(live, keys) && keyed(config, keys) => {
                for item in config {
                    let key = item_key(item, keys);
                    match live.iter_mut().find(|l| item_key(l, keys) == key) {
                        Some(slot) => merge_applied(slot, item, ty, ListKind::Atomic),
                        None => live.push(item.clone()),
                    }
                }
            }
            _ => *live = config.clone(),
        },
        (slot, value) => *slot = value.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::patch::root_type;

    fn deploy(replicas: i64, images: &[(&str, &str)]) -> Value {
        let containers: Vec<Value> = images
            .iter()
            .map(|(n, i)| json!({"name": n, "image": i}))
            .collect();
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "d", "namespace": "ns", "labels": {"app": "d"}},
               "spec": {"replicas": replicas, "template": {"spec": {"containers": containers}}}})
    }

    fn writer(manager: &str) -> Writer<'_> {
        Writer {
            manager,
            status: false,
            separate_status: true,
            ty: root_type("apps", "Deployment"),
        }
    }

    #[test]
    fn fields_v1_round_trips_with_list_map_keys_and_dot_nodes() {
        let set = field_set(
            &tracked(&deploy(3, &[("a", "a:1")]), false),
            root_type("apps", "Deployment"),
        );
        let encoded = encode_fields(&set);
        assert_eq!(
            encoded,
            json!({"f:metadata": {"f:labels": {"f:app": {}}},
                   "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                       "k:{\"name\":\"a\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}})
        );
        assert_eq!(decode_fields(&encoded), set);
        let path = set
            .iter()
            .find(|p| p.len() == 6)
            .expect("a container field");
        assert_eq!(
            path_string(path),
            ".spec.template.spec.containers[name=\"a\"].image"
        );
    }

    #[test]
    fn custom_resources_know_object_metadata_and_keep_other_lists_atomic() {
        let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "finalizers": ["example.com/a"]},
            "spec": {"items": [{"name": "x"}], "selector": {"k": "v"}}});
        let set = field_set(&tracked(&widget, false), root_type("example.com", "Widget"));
        assert_eq!(
            encode_fields(&set),
            json!({"f:metadata": {"f:finalizers": {"v:\"example.com/a\"": {}}},
                   "f:spec": {"f:items": {}, "f:selector": {"f:k": {}}}})
        );
    }

    #[test]
    fn a_second_manager_conflicts_unless_forced_and_dropped_fields_are_removed() {
        let first = apply(
            None,
            &deploy(3, &[("a", "a:1"), ("b", "b:1")]),
            &writer("one"),
            false,
        )
        .expect("create");
        let err = apply(Some(&first), &deploy(5, &[]), &writer("two"), false);
        match err {
            Err(ApplyError::Conflict { message, .. }) => assert_eq!(
                message,
                "Apply failed with 1 conflict: conflict with \"one\": .spec.replicas"
            ),
            other => panic!("{other:?}"),
        }
        let forced = apply(Some(&first), &deploy(5, &[]), &writer("two"), true).expect("forced");
        assert_eq!(forced["spec"]["replicas"], 5);
        let again = apply(
            Some(&forced),
            &deploy(3, &[("a", "a:1")]),
            &writer("one"),
            false,
        );
        assert!(
            matches!(again, Err(ApplyError::Conflict { .. })),
            "{again:?}"
        );
        let mut config = deploy(0, &[("a", "a:1")]);
        config["spec"].as_object_mut().map(|s| s.remove("replicas"));
        let shrunk = apply(Some(&forced), &config, &writer("one"), false).expect("apply");
        assert_eq!(
            shrunk["spec"]["template"]["spec"]["containers"],
            json!([{"name": "a", "image": "a:1"}])
        );
        assert_eq!(shrunk["spec"]["replicas"], 5, "owned by two, kept");
        let managers: Vec<String> = entries(&shrunk).into_iter().map(|e| e.manager).collect();
        assert_eq!(managers, vec!["one", "two"]);
    }

    #[test]
    fn update_managers_beyond_ten_are_folded_into_ancient_changes() {
        let mut obj = deploy(1, &[("a", "a:1")]);
        record_update(None, &mut obj, &writer("creator"));
        for i in 0..11 {
            let mut next = obj.clone();
            next["metadata"]["labels"][format!("l{i}")] = json!("x");
            let manager = format!("m{i:02}");
            record_update(Some(&obj), &mut next, &writer(&manager));
            obj = next;
        }
        let list = entries(&obj);
        assert_eq!(list.len(), 10, "{list:?}");
        let ancient = list
            .iter()
            .find(|e| e.manager == ANCIENT_CHANGES)
            .expect("a bucket");
        assert!(ancient.fields.contains(&vec![
            Pe::Field("spec".into()),
            Pe::Field("replicas".into())
        ]));
        assert!(
            !list
                .iter()
                .any(|e| e.manager == "creator" || e.manager == "m00")
        );
        assert!(list.iter().any(|e| e.manager == "m10"));
    }

    #[test]
    fn updates_take_changed_fields_from_other_managers() {
        let mut created = deploy(1, &[("a", "a:1")]);
        record_update(None, &mut created, &writer("creator"));
        let mut scaled = created.clone();
        scaled["spec"]["replicas"] = json!(4);
        record_update(Some(&created), &mut scaled, &writer("scaler"));
        let list = entries(&scaled);
        assert_eq!(list.len(), 2);
        let replicas = vec![Pe::Field("spec".into()), Pe::Field("replicas".into())];
        assert!(!list[0].fields.contains(&replicas));
        assert!(list[1].fields.contains(&replicas));
        assert_eq!(list[1].operation, "Update");
        assert_eq!(list[1].api_version, "apps/v1");
    }
}
