//! The SDK's views against the shared test vectors (`wit/abi-vectors.json`), which the ABI
//! codec's encoder writes (`wisp-abi`, whose own tests hold its decoder, and the lean check
//! against the full one, to them): every decoder must read them as they say.

use serde_json::{Value, json};

use super::*;

pub(crate) const VECTORS: &str = include_str!("../../../wit/abi-vectors.json");

pub(crate) fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// What a decoder reads from an object, in the vectors' form.
fn read(o: &Object<'_>) -> Value {
    let pairs = |p: Pairs<'_>| json!(p.collect::<Vec<_>>());
    let owners: Vec<Value> = o
        .owner_refs()
        .map(|r| {
            json!({ "apiVersion": r.api_version, "kind": r.kind, "name": r.name, "uid": r.uid,
                "controller": r.controller, "blockOwnerDeletion": r.block_owner_deletion })
        })
        .collect();
    let json = (!o.json().is_empty()).then(|| String::from_utf8_lossy(o.json()));
    json!({
        "apiVersion": o.api_version(), "kind": o.kind(), "namespace": o.namespace(),
        "name": o.name(), "uid": o.uid(), "resourceVersion": o.resource_version(),
        "generation": o.generation(), "deletionTimestamp": o.deletion_timestamp(),
        "labels": pairs(o.labels()), "annotations": pairs(o.annotations()),
        "ownerReferences": owners, "json": json,
    })
}

fn vectors() -> Value {
    serde_json::from_str(VECTORS).expect("the vectors are JSON")
}

#[test]
fn objects_read_as_the_vectors_say() {
    let v = vectors();
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
    }
}

#[test]
fn batches_read_as_the_vectors_say() {
    for case in vectors()["batches"].as_array().unwrap() {
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
                    other => panic!(
                        "{}: a kind the vectors do not have: {other:?}",
                        case["name"]
                    ),
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
    for case in vectors()["lists"].as_array().unwrap() {
        let l = ObjectList::decode(unhex(case["hex"].as_str().unwrap())).unwrap();
        let got: Vec<Value> = l.iter().map(|o| read(&o)).collect();
        assert_eq!(json!(got), case["expect"], "{}", case["name"]);
        assert_eq!(l.len(), got.len());
    }
}

#[test]
fn bytes_cut_anywhere_are_an_error_never_a_panic() {
    let v = vectors();
    let obj = unhex(v["objects"][0]["hex"].as_str().unwrap());
    for cut in 0..obj.len() {
        // A cut object may still decode when the cut only loses trailing JSON bytes... it
        // cannot: the JSON span then runs past the end.
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
fn a_partial_parse_borrows_only_the_fields_it_names() {
    let v = vectors();
    let bytes = unhex(v["objects"][0]["hex"].as_str().unwrap());
    let o = Object::decode(&bytes).unwrap();
    #[derive(serde::Deserialize)]
    struct Pod<'a> {
        #[serde(borrow)]
        spec: Spec<'a>,
    }
    #[derive(serde::Deserialize)]
    struct Spec<'a> {
        #[serde(borrow)]
        containers: Vec<Container<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Container<'a> {
        image: &'a str,
    }
    let p: Pod<'_> = o.parse_partial().unwrap();
    assert_eq!(p.spec.containers[0].image, "nginx:1.27");
    let e = o.parse::<Vec<u8>>().unwrap_err();
    assert!(e.message().starts_with("shop/web-0: cannot parse"), "{e}");
}

#[test]
fn a_metadata_only_object_says_why_it_cannot_be_parsed() {
    let v = vectors();
    let case = v["batches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"].as_str().unwrap().starts_with("metadata only"))
        .expect("a metadata-only vector");
    let bytes = unhex(case["hex"].as_str().unwrap());
    let b = Batch::decode(&bytes).unwrap();
    let n = b.get(0).unwrap();
    assert!(!n.object.has_json());
    assert_eq!(
        n.object.label("app"),
        Some("web"),
        "the metadata is all there"
    );
    let e = n.object.value().unwrap_err();
    assert!(
        e.message().contains("metadata-only") && e.message().contains("cache::get"),
        "{e}"
    );
}

#[test]
fn text_that_is_not_utf8_is_refused_naming_its_field() {
    let refused = vectors()["refused"].as_array().unwrap().clone();
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
        assert!(Object::decode_owned(bytes).is_err(), "{}", case["name"]);
    }
}
