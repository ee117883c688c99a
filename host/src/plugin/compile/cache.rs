//! The on-disk cache of precompiled artifacts, authenticated.
//!
//! A precompiled artifact is native code: whoever can choose the bytes Wisp deserializes chooses
//! the code it runs. So nothing in the cache is used unless all of this holds:
//!
//! - the directory is a real directory (not a symlink), owned by the effective uid, writable by
//!   nobody else (Wisp creates it 0700 and closes an existing one it owns to 0700, but never
//!   repairs one that others could write: it may already hold their files);
//! - the MAC key lives outside the directory, in the sibling file `<dir>.key` (32 random bytes,
//!   created 0600 with `create_new`), owned by the effective uid, mode 0600 or stricter, opened
//!   without following links;
//! - each artifact is `MAGIC || HMAC-SHA256(key, cache key || bytes) || bytes`, opened without
//!   following links, a regular file owned by the effective uid and writable by nobody else;
//!   the MAC covers the artifact's cache key (module hash + engine fingerprint), so an artifact
//!   copied or renamed to another module's name fails, and the bytes handed to wasmtime are the
//!   bytes that were checked (read once, never re-opened by path).
//!
//! When the directory or the key fails these checks, [`ModuleCache::open`] fails and the engine
//! compiles in memory only.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ring::hmac;

/// First bytes of every artifact file: format and version.
const MAGIC: &[u8; 8] = b"WISPCWM1";
/// Length of an HMAC-SHA256 tag.
const TAG_LEN: usize = 32;
/// Length of the MAC key.
const KEY_LEN: usize = 32;
/// Domain separation: these MACs authenticate cache artifacts and nothing else.
const DOMAIN: &[u8] = b"wisp module cache v1\0";

/// Why the cache, or one artifact in it, cannot be trusted.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// A file system operation failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The path exists but is not what it must be (owner, mode, type, contents).
    #[error("{}: {reason}", path.display())]
    Untrusted {
        /// The path.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

fn io<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> CacheError + use<'a> {
    move |source| CacheError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

fn untrusted(path: &Path, reason: impl Into<String>) -> CacheError {
    CacheError::Untrusted {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// The effective uid of this process.
fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Refuses `md` unless it is owned by the effective uid and grants nothing in `forbidden_mode`.
fn check_owner_mode(path: &Path, md: &std::fs::Metadata, forbidden: u32) -> Result<(), CacheError> {
    let me = euid();
    if md.uid() != me {
        return Err(untrusted(
            path,
            format!("owned by uid {}, not by this process (uid {me})", md.uid()),
        ));
    }
    let mode = md.mode() & 0o7777;
    if mode & forbidden != 0 {
        return Err(untrusted(
            path,
            format!(
                "mode {mode:04o} gives group or others access (at most {:04o})",
                0o777 & !forbidden
            ),
        ));
    }
    Ok(())
}

/// Opens `path` for reading without following a symlink in its last component.
fn open_nofollow(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Creates `path` (never an existing file or a link), mode 0600, and writes `bytes` to it.
fn create_private_file(path: &Path, bytes: &[&[u8]]) -> std::io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    for b in bytes {
        f.write_all(b)?;
    }
    f.sync_all()
}

/// Compares two byte strings in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A checked cache directory and its MAC key.
pub struct ModuleCache {
    dir: PathBuf,
    key: hmac::Key,
}

impl std::fmt::Debug for ModuleCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleCache")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl ModuleCache {
    /// Where the key of the cache in `dir` is kept: the sibling file `<dir>.key`.
    pub fn key_path(dir: &Path) -> Option<PathBuf> {
        let name = dir.file_name()?;
        let mut key = name.to_owned();
        key.push(".key");
        Some(dir.with_file_name(key))
    }

    /// Opens (creating when absent) the cache in `dir` and its key, checking both.
    pub fn open(dir: &Path) -> Result<Self, CacheError> {
        match std::fs::symlink_metadata(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                    std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
                }
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(dir)
                    .map_err(io("creating", dir))?;
                // The umask may have taken bits away, never added any; set it exactly.
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(io("setting the mode of", dir))?;
            }
            Err(e) => return Err(io("reading", dir)(e)),
            Ok(_) => {}
        }
        let md = std::fs::symlink_metadata(dir).map_err(io("reading", dir))?;
        if md.file_type().is_symlink() {
            return Err(untrusted(
                dir,
                "is a symbolic link (give the real directory)",
            ));
        }
        if !md.is_dir() {
            return Err(untrusted(dir, "is not a directory"));
        }
        check_owner_mode(dir, &md, 0o022)?;
        if md.mode() & 0o077 != 0 {
            // Nobody else could write it: closing it to reading too loses nothing.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(io("setting the mode of", dir))?;
        }
        let key_path = Self::key_path(dir)
            .ok_or_else(|| untrusted(dir, "has no file name to put its key beside"))?;
        let key = read_or_create_key(&key_path)?;
        Ok(Self {
            dir: dir.to_owned(),
            key: hmac::Key::new(hmac::HMAC_SHA256, &key),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The artifact file of `cache_key`.
    pub fn artifact_path(&self, cache_key: &str) -> PathBuf {
        self.dir.join(format!("{cache_key}.cwasm"))
    }

    /// What the MAC of `cache_key`'s artifact covers before its bytes: `DOMAIN || cache key || 0`.
    fn mac_prefix(cache_key: &str) -> Vec<u8> {
        [DOMAIN, cache_key.as_bytes(), b"\0"].concat()
    }

    /// The MAC of `cache_key`'s artifact: HMAC-SHA256(key, `mac_prefix(cache_key)` || bytes).
    fn tag(&self, cache_key: &str, bytes: &[u8]) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(&Self::mac_prefix(cache_key));
        ctx.update(bytes);
        ctx.sign()
    }

    /// The verified artifact bytes of `cache_key`: `Ok(None)` when there is none, an error when
    /// there is one that must not be used (then the caller compiles and [`put`](Self::put)s).
    pub fn get(&self, cache_key: &str) -> Result<Option<Vec<u8>>, CacheError> {
        let path = self.artifact_path(cache_key);
        let mut f = match open_nofollow(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(untrusted(&path, "is a symbolic link"));
            }
            Err(e) => return Err(io("opening", &path)(e)),
        };
        let md = f.metadata().map_err(io("reading", &path))?;
        if !md.is_file() {
            return Err(untrusted(&path, "is not a regular file"));
        }
        check_owner_mode(&path, &md, 0o022)?;
        // The file is read after room for the MAC's prefix, which is then moved next to the
        // artifact's bytes: `hmac::verify` checks the one message without a copy of them.
        let prefix = Self::mac_prefix(cache_key);
        let mut data = Vec::with_capacity(prefix.len() + md.len() as usize);
        data.extend_from_slice(&prefix);
        f.read_to_end(&mut data).map_err(io("reading", &path))?;
        let file = &data[prefix.len()..];
        let header = MAGIC.len() + TAG_LEN;
        if file.len() < header || &file[..MAGIC.len()] != MAGIC {
            return Err(untrusted(&path, "is not an artifact of this host"));
        }
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&file[MAGIC.len()..header]);
        // [prefix | MAGIC tag | bytes] -> [.. | prefix | bytes]: the message ends the buffer.
        data.copy_within(..prefix.len(), header);
        if hmac::verify(&self.key, &data[header..], &tag).is_err() {
            return Err(untrusted(
                &path,
                "fails its MAC check (changed, or copied from another module or host)",
            ));
        }
        data.drain(..header + prefix.len());
        Ok(Some(data))
    }

    /// Writes the artifact of `cache_key` (atomically: a new private file, then a rename over
    /// whatever was there).
    pub fn put(&self, cache_key: &str, bytes: &[u8]) -> Result<(), CacheError> {
        let path = self.artifact_path(cache_key);
        let tmp = self
            .dir
            .join(format!(".{cache_key}.tmp{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let tag = self.tag(cache_key, bytes);
        create_private_file(&tmp, &[MAGIC, tag.as_ref(), bytes]).map_err(io("writing", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io("renaming into", &path)(e)
        })
    }
}

/// Reads the key at `path`, or creates it (32 bytes from the OS's random source) when absent.
fn read_or_create_key(path: &Path) -> Result<[u8; KEY_LEN], CacheError> {
    match open_nofollow(path) {
        Ok(f) => read_key(path, f),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            use ring::rand::SecureRandom;
            let mut key = [0u8; KEY_LEN];
            ring::rand::SystemRandom::new()
                .fill(&mut key)
                .map_err(|_| {
                    io("reading random bytes for", path)(std::io::Error::other(
                        "the system's random source failed",
                    ))
                })?;
            // Written whole under a private name, then linked into place: a concurrent host
            // sees either no key or the full key; the loser of a race reads the winner's.
            let tmp = path.with_extension(format!("key.tmp{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            create_private_file(&tmp, &[&key]).map_err(io("creating", &tmp))?;
            let linked = std::fs::hard_link(&tmp, path);
            let _ = std::fs::remove_file(&tmp);
            match linked {
                Ok(()) => Ok(key),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let f = open_nofollow(path).map_err(io("opening", path))?;
                    read_key(path, f)
                }
                Err(e) => Err(io("creating", path)(e)),
            }
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            Err(untrusted(path, "is a symbolic link"))
        }
        Err(e) => Err(io("opening", path)(e)),
    }
}

fn read_key(path: &Path, mut f: File) -> Result<[u8; KEY_LEN], CacheError> {
    let md = f.metadata().map_err(io("reading", path))?;
    if !md.is_file() {
        return Err(untrusted(path, "is not a regular file"));
    }
    check_owner_mode(path, &md, 0o077)?;
    let mut buf = Vec::with_capacity(KEY_LEN);
    (&mut f)
        .take(KEY_LEN as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(io("reading", path))?;
    buf.try_into()
        .map_err(|_| untrusted(path, format!("is not a key of {KEY_LEN} bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key file and the artifact format, pinned byte for byte: a cache written by an
    /// earlier host stays valid (the tag was computed by the hand-written HMAC the cache used
    /// before `ring::hmac`, and agrees with RFC 2104 HMAC-SHA256).
    #[test]
    fn the_artifact_format_is_pinned() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("modules");
        let key: Vec<u8> = (0..32).collect();
        create_private_file(&ModuleCache::key_path(&dir).unwrap(), &[&key]).unwrap();
        let c = ModuleCache::open(&dir).unwrap();
        let bytes = b"\0asm artifact bytes";
        c.put("0123abcd-fp1", bytes).unwrap();
        let file = std::fs::read(c.artifact_path("0123abcd-fp1")).unwrap();
        assert_eq!(&file[..8], b"WISPCWM1");
        assert_eq!(
            hex::encode(&file[8..40]),
            "16a0ad2746c4a32af45e678a3d6519e72a567d88d2c103b7d6af6e35f42286f2"
        );
        assert_eq!(&file[40..], bytes);
        assert_eq!(c.get("0123abcd-fp1").unwrap().unwrap(), bytes);
        // One flipped bit anywhere after the magic fails the check.
        for i in [8, 39, 40, file.len() - 1] {
            let mut bad = file.clone();
            bad[i] ^= 1;
            std::fs::write(c.artifact_path("0123abcd-fp1"), &bad).unwrap();
            let e = c.get("0123abcd-fp1").unwrap_err().to_string();
            assert!(e.contains("fails its MAC check"), "{i}: {e}");
        }
        // A MAC prefix longer than the file's header verifies as well as a shorter one.
        let long = "f".repeat(100);
        c.put(&long, bytes).unwrap();
        assert_eq!(c.get(&long).unwrap().unwrap(), bytes);
        std::fs::write(c.artifact_path(&long), &file[..39]).unwrap();
        let e = c.get(&long).unwrap_err().to_string();
        assert!(e.contains("is not an artifact of this host"), "{e}");
        // The key file is the 32 raw bytes.
        assert_eq!(
            std::fs::read(ModuleCache::key_path(&dir).unwrap()).unwrap(),
            key
        );
    }

    #[test]
    fn an_artifact_verifies_under_its_own_key_only() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("modules");
        let c = ModuleCache::open(&dir).unwrap();
        c.put("aaa-1", b"code of a").unwrap();
        assert_eq!(c.get("aaa-1").unwrap().unwrap(), b"code of a");
        assert!(c.get("bbb-1").unwrap().is_none());
        std::fs::copy(c.artifact_path("aaa-1"), c.artifact_path("bbb-1")).unwrap();
        let e = c.get("bbb-1").unwrap_err().to_string();
        assert!(e.contains("fails its MAC check"), "{e}");
        let mode = std::fs::metadata(ModuleCache::key_path(&dir).unwrap())
            .unwrap()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // Reopened: the same key.
        let again = ModuleCache::open(&dir).unwrap();
        assert_eq!(again.get("aaa-1").unwrap().unwrap(), b"code of a");
    }

    #[test]
    fn a_loose_key_or_directory_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("modules");
        ModuleCache::open(&dir).unwrap();
        let key = ModuleCache::key_path(&dir).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = ModuleCache::open(&dir).unwrap_err().to_string();
        assert!(e.contains("modules.key: mode 0644"), "{e}");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o770)).unwrap();
        let e = ModuleCache::open(&dir).unwrap_err().to_string();
        assert!(e.contains("mode 0770"), "{e}");
    }
}
