//! One live instance of a plugin: its own `Store`, armed with a deadline (and fuel) before every
//! call. After any trap the store is dead and must be replaced (see `runtime`).
//!
//! Two limits of time, both enforced by the same epoch check (see `deadline_check`):
//! - start-up (instantiation, `describe`, `init`, and `restore` after a reload) shares one
//!   `limits.startup_deadline` until [`Instance::started`];
//! - then each call has `limits.deadline`, plus `limits.deadline_per_notification` for every
//!   notification of a batch after the first (see [`Limits::call_deadline`]).

use std::time::Duration;

use wasmtime::{Store, Trap};

use super::state::{HostApi, StoreData};
use crate::plugin::batch::Batch;
use crate::plugin::bindings::{Outcome, PluginInfo, PluginPre, v01, v02, v03, v03_admission};
use crate::plugin::spec::Limits;
use crate::plugin::status::LogRing;

/// The epoch tick and fuel metering of the engine a store runs on
/// (`PluginEngine::metering`).
#[derive(Clone, Copy, Debug)]
pub struct Metering {
    /// The epoch tick: deadlines are enforced to within one.
    pub tick: Duration,
    /// Whether fuel metering is on.
    pub fuel: bool,
}

impl Metering {
    /// Epoch ticks for a deadline (at least one).
    pub fn deadline_ticks(&self, deadline: Duration) -> u64 {
        (deadline.as_nanos().div_ceil(self.tick.as_nanos())).max(1) as u64
    }
}

/// Most bytes one host call may make the host copy out of a plugin, whatever its memory limit
/// (see [`host_call_budget`]): above the API server's largest request body (3 MiB), so any
/// manifest `apply` can send fits, and far below wasmtime's default of 128 MiB.
pub const MAX_HOST_CALL_BYTES: usize = 4 << 20;

/// The byte budget of one host call of a plugin with `memory` bytes of memory: everything it
/// passes (strings and lists, and what `handle` or `describe` return), counted as the host
/// copies it, so a string referenced N times costs N times its length. The plugin's memory limit,
/// at most [`MAX_HOST_CALL_BYTES`]: a plugin cannot make the host hold more for one call than
/// it may hold itself. Enforced by wasmtime while it lifts the arguments (its "hostcall fuel"),
/// before any host code runs: a call over it traps, as a plugin error.
pub fn host_call_budget(memory: u64) -> usize {
    usize::try_from(memory)
        .unwrap_or(usize::MAX)
        .min(MAX_HOST_CALL_BYTES)
}

/// How a call into a plugin failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// Cut by its deadline (CPU time, or the wall-clock cap): the deadline of that call.
    Deadline(Duration),
    /// Start-up (instantiate, describe, init, restore) overran `limits.startup_deadline`.
    StartupDeadline(Duration),
    /// The plugin tried to grow its memory beyond the cap.
    OutOfMemory(u64),
    /// Fuel ran out.
    OutOfFuel,
    /// Any other trap (panic, unreachable, bad cast...).
    Trap(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Deadline(d) => write!(f, "deadline of {d:?} exceeded"),
            CallError::StartupDeadline(d) => write!(
                f,
                "startup deadline of {d:?} exceeded (instantiate, describe, init and restore together: limits.startupDeadline)"
            ),
            CallError::OutOfMemory(cap) => write!(f, "memory limit of {cap} bytes exceeded"),
            CallError::OutOfFuel => write!(f, "fuel exhausted"),
            CallError::Trap(t) => write!(f, "trapped: {t}"),
        }
    }
}

/// `e` with the guest's panic message, when it printed one to stderr (since log position
/// `logs_before`) before it trapped.
pub fn with_panic_message(e: &CallError, logs: &LogRing, logs_before: u64) -> String {
    let stderr: Vec<String> = logs
        .since(logs_before)
        .into_iter()
        .filter_map(|l| l.strip_prefix("stderr: ").map(str::to_owned))
        .collect();
    let said = stderr.iter().position(|l| l.contains("panicked")).map(|i| {
        stderr[i..]
            .iter()
            .take(2)
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(" ")
    });
    match said {
        Some(p) => format!("{e} ({})", p.trim()),
        None => e.to_string(),
    }
}

/// The instantiated component, in its world.
enum Guest {
    V0_1(v01::Plugin),
    V0_2(v02::Plugin),
    V0_3(v03::Plugin),
}

/// A plugin instance.
pub struct Instance {
    store: Store<StoreData>,
    plugin: Guest,
    tick: Duration,
    limits: Limits,
    /// While starting (until [`Instance::started`]): what is left of the startup deadline.
    startup_left: Option<Duration>,
    fuel_engine: bool,
    /// Deliveries leave the JSON out (the plugin describes itself `metadata-only`).
    metadata_only: bool,
    /// ABI 0.2's (and 0.3's) `handle`, checked once to take a [`Batch`] for its `list<u8>`
    /// (see [`typed_handle`]).
    handle: Option<wasmtime::component::Func>,
    /// ABI 0.3's `admission` export, when the component has one.
    admission: Option<v03_admission::Admission>,
}

impl Instance {
    /// A fresh store and instance from the pre-instantiated component.
    pub fn new(
        metering: Metering,
        pre: &PluginPre<StoreData>,
        api: HostApi,
        limits: &Limits,
    ) -> Result<Self, CallError> {
        off_async(|| Self::instantiate(metering, pre, api, limits))
    }

    fn instantiate(
        metering: Metering,
        pre: &PluginPre<StoreData>,
        api: HostApi,
        limits: &Limits,
    ) -> Result<Self, CallError> {
        // The component's engine: the host's, or its first-load tier's (Winch).
        let mut store = Store::new(
            pre.engine(),
            StoreData::new(api, limits.memory, limits.startup_deadline),
        );
        store.limiter(|s| &mut s.limiter);
        store.set_hostcall_fuel(host_call_budget(limits.memory));
        // Handles of component resources live in host tables: wasmtime's default is 100,000.
        store.set_max_component_handles(super::state::MAX_WASI_RESOURCES);
        store.epoch_deadline_callback(deadline_check(metering.tick));
        // Instantiation runs wasm (start functions): arm the startup deadline first.
        store.data_mut().clock.start();
        store.set_epoch_deadline(metering.deadline_ticks(limits.startup_deadline));
        if metering.fuel {
            let _ = store.set_fuel(limits.fuel.unwrap_or(u64::MAX));
        }
        let plugin = match pre {
            PluginPre::V0_3(pre, admission) => instantiate_v03(&mut store, pre, admission.as_ref()),
            PluginPre::V0_2(pre) => pre.instantiate(&mut store).map(|p| (Guest::V0_2(p), None)),
            PluginPre::V0_1(pre) => pre.instantiate(&mut store).map(|p| (Guest::V0_1(p), None)),
        };
        let spent = store.data().clock.used().map_or(Duration::ZERO, |(u, _)| u);
        let (plugin, admission) = match plugin {
            Ok(p) => p,
            Err(e) => return Err(classify(&store, limits, e, None)),
        };
        let handle = match &plugin {
            Guest::V0_3(p) => Some(*p.wisp_plugin_listener().func_handle().func()),
            Guest::V0_2(p) => Some(*p.wisp_plugin_listener().func_handle().func()),
            Guest::V0_1(_) => None,
        };
        if let Some(f) = handle {
            f.typed::<(Batch<'_>,), (Vec<Outcome>,)>(&store)
                .map_err(|e| CallError::Trap(format!("handle's signature: {e}")))?;
        }
        Ok(Self {
            store,
            plugin,
            tick: metering.tick,
            startup_left: Some(limits.startup_deadline.saturating_sub(spent)),
            limits: limits.clone(),
            fuel_engine: metering.fuel,
            metadata_only: false,
            handle,
            admission,
        })
    }

    /// Start-up is over: from now on each call has its own deadline (until then, calls share
    /// what is left of the startup deadline).
    pub fn started(&mut self) {
        self.startup_left = None;
    }

    /// The deadline of the next call, of `n` notifications: what is left of the startup
    /// deadline while starting, the call deadline for `n` after.
    fn deadline(&self, n: usize) -> Duration {
        match self.startup_left {
            Some(left) => left,
            None => self.limits.call_deadline(n),
        }
    }

    fn arm(&mut self, deadline: Duration) {
        let ticks = deadline
            .as_nanos()
            .div_ceil(self.tick.as_nanos().max(1))
            .max(1);
        let data = self.store.data_mut();
        data.clock.set_deadline(deadline);
        data.clock.start();
        data.limiter.hit = false;
        self.store
            .set_epoch_deadline(u64::try_from(ticks).unwrap_or(u64::MAX));
        if self.fuel_engine {
            let _ = self.store.set_fuel(self.limits.fuel.unwrap_or(u64::MAX));
        }
    }

    fn fail(&self, e: wasmtime::Error, deadline: Duration) -> CallError {
        let call = self.startup_left.is_none().then_some(deadline);
        classify(&self.store, &self.limits, e, call)
    }

    /// One call into the plugin of `n` notifications (1 for the others): off async code, armed
    /// with its deadline (and fuel), its error classified. While starting, the time it used is
    /// taken from what is left of the startup deadline.
    fn call<R: Send>(
        &mut self,
        n: usize,
        f: impl FnOnce(&Guest, &mut Store<StoreData>) -> wasmtime::Result<R> + Send,
    ) -> Result<R, CallError> {
        off_async(|| {
            let deadline = self.deadline(n);
            self.arm(deadline);
            let r = f(&self.plugin, &mut self.store);
            if let Some(left) = &mut self.startup_left {
                let spent = self.store.data().clock.used().map_or(deadline, |(u, _)| u);
                *left = left.saturating_sub(spent);
            }
            r.map_err(|e| self.fail(e, deadline))
        })
    }

    /// Deliveries leave the JSON out (the plugin describes itself `metadata-only`).
    pub fn set_metadata_only(&mut self, yes: bool) {
        self.metadata_only = yes;
    }

    /// `describe` (which also sets what deliveries carry: see [`Instance::set_metadata_only`]),
    /// its strings bounded (see `bounded_info`).
    pub fn describe(&mut self) -> Result<PluginInfo, CallError> {
        let info = bounded_info(self.describe_call()?);
        self.set_metadata_only(info.metadata_only);
        Ok(info)
    }

    fn describe_call(&mut self) -> Result<PluginInfo, CallError> {
        self.call(1, |p, s| match p {
            Guest::V0_3(p) => p.wisp_plugin_listener().call_describe(s),
            Guest::V0_2(p) => p
                .wisp_plugin_listener()
                .call_describe(s)
                .map(|i| PluginInfo {
                    name: i.name,
                    version: i.version,
                    informers: i.informers,
                    replay_on_reload: i.replay_on_reload,
                    metadata_only: i.metadata_only,
                }),
            Guest::V0_1(p) => p
                .wisp_plugin_listener()
                .call_describe(s)
                .map(|i| PluginInfo {
                    name: i.name,
                    version: i.version,
                    informers: i.informers,
                    replay_on_reload: i.replay_on_reload,
                    metadata_only: false,
                }),
        })
    }

    /// `init(settings)`: the inner error is the plugin refusing its settings.
    pub fn init(&mut self, settings: &str) -> Result<Result<(), String>, CallError> {
        self.call(1, |p, s| match p {
            Guest::V0_3(p) => p.wisp_plugin_listener().call_init(s, settings),
            Guest::V0_2(p) => p.wisp_plugin_listener().call_init(s, settings),
            Guest::V0_1(p) => p.wisp_plugin_listener().call_init(s, settings),
        })
        .map(bounded_refusal)
    }

    /// `handle(batch)` of notifications from `informer`, in the form of the plugin's ABI.
    pub fn handle(
        &mut self,
        informer: &str,
        batch: &[crate::informer::Delivery],
    ) -> Result<Vec<Outcome>, CallError> {
        let mut outcomes = self.handle_call(informer, batch)?;
        for o in &mut outcomes {
            if let Outcome::Error(m) = o {
                bound_text(m, MAX_PLUGIN_MESSAGE);
            }
        }
        Ok(outcomes)
    }

    fn handle_call(
        &mut self,
        informer: &str,
        batch: &[crate::informer::Delivery],
    ) -> Result<Vec<Outcome>, CallError> {
        match self.plugin {
            Guest::V0_3(_) | Guest::V0_2(_) => {
                // Written into the plugin's memory while wasmtime lowers the argument (inside
                // the call, under its deadline: microseconds for a batch of 64).
                let param = Batch::new(informer, batch, self.metadata_only);
                let handle = self.handle;
                self.call(batch.len(), move |_, s| {
                    let f = typed_handle(handle)?;
                    f.call(s, (param,)).map(|(r,)| r)
                })
            }
            Guest::V0_1(_) => super::wit_batch::with_wit_batch(informer, batch, |wit| {
                self.call(batch.len(), |p, s| match p {
                    Guest::V0_1(p) => p.wisp_plugin_listener().call_handle(s, wit),
                    Guest::V0_2(_) | Guest::V0_3(_) => {
                        Err(wasmtime::Error::msg("the instance changed ABI"))
                    }
                })
                .map(|outcomes| {
                    outcomes
                        .into_iter()
                        .map(|o| match o {
                            v01::Outcome::Ok => Outcome::Ok,
                            v01::Outcome::Error(m) => Outcome::Error(m),
                        })
                        .collect()
                })
            }),
        }
    }

    /// `snapshot()`. Its state may be as large as the plugin's memory (one list, which cannot
    /// be aliased): the host-call budget is the memory limit for this call only.
    pub fn snapshot(&mut self) -> Result<Option<Vec<u8>>, CallError> {
        let memory = usize::try_from(self.limits.memory).unwrap_or(usize::MAX);
        self.store.set_hostcall_fuel(memory);
        let r = self.call(1, |p, s| match p {
            Guest::V0_3(p) => p.wisp_plugin_listener().call_snapshot(s),
            Guest::V0_2(p) => p.wisp_plugin_listener().call_snapshot(s),
            Guest::V0_1(p) => p.wisp_plugin_listener().call_snapshot(s),
        });
        self.store
            .set_hostcall_fuel(host_call_budget(self.limits.memory));
        r
    }

    /// Whether the instance takes admission requests (a 0.3 component exporting `admission`).
    pub fn admits(&self) -> bool {
        self.admission.is_some()
    }

    /// `admit(request)`, under the call deadline, with verdicts and actions refused while it
    /// runs: the plugin's answer, its texts bounded (see [`bounded_response`]); the inner error
    /// is the plugin failing (its own error, not a denial). A call error is a trap, a deadline
    /// or a component that takes no admission requests.
    pub fn admit(
        &mut self,
        request: &v03_admission::Request,
    ) -> Result<Result<v03_admission::Response, String>, CallError> {
        let Some(admission) = self.admission.clone() else {
            return Err(CallError::Trap(
                "the component takes no admission requests (it does not export \
                 wisp:plugin/admission@0.3.0)"
                    .into(),
            ));
        };
        self.store.data_mut().admitting = true;
        let r = self.call(1, |_, s| admission.call_admit(s, request));
        self.store.data_mut().admitting = false;
        r.map(|r| {
            r.map(bounded_response).map_err(|mut m| {
                bound_text(&mut m, MAX_PLUGIN_MESSAGE);
                m
            })
        })
    }

    /// `restore(state)`.
    pub fn restore(&mut self, state: &[u8]) -> Result<Result<(), String>, CallError> {
        self.call(1, |p, s| match p {
            Guest::V0_3(p) => p.wisp_plugin_listener().call_restore(s, state),
            Guest::V0_2(p) => p.wisp_plugin_listener().call_restore(s, state),
            Guest::V0_1(p) => p.wisp_plugin_listener().call_restore(s, state),
        })
        .map(bounded_refusal)
    }
}

/// A 0.3.0 component's instance: the world's exports, and `admission` when it has it.
fn instantiate_v03(
    store: &mut Store<StoreData>,
    pre: &v03::PluginPre<StoreData>,
    admission: Option<&v03_admission::AdmissionIndices>,
) -> wasmtime::Result<(Guest, Option<v03_admission::Admission>)> {
    let instance = pre.instance_pre().instantiate(&mut *store)?;
    let plugin = v03::Plugin::new(&mut *store, &instance)?;
    let admission = admission
        .map(|a| a.load(&mut *store, &instance))
        .transpose()?;
    Ok((Guest::V0_3(plugin), admission))
}

/// ABI 0.2's `handle` taking a [`Batch`] (lowered as the `list<u8>` it is).
fn typed_handle<'a>(
    handle: Option<wasmtime::component::Func>,
) -> wasmtime::Result<wasmtime::component::TypedFunc<(Batch<'a>,), (Vec<Outcome>,)>> {
    let f = handle.ok_or_else(|| wasmtime::Error::msg("the instance changed ABI"))?;
    // SAFETY: `f` is the instance's `handle`, typechecked as taking a `Batch` and returning
    // `list<outcome>` when the instance was made (`Func::typed` in `instantiate`); a `Batch` of
    // any lifetime has the same type.
    #[allow(unsafe_code)]
    let typed = unsafe { wasmtime::component::TypedFunc::new_unchecked(f) };
    Ok(typed)
}

/// Longest plugin name a `describe` may give (bytes; a Kubernetes name label's length).
pub const MAX_PLUGIN_NAME: usize = 63;
/// Longest version a `describe` may give (bytes).
pub const MAX_PLUGIN_VERSION: usize = 64;
/// Most informers a `describe` may name, and the longest name (bytes).
pub const MAX_DESCRIBED_INFORMERS: usize = 64;
/// See [`MAX_DESCRIBED_INFORMERS`].
pub const MAX_INFORMER_NAME: usize = 253;
/// Longest message a plugin's error outcome or refusal keeps (bytes; the rest is cut).
pub const MAX_PLUGIN_MESSAGE: usize = 4096;

/// `text` cut to `max` bytes and escaped to one printable line, in place.
fn bound_text(text: &mut String, max: usize) {
    let clipped = crate::plugin::status::clip(text, max);
    let bounded = crate::plugin::status::escape_line(&clipped);
    if bounded != text.as_str() {
        *text = bounded.into_owned();
    }
}

/// What a `describe` says, its strings within the bounds above: what the host keeps, logs and
/// copies into every verdict cannot be made large by a plugin.
fn bounded_info(mut info: PluginInfo) -> PluginInfo {
    bound_text(&mut info.name, MAX_PLUGIN_NAME);
    bound_text(&mut info.version, MAX_PLUGIN_VERSION);
    info.informers.truncate(MAX_DESCRIBED_INFORMERS);
    for i in &mut info.informers {
        bound_text(i, MAX_INFORMER_NAME);
    }
    info
}

/// Most warnings an admission answer keeps, and the longest (bytes); the API server keeps
/// fewer (it cuts all of a request's warnings to 4 KiB).
pub const MAX_ADMISSION_WARNINGS: usize = 32;
/// See [`MAX_ADMISSION_WARNINGS`].
pub const MAX_ADMISSION_WARNING: usize = 512;
/// Most audit annotations an admission answer keeps, and the longest key and value (bytes).
pub const MAX_AUDIT_ANNOTATIONS: usize = 32;
/// See [`MAX_AUDIT_ANNOTATIONS`].
pub const MAX_AUDIT_ANNOTATION: usize = 1024;

/// An admission answer within the bounds above (its message as an error outcome's): what the
/// host keeps and sends on cannot be made large by a plugin. The patch is checked where it is
/// applied.
fn bounded_response(mut r: v03_admission::Response) -> v03_admission::Response {
    bound_text(&mut r.message, MAX_PLUGIN_MESSAGE);
    r.warnings.truncate(MAX_ADMISSION_WARNINGS);
    for w in &mut r.warnings {
        bound_text(w, MAX_ADMISSION_WARNING);
    }
    r.audit_annotations.truncate(MAX_AUDIT_ANNOTATIONS);
    for (k, v) in &mut r.audit_annotations {
        bound_text(k, MAX_AUDIT_ANNOTATION);
        bound_text(v, MAX_AUDIT_ANNOTATION);
    }
    r
}

fn bounded_refusal(r: Result<(), String>) -> Result<(), String> {
    r.map_err(|mut m| {
        bound_text(&mut m, MAX_PLUGIN_MESSAGE);
        m
    })
}

/// What happens when a call's epoch deadline passes. The deadline is CPU time of the thread
/// running the call plus time it spent blocked in host calls (see [`clock`](super::clock)):
/// with more busy threads than cores, a call can wait for a core for longer than its deadline
/// while running far less, and cutting it then would fail a healthy plugin (and quarantine it,
/// under load). So the call is cut when it has used `deadline`, or after
/// [`WALL_CAP_FACTOR`](super::clock::WALL_CAP_FACTOR) times its deadline of wall time, whichever
/// comes first; otherwise the deadline is pushed back by the time it has left. On an idle
/// machine CPU time and wall time are the same and the cut comes at the deadline, to one epoch
/// tick. Where the thread's CPU time cannot be read, the deadline is wall-clock time.
fn deadline_check(
    tick: Duration,
) -> impl FnMut(wasmtime::StoreContextMut<'_, StoreData>) -> wasmtime::Result<wasmtime::UpdateDeadline>
+ Send
+ Sync
+ 'static {
    move |ctx| {
        let clock = &ctx.data().clock;
        let Some((used, wall)) = clock.used() else {
            return Ok(wasmtime::UpdateDeadline::Interrupt);
        };
        if used >= clock.deadline || wall >= clock.wall_cap {
            return Ok(wasmtime::UpdateDeadline::Interrupt);
        }
        let left = clock.deadline - used;
        let ticks = left.as_nanos().div_ceil(tick.as_nanos().max(1)).max(1);
        Ok(wasmtime::UpdateDeadline::Continue(
            u64::try_from(ticks).unwrap_or(u64::MAX),
        ))
    }
}

/// Runs `f` where wasmtime-wasi's synchronous host calls work. Those (a write to stdout, a
/// stream drop, a poll) block on a Tokio runtime — their own when the thread has none — which
/// panics on a thread driving async tasks. Plugin calls made from async code (the startup checks,
/// `wisp check` and `wisp replay`, tests) therefore run on a scoped thread of their own; the
/// listeners' threads and the executor's workers, which have no runtime, call directly.
pub fn off_async<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|s| match s.spawn(f).join() {
        Ok(r) => r,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

/// What `e` was; `call` is the call's deadline, `None` while starting (a cut is then the startup
/// deadline's).
fn classify(
    store: &Store<StoreData>,
    limits: &Limits,
    e: wasmtime::Error,
    call: Option<Duration>,
) -> CallError {
    let cut = || match call {
        Some(d) => CallError::Deadline(d),
        None => CallError::StartupDeadline(limits.startup_deadline),
    };
    if store.data().limiter.hit {
        return CallError::OutOfMemory(limits.memory);
    }
    if store.data().clock.cut {
        return cut();
    }
    match e.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => cut(),
        Some(Trap::OutOfFuel) => CallError::OutOfFuel,
        // wasmtime's error type for it is private: its message is what names it.
        _ if e.chain().any(|c| {
            c.to_string()
                .contains("fuel allocated for hostcalls has been exhausted")
        }) =>
        {
            CallError::Trap(format!(
                "a host call passed more than {} bytes (strings and lists as copied, a repeated string counted each time; the budget is limits.memory, at most {} MiB)",
                store.hostcall_fuel(),
                MAX_HOST_CALL_BYTES >> 20
            ))
        }
        _ => {
            // The root cause ("wasm trap: ..."), without the wasm backtrace.
            let mut msg = e.root_cause().to_string();
            if msg.len() > 2000 {
                let mut cut = 2000;
                while !msg.is_char_boundary(cut) {
                    cut -= 1;
                }
                msg.truncate(cut);
                msg.push_str(" ...");
            }
            CallError::Trap(msg)
        }
    }
}
