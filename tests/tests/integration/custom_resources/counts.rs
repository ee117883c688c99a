//! How many custom resources a host takes: `customResources.maxPerNamespace` and `maxTotal`.

use super::*;

/// Past a count cap a new resource is refused in its status, naming the cap, and the running
/// ones are untouched; once one is deleted, a refused one takes its place.
#[tokio::test]
async fn past_a_count_cap_a_new_resource_is_refused_and_takes_a_place_once_one_is_deleted() {
    let server = server().await;
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}});
    server.create(ns).unwrap();
    let host = Host::start(&server, ", maxPerNamespace: 1, maxTotal: 2").await;
    let running = |s: &Value| condition(s, "Running")["status"] == "True";
    let too_many = |s: &Value| condition(s, "Degraded")["reason"] == "TooMany";
    server.create(wisp_plugin("first", json!({}))).unwrap();
    until_status(&server, "first", "running", running).await;
    server.create(wisp_plugin("second", json!({}))).unwrap();
    let s = until_status(&server, "second", "refused", too_many).await;
    assert_eq!(
        s["lastError"],
        "WispPlugin default/second: over customResources.maxPerNamespace (1): 1 custom \
         resources of namespace \"default\" hold a place already; this one gets one when one of \
         them is deleted",
        "{s}"
    );
    assert_eq!(condition(&s, "Running")["status"], "False", "{s}");

    let mut cluster = wisp_plugin("cluster", json!({}));
    cluster["kind"] = json!("ClusterWispPlugin");
    cluster["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("namespace");
    server.create(cluster).unwrap();
    let mut other = wisp_plugin("other", json!({}));
    other["metadata"]["namespace"] = json!("team-a");
    server.create(other).unwrap();
    let ok = wait_for(patience(Duration::from_secs(20)), || {
        too_many(&status_in(&server, "team-a", "other"))
    })
    .await;
    let s = status_in(&server, "team-a", "other");
    assert!(ok, "not refused: {s:#}");
    assert!(
        s["lastError"]
            .as_str()
            .is_some_and(|e| e.contains(": over customResources.maxTotal (2): 2 custom")),
        "{s}"
    );
    // The cluster-scoped one held its place while it was applied (at once with the refusal).
    let ok = wait_for(patience(Duration::from_secs(20)), || {
        host.host.plugins.get("cluster").is_some()
    })
    .await;
    assert!(ok, "the ClusterWispPlugin does not run");
    let first = host.host.plugins.get("default/first").expect("runs on");
    assert_eq!(first.running().generation, 1);
    assert!(running(&status(&server, "first")));

    server
        .delete(API_VERSION, "WispPlugin", Some("default"), "first")
        .unwrap();
    until_status(&server, "second", "running once first is deleted", running).await;
    assert!(too_many(&status_in(&server, "team-a", "other")));
    host.stop().await;
}
