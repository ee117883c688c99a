//! Heap per cached object vs kube-runtime's Store.

use std::sync::Arc;

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
