//! `cargo xtask <task>`: project tasks that need more than one cargo command.
//!
//! - `demo`: run the host's built-in demo (no cluster needed).
//! - `plugins`: build the plugins for wasm32-wasip2 into `plugins/dist/`.
//! - `test`: build the plugins, then run the whole test suite.
//! - `bench`: build the plugins, then run `wisp-bench` in release mode.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

const USAGE: &str = "usage: cargo xtask <demo|plugins|test|bench> [args]

  demo     run `wisp demo`: the informer pipeline on an embedded in-memory cluster
  plugins  build the plugins (plugins/*) for wasm32-wasip2 into plugins/dist/
  test     build the plugins, then run the whole test suite (unit and integration tests);
           further args go to cargo test
  bench    build the plugins, then run the benchmark harness (release); `--quick` for a short run";

/// The repository root (xtask lives one level below it).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Builds every plugin crate in release mode for wasm32-wasip2 and copies the components to
/// `plugins/dist/<crate>.wasm`.
fn build_plugins() -> anyhow::Result<PathBuf> {
    let root = root();
    let mut c = cargo();
    c.current_dir(root.join("plugins"))
        .args(["build", "--release", "--target", "wasm32-wasip2"]);
    run(c).context(
        "building the plugins (is the target installed? `rustup target add wasm32-wasip2`)",
    )?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("plugins").join("target"));
    let built = target.join("wasm32-wasip2").join("release");
    let dist = root.join("plugins").join("dist");
    std::fs::create_dir_all(&dist).with_context(|| format!("creating {}", dist.display()))?;
    let mut n = 0;
    for entry in
        std::fs::read_dir(&built).with_context(|| format!("reading {}", built.display()))?
    {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "wasm") {
            let to = dist.join(path.file_name().unwrap_or_default());
            std::fs::copy(&path, &to)
                .with_context(|| format!("copying {} to {}", path.display(), to.display()))?;
            n += 1;
        }
    }
    println!("xtask: {n} plugins in {}", dist.display());
    Ok(dist)
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn run(mut cmd: Command) -> anyhow::Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd
        .status()
        .with_context(|| format!("could not start {shown}"))?;
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (task, rest) = match args.split_first() {
        Some((t, rest)) => (t.as_str(), rest),
        None => {
            println!("{USAGE}");
            return Ok(());
        }
    };
    match task {
        "demo" => {
            let mut c = cargo();
            c.args([
                "run",
                "--quiet",
                "--package",
                "wisp-host",
                "--bin",
                "wisp",
                "--",
                "demo",
            ]);
            run(c)
        }
        "plugins" => build_plugins().map(|_| ()),
        "bench" => {
            let dist = build_plugins()?;
            let mut c = cargo();
            c.env("WISP_PLUGIN_DIR", dist);
            c.args([
                "run",
                "--release",
                "--package",
                "wisp-tests",
                "--bin",
                "wisp-bench",
                "--",
            ])
            .args(rest);
            run(c)
        }
        "test" => {
            let dist = build_plugins()?;
            let mut c = cargo();
            c.env("WISP_PLUGIN_DIR", dist);
            c.args(["test", "--workspace"])
                .args(rest.iter().skip_while(|a| *a == "--"));
            run(c)
        }
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown task {other:?}\n\n{USAGE}"),
    }
}
