//! The pinned toolchains of Python and JavaScript plugins, their install, and the commands that
//! build a component with them. One copy, compiled into both `wisp build` (the host's `build`
//! module, through `build/mod.rs`) and `cargo xtask plugins` (xtask/src/polyglot.rs includes this
//! file by path): it uses only std, anyhow and serde_json, which both crates have, and its doc
//! links only to its own items, which both crates have too.
//!
//! A toolchain is installed from PyPI or npm, when missing, into `<toolchains>/<py|js>-<version>`
//! (one directory per pinned version). The install holds a lock (`<dir>.lock`), so two builds
//! started at once install it once, and is marked complete only at its end, so an interrupted
//! install is redone rather than taken for a finished one.
//!
//! componentize-js maps one directory as the root of the filesystem its engine sees while it
//! pre-initialises the plugin (`--mapdir=/::<dir>`: the current directory when the entry file is
//! under it, else the entry's directory), and StarlingMonkey's loader resolves a specifier as a
//! path in that tree: `../x.js` above the root is "No such file or directory", a symlink out of
//! it "Operation not permitted", and a bare `@wisp/plugin` the file `/@wisp/plugin`. So
//! [`componentize_js`] builds from a staging directory: the plugin's sources, the SDK as
//! `node_modules/@wisp/plugin/`, and each `'@wisp/plugin'` specifier (and its subpaths, from the
//! SDK's `package.json` `exports`) rewritten to the relative path of the file it names.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// componentize-py, from PyPI.
pub const COMPONENTIZE_PY: &str = "0.25.1";
/// @bytecodealliance/componentize-js, from npm.
pub const COMPONENTIZE_JS: &str = "0.23.0";
/// The package name a JavaScript plugin imports the SDK by.
pub const JS_SDK_PACKAGE: &str = "@wisp/plugin";

/// A language built by a pinned toolchain.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Toolchain {
    /// componentize-py.
    Python,
    /// componentize-js.
    Js,
}

impl Toolchain {
    /// `python`, `js`: the examples' directory under `plugins/`.
    pub fn dir(self) -> &'static str {
        match self {
            Toolchain::Python => "python",
            Toolchain::Js => "js",
        }
    }

    /// `py`, `js`: the install directory's prefix and the examples' component suffix.
    pub fn suffix(self) -> &'static str {
        match self {
            Toolchain::Python => "py",
            Toolchain::Js => "js",
        }
    }

    /// The pinned version.
    pub fn version(self) -> &'static str {
        match self {
            Toolchain::Python => COMPONENTIZE_PY,
            Toolchain::Js => COMPONENTIZE_JS,
        }
    }
}

/// Runs `cmd`, its output kept and shown only when it fails.
pub fn quiet(mut cmd: Command) -> anyhow::Result<()> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .with_context(|| format!("could not start {shown}"))?;
    if !out.status.success() {
        bail!(
            "{shown} failed with {}:\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The toolchain's command under `toolchains`, installed first when missing; `say` is told
/// when an install starts.
pub fn toolchain(
    lang: Toolchain,
    toolchains: &Path,
    say: &dyn Fn(String),
) -> anyhow::Result<PathBuf> {
    let dir = toolchains.join(format!("{}-{}", lang.suffix(), lang.version()));
    let bin = match lang {
        Toolchain::Python => dir.join("bin").join("componentize-py"),
        Toolchain::Js => dir
            .join("node_modules")
            .join(".bin")
            .join("componentize-js"),
    };
    let complete = dir.join(".wisp-complete");
    if bin.is_file() && complete.is_file() {
        return Ok(bin);
    }
    std::fs::create_dir_all(toolchains)
        .with_context(|| format!("creating {}", toolchains.display()))?;
    let lock_path = dir.with_extension("lock");
    let lock = std::fs::File::create(&lock_path)
        .with_context(|| format!("creating {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("locking {}", lock_path.display()))?;
    // Another build may have installed it while this one waited for the lock.
    if bin.is_file() && complete.is_file() {
        return Ok(bin);
    }
    say(format!(
        "installing the {} toolchain {} into {} (once)",
        lang.dir(),
        lang.version(),
        dir.display()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    install(lang, &dir).with_context(|| {
        format!(
            "installing the {} toolchain into {}",
            lang.dir(),
            dir.display()
        )
    })?;
    if !bin.is_file() {
        bail!("{} is missing after the install", bin.display());
    }
    std::fs::write(&complete, "")?;
    Ok(bin)
}

fn install(lang: Toolchain, dir: &Path) -> anyhow::Result<()> {
    match lang {
        Toolchain::Python => {
            let mut venv = Command::new("python3");
            venv.args(["-m", "venv"]).arg(dir);
            quiet(venv).context("python3 -m venv (is python3 >= 3.10 with venv installed?)")?;
            let mut pip = Command::new(dir.join("bin").join("pip"));
            pip.args([
                "install",
                "--quiet",
                &format!("componentize-py=={COMPONENTIZE_PY}"),
            ]);
            quiet(pip).context("pip install (is PyPI reachable?)")
        }
        Toolchain::Js => {
            let mut npm = Command::new("npm");
            npm.arg("install")
                .arg("--prefix")
                .arg(dir)
                .args(["--no-audit", "--no-fund", "--silent"])
                .arg(format!(
                    "@bytecodealliance/componentize-js@{COMPONENTIZE_JS}"
                ));
            quiet(npm).context(
                "npm install (is node >= 18 with npm installed, npm's registry reachable?)",
            )
        }
    }
}

/// `componentize-py -d <wit> -w plugin componentize -p <path>... <module> -o <out>`.
pub fn componentize_py(
    tool: &Path,
    wit: &Path,
    paths: &[&Path],
    module: &str,
    out: &Path,
) -> anyhow::Result<()> {
    let mut c = Command::new(tool);
    c.arg("-d").arg(wit).args(["-w", "plugin", "componentize"]);
    for p in paths {
        c.arg("-p").arg(p);
    }
    c.arg(module).arg("-o").arg(out);
    quiet(c)
}

/// Builds the JavaScript plugin whose sources are under `src` (entry `entry`, relative to it)
/// with the SDK in `sdk` (a directory with `package.json` and the modules it exports) into
/// `out`, through a staging directory `<out>.stage` removed afterwards (see the module's doc).
pub fn componentize_js(
    tool: &Path,
    src: &Path,
    entry: &Path,
    sdk: &Path,
    wit: &Path,
    out: &Path,
) -> anyhow::Result<()> {
    let stage = out.with_extension("stage");
    let _ = std::fs::remove_dir_all(&stage);
    let built = stage_js(src, sdk, &stage).and_then(|()| {
        // The entry by its absolute (canonical) path under the current directory: componentize-js
        // then maps the current directory, not the entry's, as the root its engine sees.
        let stage = stage.canonicalize()?;
        // Without `-d http -d fetch-event` the component would import wasi:http's incoming
        // handler types, which a plugin has no use for.
        let mut c = Command::new(tool);
        c.current_dir(&stage)
            .arg(stage.join(entry))
            .arg("--wit")
            .arg(wit)
            .args([
                "--world-name",
                "plugin",
                "-d",
                "http",
                "-d",
                "fetch-event",
                "-o",
            ])
            .arg(out);
        quiet(c)
    });
    let _ = std::fs::remove_dir_all(&stage);
    built
}

/// Directories of a plugin's tree that are not its sources.
pub const NOT_SOURCES: [&str; 7] = [
    "node_modules",
    "dist",
    "target",
    ".git",
    "__pycache__",
    "vendor",
    "wit",
];

fn stage_js(src: &Path, sdk: &Path, stage: &Path) -> anyhow::Result<()> {
    let package = stage.join("node_modules").join(JS_SDK_PACKAGE);
    std::fs::create_dir_all(&package).with_context(|| format!("creating {}", package.display()))?;
    let manifest = sdk.join("package.json");
    let text = std::fs::read_to_string(&manifest)
        .with_context(|| format!("reading the SDK's {}", manifest.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not JSON", manifest.display()))?;
    // specifier -> file of the package.
    let mut exports: Vec<(String, String)> = Vec::new();
    if let Some(map) = json.get("exports").and_then(|e| e.as_object()) {
        for (sub, file) in map {
            if let Some(file) = file.as_str() {
                let spec = format!("{JS_SDK_PACKAGE}{}", sub.trim_start_matches('.'));
                exports.push((spec, file.trim_start_matches("./").to_owned()));
            }
        }
    }
    if exports.is_empty() {
        bail!(
            "{} has no `exports` naming the SDK's modules",
            manifest.display()
        );
    }
    copy_tree(sdk, &package, &|_| true)?;
    copy_tree(src, stage, &|name| !NOT_SOURCES.contains(&name))?;
    rewrite_imports(stage, stage, &exports)
}

/// Copies the files under `from` to `to`, skipping the directories `keep` refuses and the one
/// that holds `to` (when `to` is inside `from`, it would copy itself).
pub fn copy_tree(from: &Path, to: &Path, keep: &dyn Fn(&str) -> bool) -> anyhow::Result<()> {
    let top = std::path::absolute(to)?;
    copy_into(from, to, keep, &top)
}

fn copy_into(
    from: &Path,
    to: &Path,
    keep: &dyn Fn(&str) -> bool,
    top: &Path,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for e in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let e = e?;
        let name = e.file_name();
        let path = e.path();
        if path.is_dir() {
            let holds_to = std::path::absolute(&path).is_ok_and(|p| top.starts_with(p));
            if keep(&name.to_string_lossy()) && !holds_to {
                copy_into(&path, &to.join(&name), keep, top)?;
            }
        } else {
            std::fs::copy(&path, to.join(&name))
                .with_context(|| format!("copying {}", path.display()))?;
        }
    }
    Ok(())
}

/// In each `.js` / `.mjs` file under `dir` (not the staged packages), each quoted SDK specifier
/// becomes the path of its file relative to the importing file.
fn rewrite_imports(root: &Path, dir: &Path, exports: &[(String, String)]) -> anyhow::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if path.is_dir() {
            if name != "node_modules" {
                rewrite_imports(root, &path, exports)?;
            }
            continue;
        }
        if !(name.ends_with(".js") || name.ends_with(".mjs")) {
            continue;
        }
        let depth = path
            .strip_prefix(root)
            .map_or(0, |p| p.components().count().saturating_sub(1));
        let up = if depth == 0 {
            "./".to_owned()
        } else {
            "../".repeat(depth)
        };
        let mut text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let before = text.clone();
        for (spec, file) in exports {
            let to = format!("{up}node_modules/{JS_SDK_PACKAGE}/{file}");
            for q in ['\'', '"'] {
                text = text.replace(&format!("{q}{spec}{q}"), &format!("{q}{to}{q}"));
            }
        }
        if text != before {
            std::fs::write(&path, text)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdk_specifiers_become_paths_relative_to_the_importing_file() {
        let d = std::env::temp_dir().join(format!("wisp-stage-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let (src, sdk, stage) = (d.join("src"), d.join("sdk"), d.join("stage"));
        std::fs::create_dir_all(src.join("lib")).unwrap();
        std::fs::create_dir_all(src.join("node_modules/x")).unwrap();
        std::fs::create_dir_all(&sdk).unwrap();
        std::fs::write(
            sdk.join("package.json"),
            r#"{"exports": {".": "./wisp-plugin.js", "./abi": "./abi.js"}}"#,
        )
        .unwrap();
        std::fs::write(sdk.join("wisp-plugin.js"), "export {};").unwrap();
        std::fs::write(sdk.join("abi.js"), "export {};").unwrap();
        std::fs::write(
            src.join("app.js"),
            "import * as w from '@wisp/plugin';\nimport * as h from 'wisp:plugin/host@0.3.0';\n",
        )
        .unwrap();
        std::fs::write(
            src.join("lib/rules.js"),
            "import {a} from \"@wisp/plugin/abi\";\n",
        )
        .unwrap();
        std::fs::write(src.join("node_modules/x/y.js"), "").unwrap();
        stage_js(&src, &sdk, &stage).unwrap();
        let app = std::fs::read_to_string(stage.join("app.js")).unwrap();
        assert!(
            app.contains("'./node_modules/@wisp/plugin/wisp-plugin.js'"),
            "{app}"
        );
        assert!(app.contains("'wisp:plugin/host@0.3.0'"), "{app}");
        let rules = std::fs::read_to_string(stage.join("lib/rules.js")).unwrap();
        assert!(
            rules.contains("\"../node_modules/@wisp/plugin/abi.js\""),
            "{rules}"
        );
        assert!(stage.join("node_modules/@wisp/plugin/abi.js").is_file());
        assert!(
            !stage.join("node_modules/x").exists(),
            "the plugin's node_modules is not staged"
        );
        // A destination inside the sources is not copied into itself.
        copy_tree(&src, &src.join("lib/out"), &|_| true).unwrap();
        assert!(src.join("lib/out/app.js").is_file());
        assert!(!src.join("lib/out/lib").exists());
        let _ = std::fs::remove_dir_all(&d);
    }
}
