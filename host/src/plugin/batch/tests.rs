//! The host writes what the ABI codec's test vectors (`wit/abi-vectors.json`, written and read
//! by `wisp-abi`'s tests) say, byte for byte: its objects as the informer caches them, its
//! batches of deliveries and its cache reads.

use std::sync::Arc;

use serde_json::{Value, json};
use wisp_abi::layout::{ABSENT, BATCH_ENTRY, BATCH_HEADER, LAYOUT_VERSION, field};

use super::*;
use crate::informer::Tombstone;

const VECTORS: &str = include_str!("../../../../wit/abi-vectors.json");

fn object(v: Value) -> Arc<Object> {
    Arc::new(Object::from_value(v, false).expect("vector object"))
}

/// The vectors' pod (wisp-abi's tests).
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

/// The vectors' node.
fn node() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": { "name": "n1", "uid": "u-n1", "resourceVersion": "7",
                      "deletionTimestamp": "2026-12-02T10:00:00Z" }
    })
}

fn hex_of(section: &str, i: usize) -> String {
    let v: Value = serde_json::from_str(VECTORS).expect("the vectors are JSON");
    v[section][i]["hex"]
        .as_str()
        .expect("a hex vector")
        .to_owned()
}

fn delivery(seq: u64, notification: Notification) -> Delivery {
    Delivery { seq, notification }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

#[test]
fn the_host_writes_the_test_vectors_byte_for_byte() {
    let (po, no) = (object(pod()), object(node()));
    let mut p2 = pod();
    p2["metadata"]["resourceVersion"] = json!("43");
    p2["metadata"]["labels"]["tier"] = json!("back");
    let po2 = object(p2);
    assert_eq!(hex::encode(po.wire()), hex_of("objects", 0), "the pod");
    assert_eq!(hex::encode(no.wire()), hex_of("objects", 1), "the node");
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
    let batches = [
        Batch::new("pods", &batch, false).to_vec(),
        Batch::new("pods", &batch[..2], true).to_vec(),
        Batch::new("nodes", &[], false).to_vec(),
    ];
    for (i, b) in batches.iter().enumerate() {
        assert_eq!(hex::encode(b), hex_of("batches", i), "batch vector {i}");
    }
    let lists = [
        encode_list([&*po, &*no].into_iter()),
        encode_list(std::iter::empty::<&Object>()),
    ];
    for (i, l) in lists.iter().enumerate() {
        assert_eq!(hex::encode(l), hex_of("lists", i), "list vector {i}");
    }
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
