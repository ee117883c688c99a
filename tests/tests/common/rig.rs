//! A running informer over the test API server plus a plugin manager (shared by plugin tests).

use std::sync::{Arc, OnceLock};

use serde_json::Value;
use wisp_host::informer::SharedInformer;
use wisp_host::informer::indexer::{index_by_json_pointer, index_by_owner_uid};
use wisp_host::plugin::status::PluginCounters;
use wisp_host::plugin::{EngineConfig, PluginEngine, PluginHandle, PluginManager, PluginSpec};
use wisp_tests::TestApiServer;

use super::*;

/// One engine per test binary: each module compiles once.
pub fn engine() -> Arc<PluginEngine> {
    static ENGINE: OnceLock<(Arc<PluginEngine>, tempfile::TempDir)> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let e = PluginEngine::new(EngineConfig {
                cache_dir: Some(dir.path().into()),
                ..EngineConfig::default()
            })
            .unwrap();
            (e, dir)
        })
        .0
        .clone()
}

pub struct Rig {
    pub server: TestApiServer,
    pub inf: Arc<SharedInformer>,
    pub manager: PluginManager,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// A running pod informer (indexes `node` and `owner`) over a server holding `pods`.
pub async fn rig(pods: Vec<Value>) -> Rig {
    let server = TestApiServer::start().await.unwrap();
    for p in pods {
        server.create(p).unwrap();
    }
    let inf = pod_informer(&server, fast_config());
    inf.add_indexers([
        ("node".to_owned(), index_by_json_pointer("/spec/nodeName")),
        ("owner".to_owned(), index_by_owner_uid()),
    ])
    .unwrap();
    let stop = start(&inf);
    until("informer synced", || inf.has_synced()).await;
    let mut manager = PluginManager::new(engine());
    manager.add_informer(inf.clone());
    Rig {
        server,
        inf,
        manager,
        _stop: stop,
    }
}

pub fn spec(name: &str, module: &str, settings: Value) -> PluginSpec {
    let mut s = PluginSpec::new(name, plugin_path(module), &["pods"]);
    s.settings = settings;
    s
}

pub fn counter(
    h: &PluginHandle,
    f: impl Fn(&PluginCounters) -> &std::sync::atomic::AtomicU64,
) -> u64 {
    PluginCounters::get(f(&h.status().counters))
}

pub fn logs(h: &PluginHandle) -> Vec<String> {
    h.status().logs.lines()
}
