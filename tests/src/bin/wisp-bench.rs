//! `wisp-bench`: Wisp's benchmark harness. Every figure is printed next to a baseline measured
//! in the same run, with the ratio. Run it with `cargo xtask bench` (release build, plugins
//! built first); `--quick` runs fewer iterations (to keep it building and running in CI).
//!
//! Figures (BENCHMARKS.md has the table and what limits each):
//! - plugin load: compile, disk-cache hit, memory hit, fresh instance;
//! - per-notification delivery cost, wasm plugin vs native Rust handler doing the same work
//!   (nothing, counting labels from metadata, full JSON parse), one at a time and in batches;
//! - idle instance memory, a stuck call's cut time against its deadline;
//! - heap per cached object vs kube-runtime's Store;
//! - hot reload latency (call and file change, cache hit and miss);
//! - the informer core vs kube-runtime's watcher + reflector over the test API server;
//! - pipeline throughput into 1, 8, 64 listeners, wasm vs native (`bench/pipeline.rs`);
//! - delivery latency p50 / p99 under steady load, alone and next to a stuck plugin.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

#[path = "bench/pipeline.rs"]
mod pipeline;
#[path = "bench/scale.rs"]
mod scale;
use serde_json::json;
use wisp_host::informer::{Delivery, EventHandler, Notification, Object};

use wisp_host::plugin::state::HostApi;
use wisp_host::plugin::status::PluginStatus;
use wisp_host::plugin::{EngineConfig, LoadSource, PluginEngine, PluginSpec, check_module};

struct Args {
    quick: bool,
    plugin_dir: PathBuf,
    /// Sections to run (all when empty).
    only: Vec<String>,
}

/// The sections, in the order they run.
const SECTIONS: [&str; 9] = [
    "load",
    "delivery",
    "isolation",
    "memory",
    "reload",
    "core",
    "pipeline",
    "latency",
    "scale",
];

impl Args {
    fn runs(&self, section: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == section)
    }
}

fn args() -> anyhow::Result<Args> {
    let mut quick = false;
    let mut only = Vec::new();
    let mut plugin_dir = std::env::var_os("WISP_PLUGIN_DIR").map(PathBuf::from);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--plugins" => plugin_dir = it.next().map(PathBuf::from),
            "--only" => {
                for s in it.next().unwrap_or_default().split(',') {
                    if !SECTIONS.contains(&s) {
                        bail!(
                            "--only: unknown section {s:?} (sections: {})",
                            SECTIONS.join(", ")
                        );
                    }
                    only.push(s.to_owned());
                }
            }
            "-h" | "--help" => {
                println!(
                    "usage: wisp-bench [--quick] [--plugins DIR] [--only SECTION,...]\n\nDIR holds the compiled plugins (default: $WISP_PLUGIN_DIR or plugins/dist).\nSECTION: {} (default: all).",
                    SECTIONS.join(", ")
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    let plugin_dir = plugin_dir
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist"));
    Ok(Args {
        quick,
        plugin_dir,
        only,
    })
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn us(d: Duration) -> String {
    format!("{:.1} us", d.as_secs_f64() * 1e6)
}

fn ns(d: Duration) -> String {
    format!("{} ns", d.as_nanos())
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// Realistic pods (the test fixture: labels, annotations, owner reference, two containers).
fn deliveries(n: usize) -> Vec<Delivery> {
    (0..n)
        .map(|i| {
            let mut v = wisp_tests::pod(&format!("ns-{}", i % 10), &format!("web-{i}"));
            v["metadata"]["resourceVersion"] = json!(format!("{}", i + 1));
            v["metadata"]["uid"] = json!(format!("uid-{i}"));
            let obj = Arc::new(Object::from_value(v, true).expect("fixture is an object"));
            Delivery {
                seq: i as u64 + 1,
                notification: Notification::Add {
                    obj,
                    initial_list: false,
                },
            }
        })
        .collect()
}

/// The bench plugin's `meta` work: namespace, name and one label lookup from the metadata.
fn meta_work(o: &Object) -> u64 {
    let m = o.meta();
    let ns = m.namespace.as_deref().map_or(0, str::len) as u64;
    ns + m.name.len() as u64 + m.label("app").map_or(0, |v| v.len() as u64)
}

/// The bench plugin's `partial` work: only the containers' images (borrowed).
#[derive(serde::Deserialize, Default)]
struct Images<'a> {
    #[serde(borrow, default)]
    spec: ImagesSpec<'a>,
}

#[derive(serde::Deserialize, Default)]
struct ImagesSpec<'a> {
    #[serde(borrow, default)]
    containers: Vec<ImagesContainer<'a>>,
}

#[derive(serde::Deserialize, Default)]
struct ImagesContainer<'a> {
    #[serde(default)]
    image: &'a str,
}

/// The native baseline: the same work as the bench plugin.
struct Native {
    work: &'static str,
    total: u64,
}

impl EventHandler for Native {
    fn handle(&mut self, batch: &[Delivery]) {
        for d in batch {
            let o = d.notification.object();
            match self.work {
                "labels" => self.total += o.meta().labels.len() as u64,
                "meta" => self.total += meta_work(o),
                "pod" => {
                    let p: k8s_openapi::api::core::v1::Pod =
                        serde_json::from_str(o.json()).unwrap_or_default();
                    self.total += p.spec.map_or(0, |s| s.containers.len() as u64);
                }
                "partial" => {
                    let p: Images = serde_json::from_str(o.json()).unwrap_or_default();
                    self.total += p
                        .spec
                        .containers
                        .iter()
                        .filter(|c| c.image.ends_with(":latest"))
                        .count() as u64
                        + p.spec.containers.len() as u64;
                }
                "parse" => {
                    let v: serde_json::Value = serde_json::from_str(o.json()).unwrap_or_default();
                    self.total += v
                        .pointer("/spec/containers")
                        .and_then(|c| c.as_array())
                        .map_or(0, |c| c.len() as u64);
                }
                _ => {}
            }
        }
        std::hint::black_box(self.total);
    }
}

fn per_item(total: Duration, n: usize) -> Duration {
    total / u32::try_from(n).unwrap_or(u32::MAX)
}

/// A plugin linked against the host, ready for fresh instances (as the runtime makes them).
struct Prepared {
    pre: wisp_host::plugin::bindings::PluginPre<wisp_host::plugin::state::StoreData>,
    spec: PluginSpec,
    status: Arc<PluginStatus>,
}

impl Prepared {
    fn new(
        engine: &PluginEngine,
        path: &std::path::Path,
        bytes: &[u8],
        name: &str,
    ) -> anyhow::Result<Self> {
        let component = engine
            .load(bytes)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?
            .component;
        let pre = engine
            .instance_pre(&component)
            .map_err(anyhow::Error::msg)?;
        Ok(Self {
            pre,
            spec: PluginSpec::new(name, path, &[]),
            status: Arc::default(),
        })
    }

    /// The host API state of one instance (no informers granted).
    fn api(&self) -> HostApi {
        HostApi {
            plugin: self.spec.name.as_str().into(),
            grants: Default::default(),
            log_level: self.spec.log_level,
            status: self.status.clone(),
            actions: Arc::new(wisp_host::actions::PluginActions::new(
                self.spec.name.as_str().into(),
                Default::default(),
                self.status.clone(),
                Default::default(),
            )),
            verdict_events: false,
        }
    }

    fn instance(
        &self,
        engine: &PluginEngine,
        api: HostApi,
    ) -> anyhow::Result<wisp_host::plugin::instance::Instance> {
        wisp_host::plugin::instance::Instance::new(engine, &self.pre, api, &self.spec.limits)
            .map_err(|e| anyhow::anyhow!("{e}"))
    }
}

fn load_figures(a: &Args) -> anyhow::Result<()> {
    println!("\n## Plugin load (median; module -> running instance)\n");
    println!(
        "| plugin | size | compile | disk cache hit | memory hit | fresh instance | describe+init |"
    );
    println!("|---|---|---|---|---|---|---|");
    let rounds = if a.quick { 3 } else { 15 };
    for name in ["audit_log", "image_policy", "bench"] {
        let path = a.plugin_dir.join(format!("{name}.wasm"));
        let bytes = std::fs::read(&path)
            .with_context(|| format!("{} (run `cargo xtask plugins`)", path.display()))?;
        let (mut compile, mut disk, mut mem) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let dir = tempfile::tempdir()?;
            let cfg = || EngineConfig {
                cache_dir: Some(dir.path().into()),
                ..EngineConfig::default()
            };
            let e1 = PluginEngine::new(cfg())?;
            let l = e1.load(&bytes).map_err(|e| anyhow::anyhow!("{e:?}"))?;
            assert_eq!(l.source, LoadSource::Compiled);
            compile.push(l.elapsed);
            let l = e1.load(&bytes).map_err(|e| anyhow::anyhow!("{e:?}"))?;
            mem.push(l.elapsed);
            let e2 = PluginEngine::new(cfg())?;
            let l = e2.load(&bytes).map_err(|e| anyhow::anyhow!("{e:?}"))?;
            assert_eq!(l.source, LoadSource::Disk);
            disk.push(l.elapsed);
        }
        let engine = PluginEngine::new(EngineConfig {
            cache_dir: None,
            ..EngineConfig::default()
        })?;
        let prepared = Prepared::new(&engine, &path, &bytes, name)?;
        let mut inst_times = Vec::new();
        let mut init_times = Vec::new();
        for _ in 0..rounds * 20 {
            let api = prepared.api();
            let t = Instant::now();
            let mut inst = prepared.instance(&engine, api)?;
            inst_times.push(t.elapsed());
            let t = Instant::now();
            inst.describe().map_err(|e| anyhow::anyhow!("{e}"))?;
            let _ = inst.init("{}").map_err(|e| anyhow::anyhow!("{e}"))?;
            init_times.push(t.elapsed());
        }
        println!(
            "| {name} | {} KB | {} | {} | {} | {} | {} |",
            bytes.len() / 1024,
            ms(median(compile)),
            ms(median(disk)),
            us(median(mem)),
            us(median(inst_times)),
            us(median(init_times))
        );
    }
    Ok(())
}

/// Time per notification of the bench plugin doing `work` over `items` in batches of `batch`.
fn wasm_time(
    engine: &Arc<PluginEngine>,
    path: &std::path::Path,
    work: &str,
    batch: usize,
    items: &[Delivery],
) -> anyhow::Result<Duration> {
    let checked =
        check_module(engine, path, json!({ "work": work })).map_err(|e| anyhow::anyhow!("{e}"))?;
    let status = checked.status().clone();
    let mut rt = checked.into_runtime(engine.clone());
    // Warm up (first calls fault in memory).
    rt.handle("pods", &items[..batch.min(items.len())]);
    let t = Instant::now();
    for chunk in items.chunks(batch) {
        rt.handle("pods", chunk);
    }
    let took = per_item(t.elapsed(), items.len());
    let failed = wisp_host::plugin::status::PluginCounters::get(&status.counters.failed);
    if failed > 0 {
        bail!(
            "the bench plugin failed {failed} notifications: {:?}",
            status.last_error()
        );
    }
    Ok(took)
}

fn delivery_figures(a: &Args) -> anyhow::Result<()> {
    let n = if a.quick { 2_000 } else { 20_000 };
    let items = deliveries(n);
    let engine = PluginEngine::new(EngineConfig {
        cache_dir: None,
        ..EngineConfig::default()
    })?;
    let path = a.plugin_dir.join("bench.wasm");
    println!(
        "\n## Delivery cost per notification ({n} pods of ~1.5 KB; wasm vs native handler, same work)\n"
    );
    println!("| work | batch | native | wasm | wasm/native time | wasm throughput vs native |");
    println!("|---|---|---|---|---|---|");
    // Where the wasm cost goes: the host-side staging copy of each batch (ABI 0.2 encoding).
    let mut encoder = wisp_host::abi::BatchEncoder::new();
    let t = Instant::now();
    let mut keep = 0usize;
    for chunk in items.chunks(64) {
        keep += encoder.encode("pods", chunk).len();
    }
    std::hint::black_box(keep);
    println!(
        "| (the host encoding batches of 64, part of every wasm figure below) | 64 | - | {} | - | - |",
        ns(per_item(t.elapsed(), n))
    );
    let no_epochs = PluginEngine::new(EngineConfig {
        cache_dir: None,
        epoch_interruption: false,
        ..EngineConfig::default()
    })?;
    let meta_path = a.plugin_dir.join("bench_meta.wasm");
    let epochs_off = " (epochs off: no deadline, cost of the checks)";
    let meta_only = " (metadata-only plugin: objects without JSON)";
    let mut runs: Vec<(&str, usize, &Arc<PluginEngine>, &std::path::Path, &str)> = Vec::new();
    for w in ["noop", "labels", "meta", "parse", "pod", "partial"] {
        runs.extend([(w, 1, &engine, &*path, ""), (w, 64, &engine, &*path, "")]);
    }
    for w in ["noop", "labels", "meta"] {
        runs.extend([
            (w, 1, &engine, &*meta_path, meta_only),
            (w, 64, &engine, &*meta_path, meta_only),
        ]);
    }
    for w in ["parse", "pod", "partial"] {
        runs.push((w, 64, &no_epochs, &*path, epochs_off));
    }
    for (work, batch, engine, path, note) in runs {
        let mut native = Native { work, total: 0 };
        let t = Instant::now();
        for chunk in items.chunks(batch) {
            native.handle(chunk);
        }
        let native_t = per_item(t.elapsed(), n);
        let wasm_t = wasm_time(engine, path, work, batch, &items)?;
        println!(
            "| {work}{note} | {batch} | {} | {} | {:.2}x | {:.2}x |",
            ns(native_t),
            ns(wasm_t),
            wasm_t.as_secs_f64() / native_t.as_secs_f64().max(1e-12),
            native_t.as_secs_f64() / wasm_t.as_secs_f64().max(1e-12),
        );
    }
    Ok(())
}

/// A copy of a module with a custom section appended: same code, new hash.
fn variant(bytes: &[u8], tag: u32) -> Vec<u8> {
    let mut b = bytes.to_vec();
    let payload = tag.to_le_bytes();
    b.extend_from_slice(&[0, 1 + 1 + payload.len() as u8, 1, b'w']);
    b.extend_from_slice(&payload);
    b
}

fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// File change -> new version live, through the real watcher (debounce included), and the
/// reload itself (check + swap) called directly; cache hit (a module seen before) and miss.
async fn reload_figures(a: &Args) -> anyhow::Result<()> {
    let rounds = if a.quick { 10 } else { 100 };
    let dir = tempfile::tempdir()?;
    std::fs::create_dir(dir.path().join("cluster"))?;
    std::fs::write(
        dir.path().join("cluster/p.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: x}\n",
    )?;
    let base = std::fs::read(a.plugin_dir.join("audit_log.wasm"))?;
    let module = dir.path().join("audit.wasm");
    std::fs::write(&module, &base)?;
    let cfg_path = dir.path().join("wisp.yaml");
    std::fs::write(
        &cfg_path,
        format!(
            "source: dir:cluster\ninformers:\n  - {{name: pods, apiVersion: v1, kind: Pod}}\nplugins:\n  - name: audit\n    module: audit.wasm\n    informers: [pods]\nadmin: {{listen: \"\"}}\nengine: {{cacheDir: {}}}\n",
            dir.path().join("cache").display()
        ),
    )?;
    let cfg = wisp_host::config::Config::load(&cfg_path)?;
    let opts = wisp_host::app::RunOptions {
        config_path: Some(cfg_path.clone()),
        ..Default::default()
    };
    let host = wisp_host::app::start(&cfg, &opts, std::future::pending()).await?;
    let plugin = host.plugins.read().map_err(|_| anyhow::anyhow!("lock"))?[0].clone();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let gen_now = || plugin.status().version().1;
    println!("\n## Hot reload ({rounds} reloads each; median / p99)\n");
    println!("| path | cache | median | p99 |");
    println!("|---|---|---|---|");
    let mut tag = 0u32;
    for (label, hit) in [("miss (compile)", false), ("hit (compiled before)", true)] {
        let mut file_times = Vec::new();
        let mut api_times = Vec::new();
        let pair = [variant(&base, 900_001), variant(&base, 900_002)];
        for i in 0..rounds {
            // A hit alternates between two compiled variants: the file always gets the first,
            // the API call the second, so each change differs from what runs.
            let bytes = if hit {
                pair[0].clone()
            } else {
                tag += 1;
                variant(&base, tag)
            };
            if hit && i == 0 {
                // Compile both variants first.
                for v in &pair {
                    let mut spec = cfg.plugin_specs().remove(0);
                    let warm = dir.path().join("warm.wasm");
                    std::fs::write(&warm, v)?;
                    spec.module = warm;
                    let p = plugin.clone();
                    tokio::task::spawn_blocking(move || p.reload(spec))
                        .await?
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                }
            }
            let g = gen_now();
            let t = Instant::now();
            std::fs::write(&module, &bytes)?;
            wait_gen(&plugin, g + 1).await?;
            file_times.push(t.elapsed());
            // The same kind of change through the API (no watcher, no debounce), from a file no
            // plugin watches.
            let api_bytes = if hit {
                pair[1].clone()
            } else {
                tag += 1;
                variant(&base, tag)
            };
            let api_module = dir.path().join("api.wasm");
            std::fs::write(&api_module, &api_bytes)?;
            let mut spec = cfg.plugin_specs().remove(0);
            spec.module = api_module;
            let t = Instant::now();
            let p = plugin.clone();
            tokio::task::spawn_blocking(move || p.reload(spec))
                .await?
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            api_times.push(t.elapsed());
        }
        println!(
            "| file change -> new version live (watcher, {} ms debounce) | {label} | {} | {} |",
            wisp_host::reloader::DEBOUNCE.as_millis(),
            ms(median(file_times.clone())),
            ms(percentile(file_times, 0.99))
        );
        println!(
            "| reload call -> new version live (check + swap) | {label} | {} | {} |",
            ms(median(api_times.clone())),
            ms(percentile(api_times, 0.99))
        );
    }
    Ok(())
}

async fn wait_gen(p: &wisp_host::plugin::PluginHandle, target: u64) -> anyhow::Result<()> {
    let start = Instant::now();
    while p.status().version().1 < target {
        if start.elapsed() > Duration::from_secs(10) {
            anyhow::bail!(
                "reload to generation {target} did not happen (last error: {:?})",
                p.status().last_error()
            );
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    Ok(())
}

/// Counts live heap bytes, to compare caches precisely (no allocator slack, no RSS noise), only
/// while the memory section runs: the timed sections allocate through the system allocator with
/// nothing added but one relaxed load.
struct Counting;

static LIVE: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
static COUNTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn count(bytes: i64) {
    if COUNTING.load(std::sync::atomic::Ordering::Relaxed) {
        LIVE.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
    }
}

// SAFETY: forwards to the system allocator unchanged; only counts sizes.
#[allow(unsafe_code)]
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        count(l.size() as i64);
        // SAFETY: same contract as the caller's.
        unsafe { std::alloc::System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        count(-(l.size() as i64));
        // SAFETY: same contract as the caller's.
        unsafe { std::alloc::System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: std::alloc::Layout, new: usize) -> *mut u8 {
        count(new as i64 - l.size() as i64);
        // SAFETY: same contract as the caller's.
        unsafe { std::alloc::System.realloc(p, l, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> i64 {
    LIVE.load(std::sync::atomic::Ordering::Relaxed)
}

/// Heap per cached object: Wisp's indexer (metadata + JSON, namespace index) vs kube-runtime's
/// reflector `Store<DynamicObject>`, filled with the same pods.
fn memory_figures(a: &Args) -> anyhow::Result<()> {
    let n = if a.quick { 10_000 } else { 100_000 };
    let values: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            let mut v = wisp_tests::pod(&format!("ns-{}", i % 50), &format!("web-{i}"));
            v["metadata"]["resourceVersion"] = json!(format!("{}", i + 1));
            v["metadata"]["uid"] = json!(format!("3f2a9c1e-0000-4000-8000-{i:012}"));
            v["metadata"]["managedFields"] = json!([{"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}}]);
            v
        })
        .collect();
    COUNTING.store(true, std::sync::atomic::Ordering::Relaxed);
    let r = memory_tables(n, &values);
    COUNTING.store(false, std::sync::atomic::Ordering::Relaxed);
    r
}

fn memory_tables(n: usize, values: &[serde_json::Value]) -> anyhow::Result<()> {
    println!("\n## Memory per cached object ({n} pods of ~2 KB + managedFields)\n");
    println!("| cache | heap per object | ratio |");
    println!("|---|---|---|");
    let base = live();
    let ix = wisp_host::informer::Indexer::new();
    for v in values {
        ix.add(Arc::new(
            Object::from_value(v.clone(), true).map_err(|e| anyhow::anyhow!("{e}"))?,
        ));
    }
    let ours = (live() - base) as f64 / n as f64;
    drop(ix);
    let base = live();
    let ar = kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
    let mut writer: kube::runtime::reflector::store::Writer<kube::api::DynamicObject> =
        kube::runtime::reflector::store::Writer::new(ar);
    for v in values {
        let o: kube::api::DynamicObject = serde_json::from_value(v.clone())?;
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(o));
    }
    let theirs = (live() - base) as f64 / n as f64;
    drop(writer);
    // The same store when the user strips managedFields too (kube-runtime's usual advice).
    let base = live();
    let ar = kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
    let mut writer: kube::runtime::reflector::store::Writer<kube::api::DynamicObject> =
        kube::runtime::reflector::store::Writer::new(ar);
    for v in values {
        let mut o: kube::api::DynamicObject = serde_json::from_value(v.clone())?;
        o.metadata.managed_fields = None;
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(o));
    }
    let stripped = (live() - base) as f64 / n as f64;
    drop(writer);
    // Metadata only: kube-runtime's metadata watcher stores PartialObjectMeta<Pod>.
    let base = live();
    let mut writer: kube::runtime::reflector::store::Writer<
        kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Pod>,
    > = kube::runtime::reflector::store::Writer::new(());
    for v in values {
        let mut o: kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Pod> =
            serde_json::from_value(json!({"apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadata", "metadata": v["metadata"]}))?;
        o.metadata.managed_fields = None;
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(o));
    }
    let their_meta = (live() - base) as f64 / n as f64;
    drop(writer);
    // Wisp's field mask and metadata-only informers keep what the transform leaves (a
    // metadata-only informer is sent exactly that by the API server).
    let masked = |paths: &[&str]| -> anyhow::Result<f64> {
        let mask = wisp_host::informer::mask::FieldMask::parse(
            &paths.iter().map(|p| (*p).to_owned()).collect::<Vec<_>>(),
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        let base = live();
        let ix = wisp_host::informer::Indexer::new();
        for v in values {
            ix.add(Arc::new(
                Object::from_value(mask.apply(v), true).map_err(|e| anyhow::anyhow!("{e}"))?,
            ));
        }
        let per = (live() - base) as f64 / n as f64;
        drop(ix);
        Ok(per)
    };
    let field_masked = masked(&["spec.nodeName", "spec.containers.image", "status.phase"])?;
    let metadata_only = masked(&[])?;
    println!(
        "| kube-runtime Store<DynamicObject> (baseline) | {:.0} B | 1.00x |",
        theirs
    );
    println!(
        "| kube-runtime Store<DynamicObject>, managedFields stripped | {:.0} B | {:.2}x |",
        stripped,
        stripped / theirs
    );
    println!(
        "| Wisp indexer (managedFields stripped, namespace index) | {:.0} B | {:.2}x ({:.2}x of the stripped store; target <= 0.6x) |",
        ours,
        ours / theirs,
        ours / stripped
    );
    println!(
        "| Wisp indexer, `fields: [spec.nodeName, spec.containers.image, status.phase]` | {:.0} B | {:.2}x |",
        field_masked,
        field_masked / theirs
    );
    println!(
        "| kube-runtime Store<PartialObjectMeta<Pod>> (metadata watcher, managedFields stripped) | {:.0} B | {:.2}x |",
        their_meta,
        their_meta / theirs
    );
    println!(
        "| Wisp indexer, `metadataOnly: true` | {:.0} B | {:.2}x ({:.2}x of kube-runtime's metadata store) |",
        metadata_only,
        metadata_only / theirs,
        metadata_only / their_meta
    );
    Ok(())
}

/// Counts what a consumer saw, with the time of its first and last watch update.
#[derive(Default)]
struct Seen {
    adds: std::sync::atomic::AtomicU64,
    updates: std::sync::atomic::AtomicU64,
    first_update: std::sync::Mutex<Option<Instant>>,
    last_update: std::sync::Mutex<Option<Instant>>,
}

impl Seen {
    fn update(&self) {
        let now = Instant::now();
        self.first_update
            .lock()
            .map(|mut f| *f.get_or_insert(now))
            .ok();
        if let Ok(mut l) = self.last_update.lock() {
            *l = Some(now);
        }
        self.updates
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    fn watch_time(&self) -> Duration {
        let f = self.first_update.lock().ok().and_then(|f| *f);
        let l = self.last_update.lock().ok().and_then(|l| *l);
        match (f, l) {
            (Some(f), Some(l)) => l - f,
            _ => Duration::ZERO,
        }
    }
}

struct Counter(Arc<Seen>);

impl EventHandler for Counter {
    fn handle(&mut self, batch: &[Delivery]) {
        for d in batch {
            match &d.notification {
                Notification::Add { .. } => {
                    self.0
                        .adds
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Notification::Update { .. } => self.0.update(),
                Notification::Delete { .. } => {}
            }
        }
    }
}

async fn wait_until(what: &str, limit: Duration, f: impl Fn() -> bool) -> anyhow::Result<()> {
    let start = Instant::now();
    while !f() {
        if start.elapsed() > limit {
            anyhow::bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

/// The informer core vs kube-runtime's watcher + reflector, through the test API server over
/// loopback: a paginated list of N pods, then a watch that replays M updates from the server's
/// history (the watch is held back with 429s while the updates are written, so the replay runs
/// as fast as the consumer reads).
async fn core_figures(a: &Args) -> anyhow::Result<()> {
    use futures::StreamExt;
    use std::sync::atomic::Ordering::Relaxed;
    let (n, m) = if a.quick {
        (2_000u64, 5_000u64)
    } else {
        (100_000, 200_000)
    };
    let server = wisp_tests::TestApiServer::start().await?;
    server.history_limit((n + 3 * m + 10) as usize);
    for i in 0..n {
        server.create(wisp_tests::pod(
            &format!("ns-{}", i % 50),
            &format!("web-{i}"),
        ))?;
    }
    let write_updates = |round: u64| -> anyhow::Result<()> {
        for k in 0..m {
            let i = k % n;
            let mut p = wisp_tests::pod(&format!("ns-{}", i % 50), &format!("web-{i}"));
            p["metadata"]["annotations"]["bench/round"] = json!(format!("{round}-{k}"));
            server.update(p)?;
        }
        Ok(())
    };
    println!(
        "\n## Informer core vs kube-runtime ({n} pods listed in pages of 500, then {m} watch updates; one handler)\n"
    );
    println!("| consumer | list | list objects/s | watch events/s | ratio (events/s) |");
    println!("|---|---|---|---|---|");

    // kube-runtime watcher + reflector Store<DynamicObject>.
    server
        .faults()
        .fail_next(wisp_tests::Verb::Watch, 429, None, 1_000_000);
    let ar = kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::all_with(server.client_no_retry(), &ar);
    let writer =
        kube::runtime::reflector::store::Writer::<kube::api::DynamicObject>::new(ar.clone());
    let seen_k = Arc::new(Seen::default());
    let sk = seen_k.clone();
    let started = Instant::now();
    let listed_at: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
    let la = listed_at.clone();
    let stream = kube::runtime::reflector(
        writer,
        kube::runtime::watcher(
            api,
            kube::runtime::watcher::Config::default().page_size(500),
        ),
    );
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(kube::runtime::watcher::Event::InitApply(_)) => {
                    sk.adds.fetch_add(1, Relaxed);
                }
                Ok(kube::runtime::watcher::Event::InitDone) => {
                    if let Ok(mut l) = la.lock() {
                        *l = Some(Instant::now());
                    }
                }
                Ok(kube::runtime::watcher::Event::Apply(_)) => sk.update(),
                _ => {}
            }
        }
    });
    wait_until("kube-runtime list", Duration::from_secs(600), || {
        listed_at.lock().map(|l| l.is_some()).unwrap_or(false)
    })
    .await?;
    let k_list = listed_at
        .lock()
        .ok()
        .and_then(|l| *l)
        .map_or(Duration::ZERO, |t| t - started);
    write_updates(1)?;
    server.faults().reset();
    wait_until("kube-runtime watch", Duration::from_secs(600), || {
        seen_k.updates.load(Relaxed) >= m
    })
    .await?;
    task.abort();

    // Wisp informer (kube source), one native handler.
    server
        .faults()
        .fail_next(wisp_tests::Verb::Watch, 429, None, 1_000_000);
    let source =
        wisp_host::source::kube::KubeSource::new(server.client_no_retry(), "v1", "Pod", None);
    let inf =
        wisp_host::informer::SharedInformer::new("pods", Arc::new(source), Default::default());
    let seen_w = Arc::new(Seen::default());
    let reg = inf.add_event_handler("count", Box::new(Counter(seen_w.clone())), Duration::ZERO)?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let started = Instant::now();
    tokio::spawn(inf.clone().run(async {
        let _ = stop_rx.await;
    }));
    wait_until("wisp list", Duration::from_secs(600), || {
        reg.has_synced() && seen_w.adds.load(Relaxed) >= n
    })
    .await?;
    let w_list = started.elapsed();
    write_updates(2)?;
    server.faults().reset();
    wait_until("wisp watch", Duration::from_secs(600), || {
        seen_w.updates.load(Relaxed) >= m
    })
    .await?;
    let _ = stop_tx.send(());
    // Later sections must not share the cores with this server's watches and bookmarks.
    server.shutdown();
    drop(inf);

    let rate = |count: u64, d: Duration| count as f64 / d.as_secs_f64().max(1e-9);
    let (kl, kw) = (rate(n, k_list), rate(m, seen_k.watch_time()));
    let (wl, ww) = (rate(n, w_list), rate(m, seen_w.watch_time()));
    println!(
        "| kube-runtime watcher + reflector (baseline) | {} | {:.0} | {:.0} | 1.00x |",
        ms(k_list),
        kl,
        kw
    );
    println!(
        "| Wisp informer (reflector, DeltaFIFO, indexer, listener) | {} | {:.0} | {:.0} | {:.2}x list, {:.2}x watch (target >= 1.0x) |",
        ms(w_list),
        wl,
        ww,
        wl / kl,
        ww / kw
    );
    Ok(())
}

/// Resident set size of this process, in bytes (Linux).
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

/// Memory of idle instances, and how long a stuck call runs against its deadline.
fn isolation_figures(a: &Args) -> anyhow::Result<()> {
    let engine = PluginEngine::new(EngineConfig {
        cache_dir: None,
        ..EngineConfig::default()
    })?;
    println!("\n## Instances and isolation\n");
    println!("| figure | value | baseline / target |");
    println!("|---|---|---|");
    let n = if a.quick { 50 } else { 500 };
    let path = a.plugin_dir.join("audit_log.wasm");
    let bytes = std::fs::read(&path)?;
    let prepared = Prepared::new(&engine, &path, &bytes, "idle")?;
    let spec = &prepared.spec;
    let before = rss();
    let mut keep = Vec::with_capacity(n);
    for _ in 0..n {
        let mut inst = prepared.instance(&engine, prepared.api())?;
        let _ = inst.init("{}").map_err(|e| anyhow::anyhow!("{e}"))?;
        keep.push(inst);
    }
    let per = (rss().saturating_sub(before)) / n as u64;
    println!(
        "| resident memory per idle instance (audit-log, after init; {n} instances) | {} KiB | DESIGN target <= 128 KiB, issue 6 <= 1 MiB |",
        per / 1024
    );
    drop(keep);

    let rounds = if a.quick { 3 } else { 20 };
    let checked = check_module(
        &engine,
        &a.plugin_dir.join("test_faults.wasm"),
        json!({"mode": "spin"}),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let status = checked.status().clone();
    let mut rt = checked.into_runtime(engine.clone());
    let items = deliveries(1);
    let mut times = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        rt.handle("pods", &items);
        times.push(t.elapsed());
    }
    let hits = wisp_host::plugin::status::PluginCounters::get(&status.counters.deadline_hits);
    println!(
        "| stuck call (infinite loop) cut after, median / max ({rounds} calls, {hits} deadline hits) | {} / {} | deadline {} + one {} tick |",
        ms(median(times.clone())),
        ms(*times.iter().max().unwrap_or(&Duration::ZERO)),
        ms(spec.limits.deadline),
        ms(wisp_host::plugin::engine::DEFAULT_EPOCH_TICK)
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let a = args()?;
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    println!("# wisp-bench{}", if a.quick { " (quick)" } else { "" });
    println!(
        "machine: {} cores; plugins from {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        a.plugin_dir.display()
    );
    if a.runs("load") {
        load_figures(&a)?;
    }
    if a.runs("delivery") {
        delivery_figures(&a)?;
    }
    if a.runs("isolation") {
        isolation_figures(&a)?;
    }
    if a.runs("memory") {
        memory_figures(&a)?;
    }
    let rt = tokio::runtime::Runtime::new()?;
    if a.runs("reload") {
        rt.block_on(reload_figures(&a))?;
    }
    if a.runs("core") {
        rt.block_on(core_figures(&a))?;
    }
    let engine = PluginEngine::new(EngineConfig {
        cache_dir: None,
        ..EngineConfig::default()
    })?;
    if a.runs("pipeline") {
        rt.block_on(pipeline::pipeline_figures(&engine, &a.plugin_dir, a.quick))?;
    }
    if a.runs("latency") {
        rt.block_on(pipeline::latency_figures(&engine, &a.plugin_dir, a.quick))?;
    }
    if a.runs("scale") {
        rt.block_on(scale::scale_figures(a.quick))?;
    }
    Ok(())
}
