//! cosign-style "simple signing" signatures, checked and made with ring (ECDSA P-256, SHA-256).
//!
//! The signature of the manifest `sha256:HEX` of `REGISTRY/REPO` is the manifest tagged
//! `sha256-HEX.sig` in the same repository. Each of its layers of media type
//! `application/vnd.dev.cosign.simplesigning.v1+json` is a payload:
//!
//! ```json
//! {"critical":{"identity":{"docker-reference":"REGISTRY/REPO"},
//!              "image":{"docker-manifest-digest":"sha256:HEX"},
//!              "type":"cosign container image signature"},"optional":null}
//! ```
//!
//! and the annotation `dev.cosignproject.cosign/signature` holds the base64 of an ASN.1 DER
//! ECDSA P-256 SHA-256 signature over the payload bytes. A module is accepted when one layer's
//! blob has its digest, its payload names the module's manifest digest, and its signature
//! verifies under one of the configured public keys.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::signature::{ECDSA_P256_SHA256_ASN1, UnparsedPublicKey};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{PrivatePkcs8KeyDer, SubjectPublicKeyInfoDer};

/// The `type` of a cosign signature payload.
pub const COSIGN_TYPE: &str = "cosign container image signature";

/// DER prefix of a SubjectPublicKeyInfo of an uncompressed P-256 key (id-ecPublicKey,
/// prime256v1, BIT STRING of 66 bytes); the 65-byte point follows.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// A public key signatures are checked against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicKey {
    /// The file it was read from (named in errors and logs).
    pub file: PathBuf,
    /// The uncompressed EC point.
    point: Vec<u8>,
}

/// A key that cannot be used, or a signature that is refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SignError {
    /// A public key file that is not PEM `PUBLIC KEY`.
    #[error("signature key {}: not a PEM PUBLIC KEY: {source}", path.display())]
    PublicKeyPem {
        /// The file.
        path: PathBuf,
        /// The reader's complaint.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// A public key of another kind than ECDSA P-256.
    #[error(
        "signature key {}: not an ECDSA P-256 public key (the only kind verified)",
        .0.display()
    )]
    NotP256Public(PathBuf),
    /// A signature payload that is not JSON.
    #[error("payload is not JSON: {0}")]
    PayloadJson(#[source] serde_json::Error),
    /// A payload of another type than cosign's (the type as JSON text).
    #[error("payload type is {0}, not {COSIGN_TYPE:?}")]
    PayloadType(String),
    /// A payload that signs another manifest.
    #[error("payload signs manifest {named:?}, not this module's {digest}")]
    OtherManifest {
        /// The manifest the payload names.
        named: String,
        /// The module's manifest.
        digest: String,
    },
    /// A signature annotation that is not base64.
    #[error("signature annotation is not base64: {0}")]
    SignatureBase64(#[source] base64::DecodeError),
    /// A signature no configured key verifies.
    #[error(
        "signature does not verify under any configured key ({})",
        .0.iter().map(|k| k.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    NoKey(Vec<PathBuf>),
    /// A private key file that is not PEM PKCS#8.
    #[error(
        "signing key {}: not a PEM PRIVATE KEY (PKCS#8; encrypted cosign keys are not read): {source}",
        path.display()
    )]
    PrivateKeyPem {
        /// The file.
        path: PathBuf,
        /// The reader's complaint.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// A private key of another kind than ECDSA P-256.
    #[error("signing key {}: not an ECDSA P-256 key: {why}", path.display())]
    NotP256Private {
        /// The file.
        path: PathBuf,
        /// ring's reason.
        why: ring::error::KeyRejected,
    },
    /// A JSON document (a bundle, a statement) could not be written.
    #[error("{0}")]
    Encode(#[source] serde_json::Error),
    /// ring could not sign.
    #[error("signing: {0}")]
    Signing(ring::error::Unspecified),
}

impl PublicKey {
    /// Reads a PEM `PUBLIC KEY` (SubjectPublicKeyInfo) of an ECDSA P-256 key, as
    /// `cosign generate-key-pair` writes `cosign.pub` and `openssl pkey -pubout` writes.
    pub fn load(path: &Path) -> Result<Self, SignError> {
        let der = SubjectPublicKeyInfoDer::from_pem_file(path).map_err(|source| {
            SignError::PublicKeyPem {
                path: path.to_owned(),
                source,
            }
        })?;
        match p256_point(der.as_ref()) {
            Some(point) => Ok(Self {
                file: path.to_owned(),
                point,
            }),
            None => Err(SignError::NotP256Public(path.to_owned())),
        }
    }

    /// Whether `signature` (ASN.1 DER ECDSA) over `payload` verifies under this key.
    pub fn verifies(&self, payload: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &self.point)
            .verify(payload, signature)
            .is_ok()
    }
}

impl PublicKey {
    /// The key's SubjectPublicKeyInfo DER (what a Rekor entry records of a keyed signer).
    pub fn spki_der(&self) -> Vec<u8> {
        let mut der = P256_SPKI_PREFIX.to_vec();
        der.extend_from_slice(&self.point);
        der
    }
}

/// The uncompressed point of a P-256 SubjectPublicKeyInfo DER, if it is one.
pub fn p256_point(spki: &[u8]) -> Option<Vec<u8>> {
    spki.strip_prefix(&P256_SPKI_PREFIX[..])
        .filter(|p| p.len() == 65 && p[0] == 4)
        .map(<[u8]>::to_vec)
}

/// The tag cosign keeps the signature of `manifest_digest` (`sha256:HEX`) under:
/// `sha256-HEX.sig`, in the same repository.
pub fn signature_tag(manifest_digest: &str) -> String {
    let hex = manifest_digest
        .strip_prefix("sha256:")
        .unwrap_or(manifest_digest);
    format!("sha256-{hex}.sig")
}

/// The payload signed for `manifest_digest` of `repo_path` (`REGISTRY/REPO`).
pub fn payload(repo_path: &str, manifest_digest: &str) -> Vec<u8> {
    serde_json::json!({
        "critical": {
            "identity": { "docker-reference": repo_path },
            "image": { "docker-manifest-digest": manifest_digest },
            "type": COSIGN_TYPE,
        },
        "optional": null,
    })
    .to_string()
    .into_bytes()
}

/// Checks one signature layer: its payload (already checked against its blob digest) names
/// `manifest_digest`, and `signature_b64` verifies under one of `keys`. Returns the key file that
/// verified it.
pub fn verify(
    keys: &[PublicKey],
    payload: &[u8],
    signature_b64: &str,
    manifest_digest: &str,
) -> Result<PathBuf, SignError> {
    let v: serde_json::Value = serde_json::from_slice(payload).map_err(SignError::PayloadJson)?;
    let critical = &v["critical"];
    if critical["type"].as_str() != Some(COSIGN_TYPE) {
        return Err(SignError::PayloadType(critical["type"].to_string()));
    }
    let named = critical["image"]["docker-manifest-digest"]
        .as_str()
        .unwrap_or("");
    if named != manifest_digest {
        return Err(SignError::OtherManifest {
            named: named.to_owned(),
            digest: manifest_digest.to_owned(),
        });
    }
    let sig = STANDARD
        .decode(signature_b64.trim())
        .map_err(SignError::SignatureBase64)?;
    keys.iter()
        .find(|k| k.verifies(payload, &sig))
        .map(|k| k.file.clone())
        .ok_or_else(|| SignError::NoKey(keys.iter().map(|k| k.file.clone()).collect()))
}

/// Signs `payload` with a PEM PKCS#8 ECDSA P-256 private key (`openssl genpkey -algorithm EC
/// -pkeyopt ec_paramgen_curve:P-256`); returns the base64 DER signature.
pub fn sign(key_file: &Path, payload: &[u8]) -> Result<String, SignError> {
    sign_der(key_file, payload).map(|(sig, _)| STANDARD.encode(sig))
}

/// [`sign`], returning the DER signature and the key's SubjectPublicKeyInfo DER.
pub fn sign_der(key_file: &Path, payload: &[u8]) -> Result<(Vec<u8>, Vec<u8>), SignError> {
    use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair as _};
    let der =
        PrivatePkcs8KeyDer::from_pem_file(key_file).map_err(|source| SignError::PrivateKeyPem {
            path: key_file.to_owned(),
            source,
        })?;
    let rng = ring::rand::SystemRandom::new();
    let pair = EcdsaKeyPair::from_pkcs8(
        &ECDSA_P256_SHA256_ASN1_SIGNING,
        der.secret_pkcs8_der(),
        &rng,
    )
    .map_err(|why| SignError::NotP256Private {
        path: key_file.to_owned(),
        why,
    })?;
    let sig = pair.sign(&rng, payload).map_err(SignError::Signing)?;
    let mut spki = P256_SPKI_PREFIX.to_vec();
    spki.extend_from_slice(pair.public_key().as_ref());
    Ok((sig.as_ref().to_vec(), spki))
}
