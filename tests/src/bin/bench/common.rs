//! What the sections share: time formats, the pod fixture as deliveries, the native handler
//! the plugins are measured against, prepared plugins, the counting allocator, consumers that
//! count what they saw.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use wisp_host::informer::{Delivery, EventHandler, Notification, Object};
use wisp_host::plugin::state::HostApi;
use wisp_host::plugin::status::PluginStatus;
use wisp_host::plugin::{PluginEngine, PluginSpec};

pub(crate) fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

pub(crate) fn us(d: Duration) -> String {
    format!("{:.1} us", d.as_secs_f64() * 1e6)
}

pub(crate) fn ns(d: Duration) -> String {
    format!("{} ns", d.as_nanos())
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// Realistic pods (the test fixture: labels, annotations, owner reference, two containers).
pub(crate) fn deliveries(n: usize) -> Vec<Delivery> {
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
pub(crate) fn meta_work(o: &Object) -> u64 {
    let m = o.meta();
    let ns = m.namespace().map_or(0, str::len) as u64;
    ns + m.name().len() as u64 + m.label("app").map_or(0, |v| v.len() as u64)
}

/// The bench plugin's `partial` work: only the containers' images (borrowed).
#[derive(serde::Deserialize, Default)]
pub(crate) struct Images<'a> {
    #[serde(borrow, default)]
    pub(crate) spec: ImagesSpec<'a>,
}

#[derive(serde::Deserialize, Default)]
pub(crate) struct ImagesSpec<'a> {
    #[serde(borrow, default)]
    pub(crate) containers: Vec<ImagesContainer<'a>>,
}

#[derive(serde::Deserialize, Default)]
pub(crate) struct ImagesContainer<'a> {
    #[serde(default)]
    pub(crate) image: &'a str,
}

/// The native baseline: the same work as the bench plugin.
pub(crate) struct Native {
    pub(crate) work: &'static str,
    pub(crate) total: u64,
}

impl EventHandler for Native {
    fn handle(&mut self, batch: &[Delivery]) {
        for d in batch {
            let o = d.notification.object();
            match self.work {
                "labels" => self.total += o.meta().labels().len() as u64,
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

pub(crate) fn per_item(total: Duration, n: usize) -> Duration {
    total / u32::try_from(n).unwrap_or(u32::MAX)
}

/// A plugin linked against the host, ready for fresh instances (as the runtime makes them).
pub(crate) struct Prepared {
    pub(crate) pre: wisp_host::plugin::bindings::PluginPre<wisp_host::plugin::state::StoreData>,
    pub(crate) spec: PluginSpec,
    pub(crate) status: Arc<PluginStatus>,
}

impl Prepared {
    pub(crate) fn new(
        engine: &Arc<PluginEngine>,
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
    pub(crate) fn api(&self) -> HostApi {
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

    pub(crate) fn instance(
        &self,
        engine: &PluginEngine,
        api: HostApi,
    ) -> anyhow::Result<wisp_host::plugin::instance::Instance> {
        wisp_host::plugin::instance::Instance::new(
            engine.metering(),
            &self.pre,
            api,
            &self.spec.limits,
        )
        .map_err(|e| anyhow::anyhow!("{e}"))
    }
}

pub(crate) fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Counts live heap bytes, to compare caches precisely (no allocator slack, no RSS noise), only
/// while the memory section runs: the timed sections allocate through the system allocator with
/// nothing added but one relaxed load.
pub(crate) struct Counting;

pub(crate) static LIVE: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
pub(crate) static COUNTING: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

pub(crate) fn count(bytes: i64) {
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
pub(crate) static GLOBAL: Counting = Counting;

pub(crate) fn live() -> i64 {
    LIVE.load(std::sync::atomic::Ordering::Relaxed)
}

/// Counts what a consumer saw, with the time of its first and last watch update.
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) adds: std::sync::atomic::AtomicU64,
    pub(crate) updates: std::sync::atomic::AtomicU64,
    pub(crate) first_update: std::sync::Mutex<Option<Instant>>,
    pub(crate) last_update: std::sync::Mutex<Option<Instant>>,
}

impl Seen {
    pub(crate) fn update(&self) {
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
    /// Forgets the updates seen so far (the caller knows none is in flight).
    pub(crate) fn restart(&self) {
        if let Ok(mut f) = self.first_update.lock() {
            *f = None;
        }
        if let Ok(mut l) = self.last_update.lock() {
            *l = None;
        }
        self.updates.store(0, std::sync::atomic::Ordering::Relaxed);
    }
    pub(crate) fn watch_time(&self) -> Duration {
        let f = self.first_update.lock().ok().and_then(|f| *f);
        let l = self.last_update.lock().ok().and_then(|l| *l);
        match (f, l) {
            (Some(f), Some(l)) => l - f,
            _ => Duration::ZERO,
        }
    }
}

pub(crate) struct Counter(pub(crate) Arc<Seen>);

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

pub(crate) async fn wait_until(
    what: &str,
    limit: Duration,
    f: impl Fn() -> bool,
) -> anyhow::Result<()> {
    let start = Instant::now();
    while !f() {
        if start.elapsed() > limit {
            anyhow::bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}
