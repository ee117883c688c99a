//! [`SigstoreError`]: what is wrong in a bundle, a trusted root, a leaf certificate or an
//! identity pattern. None is retryable: each names bytes that will not change.

use std::path::PathBuf;

/// A bundle, trusted root, certificate or identity pattern that cannot be read or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SigstoreError {
    /// The bundle is not JSON of a bundle's shape.
    #[error("not a Sigstore bundle: {0}")]
    NotBundle(#[source] serde_json::Error),
    /// A bundle media type other than v0.1, v0.2, v0.3.
    #[error("bundle media type {0:?} is not one read (v0.1, v0.2, v0.3)")]
    BundleMediaType(String),
    /// Neither or both of the two kinds of content.
    #[error("the bundle holds neither or both of messageSignature and dsseEnvelope")]
    Content,
    /// A transparency log entry that does not read.
    #[error("tlogEntries[{index}]: {source}")]
    TlogEntry {
        /// Its index in `tlogEntries`.
        index: usize,
        /// What is wrong in it.
        #[source]
        source: Box<SigstoreError>,
    },
    /// A v0.2+ bundle's entry without an inclusion proof.
    #[error("tlogEntries[{0}]: no inclusion proof (required from bundle v0.2 on)")]
    NoInclusionProof(usize),
    /// An empty certificate chain in the verification material.
    #[error("verificationMaterial.x509CertificateChain has no certificate")]
    NoChainCertificate,
    /// A v0.3 `certificate` in an earlier bundle.
    #[error("verificationMaterial.certificate is a v0.3 field; this bundle is an earlier version")]
    CertificateBeforeV03,
    /// Not exactly one kind of verification material.
    #[error(
        "verificationMaterial must hold exactly one of certificate, x509CertificateChain, publicKey"
    )]
    Material,
    /// A message digest other than SHA-256.
    #[error("messageSignature.messageDigest.algorithm {0:?} (only SHA2_256 is read)")]
    DigestAlgorithm(String),
    /// A DSSE envelope without exactly one signature.
    #[error("dsseEnvelope has {0} signatures; a bundle's envelope has exactly one")]
    DsseSignatures(usize),
    /// A negative log index.
    #[error("logIndex {0} is negative")]
    NegativeLogIndex(i64),
    /// A field that is not base64.
    #[error("{what} is not base64: {source}")]
    Base64 {
        /// The field.
        what: String,
        /// The decoder's complaint.
        #[source]
        source: base64::DecodeError,
    },
    /// A field that is not a non-negative integer.
    #[error("{what} {value:?} is not a non-negative integer")]
    Integer {
        /// The field.
        what: String,
        /// Its text.
        value: String,
    },
    /// A field that is not an RFC 3339 time.
    #[error("{what} {value:?} is not an RFC 3339 time: {source}")]
    Time {
        /// The field.
        what: String,
        /// Its text.
        value: String,
        /// The parser's complaint.
        #[source]
        source: k8s_openapi::jiff::Error,
    },
    /// A validity period without a start (`what` is the field holding it).
    #[error("{0}.validFor.start is missing")]
    NoValidityStart(String),
    /// A log key that is not of the type its `keyDetails` says.
    #[error("{what}.publicKey: not an {expected} key")]
    LogKey {
        /// The log (`tlogs[0]`).
        what: String,
        /// `ECDSA P-256` or `Ed25519`.
        expected: &'static str,
    },
    /// A log key type not verified.
    #[error(
        "{what}.publicKey.keyDetails {details:?}: only PKIX_ECDSA_P256_SHA_256 and PKIX_ED25519 log keys are verified"
    )]
    LogKeyDetails {
        /// The log (`tlogs[0]`).
        what: String,
        /// The `keyDetails` given.
        details: String,
    },
    /// An authority without a certificate.
    #[error("{0}.certChain has no certificate")]
    EmptyChain(String),
    /// The trusted root file cannot be read.
    #[error("trusted root {}: cannot read: {source}", path.display())]
    ReadRoot {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The trusted root is not JSON of a trusted root's shape.
    #[error("trusted root {file}: not a trusted root JSON: {source}")]
    NotRoot {
        /// The file.
        file: String,
        /// The parser's complaint.
        #[source]
        source: serde_json::Error,
    },
    /// A trusted root whose media type is not Sigstore's.
    #[error("trusted root {file}: mediaType {media_type:?} is not a Sigstore trusted root")]
    RootMediaType {
        /// The file.
        file: String,
        /// The media type given.
        media_type: String,
    },
    /// A field of the trusted root that does not read.
    #[error("trusted root {file}: {source}")]
    Root {
        /// The file.
        file: String,
        /// What is wrong.
        #[source]
        source: Box<SigstoreError>,
    },
    /// A trusted root without logs or without authorities.
    #[error(
        "trusted root {file}: needs at least one of tlogs and of certificateAuthorities (has {logs} and {authorities})"
    )]
    RootIncomplete {
        /// The file.
        file: String,
        /// Logs it has.
        logs: usize,
        /// Authorities it has.
        authorities: usize,
    },
    /// A leaf webpki cannot use.
    #[error("the leaf certificate is not a usable X.509 certificate: {0}")]
    LeafUnusable(#[source] webpki::Error),
    /// A leaf that is not DER (der's errors, without `std`, are not a `#[source]`).
    #[error("the leaf certificate is not DER X.509: {0}")]
    LeafDer(x509_cert::der::Error),
    /// A subject alternative name that is not DER.
    #[error("the leaf's subject alternative name is not DER: {0}")]
    SanDer(x509_cert::der::Error),
    /// An OIDC issuer extension (v2) that is not a UTF8String.
    #[error("the leaf's issuer extension ({oid}) is not a UTF8String: {cause}")]
    IssuerExtension {
        /// The extension's OID.
        oid: &'static str,
        /// The decoder's complaint (der, built without `std`, is no `std::error::Error`).
        cause: x509_cert::der::Error,
    },
    /// No authority of the root is valid at the Rekor time.
    #[error("no certificate authority of {file} is trusted at {at}")]
    NoAuthorityAt {
        /// The trusted root file.
        file: String,
        /// The Rekor time.
        at: i64,
    },
    /// The leaf chains to none of the authorities valid at the Rekor time.
    #[error(
        "the leaf does not chain to a trusted Fulcio authority at {at} (the Rekor time): {}",
        why.join("; ")
    )]
    Untrusted {
        /// The Rekor time.
        at: i64,
        /// Per authority: its URI and why.
        why: Vec<String>,
    },
    /// An identity pattern that is not a regular expression.
    #[error("not a regular expression: {0}")]
    Regex(#[source] regex::Error),
}
