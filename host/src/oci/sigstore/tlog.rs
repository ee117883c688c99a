//! Rekor entries checked offline: the signed entry timestamp (SET), the inclusion proof (an
//! RFC 6962 Merkle audit path to the root of a checkpoint the log signed), and that the entry
//! records this bundle's signature, signer and artifact.

use sha2::{Digest, Sha256};

use super::Refused;
use super::bundle::{InclusionProof, TlogEntry};
use super::root::{LogKey, TrustedRoot};

/// How far in the future an integrated time may lie (clock skew between the log and here).
const MAX_SKEW_SECS: i64 = 60;

/// What the entry must record.
pub struct Expected<'a> {
    /// The signature bytes.
    pub signature: &'a [u8],
    /// The signer: the leaf certificate's DER, or the key's SubjectPublicKeyInfo DER.
    pub signer_der: &'a [u8],
    /// For a message signature: the artifact's SHA-256; for DSSE: the payload's.
    pub hash: [u8; 32],
    /// Whether the content is a DSSE envelope (entry kind `dsse`) or a message signature
    /// (`hashedrekord`).
    pub dsse: bool,
}

/// Checks `e` against `root` at `now`: the log is trusted, its SET and inclusion proof verify,
/// and the body records `want`. Returns the integrated time.
pub fn verify(
    root: &TrustedRoot,
    e: &TlogEntry,
    want: &Expected,
    now: i64,
) -> Result<i64, Refused> {
    let (kind, version) = (&e.kind.0, &e.kind.1);
    let wanted_kind = if want.dsse { "dsse" } else { "hashedrekord" };
    if kind != wanted_kind || version != "0.0.1" {
        return Err(Refused::new(
            "tlog entry kind",
            format!(
                "{kind} {version}: only Rekor v1 entries {wanted_kind} 0.0.1 are verified for this content"
            ),
        ));
    }
    let log = root.log(&e.log_id).ok_or_else(|| {
        Refused::new(
            "tlog key",
            format!(
                "log {} is not in the trusted root {}",
                super::bundle_b64(&e.log_id),
                root.file
            ),
        )
    })?;
    let t = e.integrated_time;
    if !log.valid.contains(t) {
        return Err(Refused::new(
            "tlog key",
            format!(
                "the log key of {} is not trusted at the entry's integrated time {t}",
                log.base_url
            ),
        ));
    }
    if t > now + MAX_SKEW_SECS {
        return Err(Refused::new(
            "integrated time",
            format!("integrated time {t} lies in the future (now {now})"),
        ));
    }
    match (&e.set, &e.proof) {
        (None, None) => {
            return Err(Refused::new(
                "inclusion",
                "the entry has neither a signed entry timestamp nor an inclusion proof",
            ));
        }
        (set, proof) => {
            if let Some(set) = set {
                check_set(log, e, set)?;
            }
            if let Some(p) = proof {
                check_proof(log, &e.body, p)?;
            }
        }
    }
    check_body(&e.body, want)?;
    Ok(t)
}

/// The SET: the log's signature over the canonical JSON of body, integrated time, log id and
/// index (keys in order, no spaces).
fn check_set(log: &LogKey, e: &TlogEntry, set: &[u8]) -> Result<(), Refused> {
    let payload = format!(
        "{{\"body\":{},\"integratedTime\":{},\"logID\":\"{}\",\"logIndex\":{}}}",
        serde_json::Value::String(super::bundle_b64(&e.body)),
        e.integrated_time,
        hex::encode(&e.log_id),
        e.log_index
    );
    if log.verifies(payload.as_bytes(), set) {
        Ok(())
    } else {
        Err(Refused::new(
            "signed entry timestamp",
            format!("the SET does not verify under the key of {}", log.base_url),
        ))
    }
}

fn node(l: &[u8], r: &[u8]) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(l);
    h.update(r);
    h.finalize().to_vec()
}

/// The root an audit path leads to from `leaf` at `index` of a tree of `size` (RFC 9162 2.1.3.2).
fn root_from_path(index: u64, size: u64, leaf: Vec<u8>, path: &[Vec<u8>]) -> Option<Vec<u8>> {
    if index >= size {
        return None;
    }
    let (mut f, mut s, mut r) = (index, size - 1, leaf);
    for p in path {
        if s == 0 || p.len() != 32 {
            return None;
        }
        if f & 1 == 1 || f == s {
            r = node(p, &r);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            r = node(&r, p);
        }
        f >>= 1;
        s >>= 1;
    }
    (s == 0).then_some(r)
}

fn check_proof(log: &LogKey, body: &[u8], p: &InclusionProof) -> Result<(), Refused> {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(body);
    let leaf = h.finalize().to_vec();
    match root_from_path(p.log_index, p.tree_size, leaf, &p.hashes) {
        Some(r) if r == p.root_hash => {}
        _ => {
            return Err(Refused::new(
                "inclusion proof",
                format!(
                    "the audit path of index {} in a tree of {} does not lead to root hash {}",
                    p.log_index,
                    p.tree_size,
                    hex::encode(&p.root_hash)
                ),
            ));
        }
    }
    check_checkpoint(log, p)
}

/// The checkpoint (a signed note): origin, tree size, base64 root hash, optional lines, a
/// blank line, then `— NAME BASE64(4-byte key hint || signature)` lines. One signature of the
/// log's key must verify over the text before the blank line; size and root must be the proof's.
fn check_checkpoint(log: &LogKey, p: &InclusionProof) -> Result<(), Refused> {
    let bad = |d: String| Refused::new("checkpoint", d);
    let note = p.checkpoint.as_deref().ok_or_else(|| {
        bad("the inclusion proof has no checkpoint: its root hash is not signed by the log".into())
    })?;
    let (text, sigs) = note
        .split_once("\n\n")
        .ok_or_else(|| bad("no blank line between the note and its signatures".into()))?;
    let mut lines = text.lines();
    let (_origin, size, root) = (lines.next(), lines.next(), lines.next());
    if size.and_then(|s| s.parse::<u64>().ok()) != Some(p.tree_size)
        || root.and_then(|r| super::bundle::b64("root", r).ok()) != Some(p.root_hash.clone())
    {
        return Err(bad(format!(
            "its tree size and root hash are not the inclusion proof's ({}, {})",
            p.tree_size,
            hex::encode(&p.root_hash)
        )));
    }
    let signed = format!("{text}\n");
    let verified = sigs
        .lines()
        .filter_map(|l| l.strip_prefix("\u{2014} "))
        .filter_map(|l| l.rsplit_once(' '))
        .filter_map(|(_, s)| super::bundle::b64("signature", s).ok())
        .filter(|s| s.len() > 4 && s[..4] == log.key_id[..4])
        .any(|s| log.verifies(signed.as_bytes(), &s[4..]));
    if verified {
        Ok(())
    } else {
        Err(bad(format!(
            "no signature of the log key of {} verifies over it",
            log.base_url
        )))
    }
}

/// The entry body must record this bundle's signature, signer and hash: else the log proves
/// some other signature.
fn check_body(body: &[u8], want: &Expected) -> Result<(), Refused> {
    use base64::Engine as _;
    let bad = |d: &str| Refused::new("tlog entry body", d.to_owned());
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| bad("the canonicalized body is not JSON"))?;
    let spec = &v["spec"];
    let (sig, signer, hash) = if want.dsse {
        let sigs = spec["signatures"].as_array().cloned().unwrap_or_default();
        let [one] = sigs.as_slice() else {
            return Err(bad("the dsse entry does not record exactly one signature"));
        };
        (
            one["signature"].clone(),
            one["verifier"].clone(),
            spec["payloadHash"]["value"].clone(),
        )
    } else {
        (
            spec["signature"]["content"].clone(),
            spec["signature"]["publicKey"]["content"].clone(),
            spec["data"]["hash"]["value"].clone(),
        )
    };
    let b64 = |v: &serde_json::Value| {
        v.as_str()
            .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
    };
    if b64(&sig).as_deref() != Some(want.signature) {
        return Err(bad("the entry records another signature than the bundle's"));
    }
    let signer_der = b64(&signer).and_then(|pem| pem_der(&pem));
    if signer_der.as_deref() != Some(want.signer_der) {
        return Err(bad(
            "the entry records another certificate or key than the bundle's",
        ));
    }
    if hash.as_str() != Some(hex::encode(want.hash).as_str()) {
        return Err(bad(if want.dsse {
            "the entry records another payload hash than the envelope's"
        } else {
            "the entry records another artifact digest than the bundle's"
        }));
    }
    Ok(())
}

/// The DER of the first PEM block of `pem` (a certificate or a public key).
fn pem_der(pem: &[u8]) -> Option<Vec<u8>> {
    use rustls::pki_types::pem::{PemObject, SectionKind};
    let (kind, der) = <(SectionKind, Vec<u8>)>::from_pem_slice(pem).ok()?;
    matches!(kind, SectionKind::Certificate | SectionKind::PublicKey).then_some(der)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(i: u8) -> Vec<u8> {
        let mut h = Sha256::new();
        h.update([0u8, i]);
        h.finalize().to_vec()
    }

    /// The RFC 6962 root of leaves `l` (the largest power of two below the size splits it).
    fn mth(l: &[Vec<u8>]) -> Vec<u8> {
        if l.len() == 1 {
            return l[0].clone();
        }
        let k = l.len().next_power_of_two() / 2;
        node(&mth(&l[..k]), &mth(&l[k..]))
    }

    fn path(l: &[Vec<u8>], m: usize) -> Vec<Vec<u8>> {
        if l.len() == 1 {
            return vec![];
        }
        let k = l.len().next_power_of_two() / 2;
        if m < k {
            let mut p = path(&l[..k], m);
            p.push(mth(&l[k..]));
            p
        } else {
            let mut p = path(&l[k..], m - k);
            p.push(mth(&l[..k]));
            p
        }
    }

    /// Every leaf of trees of 1 to 20 leaves proves to the root; a wrong index, size or hash
    /// does not.
    #[test]
    fn audit_paths_of_every_shape_verify() {
        for n in 1..=20u8 {
            let leaves: Vec<_> = (0..n).map(leaf).collect();
            let root = mth(&leaves);
            for m in 0..n as usize {
                let p = path(&leaves, m);
                let got = root_from_path(m as u64, n as u64, leaves[m].clone(), &p);
                assert_eq!(got.as_ref(), Some(&root), "leaf {m} of {n}");
                if n > 1 {
                    let other = (m + 1) % n as usize;
                    assert_ne!(
                        root_from_path(other as u64, n as u64, leaves[m].clone(), &p),
                        Some(root.clone()),
                        "leaf {m} of {n} at index {other}"
                    );
                    let mut bad = p.clone();
                    if let Some(h) = bad.first_mut() {
                        h[0] ^= 1;
                    }
                    assert_ne!(
                        root_from_path(m as u64, n as u64, leaves[m].clone(), &bad),
                        Some(root.clone())
                    );
                }
            }
        }
    }
}
