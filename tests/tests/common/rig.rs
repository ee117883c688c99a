//! A running informer over the test API server plus a plugin manager (shared by plugin tests).

use std::path::{Path, PathBuf};
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

/// A running pod informer (indexes `node` and `owner`) over a server holding `pods`; its plugins
/// run on the process's default executor.
pub async fn rig(pods: Vec<Value>) -> Rig {
    rig_with(pods, fast_config()).await
}

/// [`rig`] with informer settings of its own (e.g. an executor).
pub async fn rig_with(
    pods: Vec<Value>,
    config: wisp_host::informer::shared_informer::InformerConfig,
) -> Rig {
    let server = TestApiServer::start().await.unwrap();
    for p in pods {
        server.create(p).unwrap();
    }
    let inf = pod_informer(&server, config);
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

/// The test-faults plugin on pods, with a deadline generous enough for a loaded machine: a cut
/// call loses the instance's state (its sequence bookkeeping), which tests that are not about
/// deadlines must not see. Tests about deadlines set their own.
pub fn faults_spec(name: &str, settings: Value) -> PluginSpec {
    let mut s = spec(name, "test_faults", settings);
    s.limits.deadline = std::time::Duration::from_secs(10);
    s
}

pub fn counter(
    h: &PluginHandle,
    f: impl Fn(&PluginCounters) -> &std::sync::atomic::AtomicU64,
) -> u64 {
    PluginCounters::get(f(&h.status().counters))
}

/// Whether the plugin has handled every notification its queues took: none waiting, none in its
/// hands (a batch counts as delivered once the plugin's call, retries included, has ended), none
/// left out but those its queues' overflow dropped or merged. Until more notifications come, it
/// does nothing more.
pub fn handled_all(h: &PluginHandle) -> bool {
    h.queues()
        .iter()
        .all(|(_, q)| q.depth == 0 && q.delivered + q.dropped + q.coalesced == q.queued)
}

pub fn logs(h: &PluginHandle) -> Vec<String> {
    h.status().logs.lines()
}

/// A copy of a module with a custom section appended: same behaviour, different hash (so its
/// first load is a compile, a cache miss).
pub fn variant(module: &Path, tag: &str, dir: &Path) -> PathBuf {
    let mut bytes = std::fs::read(module).unwrap();
    let name = b"wisp-test";
    let payload = tag.as_bytes();
    let body_len = 1 + name.len() + payload.len();
    bytes.push(0); // custom section id
    put_leb(&mut bytes, body_len as u32);
    bytes.push(name.len() as u8);
    bytes.extend_from_slice(name);
    bytes.extend_from_slice(payload);
    let out = dir.join(format!("faults-{tag}.wasm"));
    std::fs::write(&out, bytes).unwrap();
    out
}

/// A compile bomb: a valid component whose one core module has `functions` never-called
/// functions of `locals` i64 locals, each incremented inside `depth` nested loops that each
/// branch back to their start. Every loop header then needs a value of every local in
/// Cranelift's SSA form: `locals x depth` block parameters per function, compiled in time and
/// memory that grow with their product, from a few tens of KB of wasm (the issue's: one
/// function, 3,000 x 5,000, 122 s and 1,088 MiB). Many small functions take time in little
/// memory (each is compiled and dropped); one large one takes memory fast.
pub fn compile_bomb(functions: u32, locals: u32, depth: u32) -> Vec<u8> {
    let section = |out: &mut Vec<u8>, id: u8, payload: &[u8]| {
        out.push(id);
        put_leb(out, payload.len() as u32);
        out.extend_from_slice(payload);
    };
    let mut body = Vec::new();
    body.push(1); // one group of locals...
    put_leb(&mut body, locals);
    body.push(0x7e); // ...of type i64
    for _ in 0..depth {
        body.extend_from_slice(&[0x03, 0x40]); // loop (no result)
    }
    for i in 0..locals {
        body.push(0x20); // local.get i
        put_leb(&mut body, i);
        body.extend_from_slice(&[0x42, 0x01, 0x7c]); // i64.const 1; i64.add
        body.push(0x21); // local.set i
        put_leb(&mut body, i);
    }
    for _ in 0..depth {
        // local.get 0; i32.wrap_i64; br_if 0 (back to this loop's start); end
        body.extend_from_slice(&[0x20, 0x00, 0xa7, 0x0d, 0x00, 0x0b]);
    }
    body.push(0x0b); // end of the function
    let (mut funcs, mut code) = (Vec::new(), Vec::new());
    put_leb(&mut funcs, functions);
    put_leb(&mut code, functions);
    funcs.extend(std::iter::repeat_n(0, functions as usize)); // each of type 0
    for _ in 0..functions {
        put_leb(&mut code, body.len() as u32);
        code.extend_from_slice(&body);
    }
    let mut module = b"\0asm\x01\0\0\0".to_vec();
    section(&mut module, 1, &[1, 0x60, 0, 0]); // one type: [] -> []
    section(&mut module, 3, &funcs);
    section(&mut module, 10, &code);
    let mut component = b"\0asm\x0d\0\x01\0".to_vec();
    section(&mut component, 1, &module); // a core module, never instantiated
    component
}

/// Appends `v` as unsigned LEB128 (how wasm binaries write sizes and indexes).
pub fn put_leb(out: &mut Vec<u8>, mut v: u32) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// A gauge the plugin reported, without labels.
pub fn gauge(h: &PluginHandle, name: &str) -> Option<f64> {
    h.status().guest_gauge(name, &[])
}

pub use wisp_tests::view::server_checksum;

/// Whether test-faults' view (`view_size`, `view_checksum`) equals the server's pods.
pub fn view_equals_server(h: &PluginHandle, server: &TestApiServer) -> bool {
    let (size, sum) = server_checksum(server);
    gauge(h, "view_size") == Some(size as f64) && gauge(h, "view_checksum") == Some(sum)
}
