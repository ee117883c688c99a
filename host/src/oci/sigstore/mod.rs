//! Sigstore bundles (v0.1, v0.2, v0.3), as cosign 3 attaches them to images, checked offline.
//!
//! - [`bundle`]: the bundle read; [`root`]: the operator's trusted root (Fulcio chains, Rekor
//!   keys); [`tlog`]: Rekor entries (SET, inclusion proof and checkpoint, entry body);
//!   [`cert`]: the Fulcio chain at the Rekor time, and the identity in the leaf.
//!
//! A bundle is accepted for an artifact (a module's manifest bytes) when its content names the
//! artifact (a message signature of its SHA-256, or a DSSE in-toto statement whose subject has
//! it), and either its signature verifies under a configured key (keyed; Rekor entries, if any,
//! are then checked when a trusted root is configured), or (keyless) a Rekor entry of the
//! trusted root's logs proves it was logged (SET and, from v0.2 on, the inclusion proof), its
//! leaf certificate chains to a trusted Fulcio authority at the integrated time, its identity
//! and issuer match one of `oci.keyless`, and its signature verifies under the leaf.
//!
//! Not verified: Rekor v2 entries and RFC 3161 timestamps (a keyless bundle without a Rekor v1
//! entry is refused), and SCTs of the leaf.

pub mod bundle;
pub mod cert;
mod error;
pub mod root;
pub mod tlog;

use std::path::PathBuf;

use sha2::{Digest, Sha256};

use super::sign::PublicKey;
use bundle::{Bundle, Content, Material};
pub use error::SigstoreError;
pub use root::TrustedRoot;

/// The media type (and `artifactType`) of a v0.3 bundle, as cosign 3 attaches it.
pub const BUNDLE_V03: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The DSSE payload type of an in-toto statement.
pub const INTOTO_PAYLOAD: &str = "application/vnd.in-toto+json";
/// The predicate type of the statement `cosign sign` signs for an image.
pub const COSIGN_SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";

/// A refused bundle: which check failed, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The check (e.g. `certificate identity`, `inclusion proof`).
    pub check: &'static str,
    /// What is wrong.
    pub detail: String,
}

impl Refused {
    /// A refusal by `check`.
    pub fn new(check: &'static str, detail: impl Into<String>) -> Self {
        Self {
            check,
            detail: detail.into(),
        }
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} check failed: {}", self.check, self.detail)
    }
}

/// How a certificate's identity or issuer is matched.
#[derive(Clone, Debug)]
pub enum Matcher {
    /// Equal.
    Exact(String),
    /// The whole value matches the expression (anchored).
    Regex(regex::Regex),
}

impl Matcher {
    /// An anchored regex matcher; the error names the problem.
    pub fn regex(expr: &str) -> Result<Self, SigstoreError> {
        regex::Regex::new(&format!("^(?:{expr})$"))
            .map(Self::Regex)
            .map_err(SigstoreError::Regex)
    }

    fn matches(&self, s: &str) -> bool {
        match self {
            Self::Exact(e) => e == s,
            Self::Regex(r) => r.is_match(s),
        }
    }
}

impl std::fmt::Display for Matcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exact(s) => write!(f, "{s:?}"),
            Self::Regex(r) => write!(f, "/{}/", r.as_str()),
        }
    }
}

/// One accepted keyless signer: the certificate's issuer and identity.
#[derive(Clone, Debug)]
pub struct Keyless {
    /// The OIDC issuer.
    pub issuer: Matcher,
    /// The SAN: a workflow URI, an email.
    pub identity: Matcher,
}

/// What a bundle is checked against.
pub struct Policy<'a> {
    /// Keys of keyed bundles.
    pub keys: &'a [PublicKey],
    /// Signers of keyless bundles.
    pub keyless: &'a [Keyless],
    /// Fulcio and Rekor trust.
    pub root: Option<&'a TrustedRoot>,
    /// Now, in seconds since the epoch (integrated times beyond it are refused).
    pub now: i64,
}

/// Who signed an accepted bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Signer {
    /// A configured key.
    Key(PathBuf),
    /// A Fulcio certificate's identity and issuer.
    Identity {
        /// The SAN that matched.
        identity: String,
        /// The issuer.
        issuer: String,
    },
}

impl std::fmt::Display for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Key(k) => write!(f, "{}", k.display()),
            Self::Identity { identity, issuer } => write!(f, "{identity} (issuer {issuer})"),
        }
    }
}

pub(crate) fn bundle_b64(b: &[u8]) -> String {
    super::client::b64(b)
}

/// DSSE's pre-authentication encoding of a payload.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut v = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    v.extend_from_slice(payload);
    v
}

/// The message signed, and the hash the Rekor entry records, after checking that the content
/// names `artifact` (and, for DSSE, has `predicate` as its predicate type if given).
fn content_names(
    c: &Content,
    artifact: &[u8],
    predicate: Option<&str>,
) -> Result<(Vec<u8>, [u8; 32]), Refused> {
    let digest: [u8; 32] = Sha256::digest(artifact).into();
    let hex = hex::encode(digest);
    match c {
        Content::Message { digest: d, .. } => {
            if d[..] != digest[..] {
                return Err(Refused::new(
                    "artifact digest",
                    format!("the bundle's message digest is not sha256:{hex}"),
                ));
            }
            Ok((artifact.to_vec(), digest))
        }
        Content::Dsse {
            payload_type,
            payload,
            ..
        } => {
            if payload_type != INTOTO_PAYLOAD {
                return Err(Refused::new(
                    "subject",
                    format!("DSSE payload type {payload_type:?}, not {INTOTO_PAYLOAD}"),
                ));
            }
            let st: serde_json::Value = serde_json::from_slice(payload)
                .map_err(|e| Refused::new("subject", format!("the statement is not JSON: {e}")))?;
            let named = st["subject"].as_array().is_some_and(|s| {
                s.iter()
                    .any(|s| s["digest"]["sha256"].as_str() == Some(&hex))
            });
            if !named {
                return Err(Refused::new(
                    "subject",
                    format!("no subject of the in-toto statement has digest sha256:{hex}"),
                ));
            }
            if let Some(p) = predicate
                && st["predicateType"].as_str() != Some(p)
            {
                return Err(Refused::new(
                    "subject",
                    format!(
                        "predicate type {} is not {p:?} (a signature, not another attestation)",
                        st["predicateType"]
                    ),
                ));
            }
            Ok((pae(payload_type, payload), Sha256::digest(payload).into()))
        }
    }
}

fn signature(c: &Content) -> &[u8] {
    match c {
        Content::Message { signature, .. } | Content::Dsse { signature, .. } => signature,
    }
}

/// Checks `json` (a bundle) for `artifact` under `policy`; `predicate`: the predicate type a
/// DSSE statement must have (cosign's for images). Returns who signed.
pub fn verify(
    policy: &Policy,
    json: &[u8],
    artifact: &[u8],
    predicate: Option<&str>,
) -> Result<Signer, Refused> {
    let b = Bundle::parse(json).map_err(|e| Refused::new("bundle format", e.to_string()))?;
    let (message, hash) = content_names(&b.content, artifact, predicate)?;
    let sig = signature(&b.content);
    match &b.material {
        Material::PublicKey => keyed(policy, &b, &message, hash, sig),
        Material::Certificate(leaf) => keyless(policy, &b, leaf, &message, hash, sig),
    }
}

fn keyed(
    policy: &Policy,
    b: &Bundle,
    message: &[u8],
    hash: [u8; 32],
    sig: &[u8],
) -> Result<Signer, Refused> {
    if policy.keys.is_empty() {
        return Err(Refused::new(
            "signature",
            "a keyed bundle, and no oci.keys are configured",
        ));
    }
    let key = policy
        .keys
        .iter()
        .find(|k| k.verifies(message, sig))
        .ok_or_else(|| {
            Refused::new(
                "signature",
                format!(
                    "does not verify under any configured key ({})",
                    policy
                        .keys
                        .iter()
                        .map(|k| k.file.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })?;
    if let Some(root) = policy.root {
        let want = tlog::Expected {
            signature: sig,
            signer_der: &key.spki_der(),
            hash,
            dsse: matches!(b.content, Content::Dsse { .. }),
        };
        for e in &b.tlog {
            tlog::verify(root, e, &want, policy.now)?;
        }
    }
    Ok(Signer::Key(key.file.clone()))
}

fn keyless(
    policy: &Policy,
    b: &Bundle,
    leaf: &[u8],
    message: &[u8],
    hash: [u8; 32],
    sig: &[u8],
) -> Result<Signer, Refused> {
    let Some(root) = policy.root else {
        return Err(Refused::new(
            "certificate chain",
            "a keyless bundle, and no oci.trustedRoot is configured",
        ));
    };
    if policy.keyless.is_empty() {
        return Err(Refused::new(
            "certificate identity",
            "a keyless bundle, and no oci.keyless signers are configured",
        ));
    }
    if !cert::verifies(leaf, message, sig) {
        return Err(Refused::new(
            "signature",
            "does not verify under the leaf certificate's key",
        ));
    }
    let want = tlog::Expected {
        signature: sig,
        signer_der: leaf,
        hash,
        dsse: matches!(b.content, Content::Dsse { .. }),
    };
    let Some(first) = b.tlog.first() else {
        return Err(Refused::new(
            "inclusion",
            "a keyless bundle without a Rekor entry (its time cannot be established)",
        ));
    };
    let at = tlog::verify(root, first, &want, policy.now)?;
    for e in &b.tlog[1..] {
        tlog::verify(root, e, &want, policy.now)?;
    }
    cert::verify_chain(leaf, root, at)
        .map_err(|e| Refused::new("certificate chain", e.to_string()))?;
    let id =
        cert::identity(leaf).map_err(|e| Refused::new("certificate identity", e.to_string()))?;
    matching_signer(policy.keyless, &id)
}

fn matching_signer(keyless: &[Keyless], id: &cert::Identity) -> Result<Signer, Refused> {
    let issuer = id.issuer.clone().unwrap_or_default();
    for k in keyless {
        if !k.issuer.matches(&issuer) {
            continue;
        }
        if let Some(n) = id.names.iter().find(|n| k.identity.matches(n)) {
            return Ok(Signer::Identity {
                identity: n.clone(),
                issuer,
            });
        }
    }
    let (check, accepted) = if keyless.iter().any(|k| k.issuer.matches(&issuer)) {
        ("certificate identity", "identities")
    } else {
        ("certificate issuer", "issuers")
    };
    Err(Refused::new(
        check,
        format!(
            "signed by {:?} (issuer {issuer:?}); oci.keyless accepts the {accepted} {}",
            id.names,
            keyless
                .iter()
                .map(|k| format!("{} (issuer {})", k.identity, k.issuer))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ))
}

#[cfg(test)]
mod tests;
