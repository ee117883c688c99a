//! Plugins from source: `wisp new` ([`scaffold`]) writes an out-of-tree plugin, `wisp build`
//! ([`build`]) builds one into a component: Rust with cargo for wasm32-wasip2, Python with
//! componentize-py, JavaScript with componentize-js, those two pinned and installed on first
//! use ([`toolchain`], which `cargo xtask plugins` shares). What a plugin's directory lacks (the
//! SDK, the WIT) comes from the copies compiled into the binary ([`embedded`]): no checkout of
//! this repository is needed.

pub mod embedded;
pub mod scaffold;
pub mod toolchain;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

use toolchain::Toolchain;

/// A plugin's language.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Lang {
    /// A cdylib crate, built by cargo.
    Rust,
    /// `app.py`, built by componentize-py.
    Python,
    /// `app.js` (or package.json's `main`), built by componentize-js.
    Js,
}

impl Lang {
    /// As `--lang` names it.
    pub fn arg(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Js => "js",
        }
    }
}

/// Where `wisp build` installs the Python and JavaScript toolchains: `$WISP_TOOLCHAINS`, else
/// `$XDG_CACHE_HOME/wisp/toolchains` or `~/.cache/wisp/toolchains`.
pub fn toolchains_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("WISP_TOOLCHAINS") {
        return d.into();
    }
    crate::plugin::compile::wisp_cache_dir("toolchains")
        .unwrap_or_else(|| std::env::temp_dir().join("wisp").join("toolchains"))
}

/// The language of the plugin in `dir`, from its manifest.
pub fn detect(dir: &Path) -> anyhow::Result<Lang> {
    if !dir.is_dir() {
        bail!("{} is not a directory", dir.display());
    }
    if dir.join("Cargo.toml").is_file() {
        Ok(Lang::Rust)
    } else if dir.join("pyproject.toml").is_file() || dir.join("app.py").is_file() {
        Ok(Lang::Python)
    } else if dir.join("package.json").is_file() {
        Ok(Lang::Js)
    } else {
        bail!(
            "no plugin in {}: none of Cargo.toml (Rust), pyproject.toml or app.py (Python), \
             package.json (JavaScript); `wisp new --lang rust|python|js NAME` writes one",
            dir.display()
        )
    }
}

/// The first `name = "..."` of `section` in a TOML file (Cargo.toml's `[package]`,
/// pyproject.toml's `[project]`).
fn toml_name(text: &str, section: &str) -> Option<String> {
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == section;
        } else if inside && let Some(v) = line.strip_prefix("name") {
            let v = v.trim_start().strip_prefix('=')?.trim();
            return Some(v.trim_matches(|c| c == '"' || c == '\'').to_owned());
        }
    }
    None
}

/// The plugin's name, for `dist/<name>.wasm`: its manifest's, else its directory's.
fn plugin_name(dir: &Path, lang: Lang) -> String {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    let named = match lang {
        Lang::Rust => toml_name(&read("Cargo.toml"), "[package]"),
        Lang::Python => toml_name(&read("pyproject.toml"), "[project]"),
        Lang::Js => serde_json::from_str::<serde_json::Value>(&read("package.json"))
            .ok()
            .and_then(|v| v.get("name")?.as_str().map(str::to_owned)),
    };
    let name = named.unwrap_or_else(|| {
        let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        abs.file_name()
            .map_or("plugin".into(), |n| n.to_string_lossy().into_owned())
    });
    // `@scope/name` -> `name`.
    name.rsplit('/').next().unwrap_or(&name).to_owned()
}

/// A directory removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `wisp build`: builds the plugin in `dir` into `out` (default `dir/dist/<name>.wasm`) and
/// returns where it is. `say` is told of toolchain installs and of each step.
pub fn build(dir: &Path, out: Option<&Path>, say: &dyn Fn(String)) -> anyhow::Result<PathBuf> {
    let dir = &std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let lang = detect(dir)?;
    let out = match out {
        Some(o) => o.to_path_buf(),
        None => dir
            .join("dist")
            .join(format!("{}.wasm", plugin_name(dir, lang))),
    };
    let out = std::path::absolute(&out).unwrap_or(out);
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    // Staged sources, the SDK and WIT when the plugin lacks them, and the component until it
    // is whole: outside the plugin's directory, removed when done.
    static BUILDS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let scratch =
        Scratch(std::env::temp_dir().join(format!("wisp-build-{}-{n}", std::process::id())));
    let _ = std::fs::remove_dir_all(&scratch.0);
    std::fs::create_dir_all(&scratch.0)
        .with_context(|| format!("creating {}", scratch.0.display()))?;
    let built = scratch.0.join("component.wasm");
    match lang {
        Lang::Rust => build_rust(dir, &built)?,
        Lang::Python => build_python(dir, &scratch.0, &built, say)?,
        Lang::Js => build_js(dir, &scratch.0, &built, say)?,
    }
    // Whole or not at all: a copy beside it, then a rename over the old one.
    let partial = out.with_extension("wasm.partial");
    std::fs::copy(&built, &partial).with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, &out).with_context(|| format!("writing {}", out.display()))?;
    Ok(out)
}

/// The WIT directory: the plugin's `wit/` when it has `wit/wisp.wit`, else the embedded WIT
/// written under `scratch`.
fn wit_dir(dir: &Path, scratch: &Path) -> anyhow::Result<PathBuf> {
    let own = dir.join("wit");
    if own.join("wisp.wit").is_file() {
        return Ok(std::path::absolute(&own)?);
    }
    let wit = scratch.join("wit");
    embedded::write(&wit, &[("wisp.wit", embedded::WIT)])?;
    Ok(wit)
}

/// The SDK directory: the first of `own` holding `marker`, else `lang`'s embedded SDK written
/// under `scratch`.
fn sdk_dir(lang: Lang, own: &[PathBuf], marker: &str, scratch: &Path) -> anyhow::Result<PathBuf> {
    if let Some(d) = own.iter().find(|d| d.join(marker).is_file()) {
        return Ok(std::path::absolute(d)?);
    }
    let sdk = scratch.join("sdk");
    std::fs::create_dir_all(&sdk)?;
    scaffold::write_sdk(lang, &sdk)?;
    Ok(sdk.join(scaffold::sdk_dir(lang)))
}

fn build_python(
    dir: &Path,
    scratch: &Path,
    out: &Path,
    say: &dyn Fn(String),
) -> anyhow::Result<()> {
    if !dir.join("app.py").is_file() {
        bail!(
            "{} is missing: a Python plugin is the module `app` (app.py), exporting `Listener`",
            dir.join("app.py").display()
        );
    }
    let tool = toolchain::toolchain(Toolchain::Python, &toolchains_dir(), say)?;
    let wit = wit_dir(dir, scratch)?;
    let sdk = sdk_dir(
        Lang::Python,
        &[dir.join("vendor")],
        "wisp_plugin/__init__.py",
        scratch,
    )?;
    // The plugin's own sources only (not dist/, vendor/ ...): componentize-py bundles what its
    // paths hold.
    let src = scratch.join("src");
    toolchain::copy_tree(dir, &src, &|n| !toolchain::NOT_SOURCES.contains(&n))?;
    say(format!(
        "building {} with componentize-py {}",
        dir.display(),
        toolchain::COMPONENTIZE_PY
    ));
    toolchain::componentize_py(&tool, &wit, &[&src, &sdk], "app", out)
}

fn build_js(dir: &Path, scratch: &Path, out: &Path, say: &dyn Fn(String)) -> anyhow::Result<()> {
    let manifest = dir.join("package.json");
    let text = std::fs::read_to_string(&manifest)
        .with_context(|| format!("reading {}", manifest.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", manifest.display()))?;
    let entry = PathBuf::from(
        json.get("main")
            .and_then(|m| m.as_str())
            .unwrap_or("app.js"),
    );
    if !dir.join(&entry).is_file() || entry.is_absolute() {
        bail!(
            "{} is missing: the plugin's entry module (package.json's `main`, default app.js)",
            dir.join(&entry).display()
        );
    }
    let tool = toolchain::toolchain(Toolchain::Js, &toolchains_dir(), say)?;
    let wit = wit_dir(dir, scratch)?;
    let own = [
        dir.join("vendor").join("wisp-plugin"),
        dir.join("node_modules").join(toolchain::JS_SDK_PACKAGE),
    ];
    let sdk = sdk_dir(Lang::Js, &own, "package.json", scratch)?;
    say(format!(
        "building {} with componentize-js {}",
        dir.display(),
        toolchain::COMPONENTIZE_JS
    ));
    toolchain::componentize_js(&tool, dir, &entry, &sdk, &wit, out)
}

/// Fails naming the fix when the Rust target for components is not installed.
fn check_rust_target(dir: &Path) -> anyhow::Result<()> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(&rustc)
        .current_dir(dir)
        .args(["--print", "sysroot"])
        .output()
        .with_context(|| {
            format!(
                "could not run {rustc:?}: install Rust (https://rustup.rs) to build a Rust plugin"
            )
        })?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let lib = sysroot.join("lib").join("rustlib").join("wasm32-wasip2");
    if !lib.is_dir() {
        bail!(
            "the Rust target wasm32-wasip2 is not installed ({} is missing): run `rustup target \
             add wasm32-wasip2`",
            lib.display()
        );
    }
    Ok(())
}

fn build_rust(dir: &Path, out: &Path) -> anyhow::Result<()> {
    check_rust_target(dir)?;
    let manifest = std::path::absolute(dir.join("Cargo.toml"))?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut c = Command::new(&cargo);
    c.args(["build", "--release", "--target", "wasm32-wasip2"])
        .arg("--message-format=json-render-diagnostics")
        .arg("--manifest-path")
        .arg(&manifest)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let run = c
        .output()
        .with_context(|| format!("could not run {cargo:?}: install Rust (https://rustup.rs)"))?;
    if !run.status.success() {
        bail!(
            "cargo build of {} failed (its errors are above)",
            manifest.display()
        );
    }
    let wasm = String::from_utf8_lossy(&run.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| {
            m["reason"] == "compiler-artifact"
                && m["manifest_path"].as_str().map(Path::new) == Some(manifest.as_path())
                && m["target"]["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "cdylib"))
        })
        .flat_map(|m| {
            let files = m["filenames"].as_array().cloned().unwrap_or_default();
            files
                .into_iter()
                .filter_map(|f| f.as_str().map(PathBuf::from))
                .filter(|f| f.extension().is_some_and(|e| e == "wasm"))
                .collect::<Vec<_>>()
        })
        .next_back();
    let Some(wasm) = wasm else {
        bail!(
            "{} builds no component: a plugin crate needs `[lib] crate-type = [\"cdylib\"]`",
            manifest.display()
        );
    };
    std::fs::copy(&wasm, out).with_context(|| format!("copying {}", wasm.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_manifest() {
        let cargo = "[package]\nname = \"ns-owner\"\n[dependencies]\nname = \"x\"\n";
        assert_eq!(toml_name(cargo, "[package]").as_deref(), Some("ns-owner"));
        assert_eq!(toml_name("[tool.x]\nname = 'a'\n", "[project]"), None);
    }

    #[test]
    fn a_directory_without_a_manifest_is_refused_naming_what_is_looked_for() {
        let d = std::env::temp_dir().join(format!("wisp-detect-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let e = detect(&d).unwrap_err().to_string();
        assert!(
            e.contains("Cargo.toml") && e.contains("package.json"),
            "{e}"
        );
        assert!(e.contains("wisp new"), "{e}");
        std::fs::write(d.join("package.json"), "{}").unwrap();
        assert_eq!(detect(&d).unwrap(), Lang::Js);
        std::fs::write(d.join("app.py"), "").unwrap();
        assert_eq!(detect(&d).unwrap(), Lang::Python);
        let _ = std::fs::remove_dir_all(&d);
    }
}
