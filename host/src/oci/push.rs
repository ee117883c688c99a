//! `wisp push`: a module published in the current wasm convention (CNCF TAG Runtime "wasm OCI
//! artifact"): config `application/vnd.wasm.config.v0+json`, one `application/wasm` layer, an
//! OCI image manifest; optionally signed cosign-style.

use std::collections::BTreeMap;
use std::path::Path;

use super::client::{Session, Transport};
use super::manifest::{self, Descriptor, Manifest};
use super::reference::Reference;
use super::{OciError, Settings, sign};

/// What a push made.
#[derive(Clone, Debug)]
pub struct Pushed {
    /// The manifest's digest.
    pub digest: String,
    /// The digest of the Sigstore bundle attached as a referrer, when signed.
    pub bundle: Option<String>,
    /// The legacy signature's tag, when asked for.
    pub signature_tag: Option<String>,
}

async fn put_manifest(s: &mut Session, m: &Manifest, tag: &str) -> Result<String, OciError> {
    let body = serde_json::to_vec(m).map_err(|e| s.err(e.to_string()))?;
    s.put_raw(body, manifest::OCI_MANIFEST, tag)
        .await
        .map(|(d, _)| d)
}

/// How `wisp push` signs.
#[derive(Clone, Copy, Debug)]
pub struct Signing<'a> {
    /// The PEM PKCS#8 ECDSA P-256 private key.
    pub key: &'a Path,
    /// Also write the legacy cosign `sha256-HEX.sig` signature (for cosign 2 and older
    /// verifiers).
    pub legacy: bool,
}

/// Publishes `module` at `reference` (a tag), signing it if asked: a keyed Sigstore bundle
/// (v0.3) attached as a referrer, and the legacy signature if asked too.
pub async fn push(
    settings: &Settings,
    module: &[u8],
    reference: &Reference,
    signing: Option<Signing<'_>>,
) -> Result<Pushed, OciError> {
    let Some(tag) = reference.tag.clone().filter(|_| reference.digest.is_none()) else {
        return Err(OciError::new(
            reference,
            "push needs a tag (oci://REGISTRY/REPO:TAG), not a digest",
        ));
    };
    if !module.starts_with(b"\0asm") {
        return Err(OciError::new(
            reference,
            "the file is not WebAssembly (no \\0asm header)",
        ));
    }
    // A component's layer byte: 0x0d 0x00 0x01 0x00 after the magic; a core module is wasip1.
    let os = if module.get(4..8) == Some(&[0x0d, 0x00, 0x01, 0x00]) {
        "wasip2"
    } else {
        "wasip1"
    };
    let t = Transport::new(settings.shared()).map_err(|e| OciError::new(reference, e))?;
    let mut s = Session::new(
        t,
        &reference.registry,
        &reference.repository,
        reference.to_string(),
    );
    let layer_digest = s.put_blob(module, "module").await?;
    let config = serde_json::to_vec(&serde_json::json!({
        "created": crate::policy::rfc3339(std::time::SystemTime::now()),
        "architecture": "wasm",
        "os": os,
        "layerDigests": [layer_digest],
    }))
    .map_err(|e| s.err(e.to_string()))?;
    let config_digest = s.put_blob(&config, "config").await?;
    let m = one_layer(
        Descriptor::new(manifest::WASM_CONFIG_V0, config_digest, config.len()),
        Descriptor::new(manifest::WASM_LAYER, layer_digest, module.len()),
    );
    let body = serde_json::to_vec(&m).map_err(|e| s.err(e.to_string()))?;
    let size = body.len();
    let (digest, _) = s.put_raw(body, manifest::OCI_MANIFEST, &tag).await?;
    match signing {
        Some(signing) => sign_manifest(&mut s, reference, digest, size, signing).await,
        None => Ok(Pushed {
            digest,
            bundle: None,
            signature_tag: None,
        }),
    }
}

/// Signs the manifest `REGISTRY/REPO@sha256:...` already in the registry, as `push` signs
/// what it pushed (another signer's bundle is added beside those there).
pub async fn sign(
    settings: &Settings,
    reference: &Reference,
    signing: Signing<'_>,
) -> Result<Pushed, OciError> {
    let Some(digest) = reference.digest.clone() else {
        return Err(OciError::new(
            reference,
            "signing needs a digest (oci://REGISTRY/REPO@sha256:...)",
        ));
    };
    let t = Transport::new(settings.shared()).map_err(|e| OciError::new(reference, e))?;
    let mut s = Session::new(
        t,
        &reference.registry,
        &reference.repository,
        reference.to_string(),
    );
    let (_, bytes) = s
        .get_manifest(&digest)
        .await?
        .ok_or_else(|| s.err(format!("manifest {digest} not found")))?;
    sign_manifest(&mut s, reference, digest, bytes.len(), signing).await
}

/// Attaches a keyed bundle of `digest` (`size` bytes), and the legacy signature if asked.
async fn sign_manifest(
    s: &mut Session,
    reference: &Reference,
    digest: String,
    size: usize,
    signing: Signing<'_>,
) -> Result<Pushed, OciError> {
    let bundle = super::referrers::keyed_bundle(signing.key, &reference.repo_path(), &digest)
        .map_err(|e| s.err(e))?;
    let subject = Descriptor::new(manifest::OCI_MANIFEST, digest.clone(), size);
    let bundle = super::referrers::attach(s, subject, &bundle).await?;
    let signature_tag = if signing.legacy {
        Some(push_signature(s, reference, &digest, signing.key).await?)
    } else {
        None
    };
    Ok(Pushed {
        digest,
        bundle: Some(bundle),
        signature_tag,
    })
}

/// An OCI image manifest of one config and one layer (a module, or a signature).
fn one_layer(config: Descriptor, layer: Descriptor) -> Manifest {
    Manifest {
        schema_version: 2,
        media_type: Some(manifest::OCI_MANIFEST.into()),
        artifact_type: None,
        config,
        layers: vec![layer],
        subject: None,
        annotations: BTreeMap::new(),
    }
}

/// Uploads a cosign simple-signing signature of `digest` at tag `sha256-HEX.sig`.
async fn push_signature(
    s: &mut Session,
    reference: &Reference,
    digest: &str,
    key: &Path,
) -> Result<String, OciError> {
    let payload = sign::payload(&reference.repo_path(), digest);
    let signature = sign::sign(key, &payload).map_err(|e| s.err(e))?;
    let payload_digest = s.put_blob(&payload, "signature payload").await?;
    // The config cosign writes for its signature manifests.
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "",
        "created": "0001-01-01T00:00:00Z",
        "history": [{ "created": "0001-01-01T00:00:00Z" }],
        "os": "",
        "rootfs": { "type": "layers", "diff_ids": [payload_digest] },
        "config": {},
    }))
    .map_err(|e| s.err(e.to_string()))?;
    let config_digest = s.put_blob(&config, "signature config").await?;
    let mut layer = Descriptor::new(manifest::COSIGN_LAYER, payload_digest, payload.len());
    layer
        .annotations
        .insert(manifest::COSIGN_SIGNATURE_ANNOTATION.to_owned(), signature);
    let m = one_layer(
        Descriptor::new(manifest::OCI_CONFIG, config_digest, config.len()),
        layer,
    );
    let tag = sign::signature_tag(digest);
    put_manifest(s, &m, &tag).await?;
    Ok(tag)
}
