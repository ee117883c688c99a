//! `wisp build`: a plugin's directory built into a component.

use std::path::PathBuf;

/// Build a plugin into a component
///
/// Builds the plugin in DIR (default .), its language told by its manifest (Cargo.toml,
/// pyproject.toml or app.py, package.json), and prints where the component is written.
#[derive(clap::Args)]
#[command(after_long_help = build_help())]
pub struct Args {
    /// The plugin's directory.
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// Where to write the component (default DIR/dist/NAME.wasm).
    #[arg(long, short, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// What `wisp build --help` adds (the pins from the code that installs them).
fn build_help() -> String {
    use wisp_host::build::toolchain::{COMPONENTIZE_JS, COMPONENTIZE_PY};
    format!(
        "\
Rust: cargo build --release --target wasm32-wasip2 (CARGO_TARGET_DIR is honoured; without the
  target: `rustup target add wasm32-wasip2`).
Python: componentize-py {COMPONENTIZE_PY} builds app.py (module `app`) with the SDK from vendor/
  (else the one in this binary); needs python3 >= 3.10 with venv.
JavaScript: componentize-js {COMPONENTIZE_JS} builds package.json's `main` (default app.js);
  `import ... from '@wisp/plugin'` resolves to vendor/wisp-plugin, node_modules/@wisp/plugin or
  the SDK in this binary; other bare imports need a bundler first. Needs node >= 18 with npm.
Toolchains: componentize-py and componentize-js are installed on first use (from PyPI and npm)
  into $WISP_TOOLCHAINS, default $XDG_CACHE_HOME/wisp/toolchains or ~/.cache/wisp/toolchains,
  one directory per pinned version.
The WIT is the plugin's wit/ (else the one in this binary).
"
    )
}

pub async fn run(a: Args) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let say = |m: String| eprintln!("wisp build: {m}");
    let Args { dir, out } = a;
    let built =
        tokio::task::spawn_blocking(move || wisp_host::build::build(&dir, out.as_deref(), &say))
            .await??;
    let size = std::fs::metadata(&built).map_or(0, |m| m.len());
    println!(
        "built {} ({:.1} MB in {})",
        built.display(),
        size as f64 / 1e6,
        wisp_host::units::human_duration(started.elapsed())
    );
    Ok(())
}
