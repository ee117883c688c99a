//! Serving a built-in object in another version of its group, as the API server converts it
//! through its internal version.
//!
//! Converted: HorizontalPodAutoscaler between autoscaling/v1 and autoscaling/v2, the one
//! built-in kind with two served versions that manifests are commonly written in
//! (pkg/apis/autoscaling/v1/conversion.go: `targetCPUUtilizationPercentage` is a `Resource`
//! metric on `cpu` with a `Utilization` target). What autoscaling/v1 cannot express (other
//! metrics, a behavior, the annotations the API server keeps them in) is refused, naming
//! autoscaling/v2. Every other kind (the alpha and beta versions beside a GA one) is refused
//! with the version to write it in: their conversions are not modelled here.
//!
//! A converted object gets the defaults of the version it is served in
//! ([`super::defaults::apply_defaults`]), as the API server's decoding of its storage version
//! gives them.

use serde_json::{Map, Value, json};

use super::defaults::apply_defaults;
use wisp_kinds::split_api_version;

/// Annotations autoscaling/v1 keeps what it cannot express in.
const V1_ANNOTATIONS: &[&str] = &[
    "autoscaling.alpha.kubernetes.io/metrics",
    "autoscaling.alpha.kubernetes.io/current-metrics",
    "autoscaling.alpha.kubernetes.io/conditions",
    "autoscaling.alpha.kubernetes.io/behavior",
];

/// `v` (a built-in object) as served at `api_version` of its group: itself if written in that
/// version, converted if its kind converts, else an error naming the version to use.
pub fn convert(v: &Value, api_version: &str) -> Result<Value, String> {
    let written = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if written == api_version {
        return Ok(v.clone());
    }
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    let (group, to) = split_api_version(api_version);
    let (_, from) = split_api_version(written);
    let mut out = match (group, kind, from, to) {
        ("autoscaling", "HorizontalPodAutoscaler", "v1", "v2") => hpa_v1_to_v2(v)?,
        ("autoscaling", "HorizontalPodAutoscaler", "v2", "v1") => hpa_v2_to_v1(v)?,
        _ => {
            return Err(format!(
                "{} is written as {written}; the dir source does not convert {kind} to {api_version}: write it as {api_version}",
                shown(v)
            ));
        }
    };
    out["apiVersion"] = json!(api_version);
    apply_defaults(group, to, kind, &mut out);
    Ok(out)
}

/// `Kind namespace/name` (`Kind name` when cluster-scoped), as the `dir:` source's reports
/// name an object.
pub fn shown(v: &Value) -> String {
    let text = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("");
    let (kind, ns, name) = (
        text("/kind"),
        text("/metadata/namespace"),
        text("/metadata/name"),
    );
    if ns.is_empty() {
        format!("{kind} {name}")
    } else {
        format!("{kind} {ns}/{name}")
    }
}

/// The HPA spec fields autoscaling/v1 and v2 share, copied as they are either way.
const SPEC_SHARED: &[&str] = &["scaleTargetRef", "minReplicas", "maxReplicas"];

/// The HPA status fields autoscaling/v1 and v2 share, copied as they are either way.
const STATUS_SHARED: &[&str] = &[
    "observedGeneration",
    "lastScaleTime",
    "currentReplicas",
    "desiredReplicas",
];

/// Refuses an HPA that keeps autoscaling/v2 fields in autoscaling/v1's annotations.
fn refuse_annotations(v: &Value) -> Result<(), String> {
    let annotations = v
        .pointer("/metadata/annotations")
        .and_then(Value::as_object);
    if let Some(a) = V1_ANNOTATIONS
        .iter()
        .find(|a| annotations.is_some_and(|m| m.contains_key(**a)))
    {
        return Err(format!(
            "{} carries the annotation {a}, which the dir source does not convert: write it as autoscaling/v2",
            shown(v)
        ));
    }
    Ok(())
}

/// Copies the keys `keys` of `from` into `to`.
fn copy(from: &Map<String, Value>, to: &mut Map<String, Value>, keys: &[&str]) {
    for k in keys {
        if let Some(x) = from.get(*k) {
            to.insert((*k).to_owned(), x.clone());
        }
    }
}

fn hpa_v1_to_v2(v: &Value) -> Result<Value, String> {
    refuse_annotations(v)?;
    let mut out = v.clone();
    let empty = Map::new();
    let spec = v.get("spec").and_then(Value::as_object).unwrap_or(&empty);
    let mut s = Map::new();
    copy(spec, &mut s, SPEC_SHARED);
    if let Some(cpu) = spec.get("targetCPUUtilizationPercentage") {
        s.insert(
            "metrics".into(),
            json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": cpu}}}]),
        );
    }
    out["spec"] = Value::Object(s);
    if let Some(status) = v.get("status").and_then(Value::as_object) {
        let mut st = Map::new();
        copy(status, &mut st, STATUS_SHARED);
        if let Some(cpu) = status.get("currentCPUUtilizationPercentage") {
            st.insert(
                "currentMetrics".into(),
                json!([{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": cpu}}}]),
            );
        }
        out["status"] = Value::Object(st);
    }
    Ok(out)
}

/// The CPU utilization target of a v2 HPA's metrics if that is all they say (`Ok(None)`: no
/// metrics); an error if they say more.
fn only_cpu(v: &Value, metrics: Option<&Value>) -> Result<Option<Value>, String> {
    let metrics = metrics
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let cpu = |m: &Value| {
        (m.get("type")? == "Resource" && m.pointer("/resource/name")? == "cpu")
            .then(|| {
                let t = m.pointer("/resource/target")?;
                (t.get("type")? == "Utilization").then(|| t.get("averageUtilization").cloned())?
            })
            .flatten()
    };
    match metrics {
        [] => Ok(None),
        [m] if cpu(m).is_some() => Ok(cpu(m)),
        _ => Err(format!(
            "{} has metrics autoscaling/v1 cannot express (only a CPU utilization target): read it with an autoscaling/v2 informer",
            shown(v)
        )),
    }
}

fn hpa_v2_to_v1(v: &Value) -> Result<Value, String> {
    let mut out = v.clone();
    let empty = Map::new();
    let spec = v.get("spec").and_then(Value::as_object).unwrap_or(&empty);
    if spec.get("behavior").is_some_and(|b| !b.is_null()) {
        return Err(format!(
            "{} has a behavior autoscaling/v1 cannot express: read it with an autoscaling/v2 informer",
            shown(v)
        ));
    }
    let mut s = Map::new();
    copy(spec, &mut s, SPEC_SHARED);
    if let Some(cpu) = only_cpu(v, spec.get("metrics"))? {
        s.insert("targetCPUUtilizationPercentage".into(), cpu);
    }
    out["spec"] = Value::Object(s);
    if let Some(status) = v.get("status").and_then(Value::as_object) {
        let mut st = Map::new();
        copy(status, &mut st, STATUS_SHARED);
        let current = status
            .get("currentMetrics")
            .and_then(Value::as_array)
            .and_then(|m| {
                m.iter().find_map(|m| {
                    (m.get("type")? == "Resource" && m.pointer("/resource/name")? == "cpu")
                        .then(|| m.pointer("/resource/current/averageUtilization").cloned())?
                })
            });
        if let Some(cpu) = current {
            st.insert("currentCPUUtilizationPercentage".into(), cpu);
        }
        out["status"] = Value::Object(st);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hpa(version: &str, spec: Value) -> Value {
        json!({"apiVersion": format!("autoscaling/{version}"), "kind": "HorizontalPodAutoscaler",
               "metadata": {"name": "web", "namespace": "shop"}, "spec": spec})
    }

    #[test]
    fn an_autoscaling_v1_hpa_is_served_as_v2_with_its_cpu_target_as_a_metric_and_back() {
        let target = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"});
        let v1 = hpa(
            "v1",
            json!({"scaleTargetRef": target, "minReplicas": 2, "maxReplicas": 5, "targetCPUUtilizationPercentage": 70}),
        );
        let v2 = convert(&v1, "autoscaling/v2").unwrap();
        assert_eq!(
            v2,
            hpa(
                "v2",
                json!({"scaleTargetRef": target, "minReplicas": 2, "maxReplicas": 5,
                       "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}]})
            )
        );
        assert_eq!(convert(&v2, "autoscaling/v1").unwrap(), v1, "and back");
        let no_target = hpa("v1", json!({"scaleTargetRef": target, "maxReplicas": 5}));
        let v2 = convert(&no_target, "autoscaling/v2").unwrap();
        assert_eq!(v2["spec"]["minReplicas"], 1, "v2's defaults");
        assert_eq!(
            v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"], 80,
            "v2's default metric"
        );
    }

    #[test]
    fn what_autoscaling_v1_cannot_express_is_refused_naming_autoscaling_v2() {
        let v2 = hpa(
            "v2",
            json!({"maxReplicas": 5, "metrics": [{"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}}]}),
        );
        let e = convert(&v2, "autoscaling/v1").unwrap_err();
        assert_eq!(
            e,
            "HorizontalPodAutoscaler shop/web has metrics autoscaling/v1 cannot express (only a CPU utilization target): read it with an autoscaling/v2 informer"
        );
        let mut v1 = hpa("v1", json!({"maxReplicas": 5}));
        v1["metadata"]["annotations"] = json!({"autoscaling.alpha.kubernetes.io/metrics": "[]"});
        let e = convert(&v1, "autoscaling/v2").unwrap_err();
        assert!(e.ends_with("write it as autoscaling/v2"), "{e}");
    }

    #[test]
    fn kinds_whose_conversion_is_not_modelled_are_refused_naming_the_version_to_write() {
        let ip = json!({"apiVersion": "networking.k8s.io/v1beta1", "kind": "IPAddress", "metadata": {"name": "10.0.0.1"}});
        assert_eq!(
            convert(&ip, "networking.k8s.io/v1").unwrap_err(),
            "IPAddress 10.0.0.1 is written as networking.k8s.io/v1beta1; the dir source does not convert IPAddress to networking.k8s.io/v1: write it as networking.k8s.io/v1"
        );
        assert_eq!(convert(&ip, "networking.k8s.io/v1beta1").unwrap(), ip);
    }
}
