//! Queue pressure: a plugin far slower than the event rate stays within its queue bound with its
//! overflow policy, and the informer and the other listeners on it are unaffected.
//!
//! The slow plugins are test-faults in `gate` mode: the call that handles the gate pod holds
//! until the gate pod is deleted, so they fall behind by the whole burst, with no timing involved.
//!
//! A plugin whose calls spin to their deadline takes turns with the others on the shared
//! executor: its cut batch is delivered again one item per turn, and the other plugins run in
//! between (seen with one worker, gates freezing it at the moment that matters).

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
use wisp_host::plugin::status::{PluginCounters, PluginState};
use wisp_tests::pod;

/// Pods in the burst; each is created, updated `UPDATES` times, and every third deleted.
const PODS: u64 = 300;
const UPDATES: u64 = 10;
/// Room for every object, so coalescing keeps every final state.
const COALESCE_MAX: usize = 400;
/// Far less than the objects, so dropping has to drop.
const DROP_MAX: usize = 50;

/// A rig whose informer delivers on a shared executor of `workers` workers, whatever the cores.
async fn rig_on(workers: usize) -> Rig {
    let executor = wisp_host::informer::Executor::new(workers).unwrap();
    let config = wisp_host::informer::shared_informer::InformerConfig {
        executor: Some(executor),
        ..fast_config()
    };
    rig_with(vec![], config).await
}

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

/// Deletes the gate pod and waits until `coalescing`'s view equals the server and every one
/// of `plugins` has drained its queue, every notification offered (`changes`, the gate's
/// deletion not included) delivered, dropped or coalesced. Returns the changes offered then.
async fn release_gate(
    r: &Rig,
    coalescing: &PluginHandle,
    plugins: &[&PluginHandle],
    changes: u64,
) -> u64 {
    r.server
        .delete("v1", "Pod", Some("default"), "gate-0")
        .unwrap();
    let changes = changes + 1;
    until("the coalescing plugin's view equals the server", || {
        view_equals_server(coalescing, &r.server)
    })
    .await;
    for h in plugins {
        until("the slow plugin drained its queue", || {
            let q = queue(h);
            q.queued == changes && q.depth == 0 && q.delivered + q.dropped + q.coalesced == changes
        })
        .await;
    }
    changes
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
    let r = rig_on(4).await;
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
    release_gate(&r, &coalescing, &[&coalescing, &dropping], changes).await;
    for h in [&coalescing, &dropping] {
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
    let r = rig_on(3).await;
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

    release_gate(&r, &coalescing, &[&coalescing, &every], changes).await;
    for h in [&coalescing, &every] {
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

/// Issue 42 item 2: `queue.overflow: quarantine`, for a plugin that must see every change or
/// stop. Held at the gate while the burst comes, it is quarantined as soon as its full queue
/// drops a change (its state and last error say why), and once let go it is handed nothing
/// more: what was queued is dropped, counted. Its neighbour on the same informer, with the
/// default bound, sees every pod.
#[tokio::test]
async fn a_plugin_whose_queue_overflows_under_quarantine_is_quarantined_and_handed_nothing_more() {
    let r = rig_on(3).await;
    let strict = faults(
        &r,
        "strict",
        json!({"mode": "gate", "namePrefix": "gate-"}),
        QueueBound::bounded(DROP_MAX, Overflow::Quarantine),
    );
    let fast = faults(
        &r,
        "fast",
        json!({}),
        QueueBound::bounded(DEFAULT_QUEUE_MAX, DEFAULT_OVERFLOW),
    );
    r.server.create(pod("default", "gate-0")).unwrap();
    until("the strict plugin holds the gate", || {
        queue(&strict).queued == 1 && queue(&strict).depth == 0
    })
    .await;
    assert_eq!(strict.status().state(), PluginState::Running);
    for i in 0..PODS {
        r.server.create(pod("default", &format!("p-{i}"))).unwrap();
    }
    until("every pod offered to its queue", || {
        queue(&strict).queued == 1 + PODS
    })
    .await;
    let q = queue(&strict);
    assert_eq!(q.depth, DROP_MAX, "{q:?}");
    assert_eq!(
        q.dropped,
        PODS - DROP_MAX as u64,
        "the incoming ones: {q:?}"
    );
    let PluginState::Quarantined { reason } = strict.status().state() else {
        panic!("not quarantined: {:?}", strict.status().state());
    };
    assert!(reason.contains("queue.overflow: quarantine"), "{reason}");
    assert_eq!(
        strict.status().last_error().as_deref(),
        Some(reason.as_str())
    );

    r.server
        .delete("v1", "Pod", Some("default"), "gate-0")
        .unwrap();
    let st = strict.status();
    until("the strict plugin's queue drained", || {
        queue(&strict).depth == 0 && PluginCounters::get(&st.counters.dropped) >= DROP_MAX as u64
    })
    .await;
    assert_eq!(
        PluginCounters::get(&st.counters.delivered),
        1,
        "only the gate pod, handled before the overflow"
    );
    assert_eq!(seen(&strict), 1);
    until("the fast plugin saw every pod", || {
        seen(&fast) == 1 + PODS + 1
    })
    .await;
    assert_eq!(fast.status().state(), PluginState::Running);
}

/// Pods the spinner spins on: one batch, cut, then delivered again one by one.
const SPUN: u64 = 8;

/// The spinner (spins on `spin-` pods to its deadline, never quarantined), a fast plugin whose
/// call holds on `stop-0` until it is deleted (it freezes the worker right after it handled the
/// spun pods), and a gate (holds on `gate-0`), registered in this order: each pod reaches, and
/// readies, them in this order.
fn spinner_fast_and_gate(r: &Rig) -> [PluginHandle; 3] {
    let mut s = spec(
        "spinner",
        "test_faults",
        json!({"mode": "spin", "namePrefix": "spin-"}),
    );
    s.on_failure.quarantine_after = 0;
    let spinner = r.manager.start(s).unwrap();
    let gated = |name: &str, prefix: &str| {
        faults(
            r,
            name,
            json!({"mode": "gate", "namePrefix": prefix}),
            QueueBound::default(),
        )
    };
    [spinner, gated("fast", "stop-"), gated("gate", "gate-")]
}

#[tokio::test]
async fn a_spinning_plugin_redelivers_its_cut_batch_one_turn_at_a_time_and_a_fast_one_runs_between()
{
    // One worker: every plugin call is on it, one after another, so what the gates freeze is
    // the schedule itself.
    let r = rig_on(1).await;
    let [spinner, fast, gate] = spinner_fast_and_gate(&r);

    // The gate holds the worker while the spinner's and the fast plugin's queues fill.
    r.server.create(pod("default", "gate-0")).unwrap();
    until("the gate holds the worker", || {
        queue(&gate).queued == 1 && queue(&gate).depth == 0 && queue(&fast).delivered == 1
    })
    .await;
    for i in 1..=SPUN {
        r.server
            .create(pod("default", &format!("spin-{i}")))
            .unwrap();
    }
    r.server.create(pod("default", "stop-0")).unwrap();
    until("the spun pods and stop-0 queued", || {
        [&spinner, &fast]
            .iter()
            .all(|h| queue(h).queued == SPUN + 2)
    })
    .await;
    r.server
        .delete("v1", "Pod", Some("default"), "gate-0")
        .unwrap();

    // The spinner takes its batch (the spun pods, stop-0): its call is cut. Then the fast
    // plugin's turn comes before the spinner's next: it handles every spun pod and holds on
    // stop-0, and nothing moves until it is let go.
    until(
        "the fast plugin handled the spun pods and holds on stop-0",
        || seen(&fast) == SPUN + 2,
    )
    .await;
    assert_eq!(
        counter(&spinner, |c| &c.deadline_hits),
        1,
        "one turn of the spinner (its batch's call, cut) before the fast plugin's, not the \
         batch's re-deliveries too"
    );
    assert_eq!(
        (
            counter(&spinner, |c| &c.failed),
            counter(&spinner, |c| &c.delivered)
        ),
        (0, 1),
        "none of the cut batch delivered again yet (delivered: gate-0's add)"
    );

    r.server
        .delete("v1", "Pod", Some("default"), "stop-0")
        .unwrap();
    all_accounted_for(&spinner, &[&fast, &gate], SPUN + 4).await;
}

/// Once every plugin handled its `changes`: nothing lost, nothing twice; only the spun pods
/// failed, each on its own deadline after the batch's.
async fn all_accounted_for(spinner: &PluginHandle, others: &[&PluginHandle], changes: u64) {
    for h in others.iter().copied().chain([spinner]) {
        until(&format!("{} handled everything", h.name()), || {
            handled_all(h) && queue(h).queued == changes
        })
        .await;
    }
    assert_eq!(
        (
            counter(spinner, |c| &c.delivered),
            counter(spinner, |c| &c.failed),
            counter(spinner, |c| &c.dropped),
            counter(spinner, |c| &c.deadline_hits),
        ),
        (changes - SPUN, SPUN, 0, 1 + SPUN)
    );
    assert_eq!(spinner.state(), wisp_host::plugin::PluginState::Running);
    for h in others {
        assert_eq!(seen(h), changes, "{}", h.name());
        assert_eq!(
            (guest(h, "gaps_total"), guest(h, "dups_total")),
            (0, 0),
            "{}",
            h.name()
        );
        assert_eq!(counter(h, |c| &c.delivered), changes, "{}", h.name());
    }
}
