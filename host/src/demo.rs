//! `wisp demo`: the informer pipeline on an embedded in-memory cluster, no cluster needed.
//! It lists a handful of pods, applies a scripted series of changes, and prints what a
//! listener sees, then the cache's view.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::informer::shared_informer::{InformerConfig, wait_for};
use crate::informer::{DeletedObject, EventHandler, Object, SharedInformer, indexer};
use crate::source::memory::MemorySource;
use crate::sync::lock;

fn pod(ns: &str, name: &str, app: &str, image: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "namespace": ns, "labels": { "app": app } },
        "spec": { "nodeName": node, "containers": [{ "name": app, "image": image }] }
    })
}

/// Prints each notification as one line.
struct Printer {
    out: Arc<Mutex<Vec<String>>>,
}

impl Printer {
    fn line(&self, s: String) {
        println!("{s}");
        lock(&self.out).push(s);
    }
}

fn describe(o: &Object) -> String {
    let m = o.meta();
    let ns = m.namespace().unwrap_or("-");
    format!(
        "{}/{} {}/{} rv={}",
        m.api_version(),
        m.kind(),
        ns,
        m.name(),
        m.resource_version()
    )
}

impl EventHandler for Printer {
    fn on_add(&mut self, obj: &Arc<Object>, initial_list: bool) {
        let tag = if initial_list { " (initial list)" } else { "" };
        self.line(format!("ADD    {}{tag}", describe(obj)));
    }
    fn on_update(&mut self, old: &Arc<Object>, new: &Arc<Object>) {
        self.line(format!(
            "UPDATE {} (was rv={})",
            describe(new),
            old.resource_version()
        ));
    }
    fn on_delete(&mut self, obj: &DeletedObject) {
        let tag = if obj.is_tombstone() {
            " (missed deletion, tombstone)"
        } else {
            ""
        };
        self.line(format!("DELETE {}{tag}", describe(obj.object())));
    }
}

/// Runs the demo; returns the lines the listener printed.
pub async fn run() -> anyhow::Result<Vec<String>> {
    let src = MemorySource::new();
    for p in [
        pod("shop", "web-1", "web", "nginx:1.27", "node-a"),
        pod("shop", "web-2", "web", "nginx:1.27", "node-b"),
        pod("shop", "db-0", "db", "postgres:latest", "node-a"),
        pod("ops", "agent-1", "agent", "busybox:1.36", "node-a"),
    ] {
        src.apply(p)?;
    }
    let informer = SharedInformer::new("pods", Arc::new(src.clone()), InformerConfig::default());
    informer.add_indexers([(
        "node".to_owned(),
        indexer::index_by_json_pointer("/spec/nodeName"),
    )])?;
    let lines = Arc::new(Mutex::new(Vec::new()));
    let reg = informer.add_event_handler(
        "printer",
        Box::new(Printer { out: lines.clone() }),
        Duration::ZERO,
    )?;

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(informer.clone().run(async {
        let _ = stop_rx.await;
    }));
    if !wait_for(Duration::from_secs(10), || reg.has_synced()).await {
        anyhow::bail!("the informer did not sync within 10 s");
    }
    println!(
        "-- synced: {} objects cached; applying changes",
        informer.cache().len()
    );

    src.apply(pod("shop", "web-1", "web", "nginx:1.28", "node-a"))?;
    src.apply(pod("shop", "web-3", "web", "nginx:1.28", "node-b"))?;
    src.delete("shop/db-0");
    let expected = 4 + 3;
    if !wait_for(Duration::from_secs(10), || {
        reg.stats().delivered >= expected
    })
    .await
    {
        anyhow::bail!("the listener did not receive the changes within 10 s");
    }

    let cache = informer.cache();
    let mut nodes = cache.list_index_values("node")?;
    nodes.sort();
    for n in nodes {
        let mut names: Vec<String> = cache
            .by_index("node", &n)?
            .iter()
            .map(|o| o.meta().name().to_owned())
            .collect();
        names.sort();
        println!("-- node {n}: {}", names.join(", "));
    }
    let stats = reg.stats();
    println!(
        "-- listener received {} notifications (sequence 1..={}), none lost",
        stats.delivered, stats.queued
    );
    let _ = stop_tx.send(());
    run.await??;
    let out = lock(&lines).clone();
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn demo_prints_the_initial_list_then_each_change() {
        let lines = super::run().await.unwrap();
        assert_eq!(lines.len(), 7, "{lines:#?}");
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.contains("(initial list)"))
                .count(),
            4
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("UPDATE v1/Pod shop/web-1"))
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("ADD    v1/Pod shop/web-3") && !l.contains("initial"))
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("DELETE v1/Pod shop/db-0"))
        );
    }
}
