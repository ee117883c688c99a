//! The Python and JavaScript plugins (`plugins/python/*`, `plugins/js/*`), built with their
//! pinned toolchains into `plugins/dist/<name>-py.wasm` / `<name>-js.wasm`.
//!
//! The toolchains are installed from PyPI and npm, when missing, into a cache outside the clone
//! (`$WISP_TOOLCHAINS`, default `~/.cache/wisp-toolchains/`), one directory per pinned version.
//! The pins, installs and build commands are `wisp build`'s (host/src/build/toolchain.rs,
//! included below); the examples import the JS SDK as `@wisp/plugin` as out-of-tree plugins do.
//! A component is built again only when its sources (the plugin's directory, the SDK, the WIT),
//! the toolchain's version or that build code changed: its stamp (`<name>.wasm.stamp`) holds
//! their hash, since a build costs 20-60 s and up to 800 MB of memory.
//!
//! Without python3 or node (or with an install that fails), these plugins are skipped with a
//! warning, and the tests that need them skip too, except under `CI=true`, where both fail.

use std::path::{Path, PathBuf};

use anyhow::Context;

// The pins, installs and build commands, shared with `wisp build` (one copy, in the host). A
// comment, not a doc comment: rustdoc would resolve the file's own doc links from here.
#[path = "../../host/src/build/toolchain.rs"]
#[allow(dead_code)]
mod toolchain;

use toolchain::Toolchain as Lang;

fn toolchains_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("WISP_TOOLCHAINS") {
        return d.into();
    }
    let home = std::env::var_os("HOME").map_or_else(std::env::temp_dir, PathBuf::from);
    home.join(".cache").join("wisp-toolchains")
}

/// The toolchain's command, installed first when missing.
fn toolchain(lang: Lang) -> anyhow::Result<PathBuf> {
    toolchain::toolchain(lang, &toolchains_dir(), &|m| println!("xtask: {m}"))
}

/// FNV-1a over the relative paths and contents of the files under `dirs` (skipping caches and
/// tests), and `extra`.
fn sources_hash(root: &Path, dirs: &[PathBuf], extra: &str) -> anyhow::Result<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for e in std::fs::read_dir(dir)? {
            let p = e?.path();
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            if ["__pycache__", "node_modules", "tests", "test"].contains(&name.as_ref()) {
                continue;
            }
            if p.is_dir() {
                walk(&p, out)?;
            } else {
                out.push(p);
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    for d in dirs {
        if d.is_dir() {
            walk(d, &mut files)?;
        } else {
            files.push(d.clone());
        }
    }
    files.sort();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: &[u8]| {
        for x in b {
            h ^= u64::from(*x);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    eat(extra.as_bytes());
    for f in files {
        eat(f
            .strip_prefix(root)
            .unwrap_or(&f)
            .to_string_lossy()
            .as_bytes());
        eat(&[0]);
        eat(&std::fs::read(&f).with_context(|| format!("reading {}", f.display()))?);
        eat(&[0]);
    }
    Ok(format!("{h:016x}"))
}

/// Builds one language's plugins into `dist` (skipping those whose stamp matches).
fn build_lang(root: &Path, dist: &Path, lang: Lang) -> anyhow::Result<usize> {
    let plugins = root.join("plugins").join(lang.dir());
    let mut names: Vec<String> = std::fs::read_dir(&plugins)
        .with_context(|| format!("reading {}", plugins.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let sdk = root.join("plugin-sdk").join(lang.dir());
    let wit = root.join("wit");
    let mut tool = None;
    let mut built = 0;
    for name in names {
        let src = plugins.join(&name);
        let out = dist.join(format!("{name}-{}.wasm", lang.suffix()));
        let stamp = out.with_extension("wasm.stamp");
        let hash = sources_hash(
            root,
            &[src.clone(), sdk.clone(), wit.join("wisp.wit")],
            // The build's code counts too: a change to how it stages or calls the toolchain.
            &format!(
                "{}{}",
                lang.version(),
                include_str!("../../host/src/build/toolchain.rs")
            ),
        )?;
        if out.is_file() && std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == hash) {
            continue;
        }
        let bin = match &tool {
            Some(b) => b,
            None => tool.insert(toolchain(lang)?),
        };
        println!("xtask: building {}", out.display());
        let started = std::time::Instant::now();
        let tmp = out.with_extension("wasm.partial");
        let wit_dir = root.join("wit");
        match lang {
            Lang::Python => toolchain::componentize_py(bin, &wit_dir, &[&src, &sdk], "app", &tmp),
            Lang::Js => {
                toolchain::componentize_js(bin, &src, Path::new("app.js"), &sdk, &wit_dir, &tmp)
            }
        }
        .with_context(|| format!("building {}", out.display()))?;
        std::fs::rename(&tmp, &out)?;
        std::fs::write(&stamp, format!("{hash}\n"))?;
        println!(
            "xtask: built {} in {:.0} s",
            out.display(),
            started.elapsed().as_secs_f64()
        );
        built += 1;
    }
    Ok(built)
}

/// Builds the Python and JavaScript plugins into `dist`. A missing or failing toolchain is a
/// warning (these plugins and their tests are then skipped), and an error under `CI=true`.
pub fn build(root: &Path, dist: &Path) -> anyhow::Result<()> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    for lang in [Lang::Python, Lang::Js] {
        match build_lang(root, dist, lang) {
            Ok(n) => {
                if n > 0 {
                    println!("xtask: {n} {} plugins built", lang.dir());
                }
            }
            Err(e) if !ci => {
                eprintln!(
                    "xtask: warning: the {} plugins are not built (their tests will skip): {e:#}",
                    lang.dir()
                );
            }
            Err(e) => return Err(e.context(format!("the {} plugins", lang.dir()))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stamp_changes_with_the_sources_and_the_toolchain() {
        let d = std::env::temp_dir().join(format!("xtask-hash-{}", std::process::id()));
        std::fs::create_dir_all(d.join("p/__pycache__")).unwrap();
        std::fs::write(d.join("p/app.py"), "a").unwrap();
        std::fs::write(d.join("p/__pycache__/app.pyc"), "x").unwrap();
        let h = |v: &str| sources_hash(&d, &[d.join("p")], v).unwrap();
        let first = h("1");
        std::fs::write(d.join("p/__pycache__/app.pyc"), "y").unwrap();
        assert_eq!(h("1"), first, "caches do not count");
        assert_ne!(h("2"), first, "the toolchain's version counts");
        std::fs::write(d.join("p/app.py"), "b").unwrap();
        assert_ne!(h("1"), first, "the sources count");
        let _ = std::fs::remove_dir_all(&d);
    }
}
