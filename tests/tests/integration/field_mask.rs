//! An informer with `fields:` keeps only those paths of each object (besides its identity), on
//! the list and on every watch event: the cache's memory follows what plugins read.

use crate::common;

use common::*;
use serde_json::json;
use wisp_tests::pod;

fn cached_bytes(inf: &wisp_host::informer::SharedInformer) -> usize {
    inf.cache().list().iter().map(|o| o.heap_size()).sum()
}

#[tokio::test]
async fn an_informer_with_fields_keeps_only_those_paths_of_each_object() {
    let server = wisp_tests::TestApiServer::start().await.unwrap();
    for i in 0..20 {
        server.create(pod("default", &format!("p-{i}"))).unwrap();
    }
    let informers = informers_from_yaml(
        &server,
        "source: kube\ninformers:\n  - {name: full, apiVersion: v1, kind: Pod}\n  - {name: masked, apiVersion: v1, kind: Pod, fields: [spec.nodeName, spec.containers.image, status.phase]}\n",
    )
    .await;
    let (full, masked) = (informers[0].clone(), informers[1].clone());
    let _stops = (start(&full), start(&masked));
    until("synced", || full.has_synced() && masked.has_synced()).await;
    let mut changed = pod("default", "p-0");
    changed["spec"]["nodeName"] = json!("node-9");
    server.update(touched(changed, 1)).unwrap();
    // The assertions compare both caches: wait until both have the update.
    until("watched by both", || {
        let want = server_state(&server);
        cache_state(&masked) == want && cache_state(&full) == want
    })
    .await;

    let p0 = masked.cache().get_by_key("default/p-0").unwrap().to_value();
    assert_eq!(p0["spec"]["nodeName"], "node-9", "{p0}");
    let whole = full.cache().get_by_key("default/p-0").unwrap().to_value();
    assert_eq!(p0["metadata"], whole["metadata"]);
    let spec = p0["spec"].as_object().unwrap();
    assert_eq!(
        spec.keys().collect::<Vec<_>>(),
        ["containers", "nodeName"],
        "{p0}"
    );
    for c in p0["spec"]["containers"].as_array().unwrap() {
        assert_eq!(
            c.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["image"],
            "{p0}"
        );
    }
    let (f, m) = (cached_bytes(&full), cached_bytes(&masked));
    assert!(m < f, "masked cache {m} bytes, full {f}");
    println!("cached bytes per pod: full {} masked {}", f / 20, m / 20);
}

/// client-go's metadata informer: `metadataOnly: true` lists and watches
/// `PartialObjectMetadata`, so the API server sends each object's metadata alone; the cached
/// objects keep the informer's apiVersion and kind.
#[tokio::test]
async fn a_metadata_only_informer_is_sent_metadata_alone_and_keeps_its_kind() {
    let server = wisp_tests::TestApiServer::start().await.unwrap();
    for i in 0..20 {
        server.create(pod("default", &format!("p-{i}"))).unwrap();
    }
    let informers = informers_from_yaml(
        &server,
        "source: kube\ninformers:\n  - {name: full, apiVersion: v1, kind: Pod}\n  - {name: meta, apiVersion: v1, kind: Pod, metadataOnly: true, indexes: [field:metadata.labels.app]}\n",
    )
    .await;
    let (full, meta) = (informers[0].clone(), informers[1].clone());
    let _stops = (start(&full), start(&meta));
    until("synced", || full.has_synced() && meta.has_synced()).await;
    let mut changed = pod("default", "p-0");
    changed["metadata"]["labels"] = json!({"app": "shop"});
    server.update(touched(changed, 1)).unwrap();
    // The assertions compare both caches: wait until both have the update.
    until("watched by both", || {
        let want = server_state(&server);
        cache_state(&meta) == want && cache_state(&full) == want
    })
    .await;

    let p0 = meta.cache().get_by_key("default/p-0").unwrap().to_value();
    let obj = p0.as_object().unwrap();
    assert_eq!(
        obj.keys().collect::<Vec<_>>(),
        ["apiVersion", "kind", "metadata"],
        "{p0}"
    );
    assert_eq!(
        (&p0["apiVersion"], &p0["kind"]),
        (&json!("v1"), &json!("Pod"))
    );
    let whole = full.cache().get_by_key("default/p-0").unwrap().to_value();
    assert_eq!(p0["metadata"], whole["metadata"]);
    assert_eq!(
        meta.cache()
            .by_index("field:metadata.labels.app", "shop")
            .unwrap()
            .len(),
        1,
        "metadata indexes work"
    );
    let (f, m) = (cached_bytes(&full), cached_bytes(&meta));
    assert!(m < f, "metadata-only cache {m} bytes, full {f}");
    println!(
        "cached bytes per pod: full {} metadata only {}",
        f / 20,
        m / 20
    );
}
