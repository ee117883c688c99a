//! The on-disk cache of precompiled modules is native code: an artifact is only used when it
//! is this host's own, for this very module, in a directory nobody else can write.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::rig::*;
use common::*;
use serde_json::json;
use wisp_host::plugin::bindings::PluginPre;
use wisp_host::plugin::{EngineConfig, LoadSource, PluginEngine, PluginManager};
use wisp_tests::pod;

fn engine_on(dir: &Path) -> std::sync::Arc<PluginEngine> {
    PluginEngine::new(EngineConfig {
        cache_dir: Some(dir.into()),
        ..EngineConfig::default()
    })
    .unwrap()
}

fn module(name: &str) -> Vec<u8> {
    std::fs::read(plugin_path(name)).unwrap()
}

/// The artifact files of `dir` (the `.cwasm` files), sorted.
fn artifacts(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    v.sort();
    v
}

fn artifact_of(dir: &Path, hash: &str) -> PathBuf {
    artifacts(dir)
        .into_iter()
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(hash))
        .unwrap_or_else(|| panic!("no artifact for {hash} in {}", dir.display()))
}

/// Every file of `dir` with its contents.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    artifacts(dir)
        .into_iter()
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect()
}

#[tokio::test]
async fn an_artifact_copied_under_another_modules_name_is_not_run() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("modules");
    let first = engine_on(&dir);
    let audit = first.load(&module("audit_log")).unwrap();
    let other = first.load(&module("test_abi_v01")).unwrap();
    assert_eq!(artifacts(&dir).len(), 2);
    // Whoever can write the directory puts the other module's code under audit_log's name.
    std::fs::copy(
        artifact_of(&dir, &other.hash),
        artifact_of(&dir, &audit.hash),
    )
    .unwrap();

    let second = engine_on(&dir);
    let loaded = second.load(&module("audit_log")).unwrap();
    assert_eq!(loaded.source, LoadSource::Compiled, "the copy is refused");
    assert_eq!(loaded.hash, audit.hash);
    assert!(
        matches!(
            second.instance_pre(&loaded.component),
            Ok(PluginPre::V0_3(..))
        ),
        "audit_log's own code (ABI 0.3), not the copied 0.1 module"
    );

    // And it behaves as audit_log: it logs each event.
    let r = rig(vec![pod("default", "web-1")]).await;
    let mut manager = PluginManager::new(second.clone());
    manager.add_informer(r.inf.clone());
    let h = manager
        .start(spec("audit", "audit_log", json!({})))
        .unwrap();
    until("initial list", || h.has_synced()).await;
    until("logged", || {
        logs(&h)
            .iter()
            .any(|l| l.starts_with("info: ADDED v1 Pod default/web-1"))
    })
    .await;

    // The bad artifact was replaced by a good one.
    let third = engine_on(&dir);
    assert_eq!(
        third.load(&module("audit_log")).unwrap().source,
        LoadSource::Disk
    );
}

#[tokio::test]
async fn a_tampered_artifact_is_compiled_again_and_overwritten() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("modules");
    let audit = engine_on(&dir).load(&module("audit_log")).unwrap();
    let path = artifact_of(&dir, &audit.hash);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();

    let loaded = engine_on(&dir).load(&module("audit_log")).unwrap();
    assert_eq!(loaded.source, LoadSource::Compiled, "tampered: not used");
    assert_ne!(std::fs::read(&path).unwrap(), bytes, "overwritten");
    assert_eq!(
        engine_on(&dir).load(&module("audit_log")).unwrap().source,
        LoadSource::Disk,
        "the rewritten artifact is good"
    );
}

#[tokio::test]
async fn a_cache_dir_others_can_write_is_neither_read_nor_written() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("modules");
    engine_on(&dir).load(&module("audit_log")).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let before = snapshot(&dir);

    let e = engine_on(&dir);
    assert_eq!(
        e.load(&module("audit_log")).unwrap().source,
        LoadSource::Compiled,
        "a directory anyone can write is not read"
    );
    e.load(&module("test_abi_v01")).unwrap();
    assert_eq!(snapshot(&dir), before, "nor written");
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o777, "nor silently repaired");
}

#[tokio::test]
async fn a_cache_dir_reached_through_a_symlink_is_not_used() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("modules");
    engine_on(&dir).load(&module("audit_log")).unwrap();
    let link = d.path().join("link");
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    let before = snapshot(&dir);

    let e = engine_on(&link);
    assert_eq!(
        e.load(&module("audit_log")).unwrap().source,
        LoadSource::Compiled
    );
    e.load(&module("test_abi_v01")).unwrap();
    assert_eq!(snapshot(&dir), before);
}
