//! The decoder against the shared test vectors (`wit/abi-vectors.json`), which the host's encoder
//! writes: every decoder (this one, and those of the other SDKs) must read them as they say.

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
    assert!(e.starts_with("shop/web-0: cannot parse"), "{e}");
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
        e.contains("metadata-only") && e.contains("cache::get"),
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

#[test]
fn a_high_bit_anywhere_in_any_text_is_seen_and_utf8_is_checked_exactly() {
    // Every length across the 32-byte blocks, the eight-byte words and the tail, a high byte
    // at every position.
    for len in 0..80 {
        let plain = vec![b'a'; len];
        let mut high = super::HighBits::default();
        high.add(&plain);
        assert!(high.ascii(), "{len}");
        for at in 0..len {
            let mut bad = plain.clone();
            bad[at] = 0xff;
            let mut high = super::HighBits::default();
            high.add(b"abc");
            high.add(&bad);
            assert!(!high.ascii(), "{len} {at}");
            let e = super::utf8(Some(&bad), || "f".into())
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("byte {at} of {len}")), "{e}");
        }
    }
}

/// Every metadata text of `o` (all [`read`] shows but the JSON).
fn metadata_text(o: &Object<'_>) -> String {
    let mut v = read(o);
    v.as_object_mut().unwrap().remove("json");
    v.to_string()
}

#[test]
fn the_lean_check_passes_only_what_the_full_check_passes() {
    // The vectors' objects whose text is ASCII take the lean path, the others (an `é`) not...
    for case in vectors()["objects"].as_array().unwrap() {
        let obj = unhex(case["hex"].as_str().unwrap());
        let fields = u16::from_le_bytes([obj[2], obj[3]]) as usize;
        let ascii = metadata_text(&Object::decode(&obj).unwrap()).is_ascii();
        assert_eq!(
            Object::well_formed_ascii(&obj, fields),
            ascii,
            "{}",
            case["name"]
        );
    }
    // ...and whatever one byte changed to, an object the lean check passes is one the full
    // check passes, with every text span ASCII (its regions may cover more than the text).
    for case in vectors()["objects"].as_array().unwrap() {
        let obj = unhex(case["hex"].as_str().unwrap());
        let fields = u16::from_le_bytes([obj[2], obj[3]]) as usize;
        let mut m = obj.clone();
        for i in 4..obj.len() {
            for v in [0x00, 0x01, 0x7f, 0x80, 0xc3, 0xff, obj[i].wrapping_add(1)] {
                m[i] = v;
                if Object::well_formed_ascii(&m, fields) {
                    assert!(
                        Object::check_slow(&m, fields).is_ok(),
                        "{}: byte {i} = {v:#x}",
                        case["name"]
                    );
                    let o = Object::decode(&m).unwrap();
                    let r = metadata_text(&o);
                    assert!(r.is_ascii(), "{}: byte {i} = {v:#x}: {r}", case["name"]);
                }
            }
            m[i] = obj[i];
        }
    }
}
