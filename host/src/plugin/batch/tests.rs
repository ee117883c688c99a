//! The encoder against the test vectors of `wit/abi-vectors.json`, byte for byte.
//!
//! The vectors are the ABI's contract with every decoder (the SDKs run them): a change to the
//! encoding fails here first. After an intended change to the layout (a new layout version),
//! write them anew with `WISP_BLESS_VECTORS=1 cargo test -p wisp-host --lib abi::` and say so in
//! `docs/abi.md`.

use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::abi::*;
use crate::informer::Tombstone;

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../wit/abi-vectors.json");

fn object(v: Value) -> Arc<Object> {
    Arc::new(Object::from_value(v, false).expect("vector object"))
}

/// A pod with everything: namespace, generation, labels, annotations, two owners.
fn pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "web-0", "namespace": "shop", "uid": "5b1f-77", "resourceVersion": "42",
            "generation": 3,
            "labels": { "tier": "front", "app": "web" },
            "annotations": { "note": "héllo" },
            "ownerReferences": [
                { "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "o-1",
                  "controller": true, "blockOwnerDeletion": true },
                { "apiVersion": "v1", "kind": "ConfigMap", "name": "cfg", "uid": "o-2" }
            ]
        },
        "spec": { "containers": [{ "name": "c", "image": "nginx:1.27" }] }
    })
}

/// A cluster-scoped object being deleted: no namespace, no generation, no labels.
fn node() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": { "name": "n1", "uid": "u-n1", "resourceVersion": "7",
                      "deletionTimestamp": "2026-12-02T10:00:00Z" }
    })
}

/// What a decoder must read from an object.
fn expect(v: &Value) -> Value {
    let md = &v["metadata"];
    let pairs = |key: &str| {
        let mut p: Vec<(String, String)> = md[key]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        p.sort();
        json!(p)
    };
    let owners: Vec<Value> = md["ownerReferences"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    json!({ "apiVersion": r["apiVersion"], "kind": r["kind"], "name": r["name"],
                        "uid": r["uid"], "controller": r["controller"].as_bool().unwrap_or(false),
                        "blockOwnerDeletion": r["blockOwnerDeletion"].as_bool().unwrap_or(false) })
                })
                .collect()
        })
        .unwrap_or_default();
    json!({
        "apiVersion": v["apiVersion"], "kind": v["kind"], "namespace": md["namespace"],
        "name": md["name"], "uid": md["uid"], "resourceVersion": md["resourceVersion"],
        "generation": md["generation"], "deletionTimestamp": md["deletionTimestamp"],
        "labels": pairs("labels"), "annotations": pairs("annotations"),
        "ownerReferences": owners,
        "json": serde_json::to_string(v).unwrap(),
    })
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// `wire` re-laid with `count` fields (fewer: an older writer; more: a newer one, whose extra
/// fields hold `extra`): every offset moves with the span table.
fn relayout(wire: &[u8], count: usize, extra: &[u8]) -> Vec<u8> {
    let old_table = 4 + field::COUNT * 8;
    let new_table = 4 + count * 8;
    let shift = |o: u32| {
        if o == ABSENT {
            o
        } else {
            (o as usize + new_table - old_table) as u32
        }
    };
    let mut data = wire[old_table..].to_vec();
    let mut out = vec![LAYOUT_VERSION, 0];
    out.extend_from_slice(&(count as u16).to_le_bytes());
    // Offsets inside the tables move too.
    let tables = [
        (field::LABELS, 4usize, 16usize, 2usize),
        (field::ANNOTATIONS, 4, 16, 2),
        (field::OWNER_REFERENCES, 8, OWNER_ENTRY, 4),
    ];
    for (f, first, size, spans) in tables {
        let at = u32_at(wire, 4 + f * 8) as usize - old_table;
        let n = u32_at(&data, at) as usize;
        for i in 0..n {
            for s in 0..spans {
                let p = at + first + i * size + s * 8;
                let moved = shift(u32_at(&data, p));
                data[p..p + 4].copy_from_slice(&moved.to_le_bytes());
            }
        }
    }
    let extra_at = (new_table + data.len()) as u32;
    for f in 0..count {
        let (o, l) = if f < field::COUNT {
            (shift(u32_at(wire, 4 + f * 8)), u32_at(wire, 4 + f * 8 + 4))
        } else {
            (extra_at, extra.len() as u32)
        };
        out.extend_from_slice(&o.to_le_bytes());
        out.extend_from_slice(&l.to_le_bytes());
    }
    out.extend_from_slice(&data);
    if count > field::COUNT {
        out.extend_from_slice(extra);
    }
    out
}

fn with_count(mut expected: Value, count: usize) -> Value {
    if count <= field::LABELS {
        // Fields past the table are absent: empty tables, no JSON.
        expected["labels"] = json!([]);
        expected["annotations"] = json!([]);
        expected["ownerReferences"] = json!([]);
        expected["json"] = Value::Null;
    }
    expected
}

/// A notification's expected values when its objects come without their JSON.
fn no_json(mut n: Value) -> Value {
    n["object"]["json"] = Value::Null;
    if !n["old"].is_null() {
        n["old"]["json"] = Value::Null;
    }
    n
}

fn delivery(seq: u64, notification: Notification) -> Delivery {
    Delivery { seq, notification }
}

fn vectors() -> Value {
    let (p, n) = (pod(), node());
    let (po, no) = (object(p.clone()), object(n.clone()));
    let mut p2 = p.clone();
    p2["metadata"]["resourceVersion"] = json!("43");
    p2["metadata"]["labels"]["tier"] = json!("back");
    let po2 = object(p2.clone());

    let objects = json!([
        { "name": "namespaced pod with labels, annotations, owners, generation",
          "hex": hex::encode(po.wire()), "expect": expect(&p) },
        { "name": "cluster-scoped object being deleted, no generation, no labels",
          "hex": hex::encode(no.wire()), "expect": expect(&n) },
        { "name": "newer writer: a 13th field the decoder does not know (ignored)",
          "hex": hex::encode(relayout(po.wire(), 13, b"future")), "expect": expect(&p) },
        { "name": "older writer: only the first 8 fields (the rest absent)",
          "hex": hex::encode(relayout(po.wire(), 8, b"")), "expect": with_count(expect(&p), 8) },
    ]);

    let batch = [
        delivery(
            7,
            Notification::Add {
                obj: po.clone(),
                initial_list: true,
            },
        ),
        delivery(
            8,
            Notification::Update {
                old: po.clone(),
                new: po2.clone(),
            },
        ),
        delivery(
            9,
            Notification::Update {
                old: po2.clone(),
                new: po2.clone(),
            },
        ),
        delivery(
            10,
            Notification::Delete {
                obj: DeletedObject::Tombstone(Tombstone {
                    key: "n1".into(),
                    obj: no.clone(),
                }),
            },
        ),
        delivery(
            11,
            Notification::Delete {
                obj: DeletedObject::Object(po2.clone()),
            },
        ),
    ];
    let note = |seq: u64, kind: &str, flags: [bool; 3], obj: &Value, old: Option<&Value>| {
        json!({ "seq": seq, "kind": kind, "initialList": flags[0], "resync": flags[1],
            "finalStateUnknown": flags[2], "object": expect(obj), "old": old.map(expect) })
    };
    let batches = json!([
        { "name": "added (initial list), updated, resync, deleted (tombstone), deleted",
          "hex": hex::encode(Batch::new("pods", &batch, false).to_vec()),
          "expect": { "informer": "pods", "notifications": [
              note(7, "added", [true, false, false], &p, None),
              note(8, "updated", [false, false, false], &p2, Some(&p)),
              note(9, "updated", [false, true, false], &p2, Some(&p2)),
              note(10, "deleted", [false, false, true], &n, None),
              note(11, "deleted", [false, false, false], &p2, None),
          ] } },
        { "name": "metadata only: added (initial list), updated: no JSON",
          "hex": hex::encode(Batch::new("pods", &batch[..2], true).to_vec()),
          "expect": { "informer": "pods", "notifications": [
              no_json(note(7, "added", [true, false, false], &p, None)),
              no_json(note(8, "updated", [false, false, false], &p2, Some(&p))),
          ] } },
        { "name": "empty batch", "hex": hex::encode(Batch::new("nodes", &[], false).to_vec()),
          "expect": { "informer": "nodes", "notifications": [] } },
    ]);
    let lists = json!([
        { "name": "two objects", "hex": hex::encode(encode_list([&*po, &*no].into_iter())),
          "expect": [expect(&p), expect(&n)] },
        { "name": "no objects", "hex": hex::encode(encode_list(std::iter::empty::<&Object>())),
          "expect": [] },
    ]);
    json!({
        "about": "Test vectors of the Wisp plugin ABI 0.2 byte layout (docs/abi.md). Written by the host's encoder (host/src/plugin/batch/tests.rs); every decoder must read each `hex` as `expect` says. `json` null means the field is absent. Every decoder must refuse each object of `refused` (a decode error naming `field`), as docs/abi.md says.",
        "layoutVersion": LAYOUT_VERSION,
        "objects": objects,
        "batches": batches,
        "lists": lists,
        "refused": refused(po.wire()),
    })
}

/// The pod's encoding with bytes that are not UTF-8 in one text field, which no encoder writes
/// (docs/abi.md, "Text"): a name with a lone 0xff and a lead byte without its continuation, an
/// annotation value whose `é` lost its second byte.
fn refused(wire: &[u8]) -> Value {
    let field_span = |f: usize| {
        let at = 4 + f * 8;
        (u32_at(wire, at) as usize, u32_at(wire, at + 4) as usize)
    };
    let mut name = wire.to_vec();
    let (at, len) = field_span(field::NAME);
    assert_eq!(&wire[at..at + len], b"web-0");
    name[at..at + len].copy_from_slice(b"w\xffb\xc30");
    let mut value = wire.to_vec();
    let (table, _) = field_span(field::ANNOTATIONS);
    let (at, len) = (
        u32_at(wire, table + 12) as usize,
        u32_at(wire, table + 16) as usize,
    );
    assert_eq!(&wire[at..at + len], "héllo".as_bytes());
    value[at + 2] = b'A';
    json!([
        { "name": "metadata.name not UTF-8", "hex": hex::encode(&name), "field": "name" },
        { "name": "an annotation value not UTF-8", "hex": hex::encode(&value), "field": "annotations" },
    ])
}

#[test]
fn the_encoder_writes_the_test_vectors_byte_for_byte() {
    let generated = serde_json::to_string_pretty(&vectors()).unwrap() + "\n";
    if std::env::var_os("WISP_BLESS_VECTORS").is_some() {
        std::fs::write(VECTORS, &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(VECTORS).unwrap_or_default();
    assert!(
        on_disk == generated,
        "wit/abi-vectors.json differs from what the encoder writes: the ABI's byte layout changed \
         (if on purpose, bless them anew: see this file's header)"
    );
}

#[test]
fn an_object_keeps_its_json_as_the_last_span_of_its_encoding() {
    let o = object(pod());
    let w = o.wire();
    assert_eq!(w[0], LAYOUT_VERSION);
    assert_eq!(u16::from_le_bytes([w[2], w[3]]) as usize, field::COUNT);
    let json_span = 4 + field::JSON * 8;
    let (at, len) = (
        u32_at(w, json_span) as usize,
        u32_at(w, json_span + 4) as usize,
    );
    assert_eq!(at + len, w.len());
    assert_eq!(&w[at..], o.json().as_bytes());
    let ns = 4 + field::NAMESPACE * 8;
    let cluster = object(node());
    assert_eq!(u32_at(cluster.wire(), ns), ABSENT, "no namespace: absent");
    assert_eq!(u32_at(cluster.wire(), ns + 4), 0);
}

#[test]
fn a_resync_carries_its_object_once() {
    let o = object(pod());
    let resync = [delivery(
        1,
        Notification::Update {
            old: o.clone(),
            new: o.clone(),
        },
    )];
    let batch = Batch::new("pods", &resync, false);
    assert_eq!(
        batch.size(),
        BATCH_HEADER + BATCH_ENTRY + 4 + o.wire().len()
    );
    assert_eq!(batch.to_vec().len(), batch.size());
}

/// Memory the plugin's allocator hands out may hold anything: a batch written over garbage is
/// the batch written over zeros, whole and metadata-only.
#[test]
fn a_batch_overwrites_every_byte_of_its_destination() {
    let (p, n) = (object(pod()), object(node()));
    let notes = [
        delivery(
            1,
            Notification::Add {
                obj: p.clone(),
                initial_list: false,
            },
        ),
        delivery(
            2,
            Notification::Update {
                old: n.clone(),
                new: p.clone(),
            },
        ),
        delivery(
            3,
            Notification::Delete {
                obj: DeletedObject::Object(n.clone()),
            },
        ),
    ];
    for meta in [false, true] {
        let batch = Batch::new("pods", &notes, meta);
        let mut dirty = vec![0xa5; batch.size()];
        batch.write(&mut dirty);
        assert_eq!(dirty, batch.to_vec(), "metadata-only {meta}");
    }
}
