//! The informer's queue is chosen per informer (`queue: realFIFO | realFIFONonAtomic |
//! deltaFIFO`); each keeps the cache equal to the source and each object's history in order, and
//! the RealFIFO (either mode) also keeps the order of events across objects.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::common::patience;

use serde_json::json;
use wisp_host::config::Config;
use wisp_host::informer::handler::Recorder;
use wisp_host::informer::shared_informer::{InformerConfig, wait_for};
use wisp_host::informer::{Notification, QueueKind, SharedInformer};
use wisp_host::source::memory::MemorySource;

const T: Duration = Duration::from_secs(30);

fn config_with(queue_line: &str) -> Result<Config, String> {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("cluster")).unwrap();
    let text = format!(
        "source: dir:cluster\ninformers:\n  - name: pods\n    apiVersion: v1\n    kind: Pod\n{queue_line}\n"
    );
    Config::parse(&text, "wisp.yaml", d.path()).map_err(|e| e.to_string())
}

#[test]
fn wisp_yaml_chooses_the_queue_per_informer() {
    let q = |line: &str| config_with(line).map(|c| c.informers[0].queue);
    assert_eq!(q("").unwrap(), QueueKind::RealFifo, "default");
    assert_eq!(q("    queue: realFIFO").unwrap(), QueueKind::RealFifo);
    assert_eq!(q("    queue: deltaFIFO").unwrap(), QueueKind::DeltaFifo);
    assert_eq!(
        q("    queue: realFIFONonAtomic").unwrap(),
        QueueKind::RealFifoNonAtomic
    );
    let err = q("    queue: lifo").unwrap_err();
    assert!(err.contains("queue"), "{err}");
}

fn pod(name: &str, round: u32) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "labels": {"round": round.to_string()}}})
}

fn rv(n: &Notification) -> (String, u64) {
    let o = match n {
        Notification::Add { obj, .. } => obj,
        Notification::Update { new, .. } => new,
        Notification::Delete { obj } => obj.object(),
    };
    let key = format!("{}/{}", o.meta().namespace().unwrap_or(""), o.meta().name());
    (key, o.resource_version().parse().unwrap())
}

async fn churn_over(queue: QueueKind) {
    let src = MemorySource::new();
    for i in 0..20 {
        src.apply(pod(&format!("p{i}"), 0)).unwrap();
    }
    let config = InformerConfig {
        queue,
        ..InformerConfig::default()
    };
    let inf = SharedInformer::new("pods", Arc::new(src.clone()), config);
    let rec = Recorder::new();
    let reg = inf
        .add_event_handler("rec", Box::new(rec.clone()), Duration::ZERO)
        .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(inf.clone().run(async {
        let _ = rx.await;
    }));
    assert!(
        wait_for(patience(T), || reg.has_synced()).await,
        "{queue:?}: synced"
    );
    let initial = rec.len();
    assert_eq!(initial, 20, "{queue:?}");

    let mut changes = 0;
    for round in 1..=5 {
        for i in 0..20 {
            if (i + round) % 7 == 0 {
                if src.delete(&format!("ns/p{i}")).is_some() {
                    changes += 1;
                }
            } else {
                src.apply(pod(&format!("p{i}"), round)).unwrap();
                changes += 1;
            }
        }
    }
    let want: BTreeMap<String, String> = src
        .objects()
        .into_iter()
        .map(|(k, o)| (k, o.resource_version().to_owned()))
        .collect();
    let cache = inf.cache();
    assert!(
        wait_for(patience(T), || rec.len() == initial + changes).await,
        "{queue:?}: every change delivered ({} of {})",
        rec.len() - initial,
        changes
    );
    let got: BTreeMap<String, String> = cache
        .snapshot()
        .into_iter()
        .map(|(k, o)| (k, o.resource_version().to_owned()))
        .collect();
    assert_eq!(got, want, "{queue:?}: cache equals the source");

    let after: Vec<(String, u64)> = rec.deliveries()[initial..]
        .iter()
        .map(|d| rv(&d.notification))
        .collect();
    let mut last: BTreeMap<&str, u64> = BTreeMap::new();
    for (k, v) in &after {
        let prev = last.insert(k, *v).unwrap_or(0);
        assert!(*v > prev, "{queue:?}: {k} went from {prev} to {v}");
    }
    if queue != QueueKind::DeltaFifo {
        let rvs: Vec<u64> = after.iter().map(|(_, v)| *v).collect();
        assert!(
            rvs.windows(2).all(|w| w[0] < w[1]),
            "RealFIFO: events in arrival order across objects: {rvs:?}"
        );
    }
    let _ = tx.send(());
    run.await.unwrap().unwrap();
}

#[tokio::test]
async fn every_queue_keeps_the_cache_and_each_objects_history_over_churn() {
    churn_over(QueueKind::RealFifo).await;
    churn_over(QueueKind::RealFifoNonAtomic).await;
    churn_over(QueueKind::DeltaFifo).await;
}
