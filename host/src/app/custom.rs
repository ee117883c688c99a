//! Plugins from custom resources (`customResources:`): `WispPlugin` (namespaced) and
//! `ClusterWispPlugin` (`wisp.io/v1alpha1`), watched by informers of the host's own and
//! reconciled by one supervised task through the reload path of the config file's plugins
//! ([`Reloader::apply_custom`]): a new generation is validated and confined
//! ([`Config::custom_plugin`]), its `oci://` module pulled under the host's signature policy,
//! its inline informers started, then the plugin checked and started, reloaded in place (state
//! handed over, probation, rollback) or restarted; a refused generation leaves the running one.
//! At most `customResources.maxPerNamespace` resources of a namespace and `maxTotal` in all are
//! taken; one past a cap is refused (`TooMany`) until a place is free.
//!
//! Each resource's `status` is written by server-side apply (field manager `wisp`) on the
//! status subresource: at once when a condition, the module or the last error changes (looked
//! at every second, written only on change), and with the counters at most every
//! `customResources.statusInterval` (default 30s) when they changed. Nothing is reconciled or
//! written before this replica runs its plugins (a standby waits for the Lease), and status
//! writes stop while it does not hold the Lease.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::FutureExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::supervisor::{OnError, Phase, Supervisor};
use crate::config::{Config, CustomRef, CustomResourcesConfig, InformerConfig};
use crate::informer::handler::EventHandler;
use crate::informer::object::DeletedObject;
use crate::informer::object::Object;
use crate::informer::{Executor, SharedInformer};
use crate::oci::PulledModules;
use crate::plugin::status::PluginCounters as C;
use crate::plugin::{PluginSpec, PluginState};
use crate::reloader::{ReloadError, Reloader, modules};
use crate::scale::lease::Leadership;
use crate::sync::lock;

pub use crate::config::custom::{GROUP, KINDS, VERSION};
/// The field manager of the status writes.
pub const FIELD_MANAGER: &str = "wisp";
/// How often conditions are looked at (and written when they changed).
const CONDITION_CHECK: Duration = Duration::from_secs(1);
/// Refusals tried again at each resync (they may pass later).
const TRANSIENT: [&str; 5] = [
    "PullFailed",
    "SignatureRefused",
    "KindNotServed",
    "OverBudget",
    "ApplyPanicked",
];
/// The refusal of a resource past `maxPerNamespace` or `maxTotal`: it holds no place and is
/// looked at again at each reconcile (taken once a place is free).
const TOO_MANY: &str = "TooMany";
/// How often the reconciler looks again when nothing told it to (a missed notification), and
/// tries again what was refused for a [`TRANSIENT`] reason.
const RESYNC: Duration = Duration::from_secs(60);

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// What the reconciler needs of the host.
pub struct CustomPlugins {
    /// The host's config at start (its `customResources`; each generation is read against the
    /// config in force then).
    pub config: Config,
    /// The API server.
    pub client: kube::Client,
    /// Set once this replica runs its plugins.
    pub reloader: Arc<OnceLock<Arc<Reloader>>>,
    /// With `sharding`: whether this replica holds the Lease (status writes are fenced by it).
    pub leadership: Option<Arc<Leadership>>,
    /// The workers the custom resources' informers deliver on.
    pub executor: Executor,
    /// With `sharding: {mode: shards}`: the hash ranges this member serves; the custom
    /// resources' informers with `shard` (the default) hold only those, as the config's do.
    pub shard_view: Option<Arc<crate::scale::shards::ShardView>>,
    /// The host's supervisor: the custom resources' informers run under it.
    pub sup: Arc<Supervisor>,
}

/// Notifies the reconciler of any change of a watched custom resource.
struct Nudge(Arc<tokio::sync::Notify>);

impl EventHandler for Nudge {
    fn on_add(&mut self, _obj: &Arc<Object>, _initial_list: bool) {
        self.0.notify_one();
    }
    fn on_update(&mut self, _old: &Arc<Object>, _new: &Arc<Object>) {
        self.0.notify_one();
    }
    fn on_delete(&mut self, _obj: &DeletedObject) {
        self.0.notify_one();
    }
}

/// Informers running under a token of their own, as tasks of the supervisor (in the phase of
/// the reconciler that owns them: their errors and panics logged and counted by name).
struct Running {
    informers: Vec<Arc<SharedInformer>>,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    fn start(
        informers: Vec<Arc<SharedInformer>>,
        parent: &CancellationToken,
        sup: &Arc<Supervisor>,
    ) -> Self {
        let stop = parent.child_token();
        let tasks = informers
            .iter()
            .map(|i| {
                let (i, stop) = (i.clone(), stop.clone());
                let task = format!("custom resource informer {}", i.name());
                sup.spawn_owned(Phase::Intake, &task, OnError::Log, |_| async move {
                    i.run(stop.cancelled_owned())
                        .await
                        .map_err(|e| anyhow::anyhow!("custom resource informer stopped: {e}"))
                })
            })
            .collect();
        Self {
            informers,
            stop,
            tasks,
        }
    }

    async fn stop(mut self) {
        self.stop.cancel();
        for t in std::mem::take(&mut self.tasks) {
            // Its error or panic was reported by the supervisor; an error here is only a task
            // the runtime dropped at its shutdown.
            let _ = t.await;
        }
    }
}

/// Informers dropped without [`Running::stop`] (an apply that panicked) are stopped too; their
/// tasks end on their own.
impl Drop for Running {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// One custom resource as last reconciled.
struct Applied {
    cr: CustomRef,
    uid: String,
    generation: i64,
    /// The inline informers its plugin runs with, their scope and tasks (`None`: it has never
    /// run).
    informers: Option<(Vec<InformerConfig>, String, Running)>,
    /// The OCI modules it pulled, kept while its references do not change.
    pulled: PulledModules,
    /// The last generation's outcome: `None` accepted, else the reason and error.
    refused: Option<(&'static str, String)>,
    /// Rollbacks counted when the accepted generation started.
    rollbacks_at: u64,
    /// The status last written, and when.
    written: Option<(Value, Instant)>,
}

impl Applied {
    /// A resource not reconciled yet.
    fn new(s: &Seen) -> Self {
        Self {
            cr: s.cr.clone(),
            uid: s.uid.clone(),
            generation: 0,
            informers: None,
            pulled: PulledModules::new(),
            refused: None,
            rollbacks_at: 0,
            written: None,
        }
    }

    /// Whether it counts against `maxPerNamespace` and `maxTotal`: every resource the host
    /// took, run or refused, but one refused for those caps.
    fn holds_place(&self) -> bool {
        !matches!(&self.refused, Some((reason, _)) if *reason == TOO_MANY)
    }
}

/// The resources holding a place under the count caps, per namespace and in all.
#[derive(Default)]
struct Places {
    per_namespace: BTreeMap<String, usize>,
    total: usize,
}

impl Places {
    fn count(&mut self, cr: &CustomRef) {
        if let Some(ns) = &cr.namespace {
            *self.per_namespace.entry(ns.clone()).or_default() += 1;
        }
        self.total += 1;
    }

    /// A place for `cr`, or why there is none (naming the cap).
    fn take(&mut self, cr: &CustomRef, caps: &CustomResourcesConfig) -> Result<(), String> {
        let total = caps.max_total();
        if self.total >= total {
            return Err(format!(
                "{cr}: over customResources.maxTotal ({total}): {total} custom resources hold \
                 a place already; this one gets one when one of them is deleted"
            ));
        }
        if let Some(ns) = &cr.namespace {
            let per = caps.max_per_namespace();
            if self.per_namespace.get(ns).is_some_and(|n| *n >= per) {
                return Err(format!(
                    "{cr}: over customResources.maxPerNamespace ({per}): {per} custom resources \
                     of namespace {ns:?} hold a place already; this one gets one when one of \
                     them is deleted"
                ));
            }
        }
        self.count(cr);
        Ok(())
    }
}

/// The reconciler: runs until `stop`, once this replica runs its plugins. Fails (logged and
/// counted by the supervisor) when the custom resources cannot be watched.
pub async fn run(me: CustomPlugins, stop: CancellationToken) -> anyhow::Result<()> {
    let reloader = loop {
        if let Some(r) = me.reloader.get() {
            break r.clone();
        }
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    };
    let cr_config = me.config.custom_resources.clone().unwrap_or_default();
    let nudge = Arc::new(tokio::sync::Notify::new());
    let watchers = Running::start(
        watchers(&me, &cr_config, &nudge)
            .map_err(|e| e.context("cannot watch the custom resources"))?,
        &stop,
        &me.sup,
    );
    let mut r = Reconciler {
        ctx: Arc::new(Ctx {
            me,
            reloader,
            stop: stop.clone(),
            scopes: AtomicU64::new(0),
            reserved: Mutex::new(BTreeMap::new()),
            memory_limit: crate::plugin::budget::cgroup_memory_limit(),
        }),
        settings: cr_config,
        applied: BTreeMap::new(),
        busy: BTreeMap::new(),
        jobs: tokio::task::JoinSet::new(),
        ids: HashMap::new(),
        turn: None,
        queued: BTreeMap::new(),
        retry_due: BTreeSet::new(),
    };
    let mut tick = tokio::time::interval(CONDITION_CHECK);
    let mut resync = tokio::time::interval(RESYNC);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            Some(done) = r.jobs.join_next_with_id(), if !r.jobs.is_empty() => {
                r.finish(done);
                r.reconcile(&watchers.informers, false).await;
            }
            _ = nudge.notified() => r.reconcile(&watchers.informers, false).await,
            _ = resync.tick() => r.reconcile(&watchers.informers, true).await,
            _ = tick.tick() => r.write_statuses().await,
        }
    }
    // Applies in flight are dropped (their informers stop with `stop`; a check running in a
    // blocking thread ends at its own bounds).
    r.jobs.shutdown().await;
    for (_, a) in std::mem::take(&mut r.applied) {
        if let Some((_, _, running)) = a.informers {
            running.stop().await;
        }
    }
    watchers.stop().await;
    Ok(())
}

/// The informers of the custom resources the config reads.
fn watchers(
    me: &CustomPlugins,
    cr: &CustomResourcesConfig,
    nudge: &Arc<tokio::sync::Notify>,
) -> anyhow::Result<Vec<Arc<SharedInformer>>> {
    let mut out = Vec::new();
    for (kind, plural, namespaced) in KINDS {
        if !namespaced && !cr.cluster {
            continue;
        }
        let inf = InformerConfig {
            name: format!("{GROUP}/{kind}"),
            api_version: format!("{GROUP}/{VERSION}"),
            kind: kind.into(),
            namespaces: cr.namespaces.clone().filter(|_| namespaced),
            ..serde_json::from_value(json!({"name": "", "apiVersion": "", "kind": ""}))?
        };
        let lw = super::build::kube_lister(&me.client, &resource(kind, plural), &inf, None);
        let i = super::build::informer(&inf, lw, Some(&me.executor), false)?;
        i.add_event_handler(
            "custom resources",
            Box::new(Nudge(nudge.clone())),
            Duration::ZERO,
        )?;
        out.push(i);
    }
    Ok(out)
}

/// A custom resource read from the cache.
struct Seen {
    cr: CustomRef,
    uid: String,
    generation: i64,
    spec: Value,
}

fn seen(obj: &Object) -> Option<Seen> {
    let v = obj.to_value();
    let m = obj.meta();
    let kind = KINDS.iter().find(|k| k.0 == m.kind())?.0;
    Some(Seen {
        cr: CustomRef {
            kind,
            namespace: m.namespace().map(str::to_owned),
            name: m.name().to_owned(),
        },
        uid: m.uid().to_owned(),
        generation: v["metadata"]["generation"].as_i64().unwrap_or(0),
        spec: v.get("spec").cloned().unwrap_or_else(|| json!({})),
    })
}

/// What an apply needs, shared by the applies that run at once.
struct Ctx {
    me: CustomPlugins,
    reloader: Arc<Reloader>,
    stop: CancellationToken,
    /// Numbers the informer scopes of the resources' plugins.
    scopes: AtomicU64,
    /// The worst-case memory of each version being applied (see [`Ctx::reserve_memory`]).
    reserved: Mutex<BTreeMap<String, u64>>,
    /// The container's memory limit, if it has one.
    memory_limit: Option<u64>,
}

struct Reconciler {
    ctx: Arc<Ctx>,
    settings: CustomResourcesConfig,
    applied: BTreeMap<String, Applied>,
    /// The resources being applied (their record is with the apply), by name.
    busy: BTreeMap<String, CustomRef>,
    jobs: tokio::task::JoinSet<(String, Applied)>,
    /// The name of each apply in `jobs` (a panicked one is known by its id).
    ids: HashMap<tokio::task::Id, String>,
    /// The namespace last given an apply: the next goes to the one after it.
    turn: Option<String>,
    /// Resources that took a place under the count caps and wait for an apply: they keep it.
    queued: BTreeMap<String, CustomRef>,
    /// Refused resources to try again (marked at each resync, until their apply starts).
    retry_due: BTreeSet<String>,
}

/// The namespace to start the next apply for: the first after `turn` (in name order, wrapping
/// around) among those with a resource `waiting`, fewer than `per_namespace` of whose applies
/// are `running`.
fn next_turn(
    waiting: &BTreeSet<String>,
    running: &BTreeMap<String, usize>,
    per_namespace: usize,
    turn: Option<&str>,
) -> Option<String> {
    let open = |ns: &&String| running.get(*ns).copied().unwrap_or(0) < per_namespace;
    let after = |ns: &&String| turn.is_none_or(|t| ns.as_str() > t);
    waiting
        .iter()
        .filter(|ns| after(ns) && open(ns))
        .chain(waiting.iter().filter(open))
        .next()
        .cloned()
}

/// The namespace a resource's applies are taken in turn by (`""`: the cluster-scoped ones).
fn turn_of(cr: &CustomRef) -> String {
    cr.namespace.clone().unwrap_or_default()
}

impl Reconciler {
    /// Brings the plugins in line with the custom resources cached now; with `retry`, a
    /// generation refused for what may pass later (a registry, a kind not served yet, the
    /// memory plan) is tried again. Each resource to apply is started when an apply is free
    /// (`concurrentApplies`, `concurrentAppliesPerNamespace`), in turn by namespace; the
    /// others wait for the next reconcile, which each finished apply starts.
    async fn reconcile(&mut self, watchers: &[Arc<SharedInformer>], retry: bool) {
        let mut now: BTreeMap<String, Seen> = BTreeMap::new();
        for s in watchers
            .iter()
            .flat_map(|w| w.cache().list())
            .filter_map(|o| seen(&o))
        {
            now.insert(s.cr.plugin_name(), s);
        }
        let gone: Vec<String> = self
            .applied
            .keys()
            .filter(|k| now.get(*k).is_none_or(|s| s.uid != self.applied[*k].uid))
            .cloned()
            .collect();
        for name in gone {
            self.remove(&name).await;
        }
        self.queued.retain(|n, _| now.contains_key(n));
        if retry {
            let transient = self
                .applied
                .iter()
                .filter(|(_, a)| a.refused.as_ref().is_some_and(|r| TRANSIENT.contains(&r.0)));
            self.retry_due.extend(transient.map(|(n, _)| n.clone()));
        }
        self.retry_due.retain(|n| now.contains_key(n));
        let mut places = Places::default();
        let held = self
            .applied
            .values()
            .filter(|a| a.holds_place())
            .map(|a| &a.cr);
        for cr in held.chain(self.busy.values()).chain(self.queued.values()) {
            places.count(cr);
        }
        let mut wanted: BTreeMap<String, Vec<(String, Seen)>> = BTreeMap::new();
        for (name, s) in now {
            if self.busy.contains_key(&name) {
                continue;
            }
            let applied = self.applied.get(&name).filter(|a| a.holds_place());
            let holds = applied.is_some() || self.queued.contains_key(&name);
            if !holds && let Err(e) = places.take(&s.cr, &self.settings) {
                self.refuse_count(name, s, e);
                continue;
            }
            let current = applied.is_some_and(|a| a.generation == s.generation)
                && !self.retry_due.contains(&name);
            if !current {
                self.queued.insert(name.clone(), s.cr.clone());
                wanted.entry(turn_of(&s.cr)).or_default().push((name, s));
            }
        }
        self.start_applies(wanted);
        self.write_statuses().await;
    }

    /// Starts applies of `wanted` (by namespace) while there are free ones, a namespace at a
    /// time in turn, none past its namespace's share.
    fn start_applies(&mut self, mut wanted: BTreeMap<String, Vec<(String, Seen)>>) {
        let all = self.settings.concurrent_applies();
        let per_namespace = self.settings.concurrent_applies_per_namespace();
        while self.busy.len() < all {
            let mut running: BTreeMap<String, usize> = BTreeMap::new();
            for cr in self.busy.values() {
                *running.entry(turn_of(cr)).or_default() += 1;
            }
            let waiting: BTreeSet<String> = wanted
                .iter()
                .filter(|(_, w)| !w.is_empty())
                .map(|(ns, _)| ns.clone())
                .collect();
            let Some(ns) = next_turn(&waiting, &running, per_namespace, self.turn.as_deref())
            else {
                break;
            };
            let (name, s) = wanted.get_mut(&ns).map(|w| w.remove(0)).expect("chosen");
            self.turn = Some(ns);
            self.start_apply(name, s);
        }
    }

    /// Applies `s` in a task of its own; its record comes back through [`Reconciler::finish`].
    fn start_apply(&mut self, name: String, s: Seen) {
        let a = self
            .applied
            .remove(&name)
            .unwrap_or_else(|| Applied::new(&s));
        self.busy.insert(name.clone(), s.cr.clone());
        self.queued.remove(&name);
        self.retry_due.remove(&name);
        let ctx = self.ctx.clone();
        let n = name.clone();
        let task = self
            .jobs
            .spawn(async move { (n.clone(), ctx.apply(&n, a, s).await) });
        self.ids.insert(task.id(), name);
    }

    /// Takes back the record of a finished apply (a panic in one is its refusal,
    /// `ApplyPanicked`); one aborted at shutdown is forgotten.
    fn finish(
        &mut self,
        done: Result<(tokio::task::Id, (String, Applied)), tokio::task::JoinError>,
    ) {
        match done {
            Ok((id, (name, a))) => {
                self.ids.remove(&id);
                self.busy.remove(&name);
                self.applied.insert(name, a);
            }
            Err(e) => {
                if let Some(name) = self.ids.remove(&e.id()) {
                    self.busy.remove(&name);
                }
                crate::tasks::report_blocking("custom resources: apply", Err(e));
            }
        }
    }

    /// Records a resource refused for the count caps (it runs nothing and holds no place);
    /// logged once per generation.
    fn refuse_count(&mut self, name: String, s: Seen, e: String) {
        let a = self.applied.entry(name).or_insert_with(|| Applied::new(&s));
        if a.generation != s.generation || a.refused.is_none() {
            tracing::warn!(resource = %s.cr, error = %e, "custom resource refused: over a count cap");
        }
        a.generation = s.generation;
        a.refused = Some((TOO_MANY, e));
    }

    /// Stops a deleted resource's plugin and its informers.
    async fn remove(&mut self, name: &str) {
        let Some(a) = self.applied.remove(name) else {
            return;
        };
        let r = self.ctx.reloader.clone();
        let n = name.to_owned();
        let removed = tokio::task::spawn_blocking(move || r.remove_custom(&n)).await;
        crate::tasks::report_blocking("custom resources: remove a plugin", removed.map(drop));
        if let Some((_, scope, running)) = a.informers {
            self.ctx.reloader.manager().remove_scoped_informers(&scope);
            running.stop().await;
        }
        tracing::info!(plugin = %name, "custom resource deleted: plugin stopped");
    }

    fn handle(&self, name: &str) -> Option<Arc<crate::plugin::PluginHandle>> {
        self.ctx.reloader.running_plugin(name)
    }

    /// Writes each resource's status that changed: conditions at once, counters at most every
    /// `statusInterval`; nothing while this replica does not hold the Lease.
    async fn write_statuses(&mut self) {
        if let Some(l) = &self.ctx.me.leadership
            && !l.is_leader()
        {
            return;
        }
        let interval = self.settings.status_interval();
        let names: Vec<String> = self.applied.keys().cloned().collect();
        // Current violations per plugin, counted once for every resource.
        let mut violations: BTreeMap<String, u64> = BTreeMap::new();
        for ((plugin, _, _), n) in self.ctx.reloader.manager().services().verdicts.counts() {
            *violations.entry(plugin).or_default() += n;
        }
        for name in names {
            let status = self.status(&name, violations.get(&name).copied().unwrap_or(0));
            let a = &self.applied[&name];
            let due = match &a.written {
                None => true,
                Some((old, at)) => {
                    let keep = |v: &Value| {
                        let mut v = v.clone();
                        if let Some(o) = v.as_object_mut() {
                            o.remove("counters");
                        }
                        v
                    };
                    strip_times(&keep(old)) != strip_times(&keep(&status))
                        || (at.elapsed() >= interval && old["counters"] != status["counters"])
                }
            };
            if !due {
                continue;
            }
            let status = carry_times(a.written.as_ref().map(|w| &w.0), status);
            match self.patch_status(&a.cr, &status).await {
                Ok(()) => {
                    if let Some(a) = self.applied.get_mut(&name) {
                        a.written = Some((status, Instant::now()));
                    }
                }
                Err(e) => {
                    tracing::warn!(resource = %a.cr, error = %e, "status not written; tried again in a second")
                }
            }
        }
    }

    async fn patch_status(&self, cr: &CustomRef, status: &Value) -> kube::Result<()> {
        let (kind, plural, _) = KINDS
            .iter()
            .find(|k| k.0 == cr.kind)
            .copied()
            .unwrap_or(KINDS[0]);
        let ar = resource(kind, plural);
        let api: Api<DynamicObject> = match &cr.namespace {
            Some(ns) => Api::namespaced_with(self.ctx.me.client.clone(), ns, &ar),
            None => Api::all_with(self.ctx.me.client.clone(), &ar),
        };
        let body = json!({"apiVersion": ar.api_version, "kind": kind, "status": status});
        api.patch_status(
            &cr.name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await
        .map(|_| ())
    }

    /// The status of one resource now, with its plugin's current `violations`.
    fn status(&self, name: &str, violations: u64) -> Value {
        let a = &self.applied[name];
        let h = self.handle(name);
        let mut degraded: Option<(&str, String)> = a.refused.as_ref().map(|(r, e)| (*r, e.clone()));
        let (mut running, mut running_reason, mut running_msg) = (
            false,
            "NotRunning",
            "no version of this plugin runs".to_owned(),
        );
        let mut out = json!({"observedGeneration": a.generation, "plugin": name});
        if let Some(h) = &h {
            let st = h.status();
            let v = h.running();
            match st.state() {
                PluginState::Running => {
                    running = true;
                    running_reason = "Running";
                    running_msg = format!("generation {} of the module runs", v.generation);
                }
                PluginState::Quarantined { reason } => {
                    running_reason = "Quarantined";
                    running_msg = reason.clone();
                    degraded.get_or_insert(("Quarantined", reason));
                }
            }
            if C::get(&st.counters.rollbacks) > a.rollbacks_at {
                degraded.get_or_insert((
                    "RolledBack",
                    st.last_error()
                        .unwrap_or_else(|| "the new version failed its probation".into()),
                ));
            }
            out["module"] = json!({
                "reference": v.origin.as_ref().map(|o| o.reference.clone()),
                "digest": v.origin.as_ref().map_or_else(|| format!("sha256:{}", v.hash), |o| o.digest.clone()),
                "version": v.version,
            });
            out["abi"] = json!(v.abi);
            out["counters"] = json!({
                "delivered": C::get(&st.counters.delivered),
                "failed": C::get(&st.counters.failed),
                "violations": violations,
            });
        }
        if let Some(e) = a
            .refused
            .as_ref()
            .map(|r| r.1.clone())
            .or_else(|| h.as_ref().and_then(|h| h.status().last_error()))
        {
            out["lastError"] = json!(crate::plugin::status::clip(&e, 1024));
        }
        let ready = match &a.refused {
            None => ("True", "Checked", "the module passed its checks".to_owned()),
            Some((r, e)) => ("False", *r, e.clone()),
        };
        out["conditions"] = json!([
            condition("ModuleReady", ready.0, ready.1, &ready.2, a.generation),
            condition(
                "Running",
                if running { "True" } else { "False" },
                running_reason,
                &running_msg,
                a.generation
            ),
            match degraded {
                Some((r, m)) => condition("Degraded", "True", r, &m, a.generation),
                None => condition("Degraded", "False", "AsExpected", "", a.generation),
            },
        ]);
        out
    }
}

impl Ctx {
    /// Applies one new generation of a resource to its record `a`; what is refused is kept
    /// for its status.
    async fn apply(&self, name: &str, mut a: Applied, s: Seen) -> Applied {
        a.generation = s.generation;
        let tried = AssertUnwindSafe(self.try_apply(&mut a, &s))
            .catch_unwind()
            .await
            .unwrap_or_else(|p| {
                let why = crate::tasks::panic_text(&*p);
                Err(("ApplyPanicked", format!("the apply panicked: {why}")))
            });
        a.refused = match tried {
            Ok(msg) => {
                tracing::info!(resource = %s.cr, "{msg}");
                None
            }
            Err((reason, e)) => {
                tracing::error!(resource = %s.cr, reason, error = %e, "custom resource refused; what runs is unchanged");
                Some((reason, e))
            }
        };
        if a.refused.is_none() {
            a.rollbacks_at = self
                .reloader
                .running_plugin(name)
                .map_or(0, |h| C::get(&h.status().counters.rollbacks));
        }
        a
    }

    /// Validates, pulls, starts the informers, then starts or changes the plugin.
    async fn try_apply(&self, a: &mut Applied, s: &Seen) -> Result<String, (&'static str, String)> {
        // The config in force now: its `oci` keys and engine, as a file reload would use.
        let cfg = self
            .reloader
            .config()
            .custom_plugin(&s.cr, &s.spec)
            .map_err(|r| (r.reason, r.to_string()))?;
        // The memory plan reads the plugin's limits, not its module: before the pull.
        let _memory = self.reserve_memory(&s.cr, &cfg.plugin_specs(&PulledModules::new())[0])?;
        let pulled = modules::pull(&cfg, Some(&a.pulled)).await.map_err(|e| {
            let e = e.to_string();
            let reason = if e.contains("signature") || e.contains("not signed") {
                "SignatureRefused"
            } else {
                "PullFailed"
            };
            (reason, e)
        })?;
        let fresh = match &a.informers {
            Some((defs, scope, _)) if *defs == cfg.informers => Err(scope.clone()),
            _ => Ok(self.start_informers(&s.cr, &cfg).await?),
        };
        let mut spec = cfg.plugin_specs(&pulled).remove(0);
        // A tenant's path: a link at its last component is not followed (modulePaths).
        spec.module_links = crate::files::Links::Refuse;
        spec.informer_scope = Some(match &fresh {
            Ok((scope, _)) => scope.clone(),
            Err(scope) => scope.clone(),
        });
        let r = self.reloader.clone();
        let applied = tokio::task::spawn_blocking(move || r.apply_custom(spec))
            .await
            .unwrap_or_else(|e| Err(ReloadError::Refused(format!("the reload failed: {e}"))));
        match (applied, fresh) {
            (Ok(msg), Ok((scope, running))) => {
                if let Some((_, old, running)) = a.informers.take() {
                    self.reloader.manager().remove_scoped_informers(&old);
                    running.stop().await;
                }
                a.informers = Some((cfg.informers.clone(), scope, running));
                a.pulled = pulled;
                Ok(msg)
            }
            (Ok(msg), Err(_)) => {
                a.pulled = pulled;
                Ok(msg)
            }
            (Err(e), fresh) => {
                if let Ok((scope, running)) = fresh {
                    self.reloader.manager().remove_scoped_informers(&scope);
                    running.stop().await;
                }
                let e = match e {
                    ReloadError::Refused(e) | ReloadError::UnknownPlugin(e) => e,
                };
                let reason = if e.contains("settings rejected") {
                    "SettingsRefused"
                } else if e.contains("defines a plugin named") {
                    "NameClash"
                } else {
                    "ModuleRefused"
                };
                Err((reason, e))
            }
        }
    }

    /// The inline informers of `cfg` (kinds checked by discovery), running, registered with
    /// the manager under a new scope. A kind discovery does not find is `KindNotServed`
    /// (tried again); one it lists as cluster-scoped, or whose scope it cannot tell, refuses a
    /// `WispPlugin`.
    async fn start_informers(
        &self,
        cr: &CustomRef,
        cfg: &Config,
    ) -> Result<(String, Running), (&'static str, String)> {
        let mut informers = Vec::new();
        for (i, inf) in cfg.informers.iter().enumerate() {
            let found = super::build::discover(&self.me.client, cfg, i)
                .await
                .map_err(|e| {
                    let e = format!("{e:#}").replace(": informers[", ": spec.informers[");
                    ("KindNotServed", e)
                })?;
            if let Some(ns) = &cr.namespace {
                namespaced_kind(cfg, i, ns, found.namespaced)?;
            }
            let view = self.me.shard_view.as_ref();
            let lw = super::build::kube_lister(&self.me.client, &found.resource, inf, view);
            informers.push(
                super::build::informer(inf, lw, Some(&self.me.executor), false)
                    .map_err(|e| ("Invalid", format!("{}: {e:#}", cfg.file)))?,
            );
        }
        let n = self.scopes.fetch_add(1, Ordering::Relaxed) + 1;
        let scope = format!("{}#{}", cfg.plugins[0].name, n);
        self.reloader
            .manager()
            .add_scoped_informers(&scope, informers.clone());
        Ok((scope, Running::start(informers, &self.stop, &self.me.sup)))
    }

    /// Holds `spec`'s worst case in the memory plan while its apply runs (it is counted with
    /// the running plugins once accepted), or refuses it (`OverBudget`, tried again at each
    /// resync) when the container's memory limit cannot hold it beside the host, the config
    /// file's plugins, the other custom resources' running versions and the applies in flight.
    fn reserve_memory(
        &self,
        cr: &CustomRef,
        spec: &PluginSpec,
    ) -> Result<Reservation<'_>, (&'static str, String)> {
        use crate::plugin::budget::{worst_case, worst_case_of_change};
        let name = spec.name.clone();
        let running = self.reloader.custom_spec(&name);
        let this = match &running {
            Some(old) => worst_case_of_change(old, spec),
            None => worst_case(spec),
        };
        let mut reserved = lock(&self.reserved);
        if let Some(limit) = self.memory_limit {
            let files: u64 = self.reloader.config_specs().iter().map(worst_case).sum();
            // Each other resource once: as its apply in flight reserved it, else as it runs.
            let custom = self.reloader.custom_specs();
            let running_others = custom
                .iter()
                .filter(|(n, _)| **n != name && !reserved.contains_key(*n))
                .map(|(_, s)| worst_case(s));
            let in_flight = reserved
                .iter()
                .filter(|(n, _)| **n != name)
                .map(|(_, b)| *b);
            let others: u64 = running_others.chain(in_flight).sum();
            let host = crate::plugin::budget::HOST_BASE;
            let total = host + files + others + this;
            if total > limit {
                let mib = |b: u64| b >> 20;
                return Err((
                    "OverBudget",
                    format!(
                        "{cr}: spec.limits.memory: this plugin may take {} MiB at worst (limits.memory \
                         {} MiB twice, or beside the running version's, as during a reload, and \
                         {} queue(s) of queue.maxBytes {} MiB); beside the host (~{} MiB), the config file's plugins ({} MiB) and \
                         the other custom resources' ({} MiB) that is {} MiB, over the \
                         container's memory limit of {} MiB: lower its limits.memory or \
                         queue.maxBytes (tried again every minute)",
                        mib(this),
                        mib(spec.limits.memory),
                        spec.informers.len(),
                        mib(spec.queue.max_bytes().unwrap_or(0) as u64),
                        mib(host),
                        mib(files),
                        mib(others),
                        mib(total),
                        mib(limit),
                    ),
                ));
            }
        }
        reserved.insert(name.clone(), this);
        Ok(Reservation { ctx: self, name })
    }
}

/// A version's place in the memory plan while it is applied.
struct Reservation<'a> {
    ctx: &'a Ctx,
    name: String,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        lock(&self.ctx.reserved).remove(&self.name);
    }
}

/// A `WispPlugin` of namespace `ns` watches only namespaced kinds: informer `i` of `cfg` is
/// refused when discovery lists its kind as cluster-scoped (a built-in one is refused before,
/// with the config), or, discovery having failed, when the kind is not a built-in namespaced
/// one (its scope unknown: tried again).
fn namespaced_kind(
    cfg: &Config,
    i: usize,
    ns: &str,
    namespaced: Option<bool>,
) -> Result<(), (&'static str, String)> {
    let inf = &cfg.informers[i];
    let (group, _) = wisp_kinds::split_api_version(&inf.api_version);
    let at = format!("{}: spec.informers[{i}].kind", cfg.file);
    match namespaced.or_else(|| wisp_kinds::builtin_namespaced(group, &inf.kind)) {
        Some(true) => Ok(()),
        Some(false) => Err((
            "NotAllowed",
            format!(
                "{at}: {} ({}) is cluster-scoped, as the API server lists it (informer {:?}): a \
                 WispPlugin sees only its own namespace {ns:?} (a ClusterWispPlugin may watch it)",
                inf.kind, inf.api_version, inf.name
            ),
        )),
        None => Err((
            "KindNotServed",
            format!(
                "{at}: discovery failed, so the scope of {} ({}) is unknown (informer {:?}): a \
                 WispPlugin watches only namespaced kinds; tried again every minute",
                inf.kind, inf.api_version, inf.name
            ),
        )),
    }
}

fn condition(kind: &str, status: &str, reason: &str, message: &str, generation: i64) -> Value {
    json!({
        "type": kind,
        "status": status,
        "reason": reason,
        "message": crate::plugin::status::clip(message, 1024),
        "observedGeneration": generation,
        "lastTransitionTime": crate::policy::rfc3339(std::time::SystemTime::now()),
    })
}

/// `status` without its conditions' transition times (what a change is judged by).
fn strip_times(status: &Value) -> Value {
    let mut s = status.clone();
    if let Some(cs) = s["conditions"].as_array_mut() {
        for c in cs {
            if let Some(o) = c.as_object_mut() {
                o.remove("lastTransitionTime");
            }
        }
    }
    s
}

/// A condition whose status did not change keeps its transition time.
fn carry_times(old: Option<&Value>, mut new: Value) -> Value {
    let Some(old) = old else { return new };
    if let Some(cs) = new["conditions"].as_array_mut() {
        for c in cs {
            let before = old["conditions"]
                .as_array()
                .and_then(|o| o.iter().find(|o| o["type"] == c["type"]));
            if let Some(b) = before.filter(|b| b["status"] == c["status"]) {
                c["lastTransitionTime"] = b["lastTransitionTime"].clone();
            }
        }
    }
    new
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    fn running(of: &[(&str, usize)]) -> BTreeMap<String, usize> {
        of.iter().map(|(n, k)| ((*n).to_owned(), *k)).collect()
    }

    #[test]
    fn applies_go_to_the_namespaces_in_turn_none_past_its_share() {
        let waiting = set(&["", "a", "b", "c"]);
        let none = running(&[]);
        // The cluster-scoped ones ("") take their turn like a namespace.
        assert_eq!(next_turn(&waiting, &none, 1, None).as_deref(), Some(""));
        assert_eq!(
            next_turn(&waiting, &none, 1, Some("")).as_deref(),
            Some("a")
        );
        assert_eq!(
            next_turn(&waiting, &none, 1, Some("a")).as_deref(),
            Some("b")
        );
        // After the last one, around to the first.
        assert_eq!(
            next_turn(&waiting, &none, 1, Some("c")).as_deref(),
            Some("")
        );
        // A turn that is no longer waiting still orders the next.
        assert_eq!(
            next_turn(&set(&["a", "c"]), &none, 1, Some("b")).as_deref(),
            Some("c")
        );
        // A namespace at its share is passed over, wherever the turn is.
        let busy = running(&[("b", 1)]);
        assert_eq!(
            next_turn(&waiting, &busy, 1, Some("a")).as_deref(),
            Some("c")
        );
        assert_eq!(
            next_turn(&waiting, &running(&[("b", 1)]), 2, Some("a")).as_deref(),
            Some("b")
        );
        // Every waiting namespace at its share: none.
        let full = running(&[("a", 1), ("b", 1)]);
        assert_eq!(next_turn(&set(&["a", "b"]), &full, 1, Some("a")), None);
        assert_eq!(next_turn(&BTreeSet::new(), &none, 1, None), None);
    }

    /// One namespace with many waiting and another with one: the other's is started second,
    /// not after all of the first's.
    #[test]
    fn a_namespace_with_many_waiting_does_not_hold_up_another() {
        let mut waiting: BTreeMap<String, usize> = [("a".to_owned(), 5), ("z".to_owned(), 1)]
            .into_iter()
            .collect();
        let (mut turn, mut order) = (None::<String>, Vec::new());
        while let Some(ns) = next_turn(
            &waiting.keys().cloned().collect(),
            &running(&[]),
            1,
            turn.as_deref(),
        ) {
            order.push(ns.clone());
            let left = waiting.get_mut(&ns).unwrap();
            *left -= 1;
            if *left == 0 {
                waiting.remove(&ns);
            }
            turn = Some(ns);
        }
        assert_eq!(order, ["a", "z", "a", "a", "a", "a"]);
    }
}
