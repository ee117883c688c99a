//! Server-side printing: a list, get or watch asked for as a `meta.k8s.io/v1` Table (kubectl asks
//! for one on every `kubectl get`, `-w` included) is answered with one (a watch: one Table of one
//! row per event), with the columns a real server prints for Pods, Namespaces, ConfigMaps and
//! Secrets, a custom resource's CRD `additionalPrinterColumns`, and `NAME`, `AGE` for every
//! other kind.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::to_bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use super::discovery::{self, Known, PrinterColumn};
use super::http::Query;
use super::status::json_response;
use super::{ResourceKey, Shared};

/// Whether the Accept header asks for a Table first.
pub(crate) fn wanted(headers: &HeaderMap) -> bool {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table") && first.contains("g=meta.k8s.io"))
}

fn column(name: &str, kind: &str, format: &str, priority: u32) -> Value {
    json!({"name": name, "type": kind, "format": format, "description": name, "priority": priority})
}

/// Seconds since an RFC 3339 timestamp (second precision, `Z`).
fn age_secs(ts: &str) -> Option<u64> {
    let b = ts.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| ts.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    // Days from civil (Howard Hinnant).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let then = days * 86_400 + hh * 3600 + mm * 60 + ss;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    Some(now.saturating_sub(then).max(0) as u64)
}

/// apimachinery's `duration.HumanDuration`.
pub(crate) fn human(secs: u64) -> String {
    let (m, h) = (secs / 60, secs / 3600);
    if secs < 120 {
        format!("{secs}s")
    } else if m < 10 {
        if secs.is_multiple_of(60) {
            format!("{m}m")
        } else {
            format!("{m}m{}s", secs % 60)
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        if m.is_multiple_of(60) {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        if h.is_multiple_of(24) {
            format!("{}d", h / 24)
        } else {
            format!("{}d{}h", h / 24, h % 24)
        }
    } else if h < 24 * 365 * 2 {
        format!("{}d", h / 24)
    } else if h < 24 * 365 * 8 {
        format!("{}y{}d", h / 24 / 365, (h / 24) % 365)
    } else {
        format!("{}y", h / 24 / 365)
    }
}

fn age(obj: &Value) -> String {
    obj.pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(age_secs)
        .map_or_else(|| "<unknown>".to_string(), human)
}

fn name(obj: &Value) -> Value {
    obj.pointer("/metadata/name").cloned().unwrap_or(json!(""))
}

fn count(obj: &Value, fields: &[&str]) -> usize {
    fields
        .iter()
        .filter_map(|f| obj.get(*f).and_then(Value::as_object))
        .map(|m| m.len())
        .sum()
}

/// The cells of one object's row.
type Row = fn(&Value) -> Vec<Value>;

/// Columns and a row printer for one kind.
fn printer(kind: &str) -> (Vec<Value>, Row) {
    let name_col = column("Name", "string", "name", 0);
    let age_col = column("Age", "string", "", 0);
    match kind {
        "Pod" => (
            vec![
                name_col,
                column("Ready", "string", "", 0),
                column("Status", "string", "", 0),
                column("Restarts", "string", "", 0),
                age_col,
                column("IP", "string", "", 1),
                column("Node", "string", "", 1),
                column("Nominated Node", "string", "", 1),
                column("Readiness Gates", "string", "", 1),
            ],
            |pod| {
                let statuses = pod
                    .pointer("/status/containerStatuses")
                    .and_then(Value::as_array);
                let total = pod
                    .pointer("/spec/containers")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len);
                let ready = statuses.map_or(0, |s| {
                    s.iter()
                        .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
                        .count()
                });
                let restarts: i64 = statuses.map_or(0, |s| {
                    s.iter()
                        .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                        .sum()
                });
                let text = |p: &str, default: &str| {
                    pod.pointer(p)
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .unwrap_or(default)
                        .to_string()
                };
                let mut status = text("/status/reason", &text("/status/phase", "Unknown"));
                if pod.pointer("/metadata/deletionTimestamp").is_some() {
                    status = "Terminating".into();
                }
                vec![
                    name(pod),
                    json!(format!("{ready}/{total}")),
                    json!(status),
                    json!(restarts.to_string()),
                    json!(age(pod)),
                    json!(text("/status/podIP", "<none>")),
                    json!(text("/spec/nodeName", "<none>")),
                    json!(text("/status/nominatedNodeName", "<none>")),
                    json!("<none>"),
                ]
            },
        ),
        "Namespace" => (
            vec![name_col, column("Status", "string", "", 0), age_col],
            |ns| {
                let phase = ns.pointer("/status/phase").cloned().unwrap_or(json!(""));
                vec![name(ns), phase, json!(age(ns))]
            },
        ),
        "ConfigMap" => (
            vec![name_col, column("Data", "integer", "", 0), age_col],
            |cm| {
                vec![
                    name(cm),
                    json!(count(cm, &["data", "binaryData"])),
                    json!(age(cm)),
                ]
            },
        ),
        "Secret" => (
            vec![
                name_col,
                column("Type", "string", "", 0),
                column("Data", "integer", "", 0),
                age_col,
            ],
            |s| {
                let kind = s.get("type").cloned().unwrap_or(json!("Opaque"));
                vec![name(s), kind, json!(count(s, &["data"])), json!(age(s))]
            },
        ),
        _ => (vec![name_col, age_col], |o| vec![name(o), json!(age(o))]),
    }
}

/// The printer columns of a custom resource's collection, when its CRD names any.
pub(crate) fn custom_columns(
    shared: &Shared,
    resource: &ResourceKey,
) -> Option<Vec<PrinterColumn>> {
    match discovery::known(shared, resource) {
        Known::Custom(c) => Some(c.columns),
        _ => None,
    }
}

/// A custom resource's columns, as apiextensions-apiserver's table convertor makes them: the
/// name, then the CRD's `additionalPrinterColumns` (an `Age` of `creationTimestamp` when it
/// names none).
fn custom_definitions(columns: &[PrinterColumn]) -> Vec<Value> {
    let mut out = vec![column("Name", "string", "name", 0)];
    if columns.is_empty() {
        out.push(column("Age", "date", "", 0));
    }
    for c in columns {
        let mut d = column(&c.name, &c.kind, &c.format, c.priority);
        d["description"] = json!(c.description);
        out.push(d);
    }
    out
}

/// One custom resource's cells: each column's JSONPath (Kubernetes' form, without `$`) looked
/// up in the object; the first value, `null` when there is none; a `date` as an age and a
/// `string` as the value printed (text as is, anything else as JSON).
fn custom_cells(columns: &[PrinterColumn], obj: &Value) -> Vec<Value> {
    use jsonpath_rust::JsonPath;
    let mut cells = vec![name(obj)];
    if columns.is_empty() {
        cells.push(json!(age(obj)));
    }
    for c in columns {
        let path = format!("${}", c.json_path.trim_matches(|ch| ch == '{' || ch == '}'));
        let found = obj
            .query(&path)
            .ok()
            .and_then(|r| r.into_iter().next().cloned());
        cells.push(match (found, c.kind.as_str()) {
            (None, _) => Value::Null,
            (Some(Value::String(t)), "date") => {
                json!(age_secs(&t).map_or_else(|| "<invalid>".to_string(), human))
            }
            (Some(Value::String(t)), "string") => json!(t),
            (Some(v), "string") => json!(v.to_string()),
            (Some(v), _) => v,
        });
    }
    cells
}

/// A Table of `items` of `kind`; `columns` false leaves the column definitions empty, as a
/// real server does in every watch event but the first. `custom`: the printer columns of a
/// custom resource's CRD.
pub(crate) fn table(
    kind: &str,
    custom: Option<&[PrinterColumn]>,
    items: &[Value],
    metadata: Value,
    include: &str,
    columns: bool,
) -> Value {
    let (definitions, row) = printer(kind);
    let definitions = custom.map_or(definitions, custom_definitions);
    let rows: Vec<Value> = items
        .iter()
        .map(|item| {
            let object = match include {
                "None" => Value::Null,
                "Object" => item.clone(),
                _ => json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": item.get("metadata").cloned().unwrap_or(json!({})),
                }),
            };
            let cells = custom.map_or_else(|| row(item), |c| custom_cells(c, item));
            let mut r = json!({"cells": cells});
            if !object.is_null() {
                r["object"] = object;
            }
            r
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": if columns { json!(definitions) } else { json!([]) },
        "rows": rows,
    })
}

/// Turns a 200 list or get response into a Table; anything else passes through.
pub(crate) async fn render(
    response: Response,
    query: &Query,
    custom: Option<Vec<PrinterColumn>>,
) -> Response {
    if response.status() != StatusCode::OK {
        return response;
    }
    let Ok(bytes) = to_bytes(response.into_body(), usize::MAX).await else {
        return json_response(StatusCode::INTERNAL_SERVER_ERROR, "{}");
    };
    let Ok(doc) = serde_json::from_slice::<Value>(&bytes) else {
        return json_response(StatusCode::OK, bytes);
    };
    let (items, metadata, kind) = match doc.get("items").and_then(Value::as_array) {
        Some(items) => (
            items.clone(),
            doc.get("metadata").cloned().unwrap_or(json!({})),
            doc.get("kind")
                .and_then(Value::as_str)
                .and_then(|k| k.strip_suffix("List"))
                .unwrap_or("")
                .to_string(),
        ),
        None => (
            vec![doc.clone()],
            json!({"resourceVersion": doc.pointer("/metadata/resourceVersion")}),
            doc.get("kind")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        ),
    };
    let include = query
        .get("includeObject")
        .map_or("Metadata", String::as_str);
    let table = table(&kind, custom.as_deref(), &items, metadata, include, true);
    json_response(StatusCode::OK, table.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_like_kubectl() {
        for (secs, want) in [
            (5, "5s"),
            (119, "119s"),
            (150, "2m30s"),
            (600, "10m"),
            (3 * 3600 + 60, "3h1m"),
            (30 * 3600, "30h"),
            (3 * 86_400 + 3600, "3d1h"),
            (40 * 86_400, "40d"),
        ] {
            assert_eq!(human(secs), want);
        }
        assert_eq!(age_secs("1970-01-01T00:00:00Z").map(|s| s > 0), Some(true));
    }
}
