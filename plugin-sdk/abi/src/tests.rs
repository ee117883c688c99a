//! The test vectors of `wit/abi-vectors.json`: written here from this crate's encoder (byte for
//! byte what is on disk), and read back by its decoder as they say. The vectors are the ABI's
//! contract with every decoder (the Python and JavaScript SDKs run them; docs/abi.md describes
//! them for C): a change to the encoding fails here first. After an intended change to the
//! layout (a new layout version), write them anew with `WISP_BLESS_VECTORS=1 cargo test -p
//! wisp-abi` and say so in `docs/abi.md`.

use serde_json::{Value, json};

use crate::layout::*;
use crate::*;

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../wit/abi-vectors.json");

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(crate) fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// The metadata of a JSON object, as the host extracts it.
fn meta_of(v: &Value) -> ObjectMeta {
    let md = &v["metadata"];
    let s = |v: &Value| v.as_str().map(str::to_owned);
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
        p
    };
    ObjectMeta {
        api_version: s(&v["apiVersion"]).unwrap_or_default(),
        kind: s(&v["kind"]).unwrap_or_default(),
        namespace: s(&md["namespace"]),
        name: s(&md["name"]).unwrap_or_default(),
        uid: s(&md["uid"]).unwrap_or_default(),
        resource_version: s(&md["resourceVersion"]).unwrap_or_default(),
        generation: md["generation"].as_i64(),
        deletion_timestamp: s(&md["deletionTimestamp"]),
        labels: pairs("labels"),
        annotations: pairs("annotations"),
        owner_references: md["ownerReferences"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|r| OwnerReference {
                        api_version: s(&r["apiVersion"]).unwrap_or_default(),
                        kind: s(&r["kind"]).unwrap_or_default(),
                        name: s(&r["name"]).unwrap_or_default(),
                        uid: s(&r["uid"]).unwrap_or_default(),
                        controller: r["controller"].as_bool() == Some(true),
                        block_owner_deletion: r["blockOwnerDeletion"].as_bool() == Some(true),
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

pub(crate) fn encode(v: &Value) -> Encoded {
    encode_object(&meta_of(v), &v.to_string())
}

/// A pod with everything: namespace, generation, labels, annotations, two owners.
pub(crate) fn pod() -> Value {
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
    let m = meta_of(v);
    let owners: Vec<Value> = m
        .owner_references
        .iter()
        .map(|r| {
            json!({ "apiVersion": r.api_version, "kind": r.kind, "name": r.name, "uid": r.uid,
                "controller": r.controller, "blockOwnerDeletion": r.block_owner_deletion })
        })
        .collect();
    json!({
        "apiVersion": m.api_version, "kind": m.kind, "namespace": m.namespace,
        "name": m.name, "uid": m.uid, "resourceVersion": m.resource_version,
        "generation": m.generation, "deletionTimestamp": m.deletion_timestamp,
        "labels": m.labels, "annotations": m.annotations,
        "ownerReferences": owners,
        "json": v.to_string(),
    })
}

/// What this decoder reads from an object, in the vectors' form.
fn read(o: &Object<'_>) -> Value {
    let owners: Vec<Value> = o
        .owner_refs()
        .map(|r| {
            json!({ "apiVersion": r.api_version, "kind": r.kind, "name": r.name, "uid": r.uid,
                "controller": r.controller, "blockOwnerDeletion": r.block_owner_deletion })
        })
        .collect();
    let json = o.has_json().then(|| String::from_utf8_lossy(o.json()));
    json!({
        "apiVersion": o.api_version(), "kind": o.kind(), "namespace": o.namespace(),
        "name": o.name(), "uid": o.uid(), "resourceVersion": o.resource_version(),
        "generation": o.generation(), "deletionTimestamp": o.deletion_timestamp(),
        "labels": o.labels().collect::<Vec<_>>(), "annotations": o.annotations().collect::<Vec<_>>(),
        "ownerReferences": owners, "json": json,
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

fn batch<'a>(informer: &'a str, entries: &'a [Entry<'a>], meta: bool) -> Vec<u8> {
    BatchWriter::new(informer, entries.iter().copied(), meta).to_vec()
}

/// The vectors, from this crate's encoder.
pub(crate) fn vectors() -> Value {
    let (p, n) = (pod(), node());
    let (po, no) = (encode(&p), encode(&n));
    let mut p2 = p.clone();
    p2["metadata"]["resourceVersion"] = json!("43");
    p2["metadata"]["labels"]["tier"] = json!("back");
    let po2 = encode(&p2);

    let objects = json!([
        { "name": "namespaced pod with labels, annotations, owners, generation",
          "hex": hex(po.as_bytes()), "expect": expect(&p) },
        { "name": "cluster-scoped object being deleted, no generation, no labels",
          "hex": hex(no.as_bytes()), "expect": expect(&n) },
        { "name": "newer writer: a 13th field the decoder does not know (ignored)",
          "hex": hex(&relayout(po.as_bytes(), 13, b"future")), "expect": expect(&p) },
        { "name": "older writer: only the first 8 fields (the rest absent)",
          "hex": hex(&relayout(po.as_bytes(), 8, b"")), "expect": with_count(expect(&p), 8) },
    ]);

    let entry = |seq, kind, object, old| Entry {
        seq,
        kind,
        object,
        old,
    };
    let entries = [
        entry(7, Kind::Added { initial_list: true }, &po, None),
        entry(8, Kind::Updated { resync: false }, &po2, Some(&po)),
        entry(9, Kind::Updated { resync: true }, &po2, Some(&po2)),
        entry(
            10,
            Kind::Deleted {
                final_state_unknown: true,
            },
            &no,
            None,
        ),
        entry(
            11,
            Kind::Deleted {
                final_state_unknown: false,
            },
            &po2,
            None,
        ),
    ];
    let note = |seq: u64, kind: &str, flags: [bool; 3], obj: &Value, old: Option<&Value>| {
        json!({ "seq": seq, "kind": kind, "initialList": flags[0], "resync": flags[1],
            "finalStateUnknown": flags[2], "object": expect(obj), "old": old.map(expect) })
    };
    let batches = json!([
        { "name": "added (initial list), updated, resync, deleted (tombstone), deleted",
          "hex": hex(&batch("pods", &entries, false)),
          "expect": { "informer": "pods", "notifications": [
              note(7, "added", [true, false, false], &p, None),
              note(8, "updated", [false, false, false], &p2, Some(&p)),
              note(9, "updated", [false, true, false], &p2, Some(&p2)),
              note(10, "deleted", [false, false, true], &n, None),
              note(11, "deleted", [false, false, false], &p2, None),
          ] } },
        { "name": "metadata only: added (initial list), updated: no JSON",
          "hex": hex(&batch("pods", &entries[..2], true)),
          "expect": { "informer": "pods", "notifications": [
              no_json(note(7, "added", [true, false, false], &p, None)),
              no_json(note(8, "updated", [false, false, false], &p2, Some(&p))),
          ] } },
        { "name": "empty batch", "hex": hex(&batch("nodes", &[], false)),
          "expect": { "informer": "nodes", "notifications": [] } },
    ]);
    let lists = json!([
        { "name": "two objects", "hex": hex(&encode_list([po.as_bytes(), no.as_bytes()].into_iter())),
          "expect": [expect(&p), expect(&n)] },
        { "name": "no objects", "hex": hex(&encode_list(std::iter::empty())),
          "expect": [] },
    ]);
    json!({
        "about": "Test vectors of the Wisp plugin ABI 0.2 byte layout (docs/abi.md). Written by the ABI codec's encoder (plugin-sdk/abi, the wisp-abi crate: src/tests.rs), which the host and the Rust SDK use; every decoder must read each `hex` as `expect` says. `json` null means the field is absent. Every decoder must refuse each object of `refused` (a decode error naming `field`), as docs/abi.md says.",
        "layoutVersion": LAYOUT_VERSION,
        "objects": objects,
        "batches": batches,
        "lists": lists,
        "refused": refused(po.as_bytes()),
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
        { "name": "metadata.name not UTF-8", "hex": hex(&name), "field": "name" },
        { "name": "an annotation value not UTF-8", "hex": hex(&value), "field": "annotations" },
    ])
}

/// The vectors on disk.
pub(crate) fn on_disk() -> Value {
    let text = std::fs::read_to_string(VECTORS).expect("wit/abi-vectors.json");
    serde_json::from_str(&text).expect("the vectors are JSON")
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
fn objects_read_as_the_vectors_say() {
    let v = on_disk();
    assert_eq!(v["layoutVersion"], json!(LAYOUT_VERSION));
    let objects = v["objects"].as_array().unwrap();
    assert!(objects.len() >= 4);
    for case in objects {
        let bytes = unhex(case["hex"].as_str().unwrap());
        let o = Object::decode(&bytes).unwrap_or_else(|e| panic!("{}: {e}", case["name"]));
        assert_eq!(read(&o), case["expect"], "{}", case["name"]);
        for (k, val) in o.labels() {
            assert_eq!(o.label(k), Some(val), "{}: label {k} by key", case["name"]);
        }
        assert_eq!(o.label("no-such-label"), None);
        let owned = ObjectBuf::decode(bytes.clone()).unwrap();
        assert_eq!(read(&owned.view()), case["expect"], "{}", case["name"]);
    }
}

#[test]
fn batches_read_as_the_vectors_say() {
    for case in on_disk()["batches"].as_array().unwrap() {
        let bytes = unhex(case["hex"].as_str().unwrap());
        let b = Batch::decode(&bytes).unwrap_or_else(|e| panic!("{}: {e}", case["name"]));
        let want = &case["expect"];
        assert_eq!(b.informer(), want["informer"], "{}", case["name"]);
        let got: Vec<Value> = b
            .iter()
            .map(|n| {
                let n = n.unwrap();
                let (kind, flags) = match n.kind {
                    Kind::Added { initial_list } => ("added", [initial_list, false, false]),
                    Kind::Updated { resync } => ("updated", [false, resync, false]),
                    Kind::Deleted {
                        final_state_unknown,
                    } => ("deleted", [false, false, final_state_unknown]),
                };
                json!({ "seq": n.seq, "kind": kind, "initialList": flags[0], "resync": flags[1],
                    "finalStateUnknown": flags[2], "object": read(&n.object),
                    "old": n.old.as_ref().map(read) })
            })
            .collect();
        assert_eq!(json!(got), want["notifications"], "{}", case["name"]);
    }
}

#[test]
fn lists_read_as_the_vectors_say() {
    for case in on_disk()["lists"].as_array().unwrap() {
        let l = ObjectList::decode(unhex(case["hex"].as_str().unwrap())).unwrap();
        let got: Vec<Value> = l.iter().map(|o| read(&o)).collect();
        assert_eq!(json!(got), case["expect"], "{}", case["name"]);
        assert_eq!(l.len(), got.len());
    }
}

#[test]
fn text_that_is_not_utf8_is_refused_naming_its_field() {
    let refused = on_disk()["refused"].as_array().unwrap().clone();
    assert!(refused.len() >= 2);
    for case in refused {
        let bytes = unhex(case["hex"].as_str().unwrap());
        let e = Object::decode(&bytes).map(|_| ()).unwrap_err().to_string();
        let field = case["field"].as_str().unwrap();
        assert!(
            e.contains(field) && e.contains("not UTF-8"),
            "{}: {e}",
            case["name"]
        );
        assert!(ObjectBuf::decode(bytes).is_err(), "{}", case["name"]);
    }
}

#[test]
fn bytes_cut_anywhere_are_an_error_never_a_panic() {
    let v = on_disk();
    let obj = unhex(v["objects"][0]["hex"].as_str().unwrap());
    for cut in 0..obj.len() {
        // The JSON comes last: cut anywhere, its span runs past the end.
        assert!(Object::decode(&obj[..cut]).is_err(), "cut at {cut}");
    }
    let batch = unhex(v["batches"][0]["hex"].as_str().unwrap());
    for cut in 0..batch.len() {
        if let Ok(b) = Batch::decode(&batch[..cut]) {
            let _ = b.iter().collect::<Vec<_>>();
        }
    }
    let mut flipped = obj.clone();
    for i in 0..flipped.len().min(400) {
        flipped[i] ^= 0xff;
        if let Ok(o) = Object::decode(&flipped) {
            let _ = read(&o);
        }
        flipped[i] ^= 0xff;
    }
    assert!(
        Object::decode(&[2, 0, 0, 0]).is_err(),
        "another layout version"
    );
}

#[test]
fn the_host_view_of_an_encoding_reads_what_was_encoded() {
    for v in [pod(), node()] {
        let e = encode(&v);
        assert_eq!(ObjectMeta::of(&e.view()), meta_of(&v));
        assert_eq!(e.json(), v.to_string());
        assert_eq!(&e.as_bytes()[e.json_at()..], v.to_string().as_bytes());
        assert_eq!(
            read(&e.view()),
            read(&Object::decode(e.as_bytes()).unwrap())
        );
    }
}

/// Memory a plugin's allocator hands out may hold anything: a batch written over garbage is the
/// batch written over zeros, whole and metadata-only.
#[test]
fn a_batch_overwrites_every_byte_of_its_destination() {
    let (p, n) = (encode(&pod()), encode(&node()));
    let entries = [
        Entry {
            seq: 1,
            kind: Kind::Added {
                initial_list: false,
            },
            object: &p,
            old: None,
        },
        Entry {
            seq: 2,
            kind: Kind::Updated { resync: false },
            object: &p,
            old: Some(&n),
        },
        Entry {
            seq: 3,
            kind: Kind::Deleted {
                final_state_unknown: false,
            },
            object: &n,
            old: None,
        },
    ];
    for meta in [false, true] {
        let w = BatchWriter::new("pods", entries.iter().copied(), meta);
        let mut dirty = vec![0xa5; w.size()];
        w.write(&mut dirty);
        assert_eq!(dirty, w.to_vec(), "metadata-only {meta}");
    }
}

#[test]
fn a_resync_carries_its_object_once() {
    let o = encode(&pod());
    for old in [None, Some(&o)] {
        let resync = [Entry {
            seq: 1,
            kind: Kind::Updated { resync: true },
            object: &o,
            old,
        }];
        let w = BatchWriter::new("pods", resync.iter().copied(), false);
        assert_eq!(
            w.size(),
            BATCH_HEADER + BATCH_ENTRY + 4 + o.as_bytes().len()
        );
        let bytes = w.to_vec();
        let n = Batch::decode(&bytes).unwrap().get(0).unwrap();
        assert_eq!(n.old.unwrap().as_bytes(), n.object.as_bytes());
    }
}
