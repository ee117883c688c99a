//! Hot reload: replace a plugin while the host runs, losing nothing.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use common::rig::*;
use common::*;
use serde_json::json;
use wisp_host::plugin::PluginSpec;
use wisp_host::plugin::status::PluginCounters;
use wisp_tests::pod;

/// test-faults loaded from `module` (a build of it), as `faults`.
fn faults_build(module: PathBuf, settings: serde_json::Value) -> PluginSpec {
    PluginSpec {
        module,
        ..faults_spec("faults", settings)
    }
}

#[tokio::test]
async fn snapshot_and_restore_carry_state_across_a_reload() {
    let r = rig((0..5)
        .map(|i| pod("default", &format!("web-{i}")))
        .collect())
    .await;
    let h = r
        .manager
        .start(faults_build(plugin_path("test_faults"), json!({})))
        .unwrap();
    until("5 handled", || gauge(&h, "handled") == Some(5.0)).await;
    let dir = tempfile::tempdir().unwrap();
    let rep = h
        .reload(faults_build(
            variant(&plugin_path("test_faults"), "v2", dir.path()),
            json!({}),
        ))
        .unwrap();
    assert!(rep.state_handed_over);
    assert_eq!(rep.generation, 2);
    r.server.create(pod("default", "web-5")).unwrap();
    until("count carried on", || gauge(&h, "handled") == Some(6.0)).await;
    assert_eq!(h.status().guest_counter("restored_total", &[]), 1);
    assert_eq!(h.status().version().1, 2);
    assert_eq!(PluginCounters::get(&h.status().counters.reloads), 1);
}

#[tokio::test]
async fn a_bad_new_version_is_refused_and_the_running_one_keeps_running() {
    let r = rig(vec![pod("default", "web-0")]).await;
    let h = r
        .manager
        .start(faults_build(plugin_path("test_faults"), json!({})))
        .unwrap();
    until("first", || gauge(&h, "handled") == Some(1.0)).await;
    let dir = tempfile::tempdir().unwrap();
    let hash = h.status().version().0;

    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"garbage").unwrap();
    let e = h.reload(faults_build(junk, json!({}))).unwrap_err();
    assert!(e.to_string().contains("not a WebAssembly file"), "{e}");

    let mut truncated = std::fs::read(plugin_path("test_faults")).unwrap();
    truncated.truncate(truncated.len() / 3);
    let half = dir.path().join("half.wasm");
    std::fs::write(&half, truncated).unwrap();
    assert!(
        h.reload(faults_build(half, json!({})))
            .unwrap_err()
            .to_string()
            .contains("invalid component")
    );

    let e = h
        .reload(faults_build(plugin_path("test_wrong_world"), json!({})))
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("not a wisp:plugin/plugin component (0.3.0, 0.2.0 or 0.1.0)"),
        "{e}"
    );

    let e = h
        .reload(faults_build(
            plugin_path("test_faults"),
            json!({"mode": "explode"}),
        ))
        .unwrap_err();
    assert!(e.to_string().contains("settings rejected"), "{e}");

    assert_eq!(PluginCounters::get(&h.status().counters.reload_failures), 4);
    assert!(
        h.status()
            .last_error()
            .unwrap()
            .starts_with("reload refused, previous version kept: ")
    );
    assert_eq!(h.status().version(), (hash, 1), "still the first version");
    r.server.create(pod("default", "web-1")).unwrap();
    until("old version still handles", || {
        gauge(&h, "handled") == Some(2.0)
    })
    .await;
}

#[tokio::test]
async fn a_new_version_failing_its_first_events_is_rolled_back_and_the_old_one_misses_nothing() {
    let r = rig(vec![pod("default", "web-0")]).await;
    let mut spec = faults_build(plugin_path("test_faults"), json!({}));
    spec.reload_probation = 4;
    let h = r.manager.start(spec.clone()).unwrap();
    until("first", || gauge(&h, "handled") == Some(1.0)).await;
    let mut bad = spec.clone();
    bad.settings = json!({"mode": "trap"});
    h.reload(bad).unwrap();
    for i in 1..=6 {
        r.server
            .create(pod("default", &format!("web-{i}")))
            .unwrap();
    }
    until("rolled back", || {
        PluginCounters::get(&h.status().counters.rollbacks) == 1
    })
    .await;
    // The old instance, with its state, gets the six notifications the bad version failed: its
    // own view and count (published after each of its batches) show it missed none. (The
    // shared gaps counter is not used here: each trap of the bad version starts a fresh,
    // stateless instance, which counts gaps of its own.)
    until("old version saw all 7", || {
        gauge(&h, "view_size") == Some(7.0) && gauge(&h, "handled") == Some(7.0)
    })
    .await;
    let s = h.status();
    assert!(
        s.last_error()
            .unwrap()
            .starts_with("rolled back to the previous version"),
        "{:?}",
        s.last_error()
    );
    assert_eq!(
        s.version().1,
        3,
        "generation 2 was the bad one; the rollback is generation 3"
    );
    assert_eq!(h.state(), wisp_host::plugin::PluginState::Running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_reloads_under_twenty_thousand_changes_lose_and_repeat_nothing() {
    let r = rig((0..500)
        .map(|i| pod("default", &format!("web-{i}")))
        .collect())
    .await;
    let dir = tempfile::tempdir().unwrap();
    let modules = [
        variant(&plugin_path("test_faults"), "a", dir.path()),
        variant(&plugin_path("test_faults"), "b", dir.path()),
    ];
    let h = std::sync::Arc::new(
        r.manager
            .start(faults_build(modules[0].clone(), json!({})))
            .unwrap(),
    );
    until("synced", || h.has_synced()).await;

    let server = r.server.clone();
    let writer = tokio::task::spawn_blocking(move || {
        for n in 0..20_000u64 {
            let i = n % 600;
            let name = format!("web-{i}");
            if i >= 500 && n % 3 == 0 {
                let _ = server.delete("v1", "Pod", Some("default"), &name);
            } else if server.get("v1", "Pod", Some("default"), &name).is_some() {
                server.update(touched(pod("default", &name), n)).unwrap();
            } else {
                server.create(pod("default", &name)).unwrap();
            }
        }
    });
    let reloader = {
        let h = h.clone();
        tokio::task::spawn_blocking(move || {
            for k in 0..100 {
                let rep = h
                    .reload(faults_build(modules[k % 2].clone(), json!({})))
                    .expect("reload");
                assert!(rep.state_handed_over);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    reloader.await.unwrap();
    writer.await.unwrap();

    let want = server_checksum(&r.server);
    until("the last version's view equals the server", || {
        gauge(&h, "view_size") == Some(want.0 as f64) && gauge(&h, "view_checksum") == Some(want.1)
    })
    .await;
    let s = h.status();
    assert_eq!(
        s.guest_counter("gaps_total", &[]),
        0,
        "no notification lost across versions"
    );
    assert_eq!(
        s.guest_counter("dups_total", &[]),
        0,
        "none delivered twice"
    );
    let queued: u64 = h.queues().iter().map(|(_, q)| q.queued).sum();
    assert_eq!(gauge(&h, "last_seq"), None, "last_seq is per informer");
    assert_eq!(
        s.guest_gauge("last_seq", &[("informer", "pods")]),
        Some(queued as f64)
    );
    assert_eq!(PluginCounters::get(&s.counters.reloads), 100);
    assert_eq!(s.version().1, 101);
}

#[tokio::test]
async fn a_plugin_configured_for_it_gets_the_cache_replayed_after_a_reload() {
    let r = rig((0..4)
        .map(|i| pod("default", &format!("web-{i}")))
        .collect())
    .await;
    let mut spec = faults_build(plugin_path("test_faults"), json!({}));
    spec.replay_on_reload = true;
    let h = r.manager.start(spec.clone()).unwrap();
    until("initial list", || gauge(&h, "handled") == Some(4.0)).await;
    let rep = h.reload(spec).unwrap();
    assert!(rep.replay);
    // The new version restored the count (4) and then got the 4 cached objects again.
    until("replayed", || gauge(&h, "handled") == Some(8.0)).await;
    let s = h.status();
    assert_eq!(s.guest_counter("gaps_total", &[]), 0);
    assert_eq!(
        s.guest_counter("dups_total", &[]),
        0,
        "replayed objects come with new sequence numbers"
    );
    assert_eq!(
        s.guest_gauge("last_seq", &[("informer", "pods")]),
        Some(8.0)
    );
}
