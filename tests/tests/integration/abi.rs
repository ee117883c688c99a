//! Plugin ABI 0.2 / 0.3 end to end (the same byte layout): objects from the test API server,
//! through a real `kube::Client` and the informer, encoded by the host and read by the SDK's
//! decoder; plugins of ABI 0.1, 0.2 and 0.3 side by side in one host.

use crate::common;

use common::rig::*;
use common::*;
use serde_json::json;
use wisp_sdk::abi::Object as View;
use wisp_tests::pod;

/// Every cached object, as the SDK's decoder reads its encoding, agrees with what the host
/// extracted from its JSON: the encoding a plugin receives is the object the cache holds.
#[tokio::test]
async fn every_cached_object_reads_back_through_the_sdk_decoder_as_the_host_extracted_it() {
    let mut odd = pod("shop", "odd-0");
    odd["metadata"]["labels"] = json!({ "z": "", "a/b": "ü", "example.com/x": "1" });
    odd["metadata"]["annotations"] = json!({});
    odd["metadata"]["ownerReferences"] = json!([
        { "apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u" },
        { "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "v", "controller": true }
    ]);
    let mut bare = pod("kube-system", "bare-0");
    bare["metadata"] = json!({ "name": "bare-0", "namespace": "kube-system" });
    let r = rig(vec![pod("default", "web-0"), odd, bare]).await;
    let cached = r.inf.cache().list();
    assert_eq!(cached.len(), 3);
    for o in cached {
        let m = o.meta().to_owned();
        let v = View::decode(o.wire()).expect("the SDK reads the host's encoding");
        assert_eq!(v.api_version(), m.api_version);
        assert_eq!(v.kind(), m.kind);
        assert_eq!(v.namespace(), m.namespace.as_deref());
        assert_eq!(v.name(), m.name);
        assert_eq!(v.uid(), m.uid, "{}: uid set by the server", m.name);
        assert!(!v.uid().is_empty());
        assert_eq!(v.resource_version(), m.resource_version);
        assert_eq!(v.generation(), m.generation);
        let owned = |p: wisp_sdk::abi::Pairs<'_>| -> Vec<(String, String)> {
            p.map(|(k, x)| (k.to_owned(), x.to_owned())).collect()
        };
        assert_eq!(owned(v.labels()), m.labels);
        for (k, x) in &m.labels {
            assert_eq!(v.label(k), Some(x.as_str()));
        }
        assert_eq!(owned(v.annotations()), m.annotations);
        let owners: Vec<(String, String, bool, bool)> = v
            .owner_refs()
            .map(|r| {
                (
                    r.kind.to_owned(),
                    r.uid.to_owned(),
                    r.controller,
                    r.block_owner_deletion,
                )
            })
            .collect();
        let want: Vec<(String, String, bool, bool)> = m
            .owner_references
            .iter()
            .map(|r| {
                (
                    r.kind.clone(),
                    r.uid.clone(),
                    r.controller,
                    r.block_owner_deletion,
                )
            })
            .collect();
        assert_eq!(owners, want);
        assert_eq!(v.json(), o.json().as_bytes());
        let server_side: serde_json::Value = v.parse().unwrap();
        assert_eq!(server_side["metadata"]["name"], json!(m.name));
    }
    let odd = r.inf.cache().get_by_key("shop/odd-0").unwrap();
    let v = View::decode(odd.wire()).unwrap();
    assert_eq!(v.generation(), Some(1), "set by the server at creation");
    assert_eq!(v.controller().map(|c| c.name), Some("d"));
}

/// (event, key, rv) from a line of audit-log (0.2) or test-abi-v01 (0.1).
fn event_of(line: &str) -> Option<(String, String, String)> {
    let rest = line.strip_prefix("info: ")?;
    let (event, rest) = if let Some(r) = rest.strip_prefix("v0.1 ") {
        let (e, r) = r.split_once(' ')?;
        (e.to_owned(), r)
    } else {
        let (e, r) = rest.split_once(' ')?;
        // "ADDED v1 Pod default/web-1 rv=5 ..." -> skip apiVersion and kind.
        let r = r.splitn(3, ' ').nth(2)?;
        (e.to_lowercase(), r)
    };
    let mut words = rest.split(' ');
    let key = words.next()?.to_owned();
    let rv = words.next()?.strip_prefix("rv=")?.to_owned();
    Some((event, key, rv))
}

fn events(h: &wisp_host::plugin::PluginHandle) -> Vec<(String, String, String)> {
    logs(h).iter().filter_map(|l| event_of(l)).collect()
}

#[tokio::test]
async fn plugins_of_abi_0_1_and_0_3_run_side_by_side_in_one_host() {
    let r = rig(vec![pod("default", "web-1"), pod("default", "web-2")]).await;
    let new = r
        .manager
        .start(spec("new", "audit_log", json!({})))
        .unwrap();
    let old = r
        .manager
        .start(spec("old", "test_abi_v01", json!({})))
        .unwrap();
    assert_eq!(new.status().running().abi, "0.3.0");
    assert_eq!(old.status().running().abi, "0.1.0");
    until("both synced", || new.has_synced() && old.has_synced()).await;
    r.server
        .update(touched(pod("default", "web-1"), 1))
        .unwrap();
    r.server.create(pod("default", "web-3")).unwrap();
    r.server
        .delete("v1", "Pod", Some("default"), "web-2")
        .unwrap();
    until("5 delivered to each", || {
        counter(&new, |c| &c.delivered) == 5 && counter(&old, |c| &c.delivered) == 5
    })
    .await;
    let (a, b) = (events(&new), events(&old));
    assert_eq!(a.len(), 5, "{:#?}", logs(&new));
    assert_eq!(
        a, b,
        "the same notifications, in the same order, through both ABIs"
    );
    assert_eq!(
        a.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(),
        ["added", "added", "updated", "added", "deleted"]
    );
    // The 0.1 plugin's cache reads (records) found the objects it was given.
    let hits = old.status().guest_counter("abi_cache_hits_total", &[]);
    assert!(hits >= 2, "cache hits {hits}");
    assert_eq!(old.status().guest_counter("abi_seq_gaps_total", &[]), 0);
    for h in [&new, &old] {
        assert_eq!(counter(h, |c| &c.failed), 0);
        assert_eq!(counter(h, |c| &c.traps), 0);
    }
}

/// A plugin that describes itself metadata-only gets objects without their JSON: its metadata
/// work succeeds, a parse fails with an error that says why, and the JSON is a cache read away.
#[tokio::test]
async fn a_metadata_only_plugin_gets_metadata_without_the_json() {
    let r = rig(vec![pod("default", "web-1"), pod("default", "web-2")]).await;
    let meta = r
        .manager
        .start(spec("meta", "bench_meta", json!({"work": "meta"})))
        .unwrap();
    let mut parse = spec("parse", "bench_meta", json!({"work": "pod"}));
    parse.on_failure.quarantine_after = 0;
    let parse = r.manager.start(parse).unwrap();
    until("both handled the initial list", || {
        counter(&meta, |c| &c.delivered) == 2
            && counter(&parse, |c| &c.failed) + counter(&parse, |c| &c.delivered) == 2
    })
    .await;
    assert_eq!(counter(&meta, |c| &c.failed), 0);
    assert_eq!(counter(&parse, |c| &c.failed), 2, "no JSON to parse");
    let e = parse.status().last_error().unwrap_or_default();
    assert!(e.contains("metadata-only"), "{e}");
}

/// The batches a test-raw-batch plugin logged (`batch LEN PART/PARTS HEX`), each put together
/// from its lines, in order.
fn logged_batches(lines: &[String]) -> Vec<Vec<u8>> {
    let mut batches: Vec<Vec<u8>> = Vec::new();
    for line in lines {
        let Some(rest) = line.split_once("batch ").map(|(_, r)| r) else {
            continue;
        };
        let mut words = rest.split(' ');
        let len: usize = words.next().unwrap().parse().unwrap();
        let (part, parts) = words.next().unwrap().split_once('/').unwrap();
        let hex = words.next().unwrap_or("");
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        if part == "1" {
            batches.push(Vec::with_capacity(len));
        }
        let b = batches.last_mut().expect("a batch's first line");
        b.extend_from_slice(&bytes);
        if part == parts {
            assert_eq!(b.len(), len, "the batch's length as logged");
        }
    }
    batches
}

/// The host writes each batch straight into the plugin's memory while wasmtime lowers
/// `handle`'s argument (no host-side buffer): what the plugin reads there is, byte for byte, the
/// batch of ABI 0.2 (`Batch::to_vec`, which the unit tests hold to `wit/abi-vectors.json`),
/// for every kind of notification, whole and metadata-only, in batches that grow the plugin's
/// memory and batches written over memory its allocator hands back dirty.
#[tokio::test]
async fn a_batch_arrives_in_the_plugins_memory_byte_for_byte() {
    use wisp_host::informer::{DeletedObject, Delivery, Notification, Tombstone};
    use wisp_host::plugin::batch::Batch;
    use wisp_host::plugin::{EngineConfig, PluginEngine, check_module};

    let pods: Vec<_> = (0..24)
        .map(|i| pod("default", &format!("web-{i}")))
        .collect();
    let r = rig(pods).await;
    let mut objs = r.inf.cache().list();
    objs.sort_by(|a, b| a.meta().name().cmp(b.meta().name()));
    let o = |i: usize| objs[i].clone();
    let at = |seq: u64, notification: Notification| Delivery { seq, notification };
    let every_kind = vec![
        at(
            1,
            Notification::Add {
                obj: o(0),
                initial_list: true,
            },
        ),
        at(
            2,
            Notification::Update {
                old: o(0),
                new: o(1),
            },
        ),
        at(
            3,
            Notification::Update {
                old: o(2),
                new: o(2),
            },
        ),
        at(
            4,
            Notification::Delete {
                obj: DeletedObject::Object(o(3)),
            },
        ),
        at(
            5,
            Notification::Delete {
                obj: DeletedObject::Tombstone(Tombstone {
                    key: "default/web-4".into(),
                    obj: o(4),
                }),
            },
        ),
        at(
            6,
            Notification::Add {
                obj: o(5),
                initial_list: false,
            },
        ),
    ];
    let many: Vec<Delivery> = (0..objs.len())
        .map(|i| {
            at(
                7 + i as u64,
                Notification::Add {
                    obj: o(i),
                    initial_list: false,
                },
            )
        })
        .collect();
    let last = vec![at(
        99,
        Notification::Update {
            old: o(6),
            new: o(7),
        },
    )];
    let sent: [(&str, &[Delivery]); 4] = [
        ("pods", &every_kind),
        ("pods", &many),
        ("p", &last),
        ("nodes", &[]),
    ];

    let engine = PluginEngine::new(EngineConfig::default()).unwrap();
    for (module, meta) in [("test_raw_batch", false), ("test_raw_batch_meta", true)] {
        let checked = check_module(&engine, &plugin_path(module), json!({})).unwrap();
        let status = checked.status().clone();
        let mut rt = checked.into_runtime(engine.clone());
        for (informer, batch) in sent {
            rt.handle(informer, batch);
        }
        let counters = &status.counters;
        let failed = wisp_host::plugin::status::PluginCounters::get(&counters.failed);
        assert_eq!(failed, 0, "{module}: {:?}", status.last_error());
        let got = logged_batches(&status.logs.lines());
        assert_eq!(got.len(), sent.len(), "{module}: one logged batch per call");
        for ((informer, batch), got) in sent.iter().zip(&got) {
            let want = Batch::new(informer, batch, meta).to_vec();
            assert!(
                *got == want,
                "{module}: the batch of {} from {informer} differs in the plugin's memory \
                 (first difference at byte {:?}, lengths {} and {})",
                batch.len(),
                got.iter().zip(&want).position(|(a, b)| a != b),
                got.len(),
                want.len()
            );
        }
        // The big batch really carried the objects (whole or metadata-only).
        let whole: usize = objs.iter().map(|o| o.wire().len()).sum();
        assert_eq!(
            got[1].len() > whole,
            !meta,
            "{module}: {} bytes",
            got[1].len()
        );
    }
}

/// A batch larger than the plugin may grow its memory to fails in the plugin's allocator, as a
/// plugin error (out of memory), not in the host: the host tries the notifications again one at
/// a time, each fits, and every one is delivered.
#[tokio::test]
async fn a_batch_over_the_plugins_memory_limit_is_a_plugin_error_and_is_retried() {
    const PODS: usize = 24;
    let big = "x".repeat(200 * 1024);
    let pods: Vec<_> = (0..PODS)
        .map(|i| {
            let mut p = pod("default", &format!("big-{i}"));
            p["metadata"]["annotations"] = json!({ "big": big });
            p
        })
        .collect();
    let r = rig(pods).await;
    let mut s = spec("raw", "test_raw_batch", json!({"quiet": true}));
    // ~4.8 MB of pods in one initial batch; the plugin may hold 3 MiB.
    s.limits.memory = 3 << 20;
    s.batch_max = 64;
    s.limits.deadline = std::time::Duration::from_secs(10);
    s.on_failure.quarantine_after = 0;
    let h = r.manager.start(s).unwrap();
    until("every pod delivered", || {
        counter(&h, |c| &c.delivered) == PODS as u64
    })
    .await;
    assert_eq!(counter(&h, |c| &c.failed), 0);
    assert!(
        counter(&h, |c| &c.out_of_memory) >= 1,
        "{:?}",
        h.status().last_error()
    );
    let e = h.status().last_error().unwrap_or_default();
    assert!(
        e.contains(&format!("memory limit of {} bytes exceeded", 3 << 20)),
        "{e}"
    );
    let sizes: Vec<usize> = logs(&h)
        .iter()
        .filter_map(|l| {
            l.split_once("batch ")
                .and_then(|(_, n)| n.trim().parse().ok())
        })
        .collect();
    assert!(sizes.len() >= PODS, "{sizes:?}");
    assert!(sizes.iter().all(|&n| n < 3 << 20), "{sizes:?}");
}
