//! Watch-event decoding (`wisp_host::source::kube::decode_watch_line`): one line of a watch
//! stream, read as text with metadata taken from the JSON spans.
//!
//! Properties, with `serde_json` as the reference:
//! - it never panics;
//! - it accepts only JSON (`serde_json` with `IgnoredAny`: the same grammar, numbers unchecked);
//! - an object it returns is the line's object (as a `serde_json::Value`) with `managedFields`
//!   dropped on request and apiVersion/kind filled in when missing, and its metadata is what
//!   `Object::from_json` extracts from that JSON;
//! - a bookmark's resourceVersion is the line's;
//! - a well-formed event (the shape the API server sends, whatever the keys' spelling) is
//!   accepted.

use serde::de::IgnoredAny;
use serde_json::Value;
use wisp_host::informer::Object;
use wisp_host::informer::lister_watcher::WatchEvent;
use wisp_host::source::kube::decode_watch_line;

const API_VERSION: &str = "v1";
const KIND: &str = "Pod";

/// Runs the decoder on `data` (UTF-8, as the watch stream's lines are) and checks it.
pub fn check(data: &[u8]) {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    let is_json = serde_json::from_str::<IgnoredAny>(line).is_ok();
    let value: Option<Value> = serde_json::from_str(line).ok();
    for strip in [false, true] {
        let got = decode_watch_line(line, API_VERSION, KIND, strip);
        if got.is_ok() {
            assert!(is_json, "accepted text that is not JSON: {line:?}");
        }
        match (&got, &value) {
            (
                Ok(WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o)),
                Some(v),
            ) => check_object(o.as_ref(), &v["object"], strip),
            (
                Ok(WatchEvent::Bookmark {
                    resource_version, ..
                }),
                Some(v),
            ) => {
                let want = v["object"]["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default();
                assert_eq!(
                    resource_version, want,
                    "bookmark resourceVersion of {line:?}"
                );
            }
            _ => {}
        }
        if let Some(v) = &value
            && well_formed(v)
        {
            // The same event as serde_json writes it: keys unique, escapes where needed.
            let canonical = serde_json::to_string(v).expect("a Value serialises");
            if let Err(e) = decode_watch_line(&canonical, API_VERSION, KIND, strip) {
                panic!("well-formed event refused: {e}\n  line: {canonical}");
            }
        }
    }
}

/// `o` is `want` (the line's object) with the decoder's documented changes, and its metadata is
/// what the reference extraction reads from its JSON.
fn check_object(o: &Object, want: &Value, strip: bool) {
    let mut want = want.clone();
    if strip && let Some(md) = want.get_mut("metadata").and_then(Value::as_object_mut) {
        md.remove("managedFields");
    }
    for (key, fill) in [("apiVersion", API_VERSION), ("kind", KIND)] {
        if want[key].as_str().is_none_or(str::is_empty) {
            want[key] = Value::from(fill);
        }
    }
    let kept: Value = match serde_json::from_str(o.json()) {
        Ok(v) => v,
        Err(e) => panic!("kept JSON does not parse: {e}: {}", o.json()),
    };
    assert_eq!(kept, want, "kept JSON differs from the line's object");
    let reference = Object::from_json(o.json(), false).expect("the kept JSON is an object");
    assert_eq!(
        reference.meta(),
        o.meta(),
        "metadata differs from the JSON's: {}",
        o.json()
    );
}

/// The shape of an ADDED / MODIFIED / DELETED / BOOKMARK event as the API server sends it.
fn well_formed(v: &Value) -> bool {
    let Some(ty) = v.get("type").and_then(Value::as_str) else {
        return false;
    };
    let obj = &v["object"];
    let Some(md) = obj.get("metadata").and_then(Value::as_object) else {
        return false;
    };
    let str_or_null = |k: &str| md.get(k).is_none_or(|x| x.is_string() || x.is_null());
    let string_map = |k: &str| {
        md.get(k).is_none_or(|x| {
            x.is_null()
                || x.as_object()
                    .is_some_and(|m| m.values().all(Value::is_string))
        })
    };
    let owners = md.get("ownerReferences").is_none_or(|x| {
        x.is_null()
            || x.as_array().is_some_and(|refs| {
                refs.iter().all(|r| {
                    r.as_object().is_some_and(|r| {
                        ["apiVersion", "kind", "name", "uid"]
                            .iter()
                            .all(|k| r.get(*k).is_none_or(Value::is_string))
                            && r.get("controller")
                                .is_none_or(|c| c.is_boolean() || c.is_null())
                    })
                })
            })
    });
    let meta_ok = ["namespace", "uid", "resourceVersion"]
        .iter()
        .all(|k| str_or_null(k))
        && string_map("labels")
        && string_map("annotations")
        && owners;
    match ty {
        "ADDED" | "MODIFIED" | "DELETED" => {
            obj.is_object() && md.get("name").is_some_and(Value::is_string) && meta_ok
        }
        "BOOKMARK" => meta_ok && md.get("name").is_none_or(|x| x.is_string() || x.is_null()),
        _ => false,
    }
}
