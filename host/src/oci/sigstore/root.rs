//! The trusted root (`dev.sigstore.trustroot.v1.TrustedRoot`, JSON form, as `cosign
//! trusted-root create` writes and Sigstore's TUF repository serves as `trusted_root.json`): the
//! Fulcio certificate chains and the Rekor log keys, each with the time range it is trusted in.
//! The operator supplies the file; nothing is fetched.

use std::path::Path;

use serde::Deserialize;

use super::SigstoreError;
use super::bundle::b64;

/// DER prefix of the SubjectPublicKeyInfo of an Ed25519 key; the 32-byte key follows.
const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// A time range in seconds since the epoch, both ends included (`end`: none, still valid).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    /// First second.
    pub start: i64,
    /// Last second, if it ended.
    pub end: Option<i64>,
}

impl Validity {
    /// Whether `t` lies in the range.
    pub fn contains(&self, t: i64) -> bool {
        t >= self.start && self.end.is_none_or(|e| t <= e)
    }
}

/// A transparency log key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogKey {
    /// `logId.keyId`: the SHA-256 of the key's DER.
    pub key_id: Vec<u8>,
    /// The log's URL, for messages.
    pub base_url: String,
    /// The key: an uncompressed P-256 point, or 32 Ed25519 bytes.
    key: Vec<u8>,
    /// Which of the two.
    ed25519: bool,
    /// When the key is trusted.
    pub valid: Validity,
}

impl LogKey {
    /// Whether `signature` over `message` verifies under this key.
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        use ring::signature::{ECDSA_P256_SHA256_ASN1, ED25519, UnparsedPublicKey};
        let alg: &dyn ring::signature::VerificationAlgorithm = if self.ed25519 {
            &ED25519
        } else {
            &ECDSA_P256_SHA256_ASN1
        };
        UnparsedPublicKey::new(alg, &self.key)
            .verify(message, signature)
            .is_ok()
    }
}

/// A certificate authority: its chain, intermediates first, root last.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authority {
    /// Its URI, for messages.
    pub uri: String,
    /// DER certificates, leaf-most first; the last is the trust anchor.
    pub chain: Vec<Vec<u8>>,
    /// When leaf certificates it issued are accepted.
    pub valid: Validity,
}

/// A trusted root: Fulcio authorities and Rekor keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustedRoot {
    /// The file it was read from.
    pub file: String,
    /// Fulcio's chains.
    pub authorities: Vec<Authority>,
    /// Rekor's keys.
    pub logs: Vec<LogKey>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRoot {
    media_type: String,
    #[serde(default)]
    tlogs: Vec<RawLog>,
    #[serde(default)]
    certificate_authorities: Vec<RawAuthority>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawLog {
    #[serde(default)]
    base_url: String,
    public_key: RawKey,
    log_id: RawLogId,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawLogId {
    key_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawKey {
    raw_bytes: String,
    key_details: String,
    valid_for: Option<RawValidity>,
}

#[derive(Deserialize)]
struct RawValidity {
    start: Option<String>,
    end: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawAuthority {
    #[serde(default)]
    uri: String,
    cert_chain: RawChain,
    valid_for: Option<RawValidity>,
}

#[derive(Deserialize)]
struct RawChain {
    certificates: Vec<RawCert>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawCert {
    raw_bytes: String,
}

/// Seconds since the epoch of an RFC 3339 time.
pub(super) fn seconds(what: &str, s: &str) -> Result<i64, SigstoreError> {
    s.parse::<k8s_openapi::jiff::Timestamp>()
        .map(|t| t.as_second())
        .map_err(|source| SigstoreError::Time {
            what: what.to_owned(),
            value: s.to_owned(),
            source,
        })
}

fn validity(what: &str, v: Option<&RawValidity>) -> Result<Validity, SigstoreError> {
    let start = v
        .and_then(|v| v.start.as_deref())
        .ok_or_else(|| SigstoreError::NoValidityStart(what.to_owned()))?;
    Ok(Validity {
        start: seconds(&format!("{what}.validFor.start"), start)?,
        end: match v.and_then(|v| v.end.as_deref()) {
            Some(e) => Some(seconds(&format!("{what}.validFor.end"), e)?),
            None => None,
        },
    })
}

fn log_key(i: usize, l: &RawLog) -> Result<LogKey, SigstoreError> {
    let what = format!("tlogs[{i}]");
    let der = b64(
        &format!("{what}.publicKey.rawBytes"),
        &l.public_key.raw_bytes,
    )?;
    let (key, ed25519) = match l.public_key.key_details.as_str() {
        "PKIX_ECDSA_P256_SHA_256" => (
            crate::oci::sign::p256_point(&der).ok_or_else(|| SigstoreError::LogKey {
                what: what.clone(),
                expected: "ECDSA P-256",
            })?,
            false,
        ),
        "PKIX_ED25519" => (
            der.strip_prefix(&ED25519_SPKI_PREFIX[..])
                .filter(|k| k.len() == 32)
                .ok_or_else(|| SigstoreError::LogKey {
                    what: what.clone(),
                    expected: "Ed25519",
                })?
                .to_vec(),
            true,
        ),
        other => {
            return Err(SigstoreError::LogKeyDetails {
                what,
                details: other.to_owned(),
            });
        }
    };
    Ok(LogKey {
        key_id: b64(&format!("{what}.logId.keyId"), &l.log_id.key_id)?,
        base_url: l.base_url.clone(),
        key,
        ed25519,
        valid: validity(
            &format!("{what}.publicKey"),
            l.public_key.valid_for.as_ref(),
        )?,
    })
}

fn authority(i: usize, a: &RawAuthority) -> Result<Authority, SigstoreError> {
    let what = format!("certificateAuthorities[{i}]");
    let chain = a
        .cert_chain
        .certificates
        .iter()
        .enumerate()
        .map(|(j, c)| b64(&format!("{what}.certChain.certificates[{j}]"), &c.raw_bytes))
        .collect::<Result<Vec<_>, _>>()?;
    if chain.is_empty() {
        return Err(SigstoreError::EmptyChain(what));
    }
    Ok(Authority {
        uri: a.uri.clone(),
        chain,
        valid: validity(&what, a.valid_for.as_ref())?,
    })
}

impl TrustedRoot {
    /// Reads a trusted root from `json`; `file` names it in errors.
    pub fn parse(file: &str, json: &[u8]) -> Result<Self, SigstoreError> {
        let raw: RawRoot =
            serde_json::from_slice(json).map_err(|source| SigstoreError::NotRoot {
                file: file.to_owned(),
                source,
            })?;
        if !raw
            .media_type
            .starts_with("application/vnd.dev.sigstore.trustedroot")
        {
            return Err(SigstoreError::RootMediaType {
                file: file.to_owned(),
                media_type: raw.media_type,
            });
        }
        let in_file = |e| SigstoreError::Root {
            file: file.to_owned(),
            source: Box::new(e),
        };
        let logs = (raw.tlogs.iter().enumerate())
            .map(|(i, l)| log_key(i, l))
            .collect::<Result<Vec<_>, _>>()
            .map_err(in_file)?;
        let authorities = (raw.certificate_authorities.iter().enumerate())
            .map(|(i, a)| authority(i, a))
            .collect::<Result<Vec<_>, _>>()
            .map_err(in_file)?;
        if logs.is_empty() || authorities.is_empty() {
            return Err(SigstoreError::RootIncomplete {
                file: file.to_owned(),
                logs: logs.len(),
                authorities: authorities.len(),
            });
        }
        Ok(Self {
            file: file.to_owned(),
            authorities,
            logs,
        })
    }

    /// Reads the trusted root file at `path`.
    pub fn load(path: &Path) -> Result<Self, SigstoreError> {
        let bytes = std::fs::read(path).map_err(|source| SigstoreError::ReadRoot {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&path.display().to_string(), &bytes)
    }

    /// The log key of id `key_id`.
    pub fn log(&self, key_id: &[u8]) -> Option<&LogKey> {
        self.logs.iter().find(|l| l.key_id == key_id)
    }
}
