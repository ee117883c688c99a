//! Manifests: the media types Wisp reads and writes, and the one wasm layer of a module.
//!
//! Two conventions of wasm in OCI are read:
//! - the CNCF TAG Runtime "wasm OCI artifact" layout (current; what `wisp push` writes): config
//!   `application/vnd.wasm.config.v0+json`, one layer `application/wasm`;
//! - the older one of wasm-to-oci and early krustlet: config `application/vnd.wasm.config.v1+json`,
//!   one layer `application/vnd.wasm.content.layer.v1+wasm`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// Docker image manifest v2 schema 2 (registries and old tools still write it).
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// OCI image index (refused: a module is one manifest).
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Docker manifest list (refused as an index is).
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// Config of the current wasm convention.
pub const WASM_CONFIG_V0: &str = "application/vnd.wasm.config.v0+json";
/// Layer of the current wasm convention.
pub const WASM_LAYER: &str = "application/wasm";
/// Layer of the older wasm convention.
pub const WASM_LAYER_LEGACY: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// Layer of a cosign "simple signing" signature.
pub const COSIGN_LAYER: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation of a cosign layer holding the base64 signature.
pub const COSIGN_SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// OCI image config (what cosign gives its signature manifests).
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// The empty config of OCI 1.1 artifacts (the blob `{}`).
pub const OCI_EMPTY: &str = "application/vnd.oci.empty.v1+json";
/// Media types (and artifact types) of Sigstore bundles start with this.
pub const SIGSTORE_BUNDLE_PREFIX: &str = "application/vnd.dev.sigstore.bundle";

/// What the `Accept` header of a manifest request lists.
pub fn accept() -> String {
    [OCI_MANIFEST, DOCKER_MANIFEST, OCI_INDEX, DOCKER_LIST].join(", ")
}

/// A content descriptor.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// Media type.
    pub media_type: String,
    /// `sha256:HEX`.
    pub digest: String,
    /// Size in bytes.
    pub size: u64,
    /// OCI 1.1 artifact type (of a manifest an index or the referrers API lists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Descriptor {
    /// A descriptor of `size` bytes of `media_type` at `digest`, without annotations.
    pub fn new(media_type: &str, digest: String, size: usize) -> Self {
        Self {
            media_type: media_type.to_owned(),
            digest,
            size: size as u64,
            artifact_type: None,
            annotations: BTreeMap::new(),
        }
    }
}

/// An image manifest (OCI or Docker v2 schema 2: the same fields).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// 2.
    pub schema_version: u32,
    /// The manifest's media type (optional in OCI, set by every tool that matters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// OCI 1.1 artifact type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// The config blob.
    pub config: Descriptor,
    /// The layers.
    #[serde(default)]
    pub layers: Vec<Descriptor>,
    /// OCI 1.1 subject: the manifest this one refers to (a signature's module).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<Descriptor>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// A manifest that is not a wasm module's (or a signature's) schema 2 manifest.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// Not JSON.
    #[error("manifest is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// An image index, not a manifest.
    #[error(
        "an image index (several manifests), not a wasm module: give the digest of the wasm manifest"
    )]
    Index,
    /// JSON, but not of a manifest's shape.
    #[error("manifest not understood: {0}")]
    NotUnderstood(#[source] serde_json::Error),
    /// A schema version other than 2.
    #[error("manifest schemaVersion {0} (only 2 is read)")]
    SchemaVersion(u32),
    /// No wasm layer: the layers' media types, and the config's.
    #[error(
        "no wasm layer: expected one layer of media type {WASM_LAYER} or {WASM_LAYER_LEGACY}, found [{}] (config {config})",
        layers.join(", ")
    )]
    NoWasmLayer {
        /// The media types of the layers.
        layers: Vec<String>,
        /// The media type of the config.
        config: String,
    },
    /// More than one wasm layer.
    #[error("{0} wasm layers; a plugin module is one component")]
    WasmLayers(usize),
}

impl Manifest {
    /// Parses a manifest, refusing indexes and manifests that are not schema 2.
    pub fn parse(bytes: &[u8], content_type: Option<&str>) -> Result<Self, ManifestError> {
        let v: serde_json::Value = serde_json::from_slice(bytes).map_err(ManifestError::NotJson)?;
        let mt = v
            .get("mediaType")
            .and_then(|m| m.as_str())
            .or(content_type)
            .unwrap_or("");
        if mt == OCI_INDEX || mt == DOCKER_LIST || v.get("manifests").is_some() {
            return Err(ManifestError::Index);
        }
        let m: Manifest = serde_json::from_value(v).map_err(ManifestError::NotUnderstood)?;
        if m.schema_version != 2 {
            return Err(ManifestError::SchemaVersion(m.schema_version));
        }
        Ok(m)
    }

    /// The Sigstore bundle layer of a referrer manifest, if it is one.
    pub fn bundle_layer(&self) -> Option<&Descriptor> {
        self.layers
            .iter()
            .find(|l| l.media_type.starts_with(SIGSTORE_BUNDLE_PREFIX))
    }

    /// The one wasm layer of a module manifest, of either convention.
    pub fn wasm_layer(&self) -> Result<&Descriptor, ManifestError> {
        let wasm: Vec<&Descriptor> = self
            .layers
            .iter()
            .filter(|l| l.media_type == WASM_LAYER || l.media_type == WASM_LAYER_LEGACY)
            .collect();
        match wasm.as_slice() {
            [one] => Ok(one),
            [] => Err(ManifestError::NoWasmLayer {
                layers: self.layers.iter().map(|l| l.media_type.clone()).collect(),
                config: self.config.media_type.clone(),
            }),
            more => Err(ManifestError::WasmLayers(more.len())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(layer_type: &str) -> String {
        format!(
            r#"{{"schemaVersion":2,"mediaType":"{OCI_MANIFEST}","config":{{"mediaType":"{WASM_CONFIG_V0}","digest":"sha256:aa","size":2}},"layers":[{{"mediaType":"{layer_type}","digest":"sha256:bb","size":10}}]}}"#
        )
    }

    #[test]
    fn both_wasm_layer_conventions_are_found() {
        for t in [WASM_LAYER, WASM_LAYER_LEGACY] {
            let m = Manifest::parse(manifest(t).as_bytes(), None).unwrap();
            assert_eq!(m.wasm_layer().unwrap().digest, "sha256:bb");
        }
        let m = Manifest::parse(
            manifest("application/vnd.oci.image.layer.v1.tar").as_bytes(),
            None,
        )
        .unwrap();
        assert!(
            m.wasm_layer()
                .unwrap_err()
                .to_string()
                .contains("no wasm layer")
        );
    }

    #[test]
    fn an_index_is_refused_with_a_hint() {
        let e = Manifest::parse(
            format!(r#"{{"schemaVersion":2,"mediaType":"{OCI_INDEX}","manifests":[]}}"#).as_bytes(),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("image index"), "{e}");
    }
}
