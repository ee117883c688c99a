//! Reading a plugin's module file: the one reader of every module path, whoever named it (the
//! config file, a `WispPlugin` or `ClusterWispPlugin`, `wisp check` / `test` / `replay`, the
//! reloader looking at a changed file).
//!
//! A module path may come from a tenant (a custom resource), so the file is read as
//! [`crate::files`] reads what someone else named: a regular file only (a FIFO, a device, a
//! socket, a directory is refused, named, and never read; a device is not even opened), its
//! size checked against the cap (`engine.maxModuleSize`) on the open handle before any byte is
//! read, then the first 8 bytes, which must be a WebAssembly header, then the rest, never more
//! than the cap plus one byte: a `/proc` file that says it has 0 bytes, or a file that grows
//! after its size was looked at, is refused, not read until the host runs out of memory.
//!
//! Whether a link at the path's last component is followed is the spec's
//! ([`crate::plugin::spec::PluginSpec::module_links`]): the config file's paths follow links (a
//! Kubernetes ConfigMap mount is a chain of them), a custom resource's do not.

use std::io::Read;
use std::path::Path;

use crate::files::{self, FileRefused, Links};
use crate::plugin::error::PluginError;

pub use crate::plugin::compile::DEFAULT_MAX_MODULE_SIZE;
pub use crate::plugin::compile::loaded::is_wasm_header;

/// How many bytes of a module are read before anything else: the magic and the version.
const HEADER: u64 = crate::plugin::compile::loaded::WASM_HEADER as u64;

/// The bytes of the module file `path` of plugin `plugin` (named in errors): a regular file of
/// at most `cap` bytes that starts as WebAssembly does, a link at its last component followed
/// or refused as `links` says. Never blocks, never holds more than `cap + 1` bytes of it.
pub fn read_module(
    plugin: &str,
    path: &Path,
    links: Links,
    cap: u64,
) -> Result<Vec<u8>, PluginError> {
    let refused = |e: FileRefused| refusal(plugin, path, e);
    let mut file = files::open_regular(path, cap, links).map_err(refused)?;
    let mut bytes = Vec::new();
    (&mut file)
        .take(HEADER)
        .read_to_end(&mut bytes)
        .map_err(|e| refused(FileRefused::Io(e.to_string())))?;
    if !is_wasm_header(&bytes) {
        return Err(PluginError::NotWasm {
            plugin: plugin.to_owned(),
            path: path.to_owned(),
        });
    }
    files::read_to_cap(&mut file, &mut bytes, cap).map_err(refused)?;
    Ok(bytes)
}

/// Why the module file of `plugin` at `path` was not read, as the loader's error.
fn refusal(plugin: &str, path: &Path, e: FileRefused) -> PluginError {
    let (plugin, path) = (plugin.to_owned(), path.to_owned());
    match e {
        FileRefused::NotRegular(kind) => PluginError::NotRegularFile { plugin, path, kind },
        FileRefused::TooLarge { size, cap } => PluginError::ModuleTooLarge {
            plugin,
            path,
            size,
            limit: cap,
        },
        FileRefused::Io(detail) => PluginError::Read {
            plugin,
            path,
            source: std::io::Error::other(detail),
        },
        // Not said by `open_regular` or `read_to_cap`, which take no directory and read bytes.
        other => PluginError::Read {
            plugin,
            path,
            source: std::io::Error::other(other.to_string()),
        },
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    const WASM: &[u8] = b"\0asm\x0d\0\x01\0rest of a component";

    fn refused(path: &Path, links: Links, cap: u64) -> String {
        read_module("p", path, links, cap).unwrap_err().to_string()
    }

    #[test]
    fn a_regular_file_starting_as_wasm_is_read_whole() {
        let d = tempfile::tempdir().unwrap();
        let m = d.path().join("m.wasm");
        std::fs::write(&m, WASM).unwrap();
        for links in [Links::Refuse, Links::Follow] {
            assert_eq!(
                read_module("p", &m, links, WASM.len() as u64).unwrap(),
                WASM
            );
        }
    }

    #[test]
    fn a_fifo_is_refused_naming_it_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("m.wasm");
        crate::files::mkfifo(&fifo);
        for links in [Links::Refuse, Links::Follow] {
            assert_eq!(
                refused(&fifo, links, 1 << 20),
                format!(
                    "plugin \"p\": module {}: is a FIFO, not a regular file; refused",
                    fifo.display()
                )
            );
        }
    }

    #[test]
    fn a_device_and_a_directory_are_refused_naming_what_they_are() {
        assert_eq!(
            refused(Path::new("/dev/zero"), Links::Follow, 1 << 20),
            "plugin \"p\": module /dev/zero: is a character device, not a regular file; refused"
        );
        let d = tempfile::tempdir().unwrap();
        assert_eq!(
            refused(d.path(), Links::Follow, 1 << 20),
            format!(
                "plugin \"p\": module {}: is a directory, not a regular file; refused",
                d.path().display()
            )
        );
    }

    #[test]
    fn a_link_is_refused_where_links_are_not_followed_and_read_where_they_are() {
        let d = tempfile::tempdir().unwrap();
        let (m, link) = (d.path().join("m.wasm"), d.path().join("link.wasm"));
        std::fs::write(&m, WASM).unwrap();
        std::os::unix::fs::symlink(&m, &link).unwrap();
        assert_eq!(
            refused(&link, Links::Refuse, 1 << 20),
            format!(
                "plugin \"p\": module {}: is a symbolic link, not a regular file; refused",
                link.display()
            )
        );
        assert_eq!(
            read_module("p", &link, Links::Follow, 1 << 20).unwrap(),
            WASM
        );
    }

    #[test]
    fn a_file_over_the_cap_is_refused_before_it_is_read() {
        let d = tempfile::tempdir().unwrap();
        let m = d.path().join("m.wasm");
        std::fs::write(&m, WASM).unwrap();
        let cap = WASM.len() as u64 - 1;
        assert_eq!(
            refused(&m, Links::Refuse, cap),
            format!(
                "plugin \"p\": module {}: is over engine.maxModuleSize ({cap} bytes): at least {} \
                 bytes; refused",
                m.display(),
                WASM.len()
            )
        );
    }

    #[test]
    fn a_file_that_is_not_wasm_is_refused_after_its_first_bytes() {
        let d = tempfile::tempdir().unwrap();
        let (text, short) = (d.path().join("m.wat"), d.path().join("short.wasm"));
        std::fs::write(&text, "(component)").unwrap();
        std::fs::write(&short, b"\0asm").unwrap();
        for m in [&text, &short] {
            assert_eq!(
                refused(m, Links::Refuse, 1 << 20),
                format!(
                    "plugin \"p\": module {}: not a WebAssembly file (it does not start with \
                     \"\\0asm\")",
                    m.display()
                )
            );
        }
        // A /proc file says it has 0 bytes and holds far more: its first bytes refuse it.
        assert!(
            refused(Path::new("/proc/self/pagemap"), Links::Follow, 1 << 20)
                .contains("not a WebAssembly file"),
        );
    }

    #[test]
    fn a_missing_file_cannot_be_read() {
        let e = refused(Path::new("/nonexistent/m.wasm"), Links::Refuse, 1 << 20);
        assert!(
            e.starts_with("plugin \"p\": module /nonexistent/m.wasm: cannot read: No such file"),
            "{e}"
        );
    }
}
