//! The repository's plugins, the plugin `wisp new` writes and docs/plugins/rust.md's manifest
//! build with the SDK's documented release profile (`plugin-sdk/release-profile.toml`): their
//! `[profile.release]` tables say the same.

use std::path::Path;

/// The settings of the `[profile.release]` table of a Cargo manifest: its `key = value` lines,
/// comments and blank lines left out, sorted (a table in Markdown ends at its code fence).
fn release_profile(manifest: &str) -> Vec<String> {
    let mut lines = manifest.lines().map(str::trim);
    let Some(_) = lines.by_ref().find(|l| *l == "[profile.release]") else {
        return Vec::new();
    };
    let mut settings: Vec<String> = lines
        .take_while(|l| !l.starts_with('[') && !l.starts_with("```"))
        .map(|l| l.split(" #").next().unwrap_or(l))
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    settings.sort();
    settings
}

#[test]
fn plugins_use_the_documented_release_profile() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &Path| {
        std::fs::read_to_string(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
    };
    let sdk = release_profile(&read(&root.join("release-profile.toml")));
    let plugins = release_profile(&read(&root.join("../plugins/Cargo.toml")));
    assert!(
        sdk.iter().any(|s| s.starts_with("lto")),
        "release-profile.toml has no [profile.release] with lto: {sdk:?}"
    );
    assert_eq!(
        plugins, sdk,
        "plugins/Cargo.toml's [profile.release] differs from plugin-sdk/release-profile.toml"
    );
    for other in [
        "../host/templates/rust/Cargo.toml",
        "../docs/plugins/rust.md",
    ] {
        assert_eq!(
            release_profile(&read(&root.join(other))),
            sdk,
            "{other}'s [profile.release] differs from plugin-sdk/release-profile.toml"
        );
    }
}
