//! Sigstore bundles attached to a module as OCI 1.1 referrers, as cosign 3 attaches them: a
//! manifest of `artifactType` `application/vnd.dev.sigstore.bundle.v0.3+json`, an empty config,
//! one layer (the bundle JSON) and a `subject` naming the module's manifest.
//!
//! Found by the referrers API (`GET /v2/REPO/referrers/DIGEST`), or, where the registry has
//! none (it answers 404), by the referrers tag schema: the index tagged `sha256-HEX` lists them.
//! Written the same way by `wisp push --sign`: the manifest by its digest, then the tag schema's
//! index updated unless the registry said (`OCI-Subject`) that it keeps referrers itself.

use std::collections::BTreeMap;

use bytes::Bytes;
use http::{Method, StatusCode};

use super::client::{SMALL_BODY, Session, b64, sha256_digest};
use super::manifest::{self, Descriptor, Manifest, ManifestError};

use super::sigstore::{self, BUNDLE_V03, COSIGN_SIGN_PREDICATE, INTOTO_PAYLOAD};
use super::store::Store;
use super::{OciError, Settings, sign};

/// The referrers tag schema's tag of `digest` (`sha256:HEX` -> `sha256-HEX`).
pub fn tag_schema(digest: &str) -> String {
    digest.replacen(':', "-", 1)
}

/// Where a referrer was listed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listed {
    /// By the referrers API.
    Api,
    /// By the referrers tag schema's index.
    Tag,
}

impl std::fmt::Display for Listed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Api => "referrers API",
            Self::Tag => "referrers tag",
        })
    }
}

/// The Sigstore bundle referrers of `digest`, and where they were listed; none when the
/// registry lists no referrer (no API and no tag schema index).
pub async fn bundles(s: &mut Session, digest: &str) -> Result<(Vec<Descriptor>, Listed), OciError> {
    let mut h = BTreeMap::new();
    h.insert("accept", manifest::OCI_INDEX.to_owned());
    let url = s.url(&format!("referrers/{digest}"));
    let a = s
        .send(Method::GET, &url, h, Bytes::new(), SMALL_BODY)
        .await?;
    let (index, listed) = if a.status.is_success() {
        (a.body.to_vec(), Listed::Api)
    } else if matches!(
        a.status,
        StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED | StatusCode::BAD_REQUEST
    ) {
        match s.get_manifest(&tag_schema(digest)).await? {
            Some((_, b)) => (b, Listed::Tag),
            None => return Ok((Vec::new(), Listed::Tag)),
        }
    } else {
        return Err(s.unexpected(&format!("referrers of {digest}"), &a));
    };
    let v: serde_json::Value = serde_json::from_slice(&index)
        .map_err(|e| s.err(format!("the {listed} index of {digest} is not JSON: {e}")))?;
    let listed_all: Vec<Descriptor> = serde_json::from_value(v["manifests"].clone())
        .map_err(|e| s.err(format!("the {listed} index of {digest}: {e}")))?;
    let found = listed_all
        .into_iter()
        .filter(|d| {
            d.artifact_type
                .as_deref()
                .is_some_and(|t| t.starts_with(manifest::SIGSTORE_BUNDLE_PREFIX))
        })
        .collect();
    Ok((found, listed))
}

/// What bundle checks share across one pull.
pub struct Check<'a> {
    /// The settings (keys, signers, trusted root, bounds).
    pub settings: &'a Settings,
    /// The cache.
    pub store: &'a Store,
    /// The module's manifest digest.
    pub digest: &'a str,
    /// The module's manifest bytes (what a message signature signs).
    pub manifest: &'a [u8],
}

impl Check<'_> {
    /// Checks the bundle of referrer manifest `bytes` (digest `at`); `budget`: bundle bytes
    /// still allowed by `oci.maxSignatureBytes` (the bundle is fetched only within it). Returns
    /// who signed, or why not.
    pub async fn referrer(
        &self,
        s: &mut Session,
        at: &str,
        bytes: &[u8],
        budget: &mut u64,
    ) -> Result<String, ReferrerError> {
        let m = Manifest::parse(bytes, None)?;
        let subject = m.subject.as_ref().map(|d| d.digest.as_str());
        if subject != Some(self.digest) {
            return Err(ReferrerError::Subject {
                subject: subject.map(str::to_owned),
                digest: self.digest.to_owned(),
            });
        }
        let layer = m.bundle_layer().ok_or(ReferrerError::NoBundleLayer)?;
        if layer.size > *budget {
            return Err(ReferrerError::OverBudget {
                size: layer.size,
                max: self.settings.max_signature_bytes,
            });
        }
        *budget -= layer.size;
        let (bundle, fetched) = match self.store.blob(&layer.digest) {
            Some(b) => (b, false),
            None => (
                s.get_blob(&layer.digest, layer.size, layer.size)
                    .await
                    .map_err(ReferrerError::Fetch)?,
                true,
            ),
        };
        let root = self.settings.trusted_root.as_deref();
        let policy = sigstore::Policy {
            keys: &self.settings.keys,
            keyless: &self.settings.keyless,
            root,
            now: now_secs(),
        };
        let signer = sigstore::verify(&policy, &bundle, self.manifest, Some(COSIGN_SIGN_PREDICATE))
            .map_err(ReferrerError::Refused)?;
        if fetched {
            self.store.put_blob(&layer.digest, &bundle)?;
        }
        self.store.put_manifest(at, bytes)?;
        self.store.put_signature_of(self.digest, at)?;
        Ok(signer.to_string())
    }
}

/// Why a referrer's bundle was not accepted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReferrerError {
    /// Its manifest does not read.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// Its subject is another manifest.
    #[error("its subject is {subject:?}, not this module's {digest}")]
    Subject {
        /// The subject it names.
        subject: Option<String>,
        /// The module's manifest digest.
        digest: String,
    },
    /// No layer of a bundle's media type.
    #[error("no Sigstore bundle layer")]
    NoBundleLayer,
    /// The bundle is larger than what `oci.maxSignatureBytes` leaves.
    #[error("its bundle of {size} bytes is over what oci.maxSignatureBytes ({max}) leaves")]
    OverBudget {
        /// The bundle's declared size.
        size: u64,
        /// `oci.maxSignatureBytes`.
        max: u64,
    },
    /// Listed, but the registry does not have it.
    #[error("listed, but not found")]
    NotFound,
    /// Fetching it failed (shown as its problem: the reference is the module's).
    #[error("{}", .0.problem)]
    Fetch(OciError),
    /// The bundle was refused.
    #[error("{0}")]
    Refused(sigstore::Refused),
    /// It verified, but the cache cannot keep it.
    #[error(transparent)]
    Store(#[from] super::store::StoreError),
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Looks up the bundles of the module and checks each until one is accepted (`Ok(Some)`);
/// `Ok(None)` with the reasons when none was (or none is attached).
pub async fn verify(
    c: &Check<'_>,
    s: &mut Session,
) -> Result<Result<String, Vec<String>>, OciError> {
    let (found, listed) = bundles(s, c.digest).await?;
    if found.len() > c.settings.max_signature_layers {
        return Ok(Err(vec![format!(
            "{} Sigstore bundles are attached ({listed}), more than oci.maxSignatureLayers ({}); none was fetched",
            found.len(),
            c.settings.max_signature_layers
        )]));
    }
    let mut budget = c.settings.max_signature_bytes;
    let mut why = Vec::new();
    for d in found {
        let got = match s.get_manifest(&d.digest).await {
            Ok(Some((_, bytes))) => c.referrer(s, &d.digest, &bytes, &mut budget).await,
            Ok(None) => Err(ReferrerError::NotFound),
            Err(e) => Err(ReferrerError::Fetch(e)),
        };
        match got {
            Ok(signer) => return Ok(Ok(signer)),
            Err(e) => why.push(format!("bundle {} ({listed}): {e}", d.digest)),
        }
    }
    Ok(Err(why))
}

/// A keyed v0.3 bundle of `digest`, as cosign 3 signs an image: a DSSE envelope of an in-toto
/// statement (subject: the manifest digest; predicate type cosign's) signed with `key`.
pub fn keyed_bundle(
    key: &std::path::Path,
    repo_path: &str,
    digest: &str,
) -> Result<Vec<u8>, sign::SignError> {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    let statement = serde_json::to_vec(&serde_json::json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{ "name": repo_path, "digest": { "sha256": hex } }],
        "predicateType": COSIGN_SIGN_PREDICATE,
        "predicate": {},
    }))
    .map_err(sign::SignError::Encode)?;
    let (sig, spki) = sign::sign_der(key, &sigstore::pae(INTOTO_PAYLOAD, &statement))?;
    use sha2::Digest as _;
    serde_json::to_vec(&serde_json::json!({
        "mediaType": BUNDLE_V03,
        "verificationMaterial": {
            "publicKey": { "hint": b64(&sha2::Sha256::digest(&spki)) },
            "tlogEntries": [],
        },
        "dsseEnvelope": {
            "payload": b64(&statement),
            "payloadType": INTOTO_PAYLOAD,
            "signatures": [{ "sig": b64(&sig), "keyid": "" }],
        },
    }))
    .map_err(sign::SignError::Encode)
}

/// Attaches `bundle` to the manifest `subject` as a referrer; returns the referrer's digest.
pub async fn attach(
    s: &mut Session,
    subject: Descriptor,
    bundle: &[u8],
) -> Result<String, OciError> {
    let layer = s.put_blob(bundle, "Sigstore bundle").await?;
    let config = s.put_blob(b"{}", "empty config").await?;
    let mut annotations = BTreeMap::new();
    annotations.insert("dev.sigstore.bundle.content", "dsse-envelope");
    annotations.insert("dev.sigstore.bundle.predicateType", COSIGN_SIGN_PREDICATE);
    let body = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": manifest::OCI_MANIFEST,
        "artifactType": BUNDLE_V03,
        "config": { "mediaType": manifest::OCI_EMPTY, "digest": config, "size": 2 },
        "layers": [{ "mediaType": BUNDLE_V03, "digest": layer, "size": bundle.len() }],
        "subject": subject,
        "annotations": annotations,
    }))
    .map_err(|e| s.err(e.to_string()))?;
    let size = body.len();
    let digest = sha256_digest(&body);
    let (_, headers) = s.put_raw(body, manifest::OCI_MANIFEST, &digest).await?;
    if headers.get("oci-subject").is_none() {
        let mut d = Descriptor::new(manifest::OCI_MANIFEST, digest.clone(), size);
        d.artifact_type = Some(BUNDLE_V03.to_owned());
        add_to_tag_index(s, &subject.digest, d).await?;
    }
    Ok(digest)
}

/// Adds `d` to the referrers tag schema index of `subject` (made if missing).
async fn add_to_tag_index(s: &mut Session, subject: &str, d: Descriptor) -> Result<(), OciError> {
    let tag = tag_schema(subject);
    let mut index = match s.get_manifest(&tag).await? {
        Some((_, b)) => serde_json::from_slice::<serde_json::Value>(&b)
            .ok()
            .filter(|v| v["manifests"].is_array())
            .ok_or_else(|| {
                s.err(format!(
                    "the referrers tag {tag} holds something other than an image index"
                ))
            })?,
        None => serde_json::json!({
            "schemaVersion": 2,
            "mediaType": manifest::OCI_INDEX,
            "manifests": [],
        }),
    };
    let listed = index["manifests"]
        .as_array()
        .is_some_and(|m| m.iter().any(|x| x["digest"] == d.digest.as_str()));
    if !listed && let Some(m) = index["manifests"].as_array_mut() {
        m.push(serde_json::to_value(&d).map_err(|e| s.err(e.to_string()))?);
    }
    let body = serde_json::to_vec(&index).map_err(|e| s.err(e.to_string()))?;
    s.put_raw(body, manifest::OCI_INDEX, &tag).await?;
    Ok(())
}
