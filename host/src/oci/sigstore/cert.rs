//! Fulcio certificates: the chain to a trusted root's authority at a given time (webpki, the
//! verifier rustls uses, with the code-signing EKU), and the identity Fulcio wrote into the leaf
//! (x509-cert reads the extensions webpki does not expose).

use rustls::pki_types::{CertificateDer, UnixTime};
use webpki::{EndEntityCert, KeyUsage};
use x509_cert::der::Decode;
use x509_cert::der::asn1::Utf8StringRef;
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::ext::pkix::name::GeneralName;

use super::SigstoreError;
use super::root::TrustedRoot;

/// id-kp-codeSigning (1.3.6.1.5.5.7.3.3), DER content of the OID.
const CODE_SIGNING: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x03];
/// Fulcio's OIDC issuer extension, v1 (raw bytes): 1.3.6.1.4.1.57264.1.1.
const ISSUER_V1: &str = "1.3.6.1.4.1.57264.1.1";
/// Fulcio's OIDC issuer extension, v2 (a DER UTF8String): 1.3.6.1.4.1.57264.1.8.
const ISSUER_V2: &str = "1.3.6.1.4.1.57264.1.8";
/// Subject alternative name.
const SAN: &str = "2.5.29.17";

/// Signature algorithms of Fulcio chains and leaves.
static ALGS: &[&dyn rustls::pki_types::SignatureVerificationAlgorithm] = &[
    webpki::ring::ECDSA_P256_SHA256,
    webpki::ring::ECDSA_P256_SHA384,
    webpki::ring::ECDSA_P384_SHA256,
    webpki::ring::ECDSA_P384_SHA384,
    webpki::ring::ED25519,
    webpki::ring::RSA_PKCS1_2048_8192_SHA256,
    webpki::ring::RSA_PKCS1_2048_8192_SHA384,
    webpki::ring::RSA_PKCS1_2048_8192_SHA512,
];

/// What Fulcio certified: the subject alternative names and the OIDC issuer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// URIs and email addresses of the SAN (a workflow URI, an email, a SPIFFE id).
    pub names: Vec<String>,
    /// The OIDC issuer (v2 extension, else v1).
    pub issuer: Option<String>,
}

/// Checks that `leaf` chains to an authority of `root` trusted at `at` (the Rekor integrated
/// time: Fulcio leaves live about ten minutes), with the code-signing EKU, and was valid then.
/// Returns the authority's URI.
pub fn verify_chain(leaf: &[u8], root: &TrustedRoot, at: i64) -> Result<String, SigstoreError> {
    let leaf_der = CertificateDer::from(leaf);
    let ee = EndEntityCert::try_from(&leaf_der).map_err(SigstoreError::LeafUnusable)?;
    let time = UnixTime::since_unix_epoch(std::time::Duration::from_secs(
        u64::try_from(at).unwrap_or(0),
    ));
    let mut why = Vec::new();
    for a in root.authorities.iter().filter(|a| a.valid.contains(at)) {
        let Some((anchor, inter)) = a.chain.split_last() else {
            continue;
        };
        let anchor_der = CertificateDer::from(anchor.as_slice());
        let anchor = match webpki::anchor_from_trusted_cert(&anchor_der) {
            Ok(t) => t,
            Err(e) => {
                why.push(format!("{}: its root is not usable: {e}", a.uri));
                continue;
            }
        };
        let inter: Vec<CertificateDer> = inter
            .iter()
            .map(|c| CertificateDer::from(c.as_slice()))
            .collect();
        match ee.verify_for_usage(
            ALGS,
            &[anchor],
            &inter,
            time,
            KeyUsage::required(CODE_SIGNING),
            None,
            None,
        ) {
            Ok(_) => return Ok(a.uri.clone()),
            Err(e) => why.push(format!("{}: {e}", a.uri)),
        }
    }
    if why.is_empty() {
        return Err(SigstoreError::NoAuthorityAt {
            file: root.file.clone(),
            at,
        });
    }
    Err(SigstoreError::Untrusted { at, why })
}

/// Whether `signature` over `message` verifies under the leaf's key.
pub fn verifies(leaf: &[u8], message: &[u8], signature: &[u8]) -> bool {
    let der = CertificateDer::from(leaf);
    let Ok(ee) = EndEntityCert::try_from(&der) else {
        return false;
    };
    ALGS.iter()
        .any(|a| ee.verify_signature(*a, message, signature).is_ok())
}

/// The identity in `leaf`.
pub fn identity(leaf: &[u8]) -> Result<Identity, SigstoreError> {
    let c = x509_cert::Certificate::from_der(leaf).map_err(SigstoreError::LeafDer)?;
    let mut id = Identity {
        names: Vec::new(),
        issuer: None,
    };
    let mut v1 = None;
    for e in c.tbs_certificate.extensions.iter().flatten() {
        let oid = e.extn_id.to_string();
        let bytes = e.extn_value.as_bytes();
        if oid == SAN {
            let san = SubjectAltName::from_der(bytes).map_err(SigstoreError::SanDer)?;
            for n in san.0 {
                match n {
                    GeneralName::UniformResourceIdentifier(s) | GeneralName::Rfc822Name(s) => {
                        id.names.push(s.to_string());
                    }
                    GeneralName::OtherName(o) => {
                        if let Ok(s) = o.value.decode_as::<Utf8StringRef>() {
                            id.names.push(s.as_str().to_owned());
                        }
                    }
                    _ => {}
                }
            }
        } else if oid == ISSUER_V2 {
            let s =
                Utf8StringRef::from_der(bytes).map_err(|cause| SigstoreError::IssuerExtension {
                    oid: ISSUER_V2,
                    cause,
                })?;
            id.issuer = Some(s.as_str().to_owned());
        } else if oid == ISSUER_V1 {
            v1 = Some(String::from_utf8_lossy(bytes).into_owned());
        }
    }
    if id.issuer.is_none() {
        id.issuer = v1;
    }
    Ok(id)
}
