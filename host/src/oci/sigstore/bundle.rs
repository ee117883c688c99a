//! The Sigstore bundle (protobuf-specs `dev.sigstore.bundle.v1.Bundle`, JSON form): what it
//! holds, read into plain types; every versioned rule of the format checked here, so that
//! verification sees one shape for v0.1, v0.2 and v0.3.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

use super::SigstoreError;

/// Media types of the bundle versions read (v0.3 has two spellings).
const MEDIA_TYPES: [(&str, Version); 4] = [
    (
        "application/vnd.dev.sigstore.bundle+json;version=0.1",
        Version::V01,
    ),
    (
        "application/vnd.dev.sigstore.bundle+json;version=0.2",
        Version::V02,
    ),
    (
        "application/vnd.dev.sigstore.bundle+json;version=0.3",
        Version::V03,
    ),
    (
        "application/vnd.dev.sigstore.bundle.v0.3+json",
        Version::V03,
    ),
];

/// A bundle version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// v0.1: a certificate chain or a key; Rekor entries need a promise (SET), not a proof.
    V01,
    /// v0.2: every Rekor entry carries an inclusion proof.
    V02,
    /// v0.3: one leaf certificate (no chain) or a key; inclusion proofs as v0.2.
    V03,
}

/// Who signed: a certificate (keyless) or a key the verifier must already have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Material {
    /// The leaf certificate's DER (v0.1/v0.2 chains: their first certificate; the rest is
    /// ignored, the chain comes from the trusted root).
    Certificate(Vec<u8>),
    /// A key, named only by a hint: the configured keys are tried.
    PublicKey,
}

/// What was signed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    /// A signature over the artifact's bytes, with the artifact's SHA-256.
    Message {
        /// `messageDigest.digest` (SHA2_256 only).
        digest: Vec<u8>,
        /// The signature.
        signature: Vec<u8>,
    },
    /// A DSSE envelope with one signature.
    Dsse {
        /// `payloadType`.
        payload_type: String,
        /// The payload bytes.
        payload: Vec<u8>,
        /// The signature over PAE(payloadType, payload).
        signature: Vec<u8>,
    },
}

/// An inclusion proof of an entry in a Rekor log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InclusionProof {
    /// The entry's index in the tree proven (Rekor's shard-local index).
    pub log_index: u64,
    /// The root hash proven to.
    pub root_hash: Vec<u8>,
    /// The size of that tree.
    pub tree_size: u64,
    /// The audit path, leaf to root.
    pub hashes: Vec<Vec<u8>>,
    /// The signed note (checkpoint) of that root (none: the proof is refused).
    pub checkpoint: Option<String>,
}

/// A Rekor transparency log entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlogEntry {
    /// The log's index of the entry (what the SET signs).
    pub log_index: i64,
    /// The log's id: SHA-256 of its public key.
    pub log_id: Vec<u8>,
    /// `kind` and `version` of the entry.
    pub kind: (String, String),
    /// Seconds since the epoch the log says it integrated the entry (0: none, Rekor v2).
    pub integrated_time: i64,
    /// The signed entry timestamp, if any.
    pub set: Option<Vec<u8>>,
    /// The inclusion proof, if any.
    pub proof: Option<InclusionProof>,
    /// The canonical entry body (JSON) as the log stored it.
    pub body: Vec<u8>,
}

/// A bundle, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle {
    /// Its version.
    pub version: Version,
    /// Who signed.
    pub material: Material,
    /// What was signed.
    pub content: Content,
    /// Its Rekor entries.
    pub tlog: Vec<TlogEntry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawBundle {
    media_type: String,
    verification_material: RawMaterial,
    #[serde(default)]
    message_signature: Option<RawMessage>,
    #[serde(default)]
    dsse_envelope: Option<RawDsse>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMaterial {
    #[serde(default)]
    certificate: Option<RawCert>,
    #[serde(default)]
    x509_certificate_chain: Option<RawChain>,
    #[serde(default)]
    public_key: Option<serde_json::Value>,
    #[serde(default)]
    tlog_entries: Vec<RawEntry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawCert {
    raw_bytes: String,
}

#[derive(Deserialize)]
struct RawChain {
    #[serde(default)]
    certificates: Vec<RawCert>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMessage {
    message_digest: RawDigest,
    signature: String,
}

#[derive(Deserialize)]
struct RawDigest {
    algorithm: String,
    digest: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawDsse {
    payload: String,
    payload_type: String,
    signatures: Vec<RawDsseSig>,
}

#[derive(Deserialize)]
struct RawDsseSig {
    sig: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEntry {
    log_index: String,
    log_id: RawLogId,
    kind_version: RawKindVersion,
    #[serde(default)]
    integrated_time: Option<String>,
    #[serde(default)]
    inclusion_promise: Option<RawPromise>,
    #[serde(default)]
    inclusion_proof: Option<RawProof>,
    canonicalized_body: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawLogId {
    key_id: String,
}

#[derive(Deserialize)]
struct RawKindVersion {
    kind: String,
    version: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawPromise {
    signed_entry_timestamp: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawProof {
    log_index: String,
    root_hash: String,
    tree_size: String,
    #[serde(default)]
    hashes: Vec<String>,
    #[serde(default)]
    checkpoint: Option<RawCheckpoint>,
}

#[derive(Deserialize)]
struct RawCheckpoint {
    envelope: String,
}

/// Base64 of field `what`, decoded.
pub(super) fn b64(what: &str, s: &str) -> Result<Vec<u8>, SigstoreError> {
    STANDARD
        .decode(s.trim())
        .map_err(|source| SigstoreError::Base64 {
            what: what.to_owned(),
            source,
        })
}

fn int<T: std::str::FromStr>(what: &str, s: &str) -> Result<T, SigstoreError> {
    s.parse().map_err(|_| SigstoreError::Integer {
        what: what.to_owned(),
        value: s.to_owned(),
    })
}

impl Bundle {
    /// Reads a bundle from its JSON, refusing unknown versions and what a version forbids.
    pub fn parse(json: &[u8]) -> Result<Self, SigstoreError> {
        let raw: RawBundle = serde_json::from_slice(json).map_err(SigstoreError::NotBundle)?;
        let version = MEDIA_TYPES
            .iter()
            .find(|(m, _)| *m == raw.media_type)
            .map(|(_, v)| *v)
            .ok_or_else(|| SigstoreError::BundleMediaType(raw.media_type.clone()))?;
        let material = material(version, &raw.verification_material)?;
        let content = match (raw.message_signature, raw.dsse_envelope) {
            (Some(m), None) => message(&m)?,
            (None, Some(d)) => dsse(&d)?,
            _ => return Err(SigstoreError::Content),
        };
        let tlog = raw
            .verification_material
            .tlog_entries
            .iter()
            .enumerate()
            .map(|(index, e)| {
                entry(e).map_err(|m| SigstoreError::TlogEntry {
                    index,
                    source: Box::new(m),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if version != Version::V01
            && let Some(i) = tlog.iter().position(|e| e.proof.is_none())
        {
            return Err(SigstoreError::NoInclusionProof(i));
        }
        Ok(Self {
            version,
            material,
            content,
            tlog,
        })
    }
}

fn material(version: Version, m: &RawMaterial) -> Result<Material, SigstoreError> {
    match (&m.certificate, &m.x509_certificate_chain, &m.public_key) {
        (Some(c), None, None) if version == Version::V03 => Ok(Material::Certificate(b64(
            "verificationMaterial.certificate.rawBytes",
            &c.raw_bytes,
        )?)),
        (None, Some(chain), None) => {
            let first = (chain.certificates.first()).ok_or(SigstoreError::NoChainCertificate)?;
            Ok(Material::Certificate(b64(
                "verificationMaterial.x509CertificateChain.certificates[0].rawBytes",
                &first.raw_bytes,
            )?))
        }
        (None, None, Some(_)) => Ok(Material::PublicKey),
        (Some(_), None, None) => Err(SigstoreError::CertificateBeforeV03),
        _ => Err(SigstoreError::Material),
    }
}

fn message(m: &RawMessage) -> Result<Content, SigstoreError> {
    if m.message_digest.algorithm != "SHA2_256" {
        return Err(SigstoreError::DigestAlgorithm(
            m.message_digest.algorithm.clone(),
        ));
    }
    Ok(Content::Message {
        digest: b64(
            "messageSignature.messageDigest.digest",
            &m.message_digest.digest,
        )?,
        signature: b64("messageSignature.signature", &m.signature)?,
    })
}

fn dsse(d: &RawDsse) -> Result<Content, SigstoreError> {
    let [sig] = d.signatures.as_slice() else {
        return Err(SigstoreError::DsseSignatures(d.signatures.len()));
    };
    Ok(Content::Dsse {
        payload_type: d.payload_type.clone(),
        payload: b64("dsseEnvelope.payload", &d.payload)?,
        signature: b64("dsseEnvelope.signatures[0].sig", &sig.sig)?,
    })
}

fn entry(e: &RawEntry) -> Result<TlogEntry, SigstoreError> {
    let proof = match &e.inclusion_proof {
        None => None,
        Some(p) => Some(InclusionProof {
            log_index: int("inclusionProof.logIndex", &p.log_index)?,
            root_hash: b64("inclusionProof.rootHash", &p.root_hash)?,
            tree_size: int("inclusionProof.treeSize", &p.tree_size)?,
            hashes: p
                .hashes
                .iter()
                .map(|h| b64("inclusionProof.hashes", h))
                .collect::<Result<_, _>>()?,
            checkpoint: p.checkpoint.as_ref().map(|c| c.envelope.clone()),
        }),
    };
    let log_index: i64 = int("logIndex", &e.log_index)?;
    if log_index < 0 {
        return Err(SigstoreError::NegativeLogIndex(log_index));
    }
    Ok(TlogEntry {
        log_index,
        log_id: b64("logId.keyId", &e.log_id.key_id)?,
        kind: (e.kind_version.kind.clone(), e.kind_version.version.clone()),
        integrated_time: match &e.integrated_time {
            Some(t) => int("integratedTime", t)?,
            None => 0,
        },
        set: match &e.inclusion_promise {
            Some(p) => Some(b64(
                "inclusionPromise.signedEntryTimestamp",
                &p.signed_entry_timestamp,
            )?),
            None => None,
        },
        proof,
        body: b64("canonicalizedBody", &e.canonicalized_body)?,
    })
}
