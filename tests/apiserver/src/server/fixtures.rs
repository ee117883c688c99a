//! Realistic objects for tests: a pod of about 2 KB and a ConfigMap.
//!
//! The pod carries every field the official clients require when they decode one (the Python
//! client's typed models refuse a container status without `imageID`, for instance).

use serde_json::{Map, Value, json};

/// A realistic pod (about 2 KB serialized): labels, annotations, an owner reference, two
/// containers with images, ports and resources, a node name and a running status whose
/// container statuses are complete (`imageID`, `containerID`, `state`, `started`).
///
/// Labels: `app=<name without its last -suffix>`, `tier=backend`, `pod-template-hash=7d9f8b6c5d`.
pub fn pod(namespace: &str, name: &str) -> Value {
    let app = name.rsplit_once('-').map_or(name, |(stem, _)| stem);
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "app": app,
                "tier": "backend",
                "pod-template-hash": "7d9f8b6c5d"
            },
            "annotations": {
                "kubectl.kubernetes.io/restartedAt": "2025-01-01T00:00:00Z",
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9090"
            },
            "ownerReferences": [{
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": format!("{app}-7d9f8b6c5d"),
                "uid": "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b",
                "controller": true,
                "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "nodeName": "node-1",
            "serviceAccountName": "default",
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example.com/team/app:1.4.2",
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "env": [{"name": "RUST_LOG", "value": "info"}],
                    "resources": {
                        "requests": {"cpu": "250m", "memory": "256Mi"},
                        "limits": {"cpu": "1", "memory": "512Mi"}
                    }
                },
                {
                    "name": "metrics-sidecar",
                    "image": "registry.example.com/infra/metrics-agent:0.9.1",
                    "ports": [{"containerPort": 9090, "protocol": "TCP"}],
                    "resources": {
                        "requests": {"cpu": "50m", "memory": "64Mi"},
                        "limits": {"cpu": "100m", "memory": "128Mi"}
                    }
                }
            ]
        },
        "status": {
            "phase": "Running",
            "hostIP": "10.0.0.11",
            "podIP": "10.244.1.23",
            "startTime": "2025-01-01T00:00:05Z",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2025-01-01T00:00:12Z"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2025-01-01T00:00:01Z"}
            ],
            "podIPs": [{"ip": "10.244.1.23"}],
            "qosClass": "Burstable",
            "containerStatuses": [
                {
                    "name": "app",
                    "ready": true,
                    "started": true,
                    "restartCount": 0,
                    "image": "registry.example.com/team/app:1.4.2",
                    "imageID": "registry.example.com/team/app@sha256:3b1f0c9d2e4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c",
                    "containerID": "containerd://a1b2c3d4e5f6",
                    "state": {"running": {"startedAt": "2025-01-01T00:00:10Z"}}
                },
                {
                    "name": "metrics-sidecar",
                    "ready": true,
                    "started": true,
                    "restartCount": 0,
                    "image": "registry.example.com/infra/metrics-agent:0.9.1",
                    "imageID": "registry.example.com/infra/metrics-agent@sha256:9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a0",
                    "containerID": "containerd://f6e5d4c3b2a1",
                    "state": {"running": {"startedAt": "2025-01-01T00:00:11Z"}}
                }
            ]
        }
    })
}

/// A ConfigMap holding `data`.
pub fn config_map(namespace: &str, name: &str, data: &[(&str, &str)]) -> Value {
    let data: Map<String, Value> = data
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_fixture_is_about_two_kilobytes() {
        let size = serde_json::to_vec(&pod("default", "web-abc12"))
            .map(|v| v.len())
            .unwrap_or(0);
        assert!((1500..=3072).contains(&size), "pod fixture is {size} bytes");
        assert_eq!(pod("ns", "web-abc12")["metadata"]["labels"]["app"], "web");
        for status in pod("ns", "p")
            .pointer("/status/containerStatuses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            for field in ["name", "image", "imageID", "ready", "restartCount"] {
                assert!(status.get(field).is_some(), "containerStatuses[].{field}");
            }
        }
    }
}
