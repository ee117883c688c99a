//! The on-disk cache of pulled modules, by digest: `blobs/sha256/HEX` (module layers and
//! signature payloads), `manifests/sha256/HEX`, and `signatures/sha256/HEX` (the digest of the
//! signature manifest of a module manifest). Every read is checked against its digest; a file
//! that does not match is removed and fetched again.

use std::path::{Path, PathBuf};

use super::client::sha256_digest;

/// The cache cannot keep what it was given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A directory cannot be created.
    #[error("OCI cache {}: cannot create: {source}", dir.display())]
    Create {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file cannot be written.
    #[error("OCI cache {}: cannot write: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A digest that is not `sha256:` and hex: it names no file.
    #[error("not a sha256 digest: {0}")]
    Digest(String),
}

/// The cache directory.
#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
}

fn hex_of(digest: &str) -> Option<&str> {
    super::reference::is_sha256_digest(digest).then(|| &digest["sha256:".len()..])
}

impl Store {
    /// A store in `dir` (created when first written).
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// Where the blob `digest` is (or would be) kept.
    pub fn blob_path(&self, digest: &str) -> Option<PathBuf> {
        Some(self.dir.join("blobs/sha256").join(hex_of(digest)?))
    }

    fn manifest_path(&self, digest: &str) -> Option<PathBuf> {
        Some(self.dir.join("manifests/sha256").join(hex_of(digest)?))
    }

    fn signature_index(&self, manifest_digest: &str) -> Option<PathBuf> {
        Some(
            self.dir
                .join("signatures/sha256")
                .join(hex_of(manifest_digest)?),
        )
    }

    fn read_checked(path: &Path, digest: &str) -> Option<Vec<u8>> {
        let bytes = std::fs::read(path).ok()?;
        if sha256_digest(&bytes) == digest {
            Some(bytes)
        } else {
            tracing::warn!(path = %path.display(), %digest, "cached OCI content does not match its digest; fetching it again");
            let _ = std::fs::remove_file(path);
            None
        }
    }

    fn write(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Create {
            dir: dir.to_owned(),
            source,
        })?;
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, bytes)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|source| {
                let _ = std::fs::remove_file(&tmp);
                StoreError::Write {
                    path: path.to_owned(),
                    source,
                }
            })
    }

    /// The blob `digest`, if cached and intact.
    pub fn blob(&self, digest: &str) -> Option<Vec<u8>> {
        Self::read_checked(&self.blob_path(digest)?, digest)
    }

    /// Keeps a blob (its digest already checked by the caller); returns its path.
    pub fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<PathBuf, StoreError> {
        let p = self
            .blob_path(digest)
            .ok_or_else(|| StoreError::Digest(digest.to_owned()))?;
        Self::write(&p, bytes)?;
        Ok(p)
    }

    /// The manifest `digest`, if cached and intact.
    pub fn manifest(&self, digest: &str) -> Option<Vec<u8>> {
        Self::read_checked(&self.manifest_path(digest)?, digest)
    }

    /// Keeps a manifest (its digest already checked).
    pub fn put_manifest(&self, digest: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let p = self
            .manifest_path(digest)
            .ok_or_else(|| StoreError::Digest(digest.to_owned()))?;
        Self::write(&p, bytes)
    }

    /// The digest of the signature manifest last verified for `manifest_digest`.
    pub fn signature_of(&self, manifest_digest: &str) -> Option<String> {
        let s = std::fs::read_to_string(self.signature_index(manifest_digest)?).ok()?;
        let s = s.trim();
        super::reference::is_sha256_digest(s).then(|| s.to_owned())
    }

    /// Records the signature manifest of `manifest_digest`.
    pub fn put_signature_of(
        &self,
        manifest_digest: &str,
        signature: &str,
    ) -> Result<(), StoreError> {
        let p = self
            .signature_index(manifest_digest)
            .ok_or_else(|| StoreError::Digest(manifest_digest.to_owned()))?;
        Self::write(&p, signature.as_bytes())
    }
}
