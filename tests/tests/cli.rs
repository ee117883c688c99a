//! A first plugin as a user writes one: the real `wisp` binary scaffolds it (`wisp new`) in a
//! temporary directory outside this repository, builds it (`wisp build`, with the pinned
//! toolchains for Python and JavaScript), and `wisp test` runs its fixtures and `wisp check` its
//! settings, for each language. Each test prints `cost new-to-green <lang>: N s`.
//!
//! Shared between runs, to keep them fast: the toolchains (`$WISP_TOOLCHAINS`, default
//! `~/.cache/wisp-toolchains` as for `cargo xtask plugins`), the Rust plugins' cargo target dir
//! and the module cache (both under this build's target dir). Without python3 / node / the
//! wasm32-wasip2 target these tests skip, except under `CI=true`, where they fail.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use common::{skip_unless_ci, wisp_bin};

/// This build's target dir (`target/`), from the test's own path (`target/debug/deps/cli-...`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    exe.ancestors().nth(3).expect("target/").to_path_buf()
}

fn toolchains() -> PathBuf {
    std::env::var_os("WISP_TOOLCHAINS").map_or_else(
        || {
            let home = std::env::var_os("HOME").map_or_else(std::env::temp_dir, PathBuf::from);
            home.join(".cache").join("wisp-toolchains")
        },
        PathBuf::from,
    )
}

/// `wisp ARGS` in `dir`, with the shared caches.
fn wisp(dir: &Path, args: &[&str]) -> Output {
    Command::new(wisp_bin())
        .args(args)
        .current_dir(dir)
        .env("WISP_TOOLCHAINS", toolchains())
        .env("CARGO_TARGET_DIR", target_dir().join("scaffolded-plugins"))
        .env("XDG_CACHE_HOME", target_dir().join("scaffolded-cache"))
        .env_remove("RUST_LOG")
        .output()
        .expect("run wisp")
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[track_caller]
fn ok(o: Output, what: &str) -> String {
    let t = text(&o);
    assert!(o.status.success(), "{what} failed:\n{t}");
    t
}

#[track_caller]
fn fails(o: Output, what: &str) -> String {
    let t = text(&o);
    assert!(!o.status.success(), "{what} should fail:\n{t}");
    t
}

fn has(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

fn has_wasm_target() -> bool {
    Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .is_ok_and(|o| {
            let root = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
            root.join("lib/rustlib/wasm32-wasip2").is_dir()
        })
}

/// `wisp new`, `wisp build`, `wisp test`, `wisp check` of a `lang` plugin in a fresh temporary
/// directory outside the repository.
fn new_build_test_check(lang: &str) {
    let tmp = tempfile::Builder::new()
        .prefix("wisp-first-plugin-")
        .tempdir_in(std::env::temp_dir())
        .unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    assert!(
        !tmp.path().starts_with(repo),
        "{} is inside the repository",
        tmp.path().display()
    );
    let name = format!("ns-owner-{lang}");
    let dir = tmp.path().join(&name);
    let started = Instant::now();
    let said = ok(
        wisp(tmp.path(), &["new", "--lang", lang, &name]),
        "wisp new",
    );
    for f in ["fixtures.yaml", "README.md", "wit/wisp.wit"] {
        assert!(dir.join(f).is_file(), "{f} missing:\n{said}");
    }
    assert!(said.contains("wisp build"), "{said}");

    let built = ok(wisp(&dir, &["build"]), "wisp build");
    let wasm = dir.join("dist").join(format!("{name}.wasm"));
    assert!(
        built.contains(&format!("built {}", wasm.display())),
        "{built}"
    );
    assert!(wasm.is_file());

    let wasm_arg = format!("dist/{name}.wasm");
    let tested = ok(
        wisp(&dir, &["test", "--plugin", &wasm_arg, "fixtures.yaml"]),
        "wisp test",
    );
    assert!(tested.contains("5 cases: 5 passed, 0 failed"), "{tested}");
    println!(
        "cost new-to-green {lang}: {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let checked = ok(
        wisp(
            &dir,
            &["check", &wasm_arg, "--settings", r#"{"label": "team"}"#],
        ),
        "wisp check",
    );
    let is = format!("ok: {name} 0.1.0 is a wisp:plugin/plugin@0.3.0 component");
    assert!(checked.contains(&is), "{checked}");
    assert!(checked.contains("wants informers: namespaces"), "{checked}");
    // The settings check runs in the component: an empty label is refused, naming the field.
    let refused = fails(
        wisp(
            &dir,
            &["check", &wasm_arg, "--settings", r#"{"label": ""}"#],
        ),
        "wisp check of an empty label",
    );
    assert!(
        refused.contains("settings.label: must not be empty"),
        "{refused}"
    );
}

#[test]
fn a_rust_plugin_from_wisp_new_builds_and_passes_its_fixtures_and_check() {
    if !has_wasm_target() {
        return skip_unless_ci("the wasm32-wasip2 target (`rustup target add wasm32-wasip2`)");
    }
    new_build_test_check("rust");
}

#[test]
fn a_python_plugin_from_wisp_new_builds_and_passes_its_fixtures_and_check() {
    if !has("python3", "--version") {
        return skip_unless_ci("python3");
    }
    new_build_test_check("python");
}

#[test]
fn a_js_plugin_from_wisp_new_builds_and_passes_its_fixtures_and_check() {
    if !has("node", "--version") || !has("npm", "--version") {
        return skip_unless_ci("node and npm");
    }
    new_build_test_check("js");
}

#[test]
fn wisp_new_and_build_refuse_what_they_cannot_use_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let e = fails(wisp(tmp.path(), &["build"]), "wisp build of an empty dir");
    assert!(
        e.contains("no plugin in") && e.contains("Cargo.toml") && e.contains("wisp new"),
        "{e}"
    );
    let e = fails(
        wisp(tmp.path(), &["new", "--lang", "js", "Bad_Name"]),
        "wisp new with a bad name",
    );
    assert!(e.contains("\"Bad_Name\"") && e.contains("lowercase"), "{e}");
    std::fs::write(tmp.path().join("mine.txt"), "keep").unwrap();
    let here = tmp.path().to_str().unwrap();
    let e = fails(
        wisp(tmp.path(), &["new", "--lang", "rust", "x", here]),
        "wisp new into a directory with files",
    );
    assert!(e.contains("is not empty"), "{e}");
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("mine.txt")).unwrap(),
        "keep"
    );

    // A Rust toolchain without the component target: the fix is named, before cargo runs.
    ok(
        wisp(tmp.path(), &["new", "--lang", "rust", "x", "x"]),
        "wisp new",
    );
    let fake = tmp.path().join("fake-rustc");
    std::fs::write(&fake, "#!/bin/sh\necho /nonexistent-sysroot\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = Command::new(wisp_bin())
        .args(["build", "x"])
        .current_dir(tmp.path())
        .env("RUSTC", &fake)
        .output()
        .unwrap();
    let e = fails(o, "wisp build without the target");
    assert!(e.contains("rustup target add wasm32-wasip2"), "{e}");

    // A toolchain that cannot be installed (no python3 on PATH): the step and the need named.
    ok(
        wisp(tmp.path(), &["new", "--lang", "python", "py", "py"]),
        "wisp new",
    );
    let o = Command::new(wisp_bin())
        .args(["build", "py"])
        .current_dir(tmp.path())
        .env("PATH", tmp.path().join("no-such-bin"))
        .env("WISP_TOOLCHAINS", tmp.path().join("toolchains"))
        .output()
        .unwrap();
    let e = fails(o, "wisp build without python3");
    assert!(
        e.contains("installing the python toolchain") && e.contains("python3 >= 3.10"),
        "{e}"
    );
    assert!(
        !tmp.path()
            .join("toolchains/py-0.25.1/.wisp-complete")
            .exists(),
        "a failed install is not marked complete"
    );

    // A JavaScript plugin whose entry is missing.
    let js = tmp.path().join("js");
    std::fs::create_dir_all(&js).unwrap();
    std::fs::write(
        js.join("package.json"),
        r#"{"name": "j", "main": "src/index.js"}"#,
    )
    .unwrap();
    let e = fails(wisp(&js, &["build"]), "wisp build without its entry");
    assert!(e.contains("src/index.js is missing"), "{e}");
}

/// `wisp test` drives a plugin's admission decisions: image-policy, unchanged, refuses at
/// admission what its rules report in audit (plugins/image-policy/admission.yaml: creates,
/// updates with the cached old object, deletes, dry runs, and audit beside admission in one
/// case), on its own admission instance in the real sandbox. A plugin of ABI 0.2 takes no
/// admission requests, and every admit step says so.
#[test]
fn wisp_test_runs_admission_cases_against_the_plugins_admit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let cases = root.join("plugins/image-policy/admission.yaml");
    let cases = cases.to_str().unwrap();
    let policy = common::plugin_path("image_policy");
    let out = ok(
        wisp(root, &["test", "--plugin", policy.to_str().unwrap(), cases]),
        "wisp test of image-policy's admission cases",
    );
    assert!(out.contains("5 cases: 5 passed, 0 failed"), "{out}");
    let old = common::plugin_path("test_raw_batch");
    let out = fails(
        wisp(root, &["test", "--plugin", old.to_str().unwrap(), cases]),
        "wisp test of a 0.2 plugin's admission",
    );
    assert!(out.contains("5 cases: 0 passed, 5 failed"), "{out}");
    assert!(
        out.contains(
            "error: the plugin takes no admission requests (its component does not export \
             wisp:plugin/admission@0.3.0"
        ),
        "{out}"
    );
}
