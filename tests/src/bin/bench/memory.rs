//! Heap per cached object vs kube-runtime's Store.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use wisp_host::informer::Object;

use super::common::*;
use crate::Args;

/// Heap per cached object: Wisp's indexer (metadata + JSON, namespace index) vs kube-runtime's
/// reflector `Store<DynamicObject>`, filled with the same pods.
pub(crate) fn memory_figures(a: &Args) -> anyhow::Result<()> {
    let n = if a.quick { 10_000 } else { 100_000 };
    let values: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            let mut v = wisp_tests::pod(&format!("ns-{}", i % 50), &format!("web-{i}"));
            v["metadata"]["resourceVersion"] = json!(format!("{}", i + 1));
            v["metadata"]["uid"] = json!(format!("3f2a9c1e-0000-4000-8000-{i:012}"));
            v["metadata"]["managedFields"] = json!([{"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}}]);
            v
        })
        .collect();
    COUNTING.store(true, std::sync::atomic::Ordering::Relaxed);
    let r = memory_tables(n, &values);
    COUNTING.store(false, std::sync::atomic::Ordering::Relaxed);
    r
}

pub(crate) fn memory_tables(n: usize, values: &[serde_json::Value]) -> anyhow::Result<()> {
    println!("\n## Memory per cached object ({n} pods of ~2 KB + managedFields)\n");
    println!("| cache | heap per object | ratio |");
    println!("|---|---|---|");
    let base = live();
    let ix = wisp_host::informer::Indexer::new();
    for v in values {
        ix.add(Arc::new(
            Object::from_value(v.clone(), true).map_err(|e| anyhow::anyhow!("{e}"))?,
        ));
    }
    let ours = (live() - base) as f64 / n as f64;
    drop(ix);
    let base = live();
    let ar = kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
    let mut writer: kube::runtime::reflector::store::Writer<kube::api::DynamicObject> =
        kube::runtime::reflector::store::Writer::new(ar);
    for v in values {
        let o: kube::api::DynamicObject = serde_json::from_value(v.clone())?;
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(o));
    }
    let theirs = (live() - base) as f64 / n as f64;
    drop(writer);
    // The same store when the user strips managedFields too (kube-runtime's usual advice).
    let base = live();
    let ar = kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
    let mut writer: kube::runtime::reflector::store::Writer<kube::api::DynamicObject> =
        kube::runtime::reflector::store::Writer::new(ar);
    for v in values {
        let mut o: kube::api::DynamicObject = serde_json::from_value(v.clone())?;
        o.metadata.managed_fields = None;
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(o));
    }
    let stripped = (live() - base) as f64 / n as f64;
    drop(writer);
    // Metadata only: kube-runtime's metadata watcher stores PartialObjectMeta<Pod>.
    let base = live();
    let mut writer: kube::runtime::reflector::store::Writer<
        kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Pod>,
    > = kube::runtime::reflector::store::Writer::new(());
    for v in values {
        let mut o: kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Pod> =
            serde_json::from_value(json!({"apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadata", "metadata": v["metadata"]}))?;
        o.metadata.managed_fields = None;
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(o));
    }
    let their_meta = (live() - base) as f64 / n as f64;
    drop(writer);
    // Wisp's field mask and metadata-only informers keep what the transform leaves (a
    // metadata-only informer is sent exactly that by the API server).
    let masked = |paths: &[&str]| -> anyhow::Result<f64> {
        let mask = wisp_host::informer::mask::FieldMask::parse(
            &paths.iter().map(|p| (*p).to_owned()).collect::<Vec<_>>(),
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        let base = live();
        let ix = wisp_host::informer::Indexer::new();
        for v in values {
            ix.add(Arc::new(
                Object::from_value(mask.apply(v), true).map_err(|e| anyhow::anyhow!("{e}"))?,
            ));
        }
        let per = (live() - base) as f64 / n as f64;
        drop(ix);
        Ok(per)
    };
    let field_masked = masked(&["spec.nodeName", "spec.containers.image", "status.phase"])?;
    let metadata_only = masked(&[])?;
    println!(
        "| kube-runtime Store<DynamicObject> (baseline) | {:.0} B | 1.00x |",
        theirs
    );
    println!(
        "| kube-runtime Store<DynamicObject>, managedFields stripped | {:.0} B | {:.2}x |",
        stripped,
        stripped / theirs
    );
    println!(
        "| Wisp indexer (managedFields stripped, namespace index) | {:.0} B | {:.2}x ({:.2}x of the stripped store; target <= 0.6x) |",
        ours,
        ours / theirs,
        ours / stripped
    );
    println!(
        "| Wisp indexer, `fields: [spec.nodeName, spec.containers.image, status.phase]` | {:.0} B | {:.2}x |",
        field_masked,
        field_masked / theirs
    );
    println!(
        "| kube-runtime Store<PartialObjectMeta<Pod>> (metadata watcher, managedFields stripped) | {:.0} B | {:.2}x |",
        their_meta,
        their_meta / theirs
    );
    println!(
        "| Wisp indexer, `metadataOnly: true` | {:.0} B | {:.2}x ({:.2}x of kube-runtime's metadata store) |",
        metadata_only,
        metadata_only / theirs,
        metadata_only / their_meta
    );
    Ok(())
}

/// Memory of a whole idle plugin: `n` test-faults plugins (the `many_plugins` test's plugin) on
/// one pod informer of 10 pods, each started, synced (its initial list handled) and then idle.
/// Per plugin: resident memory (VmRSS delta: instance, store, linear memory, host side) and the
/// host heap of it (counted by the allocator), apart for the plugins started (instance, store,
/// status, listener, before any notification) and for the initial list handled.
pub(crate) async fn idle_plugin_figures(a: &Args) -> anyhow::Result<()> {
    use std::sync::atomic::Ordering::Relaxed;
    use wisp_host::plugin::{EngineConfig, PluginEngine};

    let n = if a.quick { 100 } else { 500 };
    let engine = PluginEngine::new(EngineConfig {
        cache_dir: None,
        ..EngineConfig::default()
    })?;
    // A first plugin, on an informer of its own, compiles the module and starts the engine's
    // and the executor's pools; a second one takes the path the measured ones take (the module
    // and its link from memory), so that the code of that path is not first paged in while
    // they are measured.
    let (warm, warm_inf) = idle_rig(&engine, a)?;
    let warm_stop = run_informer(&warm_inf);
    let first = vec![warm.start(0)?, warm.start(n + 1)?];
    wait_until("the first plugin idle", Duration::from_secs(120), || {
        all_idle(&first)
    })
    .await?;
    let (rig, inf) = idle_rig(&engine, a)?;
    COUNTING.store(true, Relaxed);
    let (heap, rss) = (live(), super::isolation::rss());
    let maps = super::smaps::snapshot();
    let mut hs = Vec::with_capacity(n);
    for i in 1..=n {
        hs.push(rig.start(i)?);
    }
    let started = (live() - heap) as f64 / n as f64 / 1024.0;
    let started_maps = super::smaps::snapshot();
    // Only now the informer lists its pods: the plugins' queues fill, the plugins handle them.
    let stop = run_informer(&inf);
    wait_until("every plugin idle", Duration::from_secs(600), || {
        all_idle(&hs)
    })
    .await?;
    let heap = (live() - heap) as f64 / n as f64 / 1024.0;
    let rss = super::isolation::rss().saturating_sub(rss) as f64 / n as f64 / 1024.0;
    let idle_maps = super::smaps::snapshot();
    COUNTING.store(false, Relaxed);
    println!(
        "\n## Whole idle plugin (test-faults, {n} plugins, initial list of 10 pods handled)\n"
    );
    println!("| per plugin | value | target |");
    println!("|---|---|---|");
    println!("| resident memory (VmRSS delta / {n}) | {rss:.0} KiB | <= 128 KiB |");
    println!("| of it host heap (allocator count / {n}) | {heap:.1} KiB | |");
    println!(
        "| of the heap, once started (instance, store, WASI, status, listener; nothing delivered) | {started:.1} KiB | |"
    );
    println!(
        "| of the heap, added by the initial list (queue, the plugin's metric series) | {:.1} KiB | |",
        heap - started
    );
    println!(
        "| of it not host heap (linear memory, instance mappings, allocator slack) | {:.0} KiB | |",
        rss - heap
    );
    println!("\nWhere the resident bytes are (`/proc/self/smaps`, by mapping), once started:\n");
    super::smaps::print_diff(&maps, &started_maps, n);
    println!("\nand idle, the initial list handled:\n");
    super::smaps::print_diff(&maps, &idle_maps, n);
    for h in hs.iter().chain(&first) {
        h.stop();
    }
    let _ = stop.send(());
    let _ = warm_stop.send(());
    Ok(())
}

/// Starts test-faults plugins on one pod informer (not yet running) of 10 pods.
struct IdleRig<'a> {
    manager: wisp_host::plugin::PluginManager,
    a: &'a Args,
}

impl IdleRig<'_> {
    fn start(&self, i: usize) -> anyhow::Result<wisp_host::plugin::PluginHandle> {
        let spec = wisp_host::plugin::PluginSpec::new(
            format!("faults-{i}"),
            self.a.plugin_dir.join("test_faults.wasm"),
            &["pods"],
        );
        self.manager
            .start(spec)
            .map_err(|e| anyhow::anyhow!("starting test-faults: {e}"))
    }
}

fn idle_rig<'a>(
    engine: &Arc<wisp_host::plugin::PluginEngine>,
    a: &'a Args,
) -> anyhow::Result<(IdleRig<'a>, Arc<wisp_host::informer::SharedInformer>)> {
    use wisp_host::informer::shared_informer::InformerConfig;
    let src = wisp_host::source::memory::MemorySource::new();
    for i in 0..10 {
        src.apply(wisp_tests::pod("default", &format!("web-{i}")))?;
    }
    let inf =
        wisp_host::informer::SharedInformer::new("pods", Arc::new(src), InformerConfig::default());
    let mut manager = wisp_host::plugin::PluginManager::new(engine.clone());
    manager.add_informer(inf.clone());
    Ok((IdleRig { manager, a }, inf))
}

fn run_informer(
    inf: &Arc<wisp_host::informer::SharedInformer>,
) -> tokio::sync::oneshot::Sender<()> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(inf.clone().run(async {
        let _ = rx.await;
    }));
    tx
}

/// Synced, nothing queued, everything queued delivered.
fn all_idle(hs: &[wisp_host::plugin::PluginHandle]) -> bool {
    hs.iter().all(|h| {
        h.has_synced()
            && h.queues()
                .iter()
                .all(|(_, q)| q.depth == 0 && q.delivered == q.queued)
    })
}
