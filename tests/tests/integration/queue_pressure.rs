//! Queue pressure: a plugin far slower than the event rate stays within its queue bound with its
//! overflow policy, and the informer and the other listeners on it are unaffected.
//!
//! The slow plugins are test-faults in `gate` mode: the call that handles the gate pod holds
//! until the gate pod is deleted, so they fall behind by the whole burst, with no timing involved.

use crate::common;

use std::time::Duration;

use common::rig::*;
use common::*;
use serde_json::json;
use wisp_host::informer::handler::Recorder;
use wisp_host::informer::listener::ListenerStats;
use wisp_host::informer::{Overflow, QueueBound};
use wisp_host::plugin::PluginHandle;
use wisp_host::plugin::spec::{DEFAULT_OVERFLOW, DEFAULT_QUEUE_MAX};
use wisp_host::plugin::status::PluginCounters;
use wisp_tests::pod;

/// Pods in the burst; each is created, updated `UPDATES` times, and every third deleted.
const PODS: u64 = 300;
const UPDATES: u64 = 10;
/// Room for every object, so coalescing keeps every final state.
const COALESCE_MAX: usize = 400;
/// Far less than the objects, so dropping has to drop.
const DROP_MAX: usize = 50;

fn queue(h: &PluginHandle) -> ListenerStats {
    let q = h.queues();
    assert_eq!(q.len(), 1);
    q[0].1
}

fn faults(r: &Rig, name: &str, settings: serde_json::Value, bound: QueueBound) -> PluginHandle {
    let mut s = spec(name, "test_faults", settings);
    s.queue = bound;
    // The gate holds one call for the whole burst; a loaded machine must not cut any call.
    s.limits.deadline = Duration::from_secs(120);
    r.manager.start(s).unwrap()
}

fn guest(h: &PluginHandle, name: &str) -> u64 {
    h.status().guest_counter(name, &[])
}

fn seen(h: &PluginHandle) -> u64 {
    h.status()
        .guest_counter("seen_total", &[("informer", "pods")])
}

#[tokio::test]
async fn a_plugin_far_behind_stays_within_its_bound_and_its_neighbours_see_everything() {
    // Each gated plugin holds a worker of the executor for the whole burst (as a plugin stuck in
    // a call does until its deadline cuts it): two more workers for the fast one, whatever the
    // number of cores.
    let executor = wisp_host::informer::Executor::new(4).unwrap();
    let r = rig_with(
        vec![],
        wisp_host::informer::shared_informer::InformerConfig {
            executor: Some(executor.clone()),
            ..fast_config()
        },
    )
    .await;
    let gated = json!({"mode": "gate", "namePrefix": "gate-"});
    let coalescing = faults(
        &r,
        "coalescing",
        gated.clone(),
        QueueBound::bounded(COALESCE_MAX, Overflow::Coalesce),
    );
    let dropping = faults(
        &r,
        "dropping",
        gated,
        QueueBound::bounded(DROP_MAX, Overflow::DropOldest),
    );
    // The default bound: far more than the burst, so it must see everything.
    let fast = faults(
        &r,
        "fast",
        json!({}),
        QueueBound::bounded(DEFAULT_QUEUE_MAX, DEFAULT_OVERFLOW),
    );
    let native = Recorder::new();
    r.inf
        .add_event_handler("native", Box::new(native.clone()), Duration::ZERO)
        .unwrap();

    r.server.create(pod("default", "gate-0")).unwrap();
    until("both slow plugins hold the gate", || {
        [&coalescing, &dropping]
            .iter()
            .all(|h| queue(h).queued == 1 && queue(h).depth == 0)
    })
    .await;
    for i in 0..PODS {
        r.server.create(pod("default", &format!("p-{i}"))).unwrap();
    }
    for n in 1..=UPDATES {
        for i in 0..PODS {
            r.server
                .update(touched(pod("default", &format!("p-{i}")), n))
                .unwrap();
        }
    }
    for i in (0..PODS).step_by(3) {
        r.server
            .delete("v1", "Pod", Some("default"), &format!("p-{i}"))
            .unwrap();
    }
    let changes = 1 + PODS * (1 + UPDATES) + PODS.div_ceil(3);

    // The informer and the fast neighbour keep up while the slow ones are stuck.
    until("the cache equals the server", || {
        cache_state(&r.inf) == server_state(&r.server)
    })
    .await;
    until("the fast plugin's view equals the server", || {
        view_equals_server(&fast, &r.server)
    })
    .await;
    let f = queue(&fast);
    assert_eq!(f.queued, changes);
    until("the fast plugin handled everything", || {
        seen(&fast) == changes
    })
    .await;
    assert_eq!(
        (guest(&fast, "gaps_total"), guest(&fast, "dups_total")),
        (0, 0)
    );
    assert_eq!((f.dropped, f.coalesced), (0, 0), "{f:?}");
    until("the native listener got everything", || {
        native.len() as u64 == changes
    })
    .await;
    let view = replay(&native.deliveries()).expect("in order, numbered 1..=n, no gaps");
    assert_eq!(view, server_state(&r.server));

    // The slow ones were offered everything and hold no more than their bound.
    for (h, max) in [(&coalescing, COALESCE_MAX), (&dropping, DROP_MAX)] {
        let q = queue(h);
        assert_eq!(q.queued, changes, "{}", h.name());
        assert_eq!(
            q.max_depth,
            max,
            "{}: filled to its bound, never past it",
            h.name()
        );
        assert!(q.depth <= max, "{}: {q:?}", h.name());
    }
    // Offered to the queues: everything but the gate pod's add, which is in the plugin.
    let c = queue(&coalescing);
    assert_eq!(c.dropped, 0, "room for every object: nothing dropped");
    assert!(c.depth <= PODS as usize, "one per object: {c:?}");
    assert_eq!(c.coalesced + c.depth as u64, changes - 1, "{c:?}");
    let d = queue(&dropping);
    assert_eq!(d.coalesced, 0);
    assert_eq!(d.depth, DROP_MAX);
    assert_eq!(d.dropped + DROP_MAX as u64, changes - 1, "{d:?}");

    // Let them go: the coalescing one ends with the server's objects; both see exactly their
    // overflow as gaps, and count it.
    r.server
        .delete("v1", "Pod", Some("default"), "gate-0")
        .unwrap();
    let changes = changes + 1;
    until("the coalescing plugin's view equals the server", || {
        view_equals_server(&coalescing, &r.server)
    })
    .await;
    for h in [&coalescing, &dropping] {
        until("the slow plugin drained its queue", || {
            let q = queue(h);
            q.queued == changes && q.depth == 0 && q.delivered + q.dropped + q.coalesced == changes
        })
        .await;
        let q = queue(h);
        until("the plugin counted what it handled", || {
            seen(h) == q.delivered
        })
        .await;
        assert_eq!(
            guest(h, "gaps_total"),
            q.dropped + q.coalesced,
            "{}",
            h.name()
        );
        assert_eq!(guest(h, "dups_total"), 0);
        let counters = &h.status().counters;
        assert_eq!(PluginCounters::get(&counters.queue_dropped), q.dropped);
        assert_eq!(PluginCounters::get(&counters.queue_coalesced), q.coalesced);
        assert!(h.has_synced());
    }
    assert!(view_equals_server(&fast, &r.server));
}

/// Issue 42 item 2: queues bounded in bytes. Two plugins held at the gate while 40 pods, each
/// with a 4 KiB annotation, are updated 10 times: their queues reach their 64 KiB bound far
/// before their count (100000). The coalescing one (the default policy) then keeps one
/// notification per object, merged to its latest state, and once let go ends with the server's
/// objects; the one that must see every event (`dropOldest`) keeps at most 64 KiB, dropping the
/// oldest, counted. Both report their bytes and their oldest notification's age while held,
/// and each handled notification's time from queue to outcome.
#[tokio::test]
async fn a_plugin_far_behind_in_bytes_coalesces_at_its_byte_bound_and_ends_with_the_final_state() {
    const PODS: u64 = 40;
    const UPDATES: u64 = 10;
    const MAX_BYTES: usize = 64 << 10;
    let executor = wisp_host::informer::Executor::new(3).unwrap();
    let r = rig_with(
        vec![],
        wisp_host::informer::shared_informer::InformerConfig {
            executor: Some(executor.clone()),
            ..fast_config()
        },
    )
    .await;
    let gated = json!({"mode": "gate", "namePrefix": "gate-"});
    let bound =
        |overflow| QueueBound::bounded(DEFAULT_QUEUE_MAX, overflow).with_max_bytes(MAX_BYTES);
    let coalescing = faults(&r, "coalescing", gated.clone(), bound(Overflow::Coalesce));
    let every = faults(&r, "every", gated, bound(Overflow::DropOldest));
    r.server.create(pod("default", "gate-0")).unwrap();
    until("both plugins hold the gate", || {
        [&coalescing, &every]
            .iter()
            .all(|h| queue(h).queued == 1 && queue(h).depth == 0)
    })
    .await;
    let big = |name: &str, n: u64| {
        let mut p = touched(pod("default", name), n);
        p["metadata"]["annotations"]["wisp.test/padding"] = "x".repeat(4096).into();
        p
    };
    for i in 0..PODS {
        r.server.create(big(&format!("p-{i}"), 0)).unwrap();
    }
    for n in 1..=UPDATES {
        for i in 0..PODS {
            r.server.update(big(&format!("p-{i}"), n)).unwrap();
        }
    }
    let changes = 1 + PODS * (1 + UPDATES);
    until("every change offered to both queues", || {
        queue(&coalescing).queued == changes && queue(&every).queued == changes
    })
    .await;

    let c = queue(&coalescing);
    assert!(c.coalesced > 0, "full in bytes, far below its count: {c:?}");
    assert_eq!(c.dropped, 0, "one per object: nothing dropped");
    assert_eq!(c.depth as u64, PODS, "one notification per object: {c:?}");
    assert_eq!(c.coalesced + c.depth as u64, changes - 1, "{c:?}");
    let e = queue(&every);
    assert!(e.bytes <= MAX_BYTES, "{e:?}");
    assert_eq!(e.coalesced, 0);
    assert!(e.dropped > 0 && (e.depth as u64) < changes - 1, "{e:?}");
    assert_eq!(e.dropped + e.depth as u64, changes - 1, "{e:?}");
    for q in [c, e] {
        assert!(q.bytes > 0 && q.oldest_age.is_some(), "{q:?}");
        assert_eq!(q.bound.max_bytes(), Some(MAX_BYTES));
    }

    r.server
        .delete("v1", "Pod", Some("default"), "gate-0")
        .unwrap();
    let changes = changes + 1;
    until("the coalescing plugin's view equals the server", || {
        view_equals_server(&coalescing, &r.server)
    })
    .await;
    for h in [&coalescing, &every] {
        until("the plugin drained its queue", || {
            let q = queue(h);
            q.queued == changes && q.depth == 0 && q.delivered + q.dropped + q.coalesced == changes
        })
        .await;
        let q = queue(h);
        assert_eq!((q.bytes, q.oldest_age), (0, None), "{}: {q:?}", h.name());
        assert_eq!(
            guest(h, "gaps_total"),
            q.dropped + q.coalesced,
            "{}",
            h.name()
        );
        let (buckets, _, count) = h.waited();
        assert_eq!(
            count,
            q.delivered,
            "{}: one time per handled notification",
            h.name()
        );
        assert_eq!(buckets.last().map(|b| b.1), Some(count));
    }
}
