//! A plugin of the previous ABI, `wisp:plugin@0.1.0` (records per object), written against
//! `wit/v0.1/wisp.wit` with wit-bindgen alone (the SDK builds 0.2): the host must keep loading
//! such components beside 0.2 ones.
//!
//! For each notification it logs `v0.1 EVENT key rv=N`, counts `abi_events_total{informer,event}`,
//! and reads the object back from the cache (a 0.1 cache read): `abi_cache_hits_total` when the
//! cache has it at that resourceVersion or newer, `abi_seq_gaps_total` when a sequence number
//! was skipped.

wit_bindgen::generate!({
    path: "../../wit/v0.1",
    world: "plugin",
});

use std::cell::RefCell;
use std::collections::BTreeMap;

use exports::wisp::plugin::listener::Guest;
use wisp::plugin::host;
use wisp::plugin::types::{Delivery, Level, Notification, Object, Outcome, PluginInfo};

thread_local! {
    /// Last sequence number per informer.
    static LAST: RefCell<BTreeMap<String, u64>> = const { RefCell::new(BTreeMap::new()) };
}

struct V01;

fn key(o: &Object) -> String {
    match &o.meta.namespace {
        Some(ns) => format!("{ns}/{}", o.meta.name),
        None => o.meta.name.clone(),
    }
}

fn see(informer: &str, event: &str, o: &Object) {
    host::log(
        Level::Info,
        &format!("v0.1 {event} {} rv={}", key(o), o.meta.resource_version),
    );
    host::counter_add(
        "abi_events_total",
        &[
            ("informer".into(), informer.into()),
            ("event".into(), event.into()),
        ],
        1,
    );
    if event != "deleted"
        && let Ok(Some(c)) = host::cache_get(informer, o.meta.namespace.as_deref(), &o.meta.name)
        && c.meta.uid == o.meta.uid
    {
        host::counter_add("abi_cache_hits_total", &[], 1);
    }
}

impl Guest for V01 {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "test-abi-v01".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            informers: Vec::new(),
            replay_on_reload: false,
        }
    }

    fn init(_settings: String) -> Result<(), String> {
        Ok(())
    }

    fn handle(batch: Vec<Delivery>) -> Vec<Outcome> {
        batch
            .into_iter()
            .map(|d| {
                LAST.with(|l| {
                    let mut l = l.borrow_mut();
                    let last = l.entry(d.informer.clone()).or_insert(0);
                    if d.seq != *last + 1 {
                        host::counter_add("abi_seq_gaps_total", &[], 1);
                    }
                    *last = d.seq;
                });
                match &d.notification {
                    Notification::Added(a) => see(&d.informer, "added", &a.object),
                    Notification::Updated(u) if u.resync => see(&d.informer, "resynced", &u.new),
                    Notification::Updated(u) => see(&d.informer, "updated", &u.new),
                    Notification::Deleted(x) => see(&d.informer, "deleted", &x.object),
                }
                Outcome::Ok
            })
            .collect()
    }

    fn snapshot() -> Option<Vec<u8>> {
        None
    }

    fn restore(_state: Vec<u8>) -> Result<(), String> {
        Ok(())
    }
}

export!(V01);
