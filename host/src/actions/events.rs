//! Repeated Events become a count on the first one, as client-go's event correlator does
//! (`tools/record/events_cache.go`, `eventLogger`): an Event identical to one this plugin sent
//! less than [`REPEAT_WINDOW`] ago (same involved object, type, reason, message and source) is
//! not created again; the first one's `count` and `lastTimestamp` are patched instead. What is
//! remembered is bounded ([`MAX_REMEMBERED`], as client-go's LRU): when full, the entry seen
//! longest ago is forgotten, so at worst a repeat is created as a new Event. An Event is
//! remembered by the SHA-256 of its key, its name and its first timestamp (about 350 bytes at
//! most, whatever the size of its message), so a plugin's memory here stays under 1.5 MiB.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// A repeat later than this after the last one is a new Event (client-go's aggregation
/// interval, 10 minutes).
pub const REPEAT_WINDOW: Duration = Duration::from_secs(600);

/// Distinct Events remembered per plugin (client-go's `maxLruCacheEntries`).
pub const MAX_REMEMBERED: usize = 4096;

/// What to send for an Event.
#[derive(Clone, Debug, PartialEq)]
pub enum Correlated {
    /// Not seen lately: create it.
    New,
    /// Seen: patch the Event `name` with this merge patch (`count`, `lastTimestamp`).
    Repeat {
        /// Name of the Event first created.
        name: String,
        /// The patch.
        patch: Value,
    },
}

struct Seen {
    name: String,
    count: u64,
    first_timestamp: Value,
    last: Instant,
}

/// One plugin's recently sent Events.
#[derive(Default)]
pub struct EventCorrelator {
    seen: HashMap<[u8; 32], Seen>,
}

/// What makes two Events the same: client-go's `getEventKey` (source, involved object, type,
/// reason, reporting controller and instance, message).
fn key(ev: &Value) -> [u8; 32] {
    let io = &ev["involvedObject"];
    let parts = [
        &ev["source"]["component"],
        &ev["source"]["host"],
        &io["kind"],
        &io["namespace"],
        &io["name"],
        &io["uid"],
        &io["apiVersion"],
        &ev["type"],
        &ev["reason"],
        &ev["reportingComponent"],
        &ev["reportingInstance"],
        &ev["message"],
    ];
    // JSON of the array: no separator can be forged inside a field.
    let text = Value::Array(parts.into_iter().cloned().collect()).to_string();
    Sha256::digest(text.as_bytes()).into()
}

impl EventCorrelator {
    /// Decides how to send `event` (a core/v1 Event this plugin is about to create) at `now`,
    /// and updates what is remembered; on a repeat, `event` gets the first one's name, count
    /// and firstTimestamp (so it can be created whole if the first one is gone).
    pub fn observe(&mut self, event: &mut Value, now: Instant) -> Correlated {
        let k = key(event);
        let last_ts = event["lastTimestamp"].clone();
        if let Some(s) = self.seen.get_mut(&k)
            && now.saturating_duration_since(s.last) < REPEAT_WINDOW
        {
            s.count += 1;
            s.last = now;
            event["metadata"]["name"] = json!(s.name);
            event["count"] = json!(s.count);
            event["firstTimestamp"] = s.first_timestamp.clone();
            return Correlated::Repeat {
                name: s.name.clone(),
                patch: json!({ "count": s.count, "lastTimestamp": last_ts }),
            };
        }
        if self.seen.len() >= MAX_REMEMBERED && !self.seen.contains_key(&k) {
            self.seen
                .retain(|_, s| now.saturating_duration_since(s.last) < REPEAT_WINDOW);
            if self.seen.len() >= MAX_REMEMBERED
                && let Some(oldest) = self
                    .seen
                    .iter()
                    .min_by_key(|(_, s)| s.last)
                    .map(|(k, _)| *k)
            {
                self.seen.remove(&oldest);
            }
        }
        self.seen.insert(
            k,
            Seen {
                name: event["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                count: 1,
                first_timestamp: event["firstTimestamp"].clone(),
                last: now,
            },
        );
        Correlated::New
    }

    /// Events remembered.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(name: &str, message: &str) -> Value {
        json!({
            "metadata": {"name": name, "namespace": "a"},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": "a", "name": "p", "uid": "u"},
            "reason": "R", "message": message, "type": "Warning",
            "source": {"component": "wisp/t"},
            "firstTimestamp": format!("t-{name}"), "lastTimestamp": format!("t-{name}"), "count": 1,
        })
    }

    #[test]
    fn an_identical_event_within_ten_minutes_is_a_count_patch_of_the_first() {
        let t0 = Instant::now();
        let mut c = EventCorrelator::default();
        assert_eq!(c.observe(&mut ev("e1", "m"), t0), Correlated::New);
        let mut again = ev("e2", "m");
        let r = c.observe(&mut again, t0 + Duration::from_secs(60));
        assert_eq!(
            r,
            Correlated::Repeat {
                name: "e1".into(),
                patch: json!({"count": 2, "lastTimestamp": "t-e2"})
            }
        );
        assert_eq!(
            (
                &again["metadata"]["name"],
                &again["count"],
                &again["firstTimestamp"]
            ),
            (&json!("e1"), &json!(2), &json!("t-e1"))
        );
        // Another message is another Event.
        assert_eq!(
            c.observe(&mut ev("e3", "other"), t0 + Duration::from_secs(61)),
            Correlated::New
        );
        // Ten minutes after the last repeat it is new again.
        assert_eq!(
            c.observe(
                &mut ev("e4", "m"),
                t0 + Duration::from_secs(60) + REPEAT_WINDOW
            ),
            Correlated::New
        );
    }

    #[test]
    fn what_is_remembered_is_bounded() {
        let t0 = Instant::now();
        let mut c = EventCorrelator::default();
        for i in 0..MAX_REMEMBERED + 100 {
            let at = t0 + Duration::from_millis(i as u64);
            c.observe(&mut ev(&format!("e{i}"), &format!("m{i}")), at);
        }
        assert_eq!(c.len(), MAX_REMEMBERED);
        // The most recent ones are kept.
        let last = MAX_REMEMBERED + 99;
        assert!(matches!(
            c.observe(
                &mut ev("x", &format!("m{last}")),
                t0 + Duration::from_secs(10)
            ),
            Correlated::Repeat { .. }
        ));
    }
}
