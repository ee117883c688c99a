//! Config parsing (`wisp_host::config::Config::parse`): any text, as a config file.
//!
//! Properties:
//! - it never panics, and neither does mapping an accepted config to plugin specs;
//! - an error names the file and a non-empty path and problem;
//! - `parse_duration` agrees with a reference (sum of `<digits><ms|s|m|h>` in u128 nanoseconds:
//!   an error exactly when the text is malformed or the sum is over Go's 2^63-1 ns);
//! - `parse_bytes` never panics.
//!
//! Paths are resolved in a scratch directory that has the modules and the `cluster` directory
//! the seeds (`deploy/demo/wisp.yaml`, ...) name, so accepted configs get past the file checks.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use wisp_host::config::{Config, parse_bytes, parse_duration};

const FILE: &str = "fuzz.yaml";

/// The config's directory: `<scratch>/a/b` with `m.wasm` and `cluster/`, and
/// `<scratch>/plugins/dist/*.wasm` for the demo config's `../../plugins/dist/` modules.
fn base_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = std::env::temp_dir().join("wisp-fuzz-config");
        let base = root.join("a").join("b");
        let dist = root.join("plugins").join("dist");
        for d in [base.join("cluster"), dist.clone()] {
            std::fs::create_dir_all(&d).expect("scratch directory");
        }
        for m in ["audit_log", "image_policy", "inventory", "team_labeler"] {
            std::fs::write(dist.join(format!("{m}.wasm")), b"").expect("scratch module");
        }
        std::fs::write(base.join("m.wasm"), b"").expect("scratch module");
        base
    })
}

/// Parses `data` as a config file and checks the result.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::parse(text, FILE, base_dir()) {
        Ok(cfg) => {
            assert_eq!(cfg.file, FILE);
            assert!(!cfg.informers.is_empty(), "accepted without informers");
            let specs = cfg.plugin_specs(&Default::default());
            assert_eq!(specs.len(), cfg.plugins.len());
            cfg.source_kind()
                .expect("an accepted config has a valid source");
        }
        Err(e) => {
            assert_eq!(e.file, FILE, "error does not name the file: {e}");
            assert!(!e.path.is_empty(), "error without a path: {e}");
            assert!(!e.problem.is_empty(), "error without a problem: {e}");
        }
    }
    if text.len() <= 64 {
        assert_eq!(
            parse_duration(text).ok(),
            reference_duration(text),
            "parse_duration({text:?})"
        );
        let _ = parse_bytes(text);
    }
}

/// `50ms`, `30s`, `5m`, `1h`, `1m30s`, `0`; `None` when malformed or too large.
fn reference_duration(s: &str) -> Option<Duration> {
    let t = s.trim();
    if t == "0" {
        return Some(Duration::ZERO);
    }
    if t.is_empty() {
        return None;
    }
    let mut nanos: u128 = 0;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit: u128 = match &rest[..unit_len] {
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        nanos = nanos.checked_add(u128::from(n) * unit)?;
        rest = &rest[unit_len..];
    }
    // Go's longest duration, 2^63-1 ns.
    if nanos > i64::MAX as u128 {
        return None;
    }
    let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
    Some(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}
