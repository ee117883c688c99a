//! The manifests in `deploy/` hold together: each is Kubernetes objects, the ConfigMap carries
//! `deploy/wisp.yaml` verbatim, the Deployment's args, mounts, ports and probes agree with that
//! config, the image has the modules it names, and `deploy/rbac.yaml` is exactly what
//! `wisp rbac` prints for it today. `deploy/shards/`, rendered by kubectl's kustomize, is the
//! same with shards mode's config, replicas, disruption budget and Lease rights. `crds.yaml`
//! defines what the host reads of custom resources, and `wispplugin-example.yaml` is valid for it.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use wisp_host::config::Config;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_path_buf()
}

fn read(name: &str) -> String {
    let p = repo().join("deploy").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The YAML documents of `deploy/<name>`.
fn docs(name: &str) -> Vec<Value> {
    yaml_docs(&read(name), &format!("deploy/{name}"))
}

/// The YAML documents of `text` (from `what`).
fn yaml_docs(text: &str, what: &str) -> Vec<Value> {
    wisp_kinds::yaml::documents(text)
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// The one object of `kind` named `name` in `deploy/<file>`.
fn object(file: &str, kind: &str, name: &str) -> Value {
    let found: Vec<Value> = docs(file)
        .into_iter()
        .filter(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "deploy/{file}: one {kind} {name}");
    found.into_iter().next().unwrap_or_default()
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what}: expected a string, got {v}"))
}

/// The built plugins: `$WISP_PLUGIN_DIR` or `<repo>/plugins/dist`, absolute.
fn plugin_dir() -> PathBuf {
    let dir = std::env::var_os("WISP_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("plugins").join("dist"));
    std::path::absolute(&dir).unwrap_or(dir)
}

/// The module file names `deploy/wisp.yaml` expects under `/plugins/` (where the image puts them).
fn image_modules() -> Vec<String> {
    read(CONFIG)
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("module: /plugins/"))
        .map(|m| m.trim().to_owned())
        .collect()
}

/// The config of `deploy/`, and that of `deploy/shards/`.
const CONFIG: &str = "wisp.yaml";
const SHARDS_CONFIG: &str = "shards/wisp.yaml";

/// Writes `deploy/<name>` into `<dir>/deploy/<name>` with its `/plugins/X.wasm` modules pointing
/// at the built plugins, so that it validates outside the image.
fn config_copy(dir: &Path, name: &str) {
    let plugins = plugin_dir();
    let mut rewritten = 0;
    let mut out = String::new();
    for line in read(name).split_inclusive('\n') {
        match line.split_once("module: /plugins/") {
            Some((indent, file)) if indent.trim().is_empty() => {
                let file = file.trim();
                let path = plugins.join(file);
                assert!(
                    path.is_file(),
                    "{} missing: run `cargo xtask plugins` (or set WISP_PLUGIN_DIR)",
                    path.display()
                );
                let quoted = path.display().to_string().replace('\'', "''");
                out.push_str(&format!("{indent}module: '{quoted}'\n"));
                rewritten += 1;
            }
            _ => out.push_str(line),
        }
    }
    assert_eq!(rewritten, 3, "deploy/{name}: the three example modules");
    let path = dir.join("deploy").join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, out).unwrap();
}

/// `deploy/<name>`, validated (modules resolved to the built plugins).
fn load_config(name: &str) -> Config {
    let d = tempfile::tempdir().unwrap();
    config_copy(d.path(), name);
    Config::load(&d.path().join("deploy").join(name)).unwrap_or_else(|e| panic!("{e}"))
}

/// `deploy/wisp.yaml`, validated.
fn config() -> Config {
    load_config(CONFIG)
}

/// What `wisp rbac --namespace wisp` prints for `deploy/<name>` (run from a copy at the same
/// relative path, so the generated header names `deploy/<name>`).
fn wisp_rbac(name: &str) -> String {
    let d = tempfile::tempdir().unwrap();
    config_copy(d.path(), name);
    let out = Command::new(env!("CARGO_BIN_EXE_wisp"))
        .current_dir(d.path())
        .args([
            "rbac",
            "--config",
            &format!("deploy/{name}"),
            "--namespace",
            "wisp",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "wisp rbac failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

const CLUSTER_SCOPED: [&str; 4] = [
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
];

/// The example of plugins as custom resources: a team's WispPlugin lives in the team's
/// namespace, not Wisp's.
const CR_EXAMPLE: &str = "wispplugin-example.yaml";

#[test]
fn every_manifest_is_kubernetes_objects_in_namespace_wisp() {
    let mut files: Vec<String> = std::fs::read_dir(repo().join("deploy"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        // wisp.yaml is Wisp's own config; the custom resources' example is a team's.
        .filter(|n| n.ends_with(".yaml") && n != "wisp.yaml" && n != CR_EXAMPLE)
        .collect();
    files.sort();
    for expected in [
        "configmap.yaml",
        "deployment.yaml",
        "namespace.yaml",
        "rbac.yaml",
    ] {
        assert!(files.iter().any(|f| f == expected), "deploy/{expected}");
    }
    for file in &files {
        let docs = docs(file);
        assert!(!docs.is_empty(), "deploy/{file}: no documents");
        for (i, d) in docs.iter().enumerate() {
            let at = format!("deploy/{file}: document {i}");
            for field in ["apiVersion", "kind"] {
                assert!(
                    d[field].as_str().is_some_and(|s| !s.is_empty()),
                    "{at}: {field} missing: {d}"
                );
            }
            assert!(
                d["metadata"]["name"]
                    .as_str()
                    .is_some_and(|s| !s.is_empty()),
                "{at}: metadata.name missing: {d}"
            );
            let kind = str_of(&d["kind"], &at);
            if !CLUSTER_SCOPED.contains(&kind) {
                assert_eq!(d["metadata"]["namespace"], "wisp", "{at}: {kind} namespace");
            }
        }
    }
    object("namespace.yaml", "Namespace", "wisp");
}

#[test]
fn the_configmap_holds_wisp_yaml_byte_for_byte() {
    let cm = object("configmap.yaml", "ConfigMap", "wisp-config");
    let held = str_of(&cm["data"]["wisp.yaml"], "data.wisp.yaml");
    assert!(
        held == read(CONFIG),
        "deploy/configmap.yaml's wisp.yaml differs from deploy/wisp.yaml; regenerate its data \
         with `sed 's/^/    /' deploy/wisp.yaml`"
    );
}

#[test]
fn deploy_wisp_yaml_is_a_valid_config_for_the_cluster() {
    let cfg = config();
    assert_eq!(cfg.source, "kube");
    assert_eq!(cfg.informers.len(), 1);
    let pods = &cfg.informers[0];
    assert_eq!(
        (
            pods.name.as_str(),
            pods.api_version.as_str(),
            pods.kind.as_str()
        ),
        ("pods", "v1", "Pod")
    );
    assert_eq!(pods.namespaces, None, "cluster-wide");
    assert_eq!(pods.indexes, ["field:spec.nodeName", "ownerUid"]);
    let plugins: Vec<(&str, &Path)> = cfg
        .plugins
        .iter()
        .map(|p| (p.name.as_str(), p.module.as_path()))
        .collect();
    let dist = plugin_dir();
    assert_eq!(
        plugins,
        [
            ("audit", dist.join("audit_log.wasm").as_path()),
            ("image-policy", dist.join("image_policy.wasm").as_path()),
            ("inventory", dist.join("inventory.wasm").as_path()),
        ]
    );
    assert_eq!(
        cfg.plugins[1].settings,
        Some(
            serde_json::json!({"denyLatest": true, "requireLimits": true, "exemptNamespaces": ["kube-system"]})
        )
    );
    assert_eq!(
        cfg.plugins[2].settings,
        Some(
            serde_json::json!({"informer": "pods", "nodeIndex": "field:spec.nodeName", "ownerIndex": "ownerUid"})
        )
    );
    assert_eq!(
        cfg.admin.listen, "127.0.0.1:9090",
        "the admin API on loopback only"
    );
    assert_eq!(cfg.admin.metrics_address.as_deref(), Some("0.0.0.0:9091"));
    assert!(
        cfg.admin.token_file.is_some(),
        "the admin API wants a token"
    );
    assert!(
        cfg.engine
            .cache_dir
            .as_deref()
            .is_some_and(|d| d.starts_with("/var/cache/wisp")),
        "{:?}",
        cfg.engine.cache_dir
    );
}

/// deploy/crds.yaml defines the group, version and kinds the host reads; each resource of the
/// example is one of them and a valid plugin for deploy/wisp.yaml with `customResources` on (its
/// modules among those the image bakes in).
#[test]
fn the_crds_serve_what_the_host_reads_and_the_example_is_valid_for_the_deploy_config() {
    use wisp_host::config::custom::{CustomRef, GROUP, KINDS, VERSION};
    let crds = docs("crds.yaml");
    assert_eq!(crds.len(), KINDS.len());
    for ((kind, plural, namespaced), crd) in KINDS.iter().zip(&crds) {
        assert_eq!(crd["metadata"]["name"], format!("{plural}.{GROUP}"));
        assert_eq!(crd["spec"]["names"]["kind"], *kind);
        let scope = if *namespaced { "Namespaced" } else { "Cluster" };
        assert_eq!(crd["spec"]["scope"], scope);
        let v = &crd["spec"]["versions"][0];
        assert_eq!(v["name"], VERSION);
        assert!(
            v["subresources"]["status"].is_object(),
            "{kind}: status subresource"
        );
    }
    let d = tempfile::tempdir().unwrap();
    config_copy(d.path(), CONFIG);
    let path = d.path().join("deploy").join(CONFIG);
    // As the example's header says, the modules allowed from where the image bakes them in.
    let allowed = format!("{:?}", plugin_dir().display().to_string());
    let text = std::fs::read_to_string(&path).unwrap()
        + &format!("customResources: {{enabled: true, modulePaths: [{allowed}]}}\n");
    std::fs::write(&path, text).unwrap();
    let cfg = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let baked = image_modules();
    for (i, cr) in docs(CR_EXAMPLE).iter().enumerate() {
        let kind = KINDS
            .iter()
            .find(|k| cr["kind"] == k.0)
            .unwrap_or_else(|| panic!("document {i}: not a kind of the CRDs: {cr}"));
        assert_eq!(cr["apiVersion"], format!("{GROUP}/{VERSION}"));
        let mut spec = cr["spec"].clone();
        let module = str_of(&spec["module"], "module").to_owned();
        let file = module.strip_prefix("/plugins/").expect("a baked-in module");
        assert!(
            baked.iter().any(|m| m == file),
            "{module} is not in the image"
        );
        spec["module"] = Value::String(plugin_dir().join(file).display().to_string());
        let r = CustomRef {
            kind: kind.0,
            namespace: cr["metadata"]["namespace"].as_str().map(str::to_owned),
            name: str_of(&cr["metadata"]["name"], "name").to_owned(),
        };
        assert_eq!(r.namespace.is_some(), kind.2, "{r}: scope");
        cfg.custom_plugin(&r, &spec)
            .unwrap_or_else(|e| panic!("deploy/{CR_EXAMPLE}: {e}"));
    }
}

#[test]
fn the_deployment_agrees_with_the_config_the_rbac_and_the_image() {
    let cfg = config();
    let dep = object("deployment.yaml", "Deployment", "wisp");
    let spec = &dep["spec"];
    // Several replicas only with a Lease to decide which one acts, each named in it by the
    // downward API; a PodDisruptionBudget keeps one through voluntary disruptions.
    let replicas = spec["replicas"].as_u64().unwrap();
    assert_eq!(cfg.sharding.is_some(), replicas > 1, "replicas: {replicas}");
    let pod = &spec["template"]["spec"];
    if replicas > 1 {
        let env = pod["containers"][0]["env"].as_array().unwrap();
        for (var, field) in [
            ("POD_NAME", "metadata.name"),
            ("POD_NAMESPACE", "metadata.namespace"),
        ] {
            assert!(
                env.iter()
                    .any(|e| e["name"] == var && e["valueFrom"]["fieldRef"]["fieldPath"] == field),
                "{var} from {field}"
            );
        }
        let pdb = object("deployment.yaml", "PodDisruptionBudget", "wisp");
        assert_eq!(pdb["spec"]["minAvailable"], 1);
        assert_eq!(pdb["spec"]["selector"], spec["selector"]);
    }
    let labels = &spec["template"]["metadata"]["labels"];
    for (k, v) in spec["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&labels[k], v, "selector label {k}");
    }

    // The ServiceAccount rbac.yaml binds.
    assert_eq!(pod["serviceAccountName"], "wisp");
    let sa = object("rbac.yaml", "ServiceAccount", "wisp");
    assert_eq!(sa["metadata"]["namespace"], dep["metadata"]["namespace"]);

    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert!(c["image"].as_str().is_some_and(|i| !i.is_empty()));

    // `run --config P`: P is a key of the ConfigMap, mounted at P's directory.
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| str_of(a, "args"))
        .collect();
    assert_eq!(
        args,
        [
            "run",
            "--config",
            "/etc/wisp/wisp.yaml",
            "--log-format",
            "json"
        ]
    );
    let config_path = Path::new(args[2]);
    let volumes = pod["volumes"].as_array().unwrap();
    let volume = |name: &Value| {
        volumes
            .iter()
            .find(|v| &v["name"] == name)
            .unwrap_or_else(|| panic!("volume {name} not defined"))
            .clone()
    };
    let mounts = c["volumeMounts"].as_array().unwrap();
    let config_mount = mounts
        .iter()
        .find(|m| Path::new(str_of(&m["mountPath"], "mountPath")) == config_path.parent().unwrap())
        .expect("a volume mounted at the config's directory");
    let config_volume = volume(&config_mount["name"]);
    assert_eq!(config_volume["configMap"]["name"], "wisp-config");
    let cm = object("configmap.yaml", "ConfigMap", "wisp-config");
    let key = config_path.file_name().unwrap().to_str().unwrap();
    assert!(cm["data"][key].is_string(), "ConfigMap key {key}");

    // The metrics port: admin.metricsAddress's, named `metrics`, the only port declared;
    // probes on it. The admin API (admin.listen) is on loopback.
    let port_of = |a: &str| -> u16 { a.rsplit_once(':').unwrap().1.parse().unwrap() };
    let metrics_port = port_of(cfg.admin.metrics_address.as_deref().unwrap());
    let ports = c["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 1, "one port: metrics");
    assert_eq!(ports[0]["name"], "metrics");
    assert_eq!(ports[0]["containerPort"], metrics_port);
    let on_metrics = |probe: &str, path: &str| {
        let get = &c[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert!(
            get["port"] == "metrics" || get["port"] == metrics_port,
            "{probe} on port {}",
            get["port"]
        );
    };
    on_metrics("livenessProbe", "/healthz");
    on_metrics("readinessProbe", "/readyz");
    if !c["startupProbe"].is_null() {
        on_metrics("startupProbe", "/healthz");
    }
    // The token file is the `token` key of the optional Secret wisp-admin-token.
    let token = PathBuf::from(cfg.admin.token_file.clone().unwrap());
    let token_mount = mounts
        .iter()
        .find(|m| Path::new(str_of(&m["mountPath"], "mountPath")) == token.parent().unwrap())
        .expect("a volume mounted at admin.tokenFile's directory");
    assert_eq!(token.file_name().unwrap(), "token");
    let secret = volume(&token_mount["name"]);
    assert_eq!(secret["secret"]["secretName"], "wisp-admin-token");
    assert_eq!(secret["secret"]["optional"], true);
    // Owner and group read (0440), as a number: YAML 1.1 (kubectl) reads `0440` as octal, YAML
    // 1.2 as a string or decimal.
    assert_eq!(secret["secret"]["defaultMode"], 0o440);
    assert_eq!(c["readinessProbe"]["periodSeconds"], 5);

    // Locked down; the module cache is the one writable place, an emptyDir.
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["runAsUser"], 65532);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    let cache = cfg.engine.cache_dir.clone().unwrap();
    let cache_mount = mounts
        .iter()
        .find(|m| cache.starts_with(str_of(&m["mountPath"], "mountPath")))
        .unwrap_or_else(|| panic!("engine.cacheDir {} is on no volume", cache.display()));
    assert!(volume(&cache_mount["name"])["emptyDir"].is_object());
    for r in ["requests", "limits"] {
        assert!(c["resources"][r]["memory"].is_string(), "resources.{r}");
    }

    // The Service reaches the metrics port of these pods, and the NetworkPolicy lets in that
    // port only.
    let svc = object("deployment.yaml", "Service", "wisp-metrics");
    assert_eq!(svc["spec"]["type"], "ClusterIP");
    for (k, v) in svc["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&labels[k], v, "Service selector label {k}");
    }
    let sp = &svc["spec"]["ports"][0];
    assert_eq!(sp["port"], metrics_port);
    assert!(sp["targetPort"] == "metrics" || sp["targetPort"] == metrics_port);
    let np = object("deployment.yaml", "NetworkPolicy", "wisp");
    for (k, v) in np["spec"]["podSelector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&labels[k], v, "NetworkPolicy selector label {k}");
    }
    assert_eq!(np["spec"]["policyTypes"], serde_json::json!(["Ingress"]));
    let rules = np["spec"]["ingress"].as_array().unwrap();
    for r in rules {
        let ports = r["ports"].as_array().expect("every rule names its ports");
        for p in ports {
            assert!(
                p["port"] == "metrics" || p["port"] == metrics_port,
                "ingress only to the metrics port: {p}"
            );
        }
    }

    // The image: the user the pod runs as, the modules wisp.yaml names at /plugins/.
    let dockerfile = read("Dockerfile");
    assert!(dockerfile.lines().any(|l| l.starts_with("USER 65532")));
    assert!(dockerfile.contains("ENTRYPOINT [\"wisp\"]"));
    let modules = image_modules();
    assert_eq!(modules.len(), cfg.plugins.len());
    for m in modules {
        assert!(
            dockerfile.contains(&format!("plugins/dist/{m}")),
            "deploy/Dockerfile does not copy {m} to /plugins/"
        );
    }
}

#[test]
fn rbac_yaml_is_what_wisp_rbac_prints_for_wisp_yaml() {
    let printed = wisp_rbac(CONFIG);
    assert!(
        printed.starts_with("# Generated by `wisp rbac` from deploy/wisp.yaml"),
        "{printed}"
    );
    assert!(
        printed == read("rbac.yaml"),
        "deploy/rbac.yaml is stale; regenerate it as deploy/README.md says. `wisp rbac` prints:\n{printed}"
    );
}

/// `kubectl kustomize` of `deploy/<dir>` (which names files of `deploy/`), as objects; `None`
/// when kubectl is missing outside CI (`.ci/run` installs it).
fn kustomize(dir: &str) -> Option<Vec<Value>> {
    let out = match Command::new("kubectl")
        .args(["kustomize", "--load-restrictor", "LoadRestrictionsNone"])
        .arg(repo().join("deploy").join(dir))
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "kubectl is missing: CI must have it (see .ci/run): {e}"
            );
            eprintln!("SKIPPED: kubectl is not installed ({e}); install it to run this test");
            return None;
        }
    };
    assert!(
        out.status.success(),
        "kubectl kustomize deploy/{dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    Some(yaml_docs(&text, &format!("kubectl kustomize deploy/{dir}")))
}

/// `objects` by kind, namespace and name.
fn by_identity(objects: Vec<Value>) -> std::collections::BTreeMap<String, Value> {
    objects
        .into_iter()
        .map(|o| {
            let id = format!(
                "{} {}/{}",
                o["kind"].as_str().unwrap_or_default(),
                o["metadata"]["namespace"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            );
            (id, o)
        })
        .collect()
}

#[test]
fn the_shards_overlay_is_deploy_with_shards_config_replicas_budget_and_lease_rights() {
    // Its config is deploy/wisp.yaml but for `sharding`, and valid.
    let plain = |name: &str| {
        let mut v: Value = wisp_kinds::yaml::from_str(&read(name)).unwrap();
        let sharding = v.as_object_mut().unwrap().remove("sharding");
        (v, sharding)
    };
    let ((base, _), (shards, sharding)) = (plain(CONFIG), plain(SHARDS_CONFIG));
    assert_eq!(
        shards, base,
        "deploy/{SHARDS_CONFIG} differs from deploy/{CONFIG} beyond `sharding`"
    );
    assert_eq!(
        sharding,
        Some(serde_json::json!({"mode": "shards", "shardBy": "uid"}))
    );
    let cfg = load_config(SHARDS_CONFIG);
    assert_eq!(
        cfg.sharding.as_ref().map(|s| s.mode),
        Some(wisp_host::config::ShardingMode::Shards)
    );

    let Some(rendered) = kustomize("shards") else {
        return;
    };
    let mut rendered = by_identity(rendered);
    let mut expected = by_identity(
        [
            "namespace.yaml",
            "rbac.yaml",
            "configmap.yaml",
            "deployment.yaml",
        ]
        .into_iter()
        .flat_map(docs)
        .collect(),
    );
    assert_eq!(
        rendered.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    // The RBAC is what `wisp rbac` prints for the shards config.
    for (id, o) in by_identity(yaml_docs(&wisp_rbac(SHARDS_CONFIG), "wisp rbac")) {
        expected.insert(id, o);
    }
    // The ConfigMap carries the shards config byte for byte.
    let cm = &mut rendered.get_mut("ConfigMap wisp/wisp-config").unwrap();
    assert!(
        cm["data"]["wisp.yaml"] == read(SHARDS_CONFIG),
        "the overlay's ConfigMap does not carry deploy/{SHARDS_CONFIG}"
    );
    expected.get_mut("ConfigMap wisp/wisp-config").unwrap()["data"]["wisp.yaml"] =
        cm["data"]["wisp.yaml"].clone();
    // Three members; a disruption takes one at a time (its share moves to the others).
    let dep = expected.get_mut("Deployment wisp/wisp").unwrap();
    dep["spec"]["replicas"] = 3.into();
    let pdb = expected.get_mut("PodDisruptionBudget wisp/wisp").unwrap();
    pdb["spec"].as_object_mut().unwrap().remove("minAvailable");
    pdb["spec"]["maxUnavailable"] = 1.into();
    for (id, want) in &expected {
        assert_eq!(&rendered[id], want, "{id}");
    }
}

/// `deploy/monitoring/`: the ServiceMonitor selects the Service `wisp-metrics` by its labels and
/// scrapes its named port at the path the config serves metrics on; the PrometheusRule and the
/// ServiceMonitor live in namespace `wisp`; `WispDown` names the job the ServiceMonitor makes
/// (the Service's name); the dashboard is JSON with a uid. (That each metric they name is
/// exported: tests/tests/process.rs; the rules' syntax and unit tests: .ci/monitoring.py.)
#[test]
fn the_monitoring_manifests_scrape_the_metrics_service_the_rules_name() {
    let service = object("deployment.yaml", "Service", "wisp-metrics");
    let monitor = object("monitoring/servicemonitor.yaml", "ServiceMonitor", "wisp");
    let rule = object("monitoring/prometheusrule.yaml", "PrometheusRule", "wisp");
    for (what, o) in [("ServiceMonitor", &monitor), ("PrometheusRule", &rule)] {
        assert_eq!(o["metadata"]["namespace"], "wisp", "{what} namespace");
        assert_eq!(
            o["apiVersion"], "monitoring.coreos.com/v1",
            "{what} apiVersion"
        );
    }
    let wanted = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("ServiceMonitor spec.selector.matchLabels");
    assert!(!wanted.is_empty());
    for (k, v) in wanted {
        assert_eq!(
            &service["metadata"]["labels"][k], v,
            "the ServiceMonitor selects label {k}={v}, which Service wisp-metrics lacks"
        );
    }
    let endpoint = &monitor["spec"]["endpoints"][0];
    let ports = service["spec"]["ports"].as_array().expect("Service ports");
    assert!(
        ports.iter().any(|p| p["name"] == endpoint["port"]),
        "the ServiceMonitor scrapes port {}, which Service wisp-metrics does not name",
        endpoint["port"]
    );
    assert_eq!(endpoint["path"], "/metrics");
    let down = rule["spec"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .find(|r| r["alert"] == "WispDown")
        .expect("a WispDown alert");
    let job = format!(
        "job=\"{}\"",
        str_of(&service["metadata"]["name"], "Service name")
    );
    assert!(
        str_of(&down["expr"], "WispDown expr").contains(&job),
        "WispDown must name {job}: {}",
        down["expr"]
    );
    let dashboard: Value = serde_json::from_str(&read("monitoring/grafana-dashboard.json"))
        .expect("grafana-dashboard.json is JSON");
    assert_eq!(dashboard["uid"], "wisp");
    assert!(dashboard["panels"].as_array().is_some_and(|p| p.len() > 10));
}
