//! Real bundles of sigstore-conformance (tests/fixtures/sigstore, see its README) against the
//! public-good trusted root of sigstore-go's test data: each happy path accepted, each broken
//! one refused by the check that should refuse it.

use std::path::PathBuf;

use super::*;

const IDENTITY: &str = "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/.github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main";
const ISSUER: &str = "https://token.actions.githubusercontent.com";

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sigstore")
}

fn read(case: &str, file: &str) -> Vec<u8> {
    std::fs::read(dir().join(case).join(file)).unwrap_or_else(|e| panic!("{case}/{file}: {e}"))
}

fn root() -> TrustedRoot {
    TrustedRoot::load(&dir().join("trusted_root.json")).unwrap()
}

fn artifact() -> Vec<u8> {
    std::fs::read(dir().join("a.txt")).unwrap()
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn signers(identity: Matcher, issuer: Matcher) -> Vec<Keyless> {
    vec![Keyless { issuer, identity }]
}

fn exact(s: &str) -> Matcher {
    Matcher::Exact(s.to_owned())
}

fn check_with(keyless: &[Keyless], keys: &[PublicKey], json: &[u8]) -> Result<Signer, Refused> {
    let r = root();
    let p = Policy {
        keys,
        keyless,
        root: Some(&r),
        now: now(),
    };
    verify(&p, json, &artifact(), None)
}

fn check(case: &str) -> Result<Signer, Refused> {
    check_with(
        &signers(exact(IDENTITY), exact(ISSUER)),
        &[],
        &read(case, "bundle.sigstore.json"),
    )
}

#[test]
fn keyless_bundles_of_every_version_verify() {
    for case in [
        "happy-path-v0.1",
        "happy-path-v0.2",
        "happy-path-v0.3",
        "happy-path-v0.3-new-mediaType",
        "happy-path-intoto-in-dsse-v3",
    ] {
        let got = check(case).unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(
            got,
            Signer::Identity {
                identity: IDENTITY.into(),
                issuer: ISSUER.into()
            },
            "{case}"
        );
    }
}

#[test]
fn broken_bundles_are_refused_by_the_check_that_fails() {
    for (case, check_name) in [
        ("checkpoint-wrong-roothash_fail", "checkpoint"),
        ("checkpoint-bad-keyhint_fail", "checkpoint"),
        ("invalid-checkpoint-signature_fail", "checkpoint"),
        ("invalid-inclusion-proof_fail", "inclusion proof"),
        ("inclusion-proof-corrupted-hash_fail", "inclusion proof"),
        ("set-invalid-signature_fail", "signed entry timestamp"),
        ("signature-mismatch_fail", "signature"),
        ("dsse-mismatch-sig_fail", "tlog entry body"),
        ("dsse-invalid-sig_fail", "signature"),
        ("dsse-mismatch-envelope_fail", "tlog entry body"),
        ("wrong-hashedrekord-artifact_fail", "tlog entry body"),
        ("wrong-hashedrekord-cert-and-sig_fail", "tlog entry body"),
        ("wrong-hashedrekord-entry_fail", "tlog entry body"),
        ("message-digest-mismatch_fail", "artifact digest"),
        ("bundle-from-wrong-instance_fail", "tlog key"),
        ("bundle-negative-log-index_fail", "bundle format"),
        ("bundle-unknown-version_fail", "bundle format"),
        ("rekor2-happy-path", "tlog entry kind"),
    ] {
        let e = check(case).expect_err(case);
        assert_eq!(e.check, check_name, "{case}: {e}");
    }
}

/// The certificate of this bundle was valid ten minutes around its signing; the log integrated
/// it later (the conformance case was written when that time was still in the future).
#[test]
fn a_certificate_expired_at_the_rekor_time_is_refused() {
    let case = "integrated-time-in-future_fail";
    let id = String::from_utf8(read(case, "identity")).unwrap();
    let issuer = String::from_utf8(read(case, "issuer")).unwrap();
    let e = check_with(
        &signers(exact(id.trim()), exact(issuer.trim())),
        &[],
        &read(case, "bundle.sigstore.json"),
    )
    .unwrap_err();
    let allowed = ["certificate chain", "integrated time"];
    assert!(allowed.contains(&e.check), "{e}");
    if e.check == "certificate chain" {
        assert!(e.detail.contains("1778168051"), "{e}");
    }
}

#[test]
fn identity_and_issuer_are_matched_exactly_or_by_anchored_regex() {
    let json = read("happy-path-v0.3", "bundle.sigstore.json");
    let other = "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/.github/workflows/other.yml@refs/heads/main";
    let e = check_with(&signers(exact(other), exact(ISSUER)), &[], &json).unwrap_err();
    assert_eq!(e.check, "certificate identity", "{e}");
    assert!(e.detail.contains(IDENTITY), "names the signer: {e}");
    let e = check_with(
        &signers(exact(IDENTITY), exact("https://accounts.google.com")),
        &[],
        &json,
    )
    .unwrap_err();
    assert_eq!(e.check, "certificate issuer", "{e}");
    let re =
        Matcher::regex(r"https://github\.com/sigstore-conformance/.*@refs/heads/main").unwrap();
    let issuer_re = Matcher::regex(r"https://token\.actions\.githubusercontent\.com").unwrap();
    assert!(check_with(&signers(re, issuer_re), &[], &json).is_ok());
    // Anchored: a prefix of the identity is not a match.
    let prefix = Matcher::regex(r"https://github\.com/sigstore-conformance").unwrap();
    let e = check_with(&signers(prefix, exact(ISSUER)), &[], &json).unwrap_err();
    assert_eq!(e.check, "certificate identity", "{e}");
    assert!(Matcher::regex("(").is_err());
}

#[test]
fn a_modified_payload_or_signature_is_refused() {
    let json = read("happy-path-intoto-in-dsse-v3", "bundle.sigstore.json");
    let mut v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let payload = bundle::b64("", v["dsseEnvelope"]["payload"].as_str().unwrap()).unwrap();
    let changed = String::from_utf8(payload).unwrap().replace(
        "https://slsa.dev/provenance/v1",
        "https://slsa.dev/provenance/v2",
    );
    v["dsseEnvelope"]["payload"] = bundle_b64(changed.as_bytes()).into();
    let e = check_with(
        &signers(exact(IDENTITY), exact(ISSUER)),
        &[],
        &serde_json::to_vec(&v).unwrap(),
    )
    .unwrap_err();
    assert_eq!(e.check, "signature", "{e}");
    // Another artifact than the one signed.
    let r = root();
    let p = Policy {
        keys: &[],
        keyless: &signers(exact(IDENTITY), exact(ISSUER)),
        root: Some(&r),
        now: now(),
    };
    let e = verify(&p, &json, b"another module", None).unwrap_err();
    assert_eq!(e.check, "subject", "{e}");
    // A statement of another predicate than cosign's signature is not a signature.
    let e = verify(&p, &json, &artifact(), Some(COSIGN_SIGN_PREDICATE)).unwrap_err();
    assert_eq!(e.check, "subject", "{e}");
}

#[test]
fn keyless_needs_a_trusted_root_and_signers() {
    let json = read("happy-path-v0.3", "bundle.sigstore.json");
    let p = Policy {
        keys: &[],
        keyless: &signers(exact(IDENTITY), exact(ISSUER)),
        root: None,
        now: now(),
    };
    let e = verify(&p, &json, &artifact(), None).unwrap_err();
    assert!(e.detail.contains("oci.trustedRoot"), "{e}");
    let e = check_with(&[], &[], &json).unwrap_err();
    assert!(e.detail.contains("oci.keyless"), "{e}");
}

#[test]
fn keyed_bundles_verify_under_the_configured_key_only() {
    let case = "managed-key-happy-path";
    let key = PublicKey::load(&dir().join(case).join("key.pub")).unwrap();
    let json = read(case, "bundle.sigstore.json");
    let got = check_with(&[], std::slice::from_ref(&key), &json).unwrap();
    assert_eq!(got, Signer::Key(key.file.clone()));
    let wrong = PublicKey::load(&dir().join("managed-key-wrong-key_fail").join("key.pub")).unwrap();
    let e = check_with(&[], &[wrong], &json).unwrap_err();
    assert_eq!(e.check, "signature", "{e}");
    let e = check_with(&[], &[], &json).unwrap_err();
    assert!(e.detail.contains("oci.keys"), "{e}");
}

#[test]
fn trusted_roots_are_checked_with_the_field_named() {
    let good = std::fs::read(dir().join("trusted_root.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_slice(&good).unwrap();
    v["tlogs"][0]["publicKey"]["validFor"] = serde_json::json!({});
    let e =
        (TrustedRoot::parse("r.json", &serde_json::to_vec(&v).unwrap()).unwrap_err()).to_string();
    assert!(
        e.contains("r.json") && e.contains("tlogs[0].publicKey.validFor.start"),
        "{e}"
    );
    let e = (TrustedRoot::parse("r.json", b"{\"mediaType\":\"x\"}").unwrap_err()).to_string();
    assert!(e.contains("mediaType"), "{e}");
    let e = TrustedRoot::parse("r.json", b"[]").unwrap_err().to_string();
    assert!(e.contains("not a trusted root JSON"), "{e}");
}
