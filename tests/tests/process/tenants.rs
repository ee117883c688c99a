//! Tenants' custom resources with the real binary (issue 42 item 4): applied at once, in turn
//! by namespace, and counted in the memory plan of the container the host runs in.

use super::*;
use serde_json::json;

const CRDS: &str = include_str!("../../../deploy/crds.yaml");
const API_VERSION: &str = "wisp.io/v1alpha1";

/// A server with the CRDs and the namespaces `names`.
async fn server(names: &[&str]) -> TestApiServer {
    let server = TestApiServer::start()
        .await
        .expect("test API server starts");
    for crd in wisp_kinds::yaml::documents(CRDS).unwrap() {
        server.create(crd).unwrap();
    }
    for ns in names {
        server
            .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
            .unwrap();
    }
    server
}

/// A WispPlugin `name` of namespace `ns` running `module` (a file under the host's
/// `modulePaths`) over the pods of its namespace, `extra` added to its spec.
fn wisp_plugin(ns: &str, name: &str, module: &Path, extra: Value) -> Value {
    let mut spec = json!({
        "module": module.display().to_string(),
        "informers": [{"name": "pods", "apiVersion": "v1", "kind": "Pod"}],
        "settings": {"requireLimits": false},
    });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    json!({"apiVersion": API_VERSION, "kind": "WispPlugin",
        "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

/// The condition `kind` of WispPlugin `ns/name`'s status (null while none is written).
fn condition(server: &TestApiServer, ns: &str, name: &str, kind: &str) -> Value {
    let status = server
        .get(API_VERSION, "WispPlugin", Some(ns), name)
        .map(|o| o["status"].clone())
        .unwrap_or(Value::Null);
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind).cloned())
        .unwrap_or(Value::Null)
}

/// Tenants with the host in a memory cgroup of 768 MiB: a compile bomb's WispPlugin in
/// namespace `bombs` (its compile runs until `engine.compileTimeout`'s CPU seconds) does not
/// hold up the WispPlugin created after it in namespace `team`, which runs while the bomb is
/// still compiling (its status not yet written); one asking for `limits.memory: 200Mi` in
/// namespace `greedy` is refused in its status (`OverBudget`, naming the container's limit),
/// as the plugins' worst case with it (twice each instance's memory, each queue full, the host)
/// is over the limit; the bomb is then refused at its bound, and the others are untouched.
/// Before (one resource at a time), `team` waited for the bomb's whole compile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_compile_bomb_holds_up_no_other_namespace_and_the_memory_plan_refuses_what_cannot_fit()
 {
    let cgroup = match MemoryCgroup::new("tenants", 768 << 20) {
        Ok(c) => c,
        Err(why) => {
            // (A container without cgroup delegation; this machine and its CI have one.)
            eprintln!("SKIPPED: no memory cgroup can be made here ({why})");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let mods = dir.path().join("mods");
    std::fs::create_dir(&mods).unwrap();
    let (policy, bomb) = (mods.join("policy.wasm"), mods.join("bomb.wasm"));
    std::fs::copy(plugin_path("image_policy"), &policy).unwrap();
    std::fs::write(&bomb, slow_bomb()).unwrap();
    let server = server(&["bombs", "team", "greedy"]).await;
    common::kubeconfig(dir.path(), &server);
    let config = dir.path().join("wisp.yaml");
    std::fs::write(
        &config,
        "source: kube\ninformers:\n  - {name: namespaces, apiVersion: v1, kind: Namespace}\n\
         customResources: {enabled: true, statusInterval: 1s, modulePaths: [mods]}\n\
         engine: {cacheDir: modules, compileTimeout: 20s, firstLoadTier: false}\n\
         executor: {workers: 2}\nadmin: {listen: \"127.0.0.1:0\"}\n",
    )
    .unwrap();
    let prefix = cgroup.prefix();
    let prefix: Vec<&str> = prefix.iter().map(String::as_str).collect();
    let mut w = Wisp::run_via(&prefix, "tenants", dir.path(), &config, "5s");
    w.admin().await;

    server
        .create(wisp_plugin("bombs", "bomb", &bomb, json!({})))
        .unwrap();
    let pid = w.child.id();
    until(
        "the bomb's compile running",
        Duration::from_secs(60),
        || async { !children(pid).is_empty() },
    )
    .await;
    server
        .create(wisp_plugin("team", "policy", &policy, json!({})))
        .unwrap();
    server
        .create(wisp_plugin(
            "greedy",
            "policy",
            &policy,
            json!({"limits": {"memory": "200Mi"}}),
        ))
        .unwrap();
    until("team's plugin runs", Duration::from_secs(120), || async {
        condition(&server, "team", "policy", "Running")["status"] == "True"
    })
    .await;
    let bomb_ready = condition(&server, "bombs", "bomb", "ModuleReady");
    assert_eq!(
        bomb_ready,
        Value::Null,
        "team's plugin ran only once the bomb's apply had ended:\n{}",
        w.log()
    );

    until("greedy refused", Duration::from_secs(120), || async {
        condition(&server, "greedy", "policy", "ModuleReady")["status"] == "False"
    })
    .await;
    let greedy = condition(&server, "greedy", "policy", "ModuleReady");
    assert_eq!(greedy["reason"], "OverBudget", "{greedy:#}");
    let msg = greedy["message"].as_str().unwrap();
    assert!(
        msg.contains("spec.limits.memory")
            && msg.contains("may take 464 MiB at worst")
            && msg.contains("over the container's memory limit of 768 MiB"),
        "{msg}"
    );

    until("the bomb refused", Duration::from_secs(300), || async {
        condition(&server, "bombs", "bomb", "ModuleReady")["status"] == "False"
    })
    .await;
    let refused = condition(&server, "bombs", "bomb", "ModuleReady");
    assert_eq!(refused["reason"], "ModuleRefused", "{refused:#}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("engine.compileTimeout"),
        "{refused:#}"
    );
    assert_eq!(
        condition(&server, "team", "policy", "Running")["status"],
        "True"
    );
    assert_eq!(cgroup.oom_kills(), 0, "{}", w.log());
    w.signal("TERM");
    let status = w.exited(Duration::from_secs(60)).await;
    assert!(status.is_some_and(|s| s.success()), "{}", w.log());
}
