//! The fuzz checks (`tests/fuzz/src/`) on stable: each target's seeds and the inputs the fuzzer
//! found (fixed since) under `tests/fuzz/regressions/`, so CI keeps them passing without
//! nightly. Fuzzing itself: `cargo xtask fuzz` (see docs/testing.md).

#[path = "../../fuzz/src/config.rs"]
mod config;
#[path = "../../fuzz/src/host_api.rs"]
mod host_api;
#[path = "../../fuzz/src/watch_event.rs"]
mod watch_event;

use std::path::Path;

/// Runs `check` on every file of `seeds/<target>` and `regressions/<target>`; at least one seed.
fn run_corpus(target: &str, check: fn(&[u8])) {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut seeds = 0;
    for dir in ["seeds", "regressions"] {
        let dir = fuzz.join(dir).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<_> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
        files.sort();
        for f in files.iter().filter(|f| f.is_file()) {
            let data = std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            eprintln!("{target}: {}", f.display());
            check(&data);
            seeds += usize::from(dir.ends_with(Path::new("seeds").join(target)));
        }
    }
    assert!(seeds > 0, "no seeds for {target} in {}", fuzz.display());
}

#[test]
fn watch_event_seeds_and_regressions_pass() {
    run_corpus("watch_event", watch_event::check);
}

#[test]
fn config_seeds_and_regressions_pass() {
    run_corpus("config", config::check);
}

#[test]
fn host_api_seeds_and_regressions_pass() {
    run_corpus("host_api", host_api::check);
}
