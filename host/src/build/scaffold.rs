//! `wisp new`: an out-of-tree plugin that builds, tests and checks as written: the manifest (with
//! the SDK dependency and, for Rust, the examples' release profile), a source with one handler
//! and a settings check, `fixtures.yaml` (cases for both), a README, the SDK and the WIT.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use super::Lang;
use super::embedded::{self, File};
use super::toolchain::{COMPONENTIZE_JS, COMPONENTIZE_PY};

const FIXTURES: &str = include_str!("../../templates/fixtures.yaml");
const README: &str = include_str!("../../templates/README.md");
const RUST_MANIFEST: &str = include_str!("../../templates/rust/Cargo.toml");
const RUST_SOURCE: &str = include_str!("../../templates/rust/src/lib.rs");
const PY_MANIFEST: &str = include_str!("../../templates/python/pyproject.toml");
const PY_SOURCE: &str = include_str!("../../templates/python/app.py");
const JS_MANIFEST: &str = include_str!("../../templates/js/package.json");
const JS_SOURCE: &str = include_str!("../../templates/js/app.js");
const GITIGNORE: &str = "dist/\ntarget/\nnode_modules/\n__pycache__/\n";

/// Where a language's SDK goes in a scaffold (`wisp build` looks there first).
pub fn sdk_dir(lang: Lang) -> &'static str {
    match lang {
        Lang::Rust => "wisp-sdk",
        Lang::Python => "vendor",
        Lang::Js => "vendor/wisp-plugin",
    }
}

/// A plugin's name: a DNS label (as the host config's plugin names), also a valid crate and
/// package name.
pub fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok {
        bail!(
            "plugin name {name:?}: use 1-63 lowercase letters, digits and '-', starting with a \
             letter and not ending with '-' (e.g. require-owner)"
        );
    }
    Ok(())
}

/// The manifest, source and README lines of `lang`, placeholders filled.
fn files(lang: Lang, name: &str) -> Vec<(String, String)> {
    let (manifest, source, sources, manifest_note, build_note, lang_name) = match lang {
        Lang::Rust => (
            "Cargo.toml",
            RUST_SOURCE,
            "src/lib.rs",
            "the SDK by path and the release profile",
            "`wisp build` runs `cargo build --release --target wasm32-wasip2` (add the target once: \
             `rustup target add wasm32-wasip2`).",
            "Rust",
        ),
        Lang::Python => (
            "pyproject.toml",
            PY_SOURCE,
            "app.py",
            "the componentize-py version it builds with",
            "`wisp build` installs the pinned componentize-py into Wisp's cache on first use \
             (python3 >= 3.10 with venv, and PyPI).",
            "Python",
        ),
        Lang::Js => (
            "package.json",
            JS_SOURCE,
            "app.js",
            "`@wisp/plugin` from vendor/ (`npm install --omit=peer` links it for node and editors)",
            "`wisp build` installs the pinned componentize-js into Wisp's cache on first use \
             (node >= 18 with npm, and npm's registry), and resolves `import ... from \
             '@wisp/plugin'` to the SDK in vendor/.",
            "JavaScript",
        ),
    };
    let fill = |t: &str| {
        t.replace("__NAME__", name)
            .replace("__PY_VERSION__", COMPONENTIZE_PY)
            .replace("__JS_VERSION__", COMPONENTIZE_JS)
            .replace("__LANGARG__", lang.arg())
            .replace("__LANG__", lang_name)
            .replace("__SOURCES__", sources)
            .replace("__MANIFEST_NOTE__", manifest_note)
            .replace("__MANIFEST__", manifest)
            .replace("__BUILD_NOTE__", build_note)
            .replace("__SDK__", &format!("{}/", sdk_dir(lang)))
    };
    let manifest_text = match lang {
        Lang::Rust => RUST_MANIFEST,
        Lang::Python => PY_MANIFEST,
        Lang::Js => JS_MANIFEST,
    };
    vec![
        (manifest.to_owned(), fill(manifest_text)),
        (sources.to_owned(), fill(source)),
        ("fixtures.yaml".to_owned(), fill(FIXTURES)),
        ("README.md".to_owned(), fill(README)),
        (".gitignore".to_owned(), GITIGNORE.to_owned()),
        ("wit/wisp.wit".to_owned(), embedded::WIT.to_owned()),
    ]
}

/// Writes the SDK of `lang` under `dir`.
pub fn write_sdk(lang: Lang, dir: &Path) -> std::io::Result<()> {
    let sdk = dir.join(sdk_dir(lang));
    let files: &[File] = match lang {
        Lang::Rust => {
            std::fs::create_dir_all(sdk.join("abi"))?;
            for (path, text) in embedded::rust_sdk_manifests() {
                std::fs::write(sdk.join(path), text)?;
            }
            &embedded::RUST_SDK
        }
        Lang::Python => &embedded::PYTHON_SDK,
        Lang::Js => &embedded::JS_SDK,
    };
    embedded::write(&sdk, files)
}

/// `wisp new`: writes the plugin `name` in `lang` into `dir` (created; it must not exist or be
/// empty). Returns the files written, relative to `dir`.
pub fn new(lang: Lang, name: &str, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    check_name(name)?;
    if let Ok(mut entries) = std::fs::read_dir(dir)
        && entries.next().is_some()
    {
        bail!(
            "{} is not empty: wisp new writes only into a new or empty directory",
            dir.display()
        );
    }
    if dir.exists() && !dir.is_dir() {
        bail!("{} exists and is not a directory", dir.display());
    }
    let mut written = Vec::new();
    for (path, text) in files(lang, name) {
        let to = dir.join(&path);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&to, text).with_context(|| format!("writing {}", to.display()))?;
        written.push(PathBuf::from(path));
    }
    write_sdk(lang, dir)
        .with_context(|| format!("writing the SDK into {}", dir.join(sdk_dir(lang)).display()))?;
    written.push(PathBuf::from(format!("{}/", sdk_dir(lang))));
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_labels() {
        for good in ["a", "require-owner", "ns2"] {
            check_name(good).unwrap();
        }
        for bad in ["", "Owner", "2ns", "a_b", "a-", &"a".repeat(64)] {
            let e = check_name(bad).unwrap_err().to_string();
            assert!(e.contains("lowercase letters"), "{bad}: {e}");
        }
    }

    #[test]
    fn every_placeholder_is_filled() {
        for lang in [Lang::Rust, Lang::Python, Lang::Js] {
            for (path, text) in files(lang, "require-owner") {
                let left = text
                    .match_indices("__")
                    .any(|(i, _)| text[i + 2..].starts_with(|c: char| c.is_ascii_uppercase()));
                assert!(!left, "{lang:?} {path}: {text}");
            }
        }
    }

    #[test]
    fn a_directory_with_files_is_refused_and_kept() {
        let d = std::env::temp_dir().join(format!("wisp-new-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("keep.txt"), "mine").unwrap();
        let e = new(Lang::Js, "x", &d).unwrap_err().to_string();
        assert!(e.contains("is not empty"), "{e}");
        assert_eq!(std::fs::read_to_string(d.join("keep.txt")).unwrap(), "mine");
        assert!(!d.join("app.js").exists());
        let _ = std::fs::remove_dir_all(&d);
    }
}
