//! `wisp new`: the scaffold of a plugin, and what to run next.

use std::path::PathBuf;

use clap::ValueEnum;
use wisp_host::build::{Lang, scaffold};

/// Write a new plugin to start from (Rust, Python or JavaScript)
///
/// Writes into DIR (default ./NAME; it must not exist or be empty): the manifest (Cargo.toml
/// with the examples' release profile, pyproject.toml or package.json), a source with one
/// handler and a settings check, fixtures.yaml for `wisp test`, a README, the SDK (wisp-sdk/,
/// vendor/) and the WIT (wit/), all from this binary: no checkout needed.
#[derive(clap::Args)]
#[command(after_long_help = NEW_HELP)]
pub struct Args {
    /// The plugin's language.
    #[arg(long, value_enum)]
    lang: NewLang,
    /// The plugin's name (lowercase letters, digits and '-').
    name: String,
    /// Where to write it.
    dir: Option<PathBuf>,
}

/// What `wisp new --help` adds.
const NEW_HELP: &str = "\
Then, in DIR: `wisp build`, `wisp test --plugin dist/NAME.wasm fixtures.yaml`,
`wisp check dist/NAME.wasm`. The plugin reports Namespaces without an `owner` label (setting
`label`) as violations; its fixtures cover the handler and the settings accepted and refused.
See docs/plugins/README.md.
";

#[derive(Clone, Copy, ValueEnum)]
enum NewLang {
    /// A cdylib crate using the wisp-sdk crate.
    Rust,
    /// app.py using the wisp_plugin package (componentize-py).
    Python,
    /// app.js importing @wisp/plugin (componentize-js).
    Js,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let lang = match a.lang {
        NewLang::Rust => Lang::Rust,
        NewLang::Python => Lang::Python,
        NewLang::Js => Lang::Js,
    };
    let name = &a.name;
    let dir = a.dir.unwrap_or_else(|| PathBuf::from(name));
    let written = scaffold::new(lang, name, &dir)?;
    println!(
        "wrote the {} plugin {name} in {}:",
        lang.arg(),
        dir.display()
    );
    for f in &written {
        println!("  {}", f.display());
    }
    println!(
        "next:\n  cd {}\n  wisp build\n  wisp test --plugin dist/{name}.wasm fixtures.yaml\n  \
         wisp check dist/{name}.wasm",
        dir.display()
    );
    Ok(())
}
