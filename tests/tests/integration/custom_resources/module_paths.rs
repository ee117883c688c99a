//! A tenant's module path is bounded before it is used (`customResources.modulePaths`, the
//! module reader's regular-file and size checks), while the host and other tenants run on.

use super::*;

/// A `WispPlugin` of `team-a` running the module at `module`.
fn tenant(name: &str, module: &str) -> Value {
    let mut p = wisp_plugin(name, json!({ "module": module }));
    p["metadata"]["namespace"] = json!("team-a");
    p
}

/// `/proc/self/pagemap` (0 bytes by its size, 256 GiB to read: the host used to read it until
/// the kernel killed it) is refused after its first 8 bytes, even under a directory the
/// operator allows; a path outside `modulePaths` is refused without being looked at; a FIFO
/// without blocking. Each says why in its status, and meanwhile the host answers and another
/// tenant's plugin delivers.
#[tokio::test]
async fn a_tenants_module_outside_module_paths_or_not_a_bounded_regular_file_is_refused() {
    let server = server().await;
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}});
    server.create(ns).unwrap();
    let fifos = tempfile::tempdir().unwrap();
    let fifo = fifos.path().join("pipe.wasm");
    mkfifo(&fifo);
    let allowed = [plugin_dir(), "/proc/self".into(), fifos.path().to_owned()];
    let host = Host::start_with(&server, &allowed, "").await;
    server.create(wisp_plugin("images", json!({}))).unwrap();
    until_status(&server, "images", "the other tenant's plugin runs", |s| {
        s["counters"]["violations"] == 1
    })
    .await;

    let fifo = fifo.display().to_string();
    for (name, module) in [
        ("pagemap", "/proc/self/pagemap"),
        ("outside", "/etc/passwd"),
        ("pipe", fifo.as_str()),
    ] {
        server.create(tenant(name, module)).unwrap();
    }
    let refused = |name: &'static str| {
        let server = &server;
        async move {
            let degraded = |s: &Value| condition(s, "Degraded")["status"] == "True";
            let ok = wait_for(patience(Duration::from_secs(20)), || {
                degraded(&status_in(server, "team-a", name))
            })
            .await;
            let s = status_in(server, "team-a", name);
            assert!(ok, "{name} not refused: {s:#}");
            assert_eq!(condition(&s, "Running")["status"], "False", "{s}");
            let reason = condition(&s, "Degraded")["reason"]
                .as_str()
                .unwrap()
                .to_owned();
            (reason, s["lastError"].as_str().unwrap().to_owned())
        }
    };
    let (reason, e) = refused("pagemap").await;
    assert_eq!(reason, "ModuleRefused", "{e}");
    assert!(
        e.contains("/pagemap: not a WebAssembly file (it does not start with \"\\0asm\")"),
        "{e}"
    );
    let (reason, e) = refused("outside").await;
    assert_eq!(reason, "NotAllowed", "{e}");
    assert!(
        e.contains(
            "spec.module: /etc/passwd is not under a directory of customResources.modulePaths"
        ),
        "{e}"
    );
    let (reason, e) = refused("pipe").await;
    assert_eq!(reason, "Invalid", "{e}");
    assert!(
        e.contains(&format!(
            "spec.module: {fifo} is a FIFO, not a regular file"
        )),
        "{e}"
    );
    for name in ["pagemap", "outside", "pipe"] {
        assert!(host.host.plugins.get(&format!("team-a/{name}")).is_none());
    }

    let mut p = pod("default", "api");
    p["spec"]["containers"][0]["image"] = json!("redis:latest");
    server.create(p).unwrap();
    until_status(
        &server,
        "images",
        "the other tenant's plugin sees the new pod",
        |s| s["counters"]["violations"] == 2,
    )
    .await;
    let health = common::http::get(host.host.admin_addr.unwrap(), "/healthz").await;
    assert_eq!(health.status, 200, "{health:?}");
    host.stop().await;
}
