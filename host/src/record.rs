//! Recorded notifications (JSON Lines) for `wisp record` and `wisp replay`.
//!
//! One line per notification:
//! `{"informer":"pods","seq":1,"event":"added","initialList":true,"object":{...}}`,
//! `{"informer":"pods","seq":2,"event":"updated","resync":false,"old":{...},"object":{...}}`,
//! `{"informer":"pods","seq":3,"event":"deleted","finalStateUnknown":false,"object":{...}}`.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::informer::object::Tombstone;
use crate::informer::{
    DeletedObject, Delivery, EventHandler, Indexer, Notification, Object, key::object_key,
};
use crate::plugin::PluginEngine;
use crate::plugin::runtime::PluginRuntime;
use crate::plugin::status::{PluginCounters, PluginStatus};
use crate::sync::lock;

/// One notification as a JSON line.
pub fn to_record(informer: &str, d: &Delivery) -> Value {
    match &d.notification {
        Notification::Add { obj, initial_list } => json!({
            "informer": informer, "seq": d.seq, "event": "added", "initialList": initial_list, "object": obj.to_value()
        }),
        Notification::Update { old, new } => json!({
            "informer": informer, "seq": d.seq, "event": "updated", "resync": d.notification.is_resync(),
            "old": old.to_value(), "object": new.to_value()
        }),
        Notification::Delete { obj } => json!({
            "informer": informer, "seq": d.seq, "event": "deleted", "finalStateUnknown": obj.is_tombstone(),
            "object": obj.object().to_value()
        }),
    }
}

/// A recorded line that does not read back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// Not JSON.
    #[error("not JSON: {0}")]
    Json(#[source] serde_json::Error),
    /// A field the line needs is missing (`seq`, `object`, `old`).
    #[error("missing {0}")]
    Missing(String),
    /// An object field that is not an object.
    #[error("{field}: {source}")]
    Object {
        /// The field.
        field: String,
        /// Why.
        #[source]
        source: crate::informer::object::ObjectError,
    },
    /// An event other than the three.
    #[error("unknown event {0:?} (expected added, updated or deleted)")]
    Event(Option<String>),
}

/// Parses one JSON line back into (informer, delivery).
pub fn from_record(line: &str) -> Result<(String, Delivery), RecordError> {
    let v: Value = serde_json::from_str(line).map_err(RecordError::Json)?;
    let informer = v
        .get("informer")
        .and_then(Value::as_str)
        .unwrap_or("events")
        .to_owned();
    let seq = (v.get("seq").and_then(Value::as_u64))
        .ok_or_else(|| RecordError::Missing("seq".to_owned()))?;
    let obj = |field: &str| -> Result<Arc<Object>, RecordError> {
        let o = v
            .get(field)
            .cloned()
            .ok_or_else(|| RecordError::Missing(field.to_owned()))?;
        Object::from_value(o, false)
            .map(Arc::new)
            .map_err(|source| RecordError::Object {
                field: field.to_owned(),
                source,
            })
    };
    let flag = |f: &str| v.get(f).and_then(Value::as_bool).unwrap_or(false);
    let notification = match v.get("event").and_then(Value::as_str) {
        Some("added") => Notification::Add {
            obj: obj("object")?,
            initial_list: flag("initialList"),
        },
        Some("updated") => Notification::Update {
            old: obj("old")?,
            new: obj("object")?,
        },
        Some("deleted") => {
            let o = obj("object")?;
            let d = if flag("finalStateUnknown") {
                DeletedObject::Tombstone(Tombstone {
                    key: object_key(&o),
                    obj: o,
                })
            } else {
                DeletedObject::Object(o)
            };
            Notification::Delete { obj: d }
        }
        other => return Err(RecordError::Event(other.map(str::to_owned))),
    };
    Ok((informer, Delivery { seq, notification }))
}

/// A handler that writes every notification as a JSON line.
pub struct RecordingHandler {
    informer: String,
    out: Arc<Mutex<Box<dyn Write + Send>>>,
    count: Arc<AtomicU64>,
}

impl RecordingHandler {
    /// Writes `informer`'s notifications to `out`, counting them in `count`.
    pub fn new(
        informer: &str,
        out: Arc<Mutex<Box<dyn Write + Send>>>,
        count: Arc<AtomicU64>,
    ) -> Self {
        Self {
            informer: informer.to_owned(),
            out,
            count,
        }
    }
}

impl EventHandler for RecordingHandler {
    fn handle(&mut self, batch: &[Delivery]) {
        let mut out = lock(&self.out);
        for d in batch {
            if let Err(e) = writeln!(out, "{}", to_record(&self.informer, d)) {
                tracing::error!(error = %e, "cannot write the recording");
            }
        }
        let _ = out.flush();
        self.count.fetch_add(batch.len() as u64, Ordering::Relaxed);
    }
}

/// What a replay did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReplaySummary {
    /// Notifications fed.
    pub notifications: u64,
    /// Handled with an ok outcome.
    pub ok: u64,
    /// Failed.
    pub failed: u64,
}

/// Feeds recorded notifications to a plugin, one at a time, and writes each outcome and the
/// plugin's log lines to `out`. The plugin may read a cache rebuilt from the recording itself
/// (every informer named in it is granted).
pub fn replay(
    engine: &Arc<PluginEngine>,
    module: &Path,
    settings: Value,
    events: &Path,
    out: &mut dyn Write,
) -> anyhow::Result<ReplaySummary> {
    let file =
        std::fs::File::open(events).with_context(|| format!("events file {}", events.display()))?;
    let mut parsed = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("{}: line {}", events.display(), i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        match from_record(&line) {
            Ok(r) => parsed.push(r),
            Err(e) => bail!("{}: line {}: {e}", events.display(), i + 1),
        }
    }
    let mut caches: BTreeMap<String, Indexer> = BTreeMap::new();
    for (inf, _) in &parsed {
        caches.entry(inf.clone()).or_default();
    }
    let grants: BTreeMap<String, crate::informer::Cache> =
        caches.iter().map(|(k, v)| (k.clone(), v.cache())).collect();
    let checked = crate::plugin::loader::check_with_grants(
        engine,
        module,
        settings,
        crate::plugin::state::Grants::caches(grants),
    )?;
    writeln!(
        out,
        "plugin {} {} ({})",
        checked.info.name,
        checked.info.version,
        module.display()
    )?;
    let status = checked.status().clone();
    let mut rt = checked.into_runtime(engine.clone());
    let mut summary = ReplaySummary::default();
    for (inf, d) in parsed {
        let (outcome, logs) = feed(&mut rt, &status, caches.get(&inf), &inf, &d);
        let outcome = match outcome {
            Fed::Ok => {
                summary.ok += 1;
                "ok".to_owned()
            }
            Fed::Failed(e) => {
                summary.failed += 1;
                format!("failed: {e}")
            }
            Fed::Dropped => "dropped (quarantined)".to_owned(),
        };
        let o = d.notification.object();
        let event = match &d.notification {
            Notification::Add { .. } => "added",
            Notification::Update { .. } => "updated",
            Notification::Delete { .. } => "deleted",
        };
        summary.notifications += 1;
        writeln!(
            out,
            "#{} {inf} {event} {} rv={} -> {outcome}",
            d.seq,
            object_key(o),
            o.resource_version()
        )?;
        for l in logs {
            writeln!(out, "    {l}")?;
        }
    }
    writeln!(
        out,
        "{} notifications: {} ok, {} failed",
        summary.notifications, summary.ok, summary.failed
    )?;
    for ((name, labels), v) in status.guest_counters().into_iter() {
        writeln!(out, "counter {name}{} = {v}", fmt_labels(&labels))?;
    }
    for ((name, labels), v) in status.guest_gauges().into_iter() {
        writeln!(out, "gauge {name}{} = {v}", fmt_labels(&labels))?;
    }
    Ok(summary)
}

/// What became of one notification handed to a plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fed {
    /// Handled.
    Ok,
    /// Failed, with the plugin's last error.
    Failed(String),
    /// Not handed over: the plugin is quarantined.
    Dropped,
}

/// Updates `cache` as the informer would before delivering, then hands `d` alone to the plugin.
/// Returns what became of it and the lines the plugin logged meanwhile.
pub(crate) fn feed(
    rt: &mut PluginRuntime,
    status: &PluginStatus,
    cache: Option<&Indexer>,
    informer: &str,
    d: &Delivery,
) -> (Fed, Vec<String>) {
    if let Some(ix) = cache {
        match &d.notification {
            Notification::Add { obj, .. } => ix.add(obj.clone()),
            Notification::Update { new, .. } => ix.update(new.clone()),
            Notification::Delete { obj } => ix.delete(obj),
        }
    }
    let c = &status.counters;
    let (ok0, failed0, logs0) = (
        PluginCounters::get(&c.delivered),
        PluginCounters::get(&c.failed),
        status.logs.total(),
    );
    rt.handle(informer, std::slice::from_ref(d));
    let fed = if PluginCounters::get(&c.delivered) > ok0 {
        Fed::Ok
    } else if PluginCounters::get(&c.failed) > failed0 {
        Fed::Failed(status.last_error().unwrap_or_default())
    } else {
        Fed::Dropped
    };
    (fed, status.logs.since(logs0))
}

/// `{k="v",...}` (nothing for no labels), as Prometheus writes a series' labels.
pub(crate) fn fmt_labels(l: &[(String, String)]) -> String {
    if l.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = l.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{{{}}}", inner.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::object::test_util::obj;

    #[test]
    fn records_round_trip_every_kind_of_notification() {
        let a = obj(Some("ns"), "a", "1");
        let b = obj(Some("ns"), "a", "2");
        for n in [
            Notification::Add {
                obj: a.clone(),
                initial_list: true,
            },
            Notification::Update {
                old: a.clone(),
                new: b.clone(),
            },
            Notification::Delete {
                obj: DeletedObject::Tombstone(Tombstone {
                    key: "ns/a".into(),
                    obj: b.clone(),
                }),
            },
            Notification::Delete {
                obj: DeletedObject::Object(b.clone()),
            },
        ] {
            let d = Delivery {
                seq: 7,
                notification: n,
            };
            let line = to_record("pods", &d).to_string();
            let (inf, back) = from_record(&line).unwrap();
            assert_eq!(inf, "pods");
            assert_eq!(back, d);
        }
    }

    #[test]
    fn a_bad_record_says_what_is_wrong() {
        assert!(
            from_record("{")
                .unwrap_err()
                .to_string()
                .starts_with("not JSON")
        );
        assert_eq!(
            from_record(r#"{"seq":1,"event":"poked","object":{}}"#)
                .unwrap_err()
                .to_string(),
            "unknown event Some(\"poked\") (expected added, updated or deleted)"
        );
    }
}
