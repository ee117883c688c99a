//! `cargo xtask <task>`: project tasks that need more than one cargo command.
//!
//! - `demo`: run the host's built-in demo (no cluster needed).
//! - `test`: build what the tests need, then run the whole test suite.

use std::process::Command;

use anyhow::{Context, bail};

const USAGE: &str = "usage: cargo xtask <demo|test> [-- extra args for cargo test]

  demo   run `wisp demo`: the informer pipeline on an embedded in-memory cluster
  test   run the whole test suite (unit and integration tests, test API server included)";

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
        "test" => {
            let mut c = cargo();
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
