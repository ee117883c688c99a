//! Reading a file someone else named (a manifest of a `dir:` source, a `wisp test` fixture, a
//! plugin module) when whoever wrote it, or wrote the path, may be hostile: regular files only,
//! never more than a cap.
//!
//! A FIFO would block `open()` until a writer comes (forever, holding whatever the reader
//! holds); a device such as `/dev/zero` never ends; a socket cannot be read as a file; a file of
//! `/proc` says it has 0 bytes and may hold gigabytes. The type is checked before opening (a
//! device is not even opened), the file is opened with `O_NONBLOCK` (a FIFO swapped in after the
//! check opens at once instead of blocking) and, unless links are followed ([`Links`]),
//! `O_NOFOLLOW` (a link at the last component is refused), and checked again on the open handle.
//! The size is checked before reading and enforced while reading: at most `cap + 1` bytes are
//! read, so a file that grows past the cap after the check (or whose size the kernel does not
//! say) is refused, not read whole.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Why a file was not read.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum FileRefused {
    /// Not a regular file: a FIFO, a device, a socket or a directory (named).
    #[error("is {0}, not a regular file (only regular files are read)")]
    NotRegular(&'static str),
    /// Larger than the cap (bytes seen, at least `cap + 1` when it grew while read).
    #[error("is {size} bytes, over the cap of {cap} bytes")]
    TooLarge {
        /// The size seen.
        size: u64,
        /// The cap.
        cap: u64,
    },
    /// A link (or a `..`) that resolves out of the directory files are read in.
    #[error("resolves to {}, outside {} (only files inside it are read)", .target.display(), .root.display())]
    Outside {
        /// Where the path leads, every link resolved.
        target: PathBuf,
        /// The directory.
        root: PathBuf,
    },
    /// An absolute path where one relative to a directory is expected.
    #[error("is an absolute path (only paths relative to {} are read)", .0.display())]
    Absolute(PathBuf),
    /// Not UTF-8 text.
    #[error("is not UTF-8 text")]
    NotText,
    /// Opening or reading failed.
    #[error("cannot be read: {0}")]
    Io(String),
}

/// What a file of type `ty` is, in words (for errors).
fn type_name(ty: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ty.is_fifo() {
            return "a FIFO";
        }
        if ty.is_char_device() {
            return "a character device";
        }
        if ty.is_block_device() {
            return "a block device";
        }
        if ty.is_socket() {
            return "a socket";
        }
    }
    if ty.is_dir() {
        "a directory"
    } else if ty.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// Where `path` leads with every link resolved, when that is inside `root` (itself resolved:
/// [`std::fs::canonicalize`]); a path that does not exist (or a dangling link) is an `Io` error.
/// Resolving only reads links and directories: it never opens the file, so a FIFO cannot block.
pub fn resolve_inside(root: &Path, path: &Path) -> Result<PathBuf, FileRefused> {
    let target = std::fs::canonicalize(path).map_err(|e| FileRefused::Io(e.to_string()))?;
    if target.starts_with(root) {
        Ok(target)
    } else {
        Err(FileRefused::Outside {
            target,
            root: root.to_owned(),
        })
    }
}

/// The text of the file `relative` names in the directory `dir`, as [`read_regular`] reads it:
/// a relative path whose every link resolves inside `dir` (a `..` out of it or an absolute path
/// is refused), a regular file of at most `cap` bytes.
pub fn read_inside(dir: &Path, relative: &Path, cap: u64) -> Result<String, FileRefused> {
    if relative.is_absolute() {
        return Err(FileRefused::Absolute(dir.to_owned()));
    }
    let root = std::fs::canonicalize(dir).map_err(|e| FileRefused::Io(e.to_string()))?;
    read_regular(&resolve_inside(&root, &root.join(relative))?, cap)
}

/// Whether a link at a path's last component is followed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Links {
    /// Refused (`O_NOFOLLOW`): the path names the file itself. For paths whose links were
    /// resolved and checked first, and for paths from someone who must not point elsewhere.
    #[default]
    Refuse,
    /// Followed: what the link points to is checked and read (a Kubernetes ConfigMap or Secret
    /// mount is a chain of links).
    Follow,
}

/// The text of the regular file at `path`, at most `cap` bytes, following no link at its last
/// component (resolve links first and check where they point). Never blocks on a FIFO, never
/// reads more than `cap + 1` bytes.
pub fn read_regular(path: &Path, cap: u64) -> Result<String, FileRefused> {
    let mut file = open_regular(path, cap, Links::Refuse)?;
    let mut bytes = Vec::new();
    read_to_cap(&mut file, &mut bytes, cap)?;
    String::from_utf8(bytes).map_err(|_| FileRefused::NotText)
}

/// The regular file at `path`, of at most `cap` bytes by its size, open for reading: its type
/// and size checked on the path and again on the handle, a link at the last component followed
/// or refused as `links` says. Never blocks on a FIFO; nothing is read.
pub fn open_regular(path: &Path, cap: u64, links: Links) -> Result<File, FileRefused> {
    let io = |e: std::io::Error| FileRefused::Io(e.to_string());
    check_path(path, cap, links)?;
    let mut options = std::fs::File::options();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(match links {
            Links::Refuse => libc::O_NONBLOCK | libc::O_NOFOLLOW,
            Links::Follow => libc::O_NONBLOCK,
        });
    }
    let file = options.open(path).map_err(|e| match e.raw_os_error() {
        // O_NOFOLLOW's answer for a link at the last component (swapped in after the check).
        Some(libc::ELOOP) if links == Links::Refuse => FileRefused::NotRegular("a symbolic link"),
        _ => io(e),
    })?;
    // What was opened, which may not be what was checked.
    check(&file.metadata().map_err(io)?, cap)?;
    Ok(file)
}

/// Whether `path` is a regular file of at most `cap` bytes by its size, a link at its last
/// component followed or refused as `links` says; looked at, not opened.
pub fn check_path(path: &Path, cap: u64, links: Links) -> Result<(), FileRefused> {
    let md = match links {
        Links::Refuse => std::fs::symlink_metadata(path),
        Links::Follow => std::fs::metadata(path),
    };
    check(&md.map_err(|e| FileRefused::Io(e.to_string()))?, cap)
}

/// Reads the rest of `file` onto `bytes`, refusing it once `bytes` would hold more than `cap`:
/// at most `cap + 1` bytes in all are ever held, whatever the file's size said.
pub fn read_to_cap(file: &mut File, bytes: &mut Vec<u8>, cap: u64) -> Result<(), FileRefused> {
    let left = cap.saturating_add(1).saturating_sub(bytes.len() as u64);
    file.take(left)
        .read_to_end(bytes)
        .map_err(|e| FileRefused::Io(e.to_string()))?;
    let size = bytes.len() as u64;
    if size > cap {
        return Err(FileRefused::TooLarge { size, cap });
    }
    Ok(())
}

/// A regular file of at most `cap` bytes.
fn check(md: &std::fs::Metadata, cap: u64) -> Result<(), FileRefused> {
    if !md.file_type().is_file() {
        return Err(FileRefused::NotRegular(type_name(md.file_type())));
    }
    if md.len() > cap {
        return Err(FileRefused::TooLarge {
            size: md.len(),
            cap,
        });
    }
    Ok(())
}

/// Makes a FIFO at `path` (for tests of what refuses one).
#[cfg(all(test, unix))]
pub(crate) fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo").arg(path).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo {}", path.display());
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_a_device_a_link_and_a_file_over_the_cap_are_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("pipe.yaml");
        mkfifo(&fifo);
        assert_eq!(
            read_regular(&fifo, 100),
            Err(FileRefused::NotRegular("a FIFO"))
        );
        assert_eq!(
            read_regular(Path::new("/dev/zero"), 100),
            Err(FileRefused::NotRegular("a character device"))
        );
        let link = d.path().join("zero.yaml");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert_eq!(
            read_regular(&link, 100),
            Err(FileRefused::NotRegular("a symbolic link"))
        );
        let big = d.path().join("big.yaml");
        std::fs::write(&big, "x".repeat(101)).unwrap();
        assert_eq!(
            read_regular(&big, 100),
            Err(FileRefused::TooLarge {
                size: 101,
                cap: 100
            })
        );
        std::fs::write(&big, "x".repeat(100)).unwrap();
        assert_eq!(read_regular(&big, 100).unwrap().len(), 100);
    }

    #[test]
    fn a_followed_link_is_checked_and_read_as_what_it_points_to() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a.yaml"), "kind: Pod").unwrap();
        let (to_file, to_zero) = (d.path().join("file"), d.path().join("zero"));
        std::os::unix::fs::symlink(d.path().join("a.yaml"), &to_file).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &to_zero).unwrap();
        let mut f = open_regular(&to_file, 100, Links::Follow).unwrap();
        let mut bytes = Vec::new();
        read_to_cap(&mut f, &mut bytes, 100).unwrap();
        assert_eq!(bytes, b"kind: Pod");
        assert_eq!(
            open_regular(&to_zero, 100, Links::Follow).err(),
            Some(FileRefused::NotRegular("a character device"))
        );
        assert_eq!(
            open_regular(&to_file, 100, Links::Refuse).err(),
            Some(FileRefused::NotRegular("a symbolic link"))
        );
    }

    #[test]
    fn a_file_whose_size_says_nothing_is_still_read_only_to_the_cap() {
        // /proc files say they have 0 bytes.
        let mut f = open_regular(Path::new("/proc/self/status"), 10, Links::Follow).unwrap();
        let mut bytes = Vec::new();
        assert_eq!(
            read_to_cap(&mut f, &mut bytes, 10),
            Err(FileRefused::TooLarge { size: 11, cap: 10 })
        );
        assert_eq!(bytes.len(), 11);
    }

    #[test]
    fn read_inside_refuses_absolute_paths_and_paths_leading_out() {
        let top = tempfile::tempdir().unwrap();
        let d = top.path().join("fixtures");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::fs::write(top.path().join("secret"), "token").unwrap();
        std::fs::write(d.join("sub/pod.yaml"), "kind: Pod").unwrap();
        std::os::unix::fs::symlink("../secret", d.join("link.yaml")).unwrap();
        std::os::unix::fs::symlink("sub/pod.yaml", d.join("in.yaml")).unwrap();
        let root = std::fs::canonicalize(&d).unwrap();
        assert_eq!(
            read_inside(&d, Path::new("sub/pod.yaml"), 100).unwrap(),
            "kind: Pod"
        );
        assert_eq!(
            read_inside(&d, Path::new("sub/../in.yaml"), 100).unwrap(),
            "kind: Pod"
        );
        let outside = FileRefused::Outside {
            target: std::fs::canonicalize(top.path().join("secret")).unwrap(),
            root,
        };
        assert_eq!(
            read_inside(&d, Path::new("../secret"), 100),
            Err(outside.clone())
        );
        assert_eq!(read_inside(&d, Path::new("link.yaml"), 100), Err(outside));
        for abs in ["/dev/zero", "/etc/passwd"] {
            assert_eq!(
                read_inside(&d, Path::new(abs), 100),
                Err(FileRefused::Absolute(d.clone()))
            );
        }
        assert!(matches!(
            read_inside(&d, Path::new("missing.yaml"), 100),
            Err(FileRefused::Io(_))
        ));
    }
}
