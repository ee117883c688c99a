//! Pulling a module: manifest, its one wasm layer, its signature; every digest checked, every
//! body bounded, everything kept in the [`Store`] by digest.

use super::client::{Session, Transport};
use super::manifest::{self, Manifest};
use super::reference::Reference;
use super::store::Store;
use super::{OciError, Pulled, Settings};
use super::{referrers, sign};

/// Longest signature payload read.
const MAX_PAYLOAD: usize = 64 * 1024;

/// Runs `f` (one pull or look-up of `reference`) within `settings.pull_timeout`: every
/// request, redirect, challenge and layer it makes count against one deadline.
async fn within_deadline<T>(
    settings: &Settings,
    reference: &Reference,
    f: impl Future<Output = Result<T, OciError>>,
) -> Result<T, OciError> {
    tokio::time::timeout(settings.pull_timeout, f)
        .await
        .unwrap_or_else(|_| {
            Err(OciError::new(
                reference,
                format!(
                    "not pulled within oci.pullTimeout ({:?}): manifest, signature and module, \
                     with every redirect and retry, share that deadline",
                    settings.pull_timeout
                ),
            ))
        })
}

/// The digest `reference` resolves to now (one manifest request, within `oci.pullTimeout`).
pub async fn resolve(settings: &Settings, reference: &Reference) -> Result<String, OciError> {
    within_deadline(settings, reference, resolve_now(settings, reference)).await
}

async fn resolve_now(settings: &Settings, reference: &Reference) -> Result<String, OciError> {
    let t = Transport::new(settings.shared()).map_err(|e| OciError::new(reference, e))?;
    let mut s = Session::new(
        t,
        &reference.registry,
        &reference.repository,
        reference.to_string(),
    );
    match s.get_manifest(reference.manifest_ref()).await? {
        Some((d, _)) => Ok(d),
        None => Err(s.err(format!("manifest {} not found", reference.manifest_ref()))),
    }
}

/// Pulls `reference` (from the cache when it is pinned by digest and cached), checks its
/// signature when keys are configured, and returns where the module is. The whole pull has
/// `oci.pullTimeout`.
pub async fn pull(settings: &Settings, reference: &Reference) -> Result<Pulled, OciError> {
    within_deadline(settings, reference, pull_now(settings, reference)).await
}

/// [`pull`], without its deadline. The signature is checked before the module is fetched:
/// a module whose signature is refused is neither downloaded nor kept.
async fn pull_now(settings: &Settings, reference: &Reference) -> Result<Pulled, OciError> {
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
        None => s
            .get_manifest(reference.manifest_ref())
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
    let signed_by = if settings.requires_signature() {
        let c = referrers::Check {
            settings,
            store: &store,
            digest: &digest,
            manifest: &bytes,
        };
        Some(verify_signature(&c, &mut s, reference).await?)
    } else {
        None
    };
    let blob_cached = store.blob(&layer.digest).is_some();
    if !blob_cached {
        let blob = s
            .get_blob(&layer.digest, layer.size, settings.max_module_size)
            .await?;
        store.put_blob(&layer.digest, &blob).map_err(|e| s.err(e))?;
    }
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

/// A signature manifest refused before any payload is fetched.
#[derive(Debug, thiserror::Error)]
enum LayersError {
    /// More layers than `oci.maxSignatureLayers`.
    #[error("the signature manifest has {layers} layers, more than oci.maxSignatureLayers ({max})")]
    TooMany { layers: usize, max: usize },
    /// Payloads declaring more than `oci.maxSignatureBytes` together.
    #[error(
        "its {payloads} payloads declare {declared} bytes together, more than oci.maxSignatureBytes ({max})"
    )]
    TooLarge {
        payloads: usize,
        declared: u64,
        max: u64,
    },
    /// No cosign layer.
    #[error("no layer of media type {}", manifest::COSIGN_LAYER)]
    NoCosignLayer,
}

/// The cosign layers of signature manifest `m`, within `oci.maxSignatureLayers` (all its
/// layers counted) and `oci.maxSignatureBytes` (their declared sizes together, each fetched
/// payload being checked against its size): over either, nothing is fetched.
fn signature_layers<'m>(
    settings: &Settings,
    m: &'m Manifest,
) -> Result<Vec<&'m manifest::Descriptor>, LayersError> {
    if m.layers.len() > settings.max_signature_layers {
        return Err(LayersError::TooMany {
            layers: m.layers.len(),
            max: settings.max_signature_layers,
        });
    }
    let layers: Vec<_> = m
        .layers
        .iter()
        .filter(|l| l.media_type == manifest::COSIGN_LAYER)
        .collect();
    let declared = layers.iter().fold(0u64, |n, l| n.saturating_add(l.size));
    if declared > settings.max_signature_bytes {
        return Err(LayersError::TooLarge {
            payloads: layers.len(),
            declared,
            max: settings.max_signature_bytes,
        });
    }
    if layers.is_empty() {
        return Err(LayersError::NoCosignLayer);
    }
    Ok(layers)
}

/// Checks the signature of the module (`c.digest`): the one verified before, if cached (it is
/// verified again, against today's policy; a cached bundle that no longer verifies is looked up
/// afresh), else, in this order, Sigstore bundles by the referrers API or the referrers tag
/// schema, then the legacy cosign `.sig` tag (keyed only). Only what verified is kept in the
/// cache: refused payloads and bundles are dropped.
async fn verify_signature(
    c: &referrers::Check<'_>,
    s: &mut Session,
    reference: &Reference,
) -> Result<String, OciError> {
    let cached = c
        .store
        .signature_of(c.digest)
        .and_then(|d| c.store.manifest(&d).map(|m| (d, m)));
    let is_bundle = |m: &[u8]| Manifest::parse(m, None).is_ok_and(|m| m.bundle_layer().is_some());
    // A cached legacy signature is checked again with today's keys (with none configured now,
    // the bundles are looked up instead).
    if let Some((_, m)) = &cached
        && !is_bundle(m)
        && !c.settings.keys.is_empty()
    {
        return verify_legacy(c, s, reference, cached, Vec::new()).await;
    }
    if let Some((d, m)) = &cached {
        let mut budget = c.settings.max_signature_bytes;
        if let Ok(signer) = c.referrer(s, d, m, &mut budget).await {
            return Ok(signer);
        }
    }
    let why = match referrers::verify(c, s).await? {
        Ok(signer) => return Ok(signer),
        Err(why) => why,
    };
    verify_legacy(c, s, reference, None, why).await
}

/// The legacy cosign `.sig` signature (keyed only): `cached` if verified before, else fetched;
/// `bundles_why`: why no bundle was accepted, said too when this fails.
async fn verify_legacy(
    c: &referrers::Check<'_>,
    s: &mut Session,
    reference: &Reference,
    cached: Option<(String, Vec<u8>)>,
    bundles_why: Vec<String>,
) -> Result<String, OciError> {
    let (settings, store, manifest_digest) = (c.settings, c.store, c.digest);
    let tag = sign::signature_tag(manifest_digest);
    let bundles = if bundles_why.is_empty() {
        format!(
            "no Sigstore bundle is attached (referrers API, tag {})",
            referrers::tag_schema(manifest_digest)
        )
    } else {
        format!("no Sigstore bundle accepted: {}", bundles_why.join("; "))
    };
    if settings.keys.is_empty() {
        let verdict = if bundles_why.is_empty() {
            "not signed"
        } else {
            "signature refused"
        };
        return Err(s.err(format!(
            "{verdict}: {bundles}, and oci.keyless requires one (sign with `cosign sign`; the legacy {tag} tag is read with oci.keys only)"
        )));
    }
    let (sig_digest, bytes, fetched) = match cached {
        Some((d, m)) => (d, m, false),
        None => match s.get_manifest(&tag).await? {
            Some((d, m)) => (d, m, true),
            None if bundles_why.is_empty() => {
                return Err(s.err(format!(
                    "not signed: {bundles}, and no legacy signature at {}:{tag}; oci.keys requires one (sign with `wisp push --sign KEY` or `cosign sign --key`)",
                    reference.repo_path()
                )));
            }
            None => {
                return Err(s.err(format!(
                    "signature refused: {bundles}; and no legacy signature at {}:{tag}",
                    reference.repo_path()
                )));
            }
        },
    };
    let refused = format!("signature refused: {}:{tag}", reference.repo_path());
    let m = Manifest::parse(&bytes, None).map_err(|e| s.err(format!("signature {tag}: {e}")))?;
    let layers = signature_layers(settings, &m).map_err(|e| s.err(format!("{refused}: {e}")))?;
    let mut why = Vec::new();
    for l in layers {
        let Some(sig) = l.annotations.get(manifest::COSIGN_SIGNATURE_ANNOTATION) else {
            why.push(format!(
                "layer {}: no {} annotation",
                l.digest,
                manifest::COSIGN_SIGNATURE_ANNOTATION
            ));
            continue;
        };
        let (payload, payload_fetched) = match store.blob(&l.digest) {
            Some(p) => (p, false),
            None => match s.get_blob(&l.digest, l.size, MAX_PAYLOAD as u64).await {
                Ok(p) => (p, true),
                Err(e) => {
                    why.push(e.problem);
                    continue;
                }
            },
        };
        match sign::verify(&settings.keys, &payload, sig, manifest_digest) {
            Ok(key) => {
                if payload_fetched {
                    store.put_blob(&l.digest, &payload).map_err(|e| s.err(e))?;
                }
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
            Err(e) => why.push(format!("layer {}: {e}", l.digest)),
        }
    }
    Err(s.err(format!("{refused}: {}", why.join("; "))))
}
