//! The API server's defaults for built-in kinds, applied to an object as it is created: the
//! `SetDefaults_*` functions of Kubernetes' versioned API packages and the declarative
//! `+default` markers (pkg/apis/core/v1/defaults.go, apps/v1/defaults.go, batch/v1/defaults.go,
//! autoscaling/v1 and v2/defaults.go, networking/v1/defaults.go, rbac/v1/defaults.go,
//! admissionregistration/v1/defaults.go), and the
//! fields a create sets in the registry's `PrepareForCreate` that need no cluster state (a new
//! Pod's `status.phase: Pending` and `qosClass`; a Namespace's `spec.finalizers`).
//!
//! Field-level defaults only: nothing that needs the cluster's state or an allocator
//! (`clusterIP`, `nodePort`, a ServiceAccount's token volume, admission plugins' `priority` and
//! tolerations). A Service's IP families are those of an IPv4 single-stack cluster.
//!
//! Every function takes the object as JSON and fills only what is missing: a field written
//! (even as `null` where Kubernetes would keep it) is left as written.

use serde_json::{Map, Value, json};

mod pod;

use pod::{pod, pod_template, template_of};

/// Applies the defaults of the built-in kind `kind` of `group`/`version` to `v` (nothing for
/// a kind without defaults or of another group).
pub fn apply_defaults(group: &str, version: &str, kind: &str, v: &mut Value) {
    let Some(obj) = v.as_object_mut() else {
        return;
    };
    match (group, version, kind) {
        ("", "v1", "Pod") => pod(obj),
        ("", "v1", "PodTemplate") => {
            if let Some(t) = obj.get_mut("template") {
                pod_template(t);
            }
        }
        ("", "v1", "ReplicationController") => replication_controller(obj),
        ("", "v1", "Service") => service(obj),
        ("", "v1", "Secret") => set(obj, "type", json!("Opaque")),
        ("", "v1", "Namespace") => namespace(obj),
        ("", "v1", "Endpoints") => {
            for subset in array_mut(obj.get_mut("subsets")) {
                for port in array_mut(subset.get_mut("ports")) {
                    set_in(port, "protocol", json!("TCP"));
                }
            }
        }
        ("", "v1", "PersistentVolume") => {
            let spec = child(obj, "spec");
            set(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
            set(spec, "volumeMode", json!("Filesystem"));
            set(child(obj, "status"), "phase", json!("Pending"));
        }
        ("", "v1", "PersistentVolumeClaim") => claim(obj),
        ("apps", "v1", "Deployment") => deployment(obj),
        ("apps", "v1", "DaemonSet") => daemon_set(obj),
        ("apps", "v1", "StatefulSet") => stateful_set(obj),
        ("apps", "v1", "ReplicaSet") => {
            let spec = child(obj, "spec");
            set(spec, "replicas", json!(1));
            template_of(spec);
        }
        ("batch", "v1", "Job") => job(obj),
        ("batch", "v1", "CronJob") => cron_job(obj),
        ("autoscaling", "v1", "HorizontalPodAutoscaler") => {
            set(child(obj, "spec"), "minReplicas", json!(1));
        }
        ("autoscaling", "v2", "HorizontalPodAutoscaler") => hpa_v2(obj),
        ("networking.k8s.io", "v1", "NetworkPolicy") => network_policy(obj),
        (
            "admissionregistration.k8s.io",
            "v1",
            "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration",
        ) => {
            let mutating = kind == "MutatingWebhookConfiguration";
            for webhook in array_mut(obj.get_mut("webhooks")) {
                if let Some(w) = webhook.as_object_mut() {
                    admission_webhook(w, mutating);
                }
            }
        }
        ("rbac.authorization.k8s.io", "v1", "RoleBinding" | "ClusterRoleBinding") => {
            for subject in array_mut(obj.get_mut("subjects")) {
                subject_group(subject);
            }
        }
        _ => {}
    }
}

/// One webhook of a Mutating or Validating WebhookConfiguration
/// (pkg/apis/admissionregistration/v1/defaults.go): `failurePolicy: Fail`, `matchPolicy:
/// Equivalent`, empty selectors, `timeoutSeconds: 10`, a rule's `scope: "*"`, a service's
/// `port: 443`, and for mutating webhooks `reinvocationPolicy: Never`.
fn admission_webhook(w: &mut Map<String, Value>, mutating: bool) {
    set(w, "failurePolicy", json!("Fail"));
    set(w, "matchPolicy", json!("Equivalent"));
    set(w, "namespaceSelector", json!({}));
    set(w, "objectSelector", json!({}));
    set(w, "timeoutSeconds", json!(10));
    if mutating {
        set(w, "reinvocationPolicy", json!("Never"));
    }
    for rule in array_mut(w.get_mut("rules")) {
        set_in(rule, "scope", json!("*"));
    }
    if let Some(service) = w.get_mut("clientConfig").and_then(|c| c.get_mut("service")) {
        set_in(service, "port", json!(443));
    }
}

/// Sets `key` of `m` to `value` if it is missing.
fn set(m: &mut Map<String, Value>, key: &str, value: Value) {
    if !m.contains_key(key) {
        m.insert(key.to_owned(), value);
    }
}

/// [`set`] on `v` if it is an object.
fn set_in(v: &mut Value, key: &str, value: Value) {
    if let Some(m) = v.as_object_mut() {
        set(m, key, value);
    }
}

/// The object under `key`, made an empty one if missing or `null` (where the Go type is a
/// struct, not a pointer, and its fields get defaults).
fn child<'a>(m: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let v = m.entry(key.to_owned()).or_insert_with(|| json!({}));
    if !v.is_object() {
        *v = json!({});
    }
    v.as_object_mut()
        .unwrap_or_else(|| unreachable!("made an object above"))
}

/// The items of `v` if it is an array (none otherwise).
fn array_mut(v: Option<&mut Value>) -> impl Iterator<Item = &mut Value> {
    v.and_then(Value::as_array_mut).into_iter().flatten()
}

/// SetDefaults_PersistentVolumeClaim and its spec's.
fn claim(obj: &mut Map<String, Value>) {
    set(child(obj, "spec"), "volumeMode", json!("Filesystem"));
    set(child(obj, "status"), "phase", json!("Pending"));
}

/// Replicas 1 (declarative); selector and labels from the template's labels.
fn replication_controller(obj: &mut Map<String, Value>) {
    let labels = obj
        .get("spec")
        .and_then(|s| s.pointer("/template/metadata/labels"))
        .filter(|l| l.as_object().is_some_and(|m| !m.is_empty()))
        .cloned();
    let spec = child(obj, "spec");
    set(spec, "replicas", json!(1));
    if let Some(labels) = &labels
        && spec
            .get("selector")
            .and_then(Value::as_object)
            .is_none_or(Map::is_empty)
    {
        spec.insert("selector".into(), labels.clone());
    }
    template_of(spec);
    if let Some(labels) = labels {
        labels_unless_set(obj, labels);
    }
}

/// SetDefaults_Service: type, session affinity, ports, traffic policies; the IP families of
/// an IPv4 single-stack cluster (pkg/registry/core/service/storage/alloc.go) for a Service
/// that gets a cluster IP or is headless with a selector.
fn service(obj: &mut Map<String, Value>) {
    let spec = child(obj, "spec");
    set(spec, "type", json!("ClusterIP"));
    set(spec, "sessionAffinity", json!("None"));
    if spec.get("sessionAffinity") == Some(&json!("ClientIP")) {
        let timeout = spec
            .get("sessionAffinityConfig")
            .and_then(|c| c.pointer("/clientIP/timeoutSeconds"))
            .is_some();
        if !timeout {
            spec.insert(
                "sessionAffinityConfig".into(),
                json!({"clientIP": {"timeoutSeconds": 10800}}),
            );
        }
    }
    for port in array_mut(spec.get_mut("ports")) {
        set_in(port, "protocol", json!("TCP"));
        let unset = match port.get("targetPort") {
            None | Some(Value::Null) => true,
            Some(t) => t == &json!(0) || t == &json!(""),
        };
        if unset && let Some(p) = port.get("port").cloned() {
            port["targetPort"] = p;
        }
    }
    let ty = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let external = matches!(ty.as_str(), "NodePort" | "LoadBalancer")
        || spec
            .get("externalIPs")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
    if external {
        set(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if matches!(ty.as_str(), "ClusterIP" | "NodePort" | "LoadBalancer") {
        set(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if ty == "LoadBalancer" {
        set(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
    let selector = spec
        .get("selector")
        .and_then(Value::as_object)
        .is_some_and(|m| !m.is_empty());
    if ty != "ExternalName" && (!headless || selector) {
        set(spec, "ipFamilyPolicy", json!("SingleStack"));
        set(spec, "ipFamilies", json!(["IPv4"]));
    }
}

/// SetDefaults_Namespace (the `kubernetes.io/metadata.name` label), SetDefaults_NamespaceStatus
/// (phase Active) and pkg/registry/core/namespace/strategy.go PrepareForCreate (finalizers).
fn namespace(obj: &mut Map<String, Value>) {
    let name = obj
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if !name.is_empty() {
        let md = child(obj, "metadata");
        let labels = child(md, "labels");
        labels.insert("kubernetes.io/metadata.name".into(), json!(name));
    }
    set(child(obj, "spec"), "finalizers", json!(["kubernetes"]));
    set(child(obj, "status"), "phase", json!("Active"));
}

/// apps/v1 SetDefaults_Deployment.
fn deployment(obj: &mut Map<String, Value>) {
    let spec = child(obj, "spec");
    set(spec, "replicas", json!(1));
    let strategy = child(spec, "strategy");
    set(strategy, "type", json!("RollingUpdate"));
    if strategy.get("type") == Some(&json!("RollingUpdate")) {
        let ru = child(strategy, "rollingUpdate");
        set(ru, "maxUnavailable", json!("25%"));
        set(ru, "maxSurge", json!("25%"));
    }
    set(spec, "revisionHistoryLimit", json!(10));
    set(spec, "progressDeadlineSeconds", json!(600));
    template_of(spec);
}

/// apps/v1 SetDefaults_DaemonSet.
fn daemon_set(obj: &mut Map<String, Value>) {
    let spec = child(obj, "spec");
    let strategy = child(spec, "updateStrategy");
    set(strategy, "type", json!("RollingUpdate"));
    if strategy.get("type") == Some(&json!("RollingUpdate")) {
        let ru = child(strategy, "rollingUpdate");
        set(ru, "maxUnavailable", json!(1));
        set(ru, "maxSurge", json!(0));
    }
    set(spec, "revisionHistoryLimit", json!(10));
    template_of(spec);
}

/// apps/v1 SetDefaults_StatefulSet (StatefulSetAutoDeletePVC is on since 1.32); each claim
/// template gets a claim's defaults.
fn stateful_set(obj: &mut Map<String, Value>) {
    let spec = child(obj, "spec");
    set(spec, "podManagementPolicy", json!("OrderedReady"));
    let strategy = child(spec, "updateStrategy");
    if !strategy.contains_key("type") {
        strategy.insert("type".into(), json!("RollingUpdate"));
        set(strategy, "rollingUpdate", json!({}));
    }
    if strategy.get("type") == Some(&json!("RollingUpdate"))
        && let Some(ru) = strategy.get_mut("rollingUpdate")
    {
        set_in(ru, "partition", json!(0));
    }
    let retention = child(spec, "persistentVolumeClaimRetentionPolicy");
    set(retention, "whenDeleted", json!("Retain"));
    set(retention, "whenScaled", json!("Retain"));
    set(spec, "replicas", json!(1));
    set(spec, "revisionHistoryLimit", json!(10));
    for c in array_mut(spec.get_mut("volumeClaimTemplates")) {
        if let Some(c) = c.as_object_mut() {
            claim(c);
        }
    }
    template_of(spec);
}

/// batch/v1 SetDefaults_Job, with podReplacementPolicy (JobPodReplacementPolicy, on by
/// default) and a backoff limit per index's own default.
fn job(obj: &mut Map<String, Value>) {
    let template_labels = obj
        .get("spec")
        .and_then(|s| s.pointer("/template/metadata/labels"))
        .filter(|l| l.as_object().is_some_and(|m| !m.is_empty()))
        .cloned();
    let spec = child(obj, "spec");
    job_spec(spec);
    if let Some(labels) = template_labels {
        labels_unless_set(obj, labels);
    }
}

/// `metadata.labels` set to `labels` when the object has none (the workloads' and Job's
/// defaulting from their template's labels).
fn labels_unless_set(obj: &mut Map<String, Value>, labels: Value) {
    if let Some(md) = obj.get_mut("metadata").and_then(Value::as_object_mut)
        && md
            .get("labels")
            .and_then(Value::as_object)
            .is_none_or(Map::is_empty)
    {
        md.insert("labels".into(), labels);
    }
}

fn job_spec(spec: &mut Map<String, Value>) {
    if !spec.contains_key("completions") && !spec.contains_key("parallelism") {
        spec.insert("completions".into(), json!(1));
    }
    set(spec, "parallelism", json!(1));
    let per_index = spec.contains_key("backoffLimitPerIndex");
    set(
        spec,
        "backoffLimit",
        json!(if per_index { i32::MAX } else { 6 }),
    );
    set(spec, "completionMode", json!("NonIndexed"));
    set(spec, "suspend", json!(false));
    let failure_policy = spec.get("podFailurePolicy").is_some_and(|p| !p.is_null());
    set(
        spec,
        "podReplacementPolicy",
        json!(if failure_policy {
            "Failed"
        } else {
            "TerminatingOrFailed"
        }),
    );
    template_of(spec);
}

/// batch/v1 SetDefaults_CronJob; the job template's pod template gets the PodSpec defaults.
fn cron_job(obj: &mut Map<String, Value>) {
    let spec = child(obj, "spec");
    set(spec, "concurrencyPolicy", json!("Allow"));
    set(spec, "suspend", json!(false));
    set(spec, "successfulJobsHistoryLimit", json!(3));
    set(spec, "failedJobsHistoryLimit", json!(1));
    if let Some(job) = spec
        .get_mut("jobTemplate")
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut)
    {
        template_of(job);
    }
}

/// autoscaling/v2 SetDefaults_HorizontalPodAutoscaler: minReplicas 1, a CPU utilization
/// metric of 80% when none is given; a behavior given gets its rules' defaults.
fn hpa_v2(obj: &mut Map<String, Value>) {
    let spec = child(obj, "spec");
    set(spec, "minReplicas", json!(1));
    let no_metrics = spec
        .get("metrics")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    if no_metrics {
        spec.insert(
            "metrics".into(),
            json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]),
        );
    }
    if let Some(b) = spec.get_mut("behavior").and_then(Value::as_object_mut) {
        let up = child(b, "scaleUp");
        set(up, "stabilizationWindowSeconds", json!(0));
        set(up, "selectPolicy", json!("Max"));
        set(
            up,
            "policies",
            json!([{"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}]),
        );
        let down = child(b, "scaleDown");
        set(down, "stabilizationWindowSeconds", json!(300));
        set(down, "selectPolicy", json!("Max"));
        set(
            down,
            "policies",
            json!([{"type": "Percent", "value": 100, "periodSeconds": 15}]),
        );
    }
}

/// networking/v1 SetDefaults_NetworkPolicy (policyTypes) and its ports' protocol.
fn network_policy(obj: &mut Map<String, Value>) {
    let spec = child(obj, "spec");
    for dir in ["ingress", "egress"] {
        for rule in array_mut(spec.get_mut(dir)) {
            for port in array_mut(rule.get_mut("ports")) {
                set_in(port, "protocol", json!("TCP"));
            }
        }
    }
    let no_types = spec
        .get("policyTypes")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    if no_types {
        let egress = spec
            .get("egress")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        let types = if egress {
            json!(["Ingress", "Egress"])
        } else {
            json!(["Ingress"])
        };
        spec.insert("policyTypes".into(), types);
    }
}

/// rbac/v1 SetDefaults_Subject: a User's or Group's apiGroup.
fn subject_group(s: &mut Value) {
    let kind = s.get("kind").and_then(Value::as_str).unwrap_or("");
    let missing = s
        .get("apiGroup")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    if matches!(kind, "User" | "Group") && missing {
        s["apiGroup"] = json!("rbac.authorization.k8s.io");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_get_their_defaults_and_their_pod_templates_the_pod_spec_defaults() {
        let template = json!({"metadata": {"labels": {"app": "w"}}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}});
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"template": template}});
        apply_defaults("apps", "v1", "Deployment", &mut d);
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(
            d["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
        assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
        let t = &d["spec"]["template"]["spec"];
        assert_eq!(t["dnsPolicy"], "ClusterFirst");
        assert_eq!(t["containers"][0]["imagePullPolicy"], "IfNotPresent");
        assert!(t.get("enableServiceLinks").is_none(), "a Pod's own default");

        let mut s = json!({"kind": "StatefulSet", "spec": {"template": template, "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {}}]}});
        apply_defaults("apps", "v1", "StatefulSet", &mut s);
        assert_eq!(
            s["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        );
        assert_eq!(s["spec"]["podManagementPolicy"], "OrderedReady");
        assert_eq!(
            s["spec"]["volumeClaimTemplates"][0]["status"]["phase"],
            "Pending"
        );

        let mut ds = json!({"kind": "DaemonSet", "spec": {"template": template}});
        apply_defaults("apps", "v1", "DaemonSet", &mut ds);
        assert_eq!(
            ds["spec"]["updateStrategy"]["rollingUpdate"],
            json!({"maxUnavailable": 1, "maxSurge": 0})
        );

        let mut j =
            json!({"kind": "Job", "metadata": {"name": "j"}, "spec": {"template": template}});
        apply_defaults("batch", "v1", "Job", &mut j);
        assert_eq!(j["spec"]["completions"], 1);
        assert_eq!(j["spec"]["parallelism"], 1);
        assert_eq!(j["spec"]["backoffLimit"], 6);
        assert_eq!(j["spec"]["completionMode"], "NonIndexed");
        assert_eq!(j["metadata"]["labels"], json!({"app": "w"}));

        let mut cj = json!({"kind": "CronJob", "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}});
        apply_defaults("batch", "v1", "CronJob", &mut cj);
        assert_eq!(cj["spec"]["concurrencyPolicy"], "Allow");
        assert_eq!(cj["spec"]["successfulJobsHistoryLimit"], 3);
        assert_eq!(
            cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"],
            "Always"
        );
    }

    #[test]
    fn services_namespaces_and_secrets_get_their_defaults() {
        let mut s = json!({"kind": "Service", "metadata": {"name": "s"}, "spec": {"selector": {"app": "w"}, "ports": [{"port": 80}, {"port": 443, "targetPort": "https", "protocol": "UDP"}]}});
        apply_defaults("", "v1", "Service", &mut s);
        assert_eq!(s["spec"]["type"], "ClusterIP");
        assert_eq!(s["spec"]["sessionAffinity"], "None");
        assert_eq!(
            s["spec"]["ports"][0],
            json!({"port": 80, "protocol": "TCP", "targetPort": 80})
        );
        assert_eq!(s["spec"]["ports"][1]["targetPort"], "https");
        assert_eq!(s["spec"]["ports"][1]["protocol"], "UDP");
        assert_eq!(s["spec"]["ipFamilyPolicy"], "SingleStack");
        assert_eq!(s["spec"]["internalTrafficPolicy"], "Cluster");
        let mut ext = json!({"kind": "Service", "spec": {"type": "ExternalName", "externalName": "x.example.com"}});
        apply_defaults("", "v1", "Service", &mut ext);
        assert!(ext["spec"].get("ipFamilyPolicy").is_none());

        let mut ns = json!({"kind": "Namespace", "metadata": {"name": "shop"}});
        apply_defaults("", "v1", "Namespace", &mut ns);
        assert_eq!(ns["status"]["phase"], "Active");
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
        assert_eq!(
            ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
            "shop"
        );

        let mut sec = json!({"kind": "Secret", "metadata": {"name": "s"}});
        apply_defaults("", "v1", "Secret", &mut sec);
        assert_eq!(sec["type"], "Opaque");
    }
}
