//! The lean pass against the full check: it passes only what the full check passes.

use super::*;
use crate::Object;
use crate::tests::{on_disk, unhex};

#[test]
fn a_high_bit_anywhere_in_any_text_is_seen() {
    // Every length across the 64-byte blocks and the shorter ends, a high byte at
    // every position.
    for len in 0..200 {
        let plain = vec![b'a'; len];
        assert_eq!(high_bits(&plain) & HIGH, 0, "{len}");
        for at in 0..len {
            let mut bad = plain.clone();
            bad[at] = 0xff;
            assert_ne!(high_bits(&bad) & HIGH, 0, "{len} {at}");
            let e = utf8(Some(&bad), || "f".into()).unwrap_err().to_string();
            assert!(e.contains(&format!("byte {at} of {len}")), "{e}");
        }
    }
}

#[test]
fn a_refusal_names_the_field_and_the_byte() {
    let refused = on_disk()["refused"].as_array().unwrap().clone();
    let name = unhex(refused[0]["hex"].as_str().unwrap());
    assert_eq!(
        full(&name).unwrap_err().to_string(),
        "malformed ABI bytes: field name: text that is not UTF-8 (byte 1 of 5)"
    );
    let value = unhex(refused[1]["hex"].as_str().unwrap());
    assert_eq!(
        full(&value).unwrap_err().to_string(),
        "malformed ABI bytes: annotations entry 0: value: text that is not UTF-8 (byte 1 of 6)"
    );
}

/// Every metadata text of `o`, in one string.
fn metadata_text(o: &Object<'_>) -> String {
    let mut s = format!(
        "{} {} {:?} {} {} {} {:?}",
        o.api_version(),
        o.kind(),
        o.namespace(),
        o.name(),
        o.uid(),
        o.resource_version(),
        o.deletion_timestamp()
    );
    for (k, v) in o.labels().chain(o.annotations()) {
        s += &format!(" {k}={v}");
    }
    for r in o.owner_refs() {
        s += &format!(" {} {} {} {}", r.api_version, r.kind, r.name, r.uid);
    }
    s
}

#[test]
fn the_lean_pass_passes_only_what_the_full_check_passes() {
    // The vectors' objects whose text is ASCII take the lean path (those of this version's
    // fields or more), the others (an `é`) not...
    for case in on_disk()["objects"].as_array().unwrap() {
        let obj = unhex(case["hex"].as_str().unwrap());
        let fields = usize::from(u16::from_le_bytes([obj[2], obj[3]]));
        let ascii = metadata_text(&Object::decode(&obj).unwrap()).is_ascii();
        assert_eq!(
            lean(&obj).is_some(),
            ascii && fields >= field::COUNT,
            "{}",
            case["name"]
        );
    }
    // ...and whatever one byte (or two neighbouring bytes) changed to, an object the lean pass
    // passes is one the full check passes, with every text span ASCII.
    for case in on_disk()["objects"].as_array().unwrap() {
        let mut obj = unhex(case["hex"].as_str().unwrap());
        // Make the text ASCII (`é` -> `e` and a byte dropped from the annotation value would
        // move spans; an ASCII stand-in of the same length keeps them).
        while let Some(at) = obj.windows(2).position(|w| w == "é".as_bytes()) {
            obj[at..at + 2].copy_from_slice(b"e!");
        }
        assert!(
            lean(&obj).is_some() || obj[2] < field::COUNT as u8,
            "{}",
            case["name"]
        );
        let mut m = obj.clone();
        for i in 0..obj.len() {
            for v in [0x00, 0x01, 0x7f, 0x80, 0xc3, 0xff, obj[i].wrapping_add(1)] {
                m[i] = v;
                for (j, w) in [(i + 1, 0xffu8), (i + 1, 0x00), (i + 3, 0xff)] {
                    let keep = m.get(j).copied();
                    if let Some(x) = m.get_mut(j).filter(|_| v == 0xff || v == 0) {
                        *x = w;
                    }
                    if lean(&m).is_some() {
                        assert!(
                            full(&m).is_ok(),
                            "{}: byte {i} = {v:#x}, {j} = {w:#x}",
                            case["name"]
                        );
                        let r = metadata_text(&Object::decode(&m).unwrap());
                        assert!(r.is_ascii(), "{}: byte {i} = {v:#x}: {r}", case["name"]);
                    }
                    if let (Some(x), Some(k)) = (m.get_mut(j), keep) {
                        *x = k;
                    }
                }
            }
            m[i] = obj[i];
        }
        // Cut anywhere: what the lean pass passes, the full check passes.
        for cut in 0..obj.len() {
            assert!(
                lean(&obj[..cut]).is_none() || full(&obj[..cut]).is_ok(),
                "cut at {cut}"
            );
        }
    }
}
