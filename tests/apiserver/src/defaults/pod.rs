//! The defaults of a Pod and of what holds a PodSpec (pkg/apis/core/v1/defaults.go).

use serde_json::{Map, Value, json};

use super::{array_mut, child, set, set_in};

/// pkg/apis/core/v1/defaults.go SetDefaults_Pod, with the PodSpec's and its containers'
/// defaults, and pkg/registry/core/pod/strategy.go PrepareForCreate's status.
pub(super) fn pod(obj: &mut Map<String, Value>) {
    let spec = child(obj, "spec");
    for list in ["containers", "initContainers"] {
        for c in array_mut(spec.get_mut(list)) {
            requests_from_limits(c);
        }
    }
    set(spec, "enableServiceLinks", json!(true));
    if spec.get("hostNetwork") == Some(&json!(true)) {
        for list in ["containers", "initContainers"] {
            for c in array_mut(spec.get_mut(list)) {
                for port in array_mut(c.get_mut("ports")) {
                    if let (Some(p), None) =
                        (port.get("containerPort").cloned(), port.get("hostPort"))
                    {
                        set_in(port, "hostPort", p);
                    }
                }
            }
        }
    }
    pod_spec(spec);
    let qos = qos_class(spec);
    let status = child(obj, "status");
    set(status, "phase", json!("Pending"));
    set(status, "qosClass", json!(qos));
}

/// A Pod's containers' requests default to their limits (SetDefaults_Pod).
fn requests_from_limits(c: &mut Value) {
    let Some(limits) = c
        .pointer("/resources/limits")
        .and_then(Value::as_object)
        .cloned()
    else {
        return;
    };
    let Some(resources) = c.get_mut("resources").and_then(Value::as_object_mut) else {
        return;
    };
    let requests = child(resources, "requests");
    for (k, v) in limits {
        requests.entry(k).or_insert(v);
    }
}

/// pkg/apis/core/v1/helper/qos GetPodQOS, for cpu and memory: BestEffort without requests or
/// limits, Guaranteed when every container's limits equal its requests for both, else
/// Burstable. Quantities compare as written (`1` and `1000m` differ here).
fn qos_class(spec: &Map<String, Value>) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|l| spec.get(*l).and_then(Value::as_array))
        .flatten()
        .collect();
    let of = |c: &Value, which: &str, r: &str| {
        c.pointer(&format!("/resources/{which}/{r}"))
            .filter(|q| !q.is_null() && q.as_str() != Some("0"))
            .cloned()
    };
    let mut any = false;
    let mut guaranteed = true;
    for c in &containers {
        for r in ["cpu", "memory"] {
            let (req, lim) = (of(c, "requests", r), of(c, "limits", r));
            any |= req.is_some() || lim.is_some();
            guaranteed &= lim.is_some() && req == lim;
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// SetDefaults_PodSpec and the defaults of what a PodSpec holds (containers, volumes).
fn pod_spec(spec: &mut Map<String, Value>) {
    set(spec, "dnsPolicy", json!("ClusterFirst"));
    set(spec, "restartPolicy", json!("Always"));
    set(spec, "securityContext", json!({}));
    set(spec, "terminationGracePeriodSeconds", json!(30));
    set(spec, "schedulerName", json!("default-scheduler"));
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        for c in array_mut(spec.get_mut(list)) {
            if let Some(c) = c.as_object_mut() {
                container(c);
            }
        }
    }
    for v in array_mut(spec.get_mut("volumes")) {
        if let Some(v) = v.as_object_mut() {
            volume(v);
        }
    }
}

/// A PodTemplateSpec's spec gets the PodSpec defaults (not SetDefaults_Pod's).
pub(super) fn pod_template(template: &mut Value) {
    if let Some(t) = template.as_object_mut() {
        pod_spec(child(t, "spec"));
    }
}

/// `spec.template` of a workload.
pub(super) fn template_of(spec: &mut Map<String, Value>) {
    if let Some(t) = spec.get_mut("template") {
        pod_template(t);
    }
}

/// SetDefaults_Container: imagePullPolicy from the image's tag, the termination message;
/// ports' protocol TCP (declarative), probes, lifecycle handlers and env field references.
fn container(c: &mut Map<String, Value>) {
    if !c.contains_key("imagePullPolicy") {
        let image = c.get("image").and_then(Value::as_str).unwrap_or("");
        let policy = if image_tag(image) == "latest" {
            "Always"
        } else {
            "IfNotPresent"
        };
        c.insert("imagePullPolicy".into(), json!(policy));
    }
    set(c, "terminationMessagePath", json!("/dev/termination-log"));
    set(c, "terminationMessagePolicy", json!("File"));
    for port in array_mut(c.get_mut("ports")) {
        set_in(port, "protocol", json!("TCP"));
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).and_then(Value::as_object_mut) {
            set(p, "timeoutSeconds", json!(1));
            set(p, "periodSeconds", json!(10));
            set(p, "successThreshold", json!(1));
            set(p, "failureThreshold", json!(3));
            handler(p);
        }
    }
    if let Some(l) = c.get_mut("lifecycle").and_then(Value::as_object_mut) {
        for hook in ["postStart", "preStop"] {
            if let Some(h) = l.get_mut(hook).and_then(Value::as_object_mut) {
                handler(h);
            }
        }
    }
    for e in array_mut(c.get_mut("env")) {
        if let Some(f) = e.pointer_mut("/valueFrom/fieldRef") {
            set_in(f, "apiVersion", json!("v1"));
        }
    }
}

/// SetDefaults_HTTPGetAction: path `/`, scheme HTTP.
fn handler(h: &mut Map<String, Value>) {
    if let Some(g) = h.get_mut("httpGet").and_then(Value::as_object_mut) {
        set(g, "path", json!("/"));
        set(g, "scheme", json!("HTTP"));
    }
}

/// The tag pkg/util/parsers ParseImageName finds: `latest` when the image names neither a tag
/// nor a digest, `""` for a digest alone.
fn image_tag(image: &str) -> &str {
    let (name, digest) = match image.split_once('@') {
        Some((n, _)) => (n, true),
        None => (image, false),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.split_once(':') {
        Some((_, tag)) => tag,
        None if digest => "",
        None => "latest",
    }
}

/// SetDefaults_Volume (no source: emptyDir) and its sources' defaults.
fn volume(v: &mut Map<String, Value>) {
    if v.keys().all(|k| k == "name") {
        v.insert("emptyDir".into(), json!({}));
    }
    for source in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(s) = v.get_mut(source).and_then(Value::as_object_mut) {
            set(s, "defaultMode", json!(420));
        }
    }
    if let Some(h) = v.get_mut("hostPath").and_then(Value::as_object_mut) {
        set(h, "type", json!(""));
    }
    for item in array_mut(v.get_mut("downwardAPI").and_then(|d| d.get_mut("items"))) {
        if let Some(f) = item.get_mut("fieldRef") {
            set_in(f, "apiVersion", json!("v1"));
        }
    }
    for source in array_mut(v.get_mut("projected").and_then(|p| p.get_mut("sources"))) {
        if let Some(t) = source.get_mut("serviceAccountToken") {
            set_in(t, "expirationSeconds", json!(3600));
        }
        for item in array_mut(source.pointer_mut("/downwardAPI/items")) {
            if let Some(f) = item.get_mut("fieldRef") {
                set_in(f, "apiVersion", json!("v1"));
            }
        }
    }
    if let Some(spec) = v
        .get_mut("ephemeral")
        .and_then(|e| e.pointer_mut("/volumeClaimTemplate/spec"))
    {
        set_in(spec, "volumeMode", json!("Filesystem"));
    }
}

#[cfg(test)]
mod tests {
    use super::super::apply_defaults;
    use serde_json::json;

    #[test]
    fn a_pod_gets_each_default_the_api_server_gives_it() {
        let mut p = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {
                "containers": [
                    {"name": "a", "image": "nginx", "ports": [{"containerPort": 80}],
                     "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                     "readinessProbe": {"httpGet": {"port": 80}},
                     "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]},
                    {"name": "b", "image": "registry.example.com:5000/app:1.2"},
                    {"name": "c", "image": "busybox:latest"},
                    {"name": "d", "image": "x@sha256:abc", "imagePullPolicy": "Never"}
                ],
                "volumes": [{"name": "scratch"}, {"name": "s", "secret": {"secretName": "s"}}]
            }
        });
        apply_defaults("", "v1", "Pod", &mut p);
        let spec = &p["spec"];
        assert_eq!(spec["dnsPolicy"], "ClusterFirst");
        assert_eq!(spec["restartPolicy"], "Always");
        assert_eq!(spec["schedulerName"], "default-scheduler");
        assert_eq!(spec["securityContext"], json!({}));
        assert_eq!(spec["terminationGracePeriodSeconds"], 30);
        assert_eq!(spec["enableServiceLinks"], true);
        let c = &spec["containers"];
        assert_eq!(c[0]["imagePullPolicy"], "Always", "no tag is latest");
        assert_eq!(
            c[1]["imagePullPolicy"], "IfNotPresent",
            "a registry port is no tag"
        );
        assert_eq!(c[2]["imagePullPolicy"], "Always");
        assert_eq!(c[3]["imagePullPolicy"], "Never", "as written");
        assert_eq!(c[0]["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(c[0]["terminationMessagePolicy"], "File");
        assert_eq!(c[0]["ports"][0]["protocol"], "TCP");
        assert_eq!(
            c[0]["resources"]["requests"],
            json!({"cpu": "1", "memory": "1Gi"})
        );
        assert_eq!(
            c[0]["readinessProbe"],
            json!({"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"}, "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3})
        );
        assert_eq!(c[0]["env"][0]["valueFrom"]["fieldRef"]["apiVersion"], "v1");
        assert_eq!(spec["volumes"][0]["emptyDir"], json!({}));
        assert_eq!(spec["volumes"][1]["secret"]["defaultMode"], 420);
        assert_eq!(
            p["status"],
            json!({"phase": "Pending", "qosClass": "Burstable"})
        );
    }
}
