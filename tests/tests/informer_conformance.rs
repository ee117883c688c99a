//! Shared informer behaviour checked against client-go's (`tools/cache`), through Wisp's public
//! API: test names follow client-go's cases where one exists.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use wisp_host::informer::indexer::{IndexFunc, index_by_label};
use wisp_host::informer::shared_informer::{InformerConfig, InformerError, wait_for};
use wisp_host::informer::{Object, SharedInformer};
use wisp_host::source::memory::MemorySource;

const T: Duration = Duration::from_secs(10);

fn pod(name: &str, labels: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "ns", "labels": labels}})
}

fn names(mut v: Vec<Arc<Object>>) -> Vec<String> {
    v.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
    v.into_iter().map(|o| o.meta().name.clone()).collect()
}

type Run = tokio::task::JoinHandle<Result<(), InformerError>>;

/// Starts the informer; the sender stops it.
fn start(inf: &Arc<SharedInformer>) -> (tokio::sync::oneshot::Sender<()>, Run) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(inf.clone().run(async {
        let _ = rx.await;
    }));
    (tx, run)
}

/// client-go `TestIndexer`: indexes may be added to a running informer and are usable at once
/// over the objects already cached; a stopped informer refuses them.
#[tokio::test]
async fn indexer_added_after_start_indexes_existing_items() {
    let src = MemorySource::new();
    src.apply(pod("pod1", json!({"a": "a-val", "b": "b-val1"})))
        .unwrap();
    src.apply(pod("pod2", json!({"b": "b-val2"}))).unwrap();
    let inf = SharedInformer::new("pods", Arc::new(src.clone()), InformerConfig::default());
    let label_keys: IndexFunc =
        Arc::new(|o: &Object| o.meta().labels.iter().map(|(k, _)| k.clone()).collect());
    inf.add_indexers([("labels".to_owned(), label_keys.clone())])
        .unwrap();
    let (stop, run) = start(&inf);
    assert!(wait_for(T, || inf.has_synced()).await);
    assert_eq!(
        names(inf.cache().by_index("labels", "a").unwrap()),
        ["pod1"]
    );

    src.apply(pod("pod3", json!({"a": "a-val2"}))).unwrap();
    assert!(
        wait_for(T, || inf.cache().by_index("labels", "a").unwrap().len()
            == 2)
        .await,
        "adding an item later is fine as well"
    );

    inf.add_indexers([
        ("labels-again".to_owned(), label_keys),
        ("by-a".to_owned(), index_by_label("a")),
    ])
    .expect("adding an index to a running informer is fine");
    assert_eq!(
        names(inf.cache().by_index("labels-again", "a").unwrap()),
        ["pod1", "pod3"],
        "immediately available"
    );
    assert_eq!(
        names(inf.cache().by_index("by-a", "a-val2").unwrap()),
        ["pod3"]
    );
    let mut values = inf.cache().list_index_values("labels-again").unwrap();
    values.sort();
    assert_eq!(values, ["a", "b"]);
    src.apply(pod("pod4", json!({"a": "x"}))).unwrap();
    assert!(wait_for(T, || inf.cache().by_index("by-a", "x").unwrap().len() == 1).await);

    let _ = stop.send(());
    run.await.unwrap().unwrap();
    assert!(matches!(
        inf.add_indexers([("late".to_owned(), index_by_label("z"))]),
        Err(InformerError::Stopped(_))
    ));
}
