//! The plugin SDKs and the WIT, compiled into the `wisp` binary: `wisp new` writes them into a
//! scaffold and `wisp build` uses them for what a plugin's directory lacks, so an out-of-tree
//! plugin builds with no checkout of this repository (the SDKs are not published).

/// A file: its path relative to the SDK's directory, and its contents.
pub type File = (&'static str, &'static str);

/// `wit/wisp.wit`: the world `wisp:plugin/plugin`.
pub const WIT: &str = include_str!("../../../wit/wisp.wit");

/// The Rust crate `wisp-sdk` (plugin-sdk/) and the ABI codec it depends on, `wisp-abi`
/// (plugin-sdk/abi/, its path dependency `abi`), without their tests (they read the
/// repository's ABI vectors). Their `Cargo.toml`s inherit from this workspace:
/// [`rust_sdk_manifests`] gives them standalone.
pub const RUST_SDK: [File; 13] = [
    ("src/lib.rs", include_str!("../../../plugin-sdk/src/lib.rs")),
    ("src/abi.rs", include_str!("../../../plugin-sdk/src/abi.rs")),
    (
        "src/admission.rs",
        include_str!("../../../plugin-sdk/src/admission.rs"),
    ),
    (
        "src/error.rs",
        include_str!("../../../plugin-sdk/src/error.rs"),
    ),
    ("src/sys.rs", include_str!("../../../plugin-sdk/src/sys.rs")),
    (
        "src/testing.rs",
        include_str!("../../../plugin-sdk/src/testing.rs"),
    ),
    (
        "abi/src/lib.rs",
        include_str!("../../../plugin-sdk/abi/src/lib.rs"),
    ),
    (
        "abi/src/batch.rs",
        include_str!("../../../plugin-sdk/abi/src/batch.rs"),
    ),
    (
        "abi/src/check.rs",
        include_str!("../../../plugin-sdk/abi/src/check.rs"),
    ),
    (
        "abi/src/encode.rs",
        include_str!("../../../plugin-sdk/abi/src/encode.rs"),
    ),
    (
        "abi/src/layout.rs",
        include_str!("../../../plugin-sdk/abi/src/layout.rs"),
    ),
    (
        "abi/src/list.rs",
        include_str!("../../../plugin-sdk/abi/src/list.rs"),
    ),
    (
        "abi/src/object.rs",
        include_str!("../../../plugin-sdk/abi/src/object.rs"),
    ),
];

const RUST_SDK_MANIFEST: &str = include_str!("../../../plugin-sdk/Cargo.toml");
const RUST_ABI_MANIFEST: &str = include_str!("../../../plugin-sdk/abi/Cargo.toml");

/// The Python package `wisp_plugin` (plugin-sdk/python/wisp_plugin).
pub const PYTHON_SDK: [File; 9] = [
    (
        "wisp_plugin/__init__.py",
        include_str!("../../../plugin-sdk/python/wisp_plugin/__init__.py"),
    ),
    (
        "wisp_plugin/abi.py",
        include_str!("../../../plugin-sdk/python/wisp_plugin/abi.py"),
    ),
    (
        "wisp_plugin/actions.py",
        include_str!("../../../plugin-sdk/python/wisp_plugin/actions.py"),
    ),
    (
        "wisp_plugin/cache.py",
        include_str!("../../../plugin-sdk/python/wisp_plugin/cache.py"),
    ),
    (
        "wisp_plugin/errors.py",
        include_str!("../../../plugin-sdk/python/wisp_plugin/errors.py"),
    ),
    (
        "wisp_plugin/fmt.py",
        include_str!("../../../plugin-sdk/python/wisp_plugin/fmt.py"),
    ),
    (
        "wisp_plugin/metrics.py",
        include_str!("../../../plugin-sdk/python/wisp_plugin/metrics.py"),
    ),
    (
        "wisp_plugin/policy.py",
        include_str!("../../../plugin-sdk/python/wisp_plugin/policy.py"),
    ),
    (
        "wisp_plugin/settings.py",
        include_str!("../../../plugin-sdk/python/wisp_plugin/settings.py"),
    ),
];

/// The npm package `@wisp/plugin` (plugin-sdk/js).
pub const JS_SDK: [File; 5] = [
    (
        "package.json",
        include_str!("../../../plugin-sdk/js/package.json"),
    ),
    (
        "wisp-plugin.js",
        include_str!("../../../plugin-sdk/js/wisp-plugin.js"),
    ),
    ("abi.js", include_str!("../../../plugin-sdk/js/abi.js")),
    (
        "settings.js",
        include_str!("../../../plugin-sdk/js/settings.js"),
    ),
    (
        "README.md",
        include_str!("../../../plugin-sdk/js/README.md"),
    ),
];

/// The `Cargo.toml`s of the SDK's crates (path relative to the SDK's directory, text), with
/// what they inherit from this workspace written out.
pub fn rust_sdk_manifests() -> [(&'static str, String); 2] {
    [
        ("Cargo.toml", standalone(RUST_SDK_MANIFEST)),
        ("abi/Cargo.toml", standalone(RUST_ABI_MANIFEST)),
    ]
}

/// A workspace member's manifest with what it inherits written out (and no lints).
fn standalone(manifest: &str) -> String {
    let mut out = String::new();
    let mut skip_lints = false;
    for line in manifest.lines() {
        if skip_lints {
            if line.starts_with('[') {
                skip_lints = false;
            } else {
                continue;
            }
        }
        let line = match line.trim() {
            "version.workspace = true" => format!("version = \"{}\"", env!("CARGO_PKG_VERSION")),
            "edition.workspace = true" => "edition = \"2024\"".to_owned(),
            "license.workspace = true" => format!("license = \"{}\"", env!("CARGO_PKG_LICENSE")),
            "rust-version.workspace = true" => {
                format!("rust-version = \"{}\"", env!("CARGO_PKG_RUST_VERSION"))
            }
            "[lints]" => {
                skip_lints = true;
                continue;
            }
            _ => line.to_owned(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out.trim_end().to_owned() + "\n"
}

/// Writes `files` under `dir`.
pub fn write(dir: &std::path::Path, files: &[File]) -> std::io::Result<()> {
    for (path, text) in files {
        let to = dir.join(path);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&to, text)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// The files under `dir` (relative, sorted), skipping `skip` directories and names.
    fn files(dir: &Path, base: &Path, skip: &[&str], out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if skip.contains(&name.as_str()) {
                continue;
            }
            if p.is_dir() {
                files(&p, base, skip, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().to_string_lossy().into_owned());
            }
        }
        out.sort();
    }

    fn listed(files: &[File]) -> Vec<String> {
        let mut v: Vec<String> = files.iter().map(|(p, _)| p.to_string()).collect();
        v.sort();
        v
    }

    /// A file added to an SDK is embedded too (or this fails, naming it).
    #[test]
    fn every_sdk_file_is_embedded() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join("plugin-sdk");
        let mut rust = Vec::new();
        files(
            &root.join("src"),
            &root,
            &["tests.rs", "abi", "testing"],
            &mut rust,
        );
        // The codec's sources, without its tests (`check/` holds only the check's).
        files(
            &root.join("abi").join("src"),
            &root,
            &["tests.rs", "check"],
            &mut rust,
        );
        rust.sort();
        // abi/ and testing/ hold only their modules' tests.
        assert_eq!(listed(&RUST_SDK), rust);
        let py = root.join("python");
        let mut python = Vec::new();
        files(&py.join("wisp_plugin"), &py, &["__pycache__"], &mut python);
        assert_eq!(listed(&PYTHON_SDK), python);
        let js = root.join("js");
        let mut javascript = Vec::new();
        files(&js, &js, &["test", "node_modules"], &mut javascript);
        assert_eq!(listed(&JS_SDK), javascript);
        for d in ["abi", "testing"] {
            let mut inner = Vec::new();
            files(&root.join("src").join(d), &root, &[], &mut inner);
            assert_eq!(
                inner,
                [format!("src/{d}/tests.rs")],
                "src/{d}/ holds tests only"
            );
        }
    }

    #[test]
    fn the_rust_sdk_manifests_stand_alone() {
        let [(_, m), (_, abi)] = rust_sdk_manifests();
        assert!(!abi.contains("workspace"), "{abi}");
        assert!(abi.contains("name = \"wisp-abi\""), "{abi}");
        assert!(m.contains("wisp-abi = { path = \"abi\" }"), "{m}");
        assert!(!m.contains("workspace"), "{m}");
        assert!(m.contains("name = \"wisp-sdk\""), "{m}");
        assert!(m.contains("edition = \"2024\""), "{m}");
        assert!(m.contains("wit-bindgen"), "{m}");
        assert!(m.contains("[features]"), "{m}");
    }
}
