//! Pulling a module: manifest, its one wasm layer, its signature; every digest checked, every
//! body bounded, everything kept in the [`Store`] by digest.

use std::collections::BTreeMap;

use bytes::Bytes;
use http::{Method, StatusCode};

use super::client::{SMALL_BODY, Session, Transport, sha256_digest};
use super::manifest::{self, Manifest};
use super::reference::Reference;
use super::sign;
use super::store::Store;
use super::{OciError, Pulled, Settings};

/// Longest signature payload read.
const MAX_PAYLOAD: usize = 64 * 1024;

async fn get_manifest(
    s: &mut Session,
    reference: &str,
) -> Result<Option<(String, Vec<u8>)>, OciError> {
    let mut h = BTreeMap::new();
    h.insert("accept", manifest::accept());
    let url = s.url(&format!("manifests/{reference}"));
    let a = s
        .send(Method::GET, &url, h, Bytes::new(), SMALL_BODY)
        .await?;
    if a.status == StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !a.status.is_success() {
        return Err(s.unexpected(&format!("manifest {reference}"), &a));
    }
    let digest = sha256_digest(&a.body);
    if super::reference::is_sha256_digest(reference) && digest != reference {
        return Err(s.err(format!(
            "the registry answered for manifest {reference} with content of digest {digest}"
        )));
    }
    Ok(Some((digest, a.body.to_vec())))
}

async fn get_blob(s: &mut Session, digest: &str, size: u64, max: u64) -> Result<Vec<u8>, OciError> {
    if size > max {
        return Err(s.err(format!(
            "blob {digest} is {size} bytes, more than the limit of {max} (oci.maxModuleSize)"
        )));
    }
    let limit = usize::try_from(size).unwrap_or(usize::MAX);
    let url = s.url(&format!("blobs/{digest}"));
    let a = s
        .send(Method::GET, &url, BTreeMap::new(), Bytes::new(), limit)
        .await?;
    if !a.status.is_success() {
        return Err(s.unexpected(&format!("blob {digest}"), &a));
    }
    let got = sha256_digest(&a.body);
    if got != digest || a.body.len() as u64 != size {
        return Err(s.err(format!(
            "blob {digest}: the registry sent {} bytes of digest {got} (expected {size} bytes)",
            a.body.len()
        )));
    }
    Ok(a.body.to_vec())
}

/// The digest `reference` resolves to now (one manifest request).
pub async fn resolve(settings: &Settings, reference: &Reference) -> Result<String, OciError> {
    let t = Transport::new(settings.shared()).map_err(|e| OciError::new(reference, e))?;
    let mut s = Session::new(
        t,
        &reference.registry,
        &reference.repository,
        reference.to_string(),
    );
    match get_manifest(&mut s, reference.manifest_ref()).await? {
        Some((d, _)) => Ok(d),
        None => Err(s.err(format!("manifest {} not found", reference.manifest_ref()))),
    }
}

/// Pulls `reference` (from the cache when it is pinned by digest and cached), checks its
/// signature when keys are configured, and returns where the module is.
pub async fn pull(settings: &Settings, reference: &Reference) -> Result<Pulled, OciError> {
    let store = Store::new(settings.cache_dir.clone());
    let t = Transport::new(settings.shared()).map_err(|e| OciError::new(reference, e))?;
    let mut s = Session::new(
        t,
        &reference.registry,
        &reference.repository,
        reference.to_string(),
    );
    let cached = reference
        .digest
        .as_deref()
        .and_then(|d| store.manifest(d).map(|m| (d.to_owned(), m)));
    let from_cache = cached.is_some();
    let (digest, bytes) = match cached {
        Some(x) => x,
        None => get_manifest(&mut s, reference.manifest_ref())
            .await?
            .ok_or_else(|| s.err(format!("manifest {} not found", reference.manifest_ref())))?,
    };
    let m = Manifest::parse(&bytes, None).map_err(|e| s.err(format!("manifest {digest}: {e}")))?;
    let layer = m
        .wasm_layer()
        .map_err(|e| s.err(format!("manifest {digest}: {e}")))?
        .clone();
    if !super::reference::is_sha256_digest(&layer.digest) {
        return Err(s.err(format!(
            "manifest {digest}: layer digest {:?} is not sha256",
            layer.digest
        )));
    }
    let blob_cached = store.blob(&layer.digest).is_some();
    if !blob_cached {
        let blob = get_blob(&mut s, &layer.digest, layer.size, settings.max_module_size).await?;
        store.put_blob(&layer.digest, &blob).map_err(|e| s.err(e))?;
    }
    let signed_by = if settings.keys.is_empty() {
        None
    } else {
        Some(verify_signature(settings, &store, &mut s, reference, &digest).await?)
    };
    if !from_cache {
        store.put_manifest(&digest, &bytes).map_err(|e| s.err(e))?;
    }
    let path = store
        .blob_path(&layer.digest)
        .ok_or_else(|| s.err("bad layer digest"))?;
    Ok(Pulled {
        reference: reference.clone(),
        digest,
        layer_digest: layer.digest,
        media_type: layer.media_type,
        path,
        signed_by,
        from_cache: from_cache && blob_cached,
    })
}

/// Checks the cosign signature of `manifest_digest`: from the cache if one was verified before
/// (it is verified again, against today's keys), else from the registry.
async fn verify_signature(
    settings: &Settings,
    store: &Store,
    s: &mut Session,
    reference: &Reference,
    manifest_digest: &str,
) -> Result<String, OciError> {
    let tag = sign::signature_tag(manifest_digest);
    let cached = store
        .signature_of(manifest_digest)
        .and_then(|d| store.manifest(&d).map(|m| (d, m)));
    let (sig_digest, bytes, fetched) = match cached {
        Some((d, m)) => (d, m, false),
        None => match get_manifest(s, &tag).await? {
            Some((d, m)) => (d, m, true),
            None => {
                return Err(s.err(format!(
                    "not signed: no signature at {}:{tag}, and oci.keys requires one (sign with `wisp push --sign KEY` or `cosign sign --key`)",
                    reference.repo_path()
                )));
            }
        },
    };
    let m = Manifest::parse(&bytes, None).map_err(|e| s.err(format!("signature {tag}: {e}")))?;
    let mut why = Vec::new();
    for l in m
        .layers
        .iter()
        .filter(|l| l.media_type == manifest::COSIGN_LAYER)
    {
        let Some(sig) = l.annotations.get(manifest::COSIGN_SIGNATURE_ANNOTATION) else {
            why.push(format!(
                "layer {}: no {} annotation",
                l.digest,
                manifest::COSIGN_SIGNATURE_ANNOTATION
            ));
            continue;
        };
        let payload = match store.blob(&l.digest) {
            Some(p) => p,
            None => match get_blob(s, &l.digest, l.size, MAX_PAYLOAD as u64).await {
                Ok(p) => {
                    store.put_blob(&l.digest, &p).map_err(|e| s.err(e))?;
                    p
                }
                Err(e) => {
                    why.push(e.problem);
                    continue;
                }
            },
        };
        match sign::verify(&settings.keys, &payload, sig, manifest_digest) {
            Ok(key) => {
                if fetched {
                    store
                        .put_manifest(&sig_digest, &bytes)
                        .map_err(|e| s.err(e))?;
                    store
                        .put_signature_of(manifest_digest, &sig_digest)
                        .map_err(|e| s.err(e))?;
                }
                return Ok(key.display().to_string());
            }
            Err(e) => why.push(e),
        }
    }
    if why.is_empty() {
        why.push(format!("no layer of media type {}", manifest::COSIGN_LAYER));
    }
    Err(s.err(format!(
        "signature refused: {}:{tag}: {}",
        reference.repo_path(),
        why.join("; ")
    )))
}
