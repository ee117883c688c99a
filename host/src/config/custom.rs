//! `customResources:`: plugins defined as `WispPlugin` (namespaced) and `ClusterWispPlugin`
//! custom resources, and what the operator lets them ask for. A custom resource's `spec` is
//! read into a config of its own (the host's settings, its informers, its one plugin) and
//! validated as the file is, then confined: a `WispPlugin` sees and acts only in its own
//! namespace, nothing a custom resource asks may exceed `maxLimits` or `allowedGrants`, and its
//! module is pulled from a registry or read from under `modulePaths` (`module_paths`).

use super::*;
use crate::actions::ActionGrant;

mod module_paths;

/// The API group of the CRDs (deploy/crds.yaml).
pub const GROUP: &str = "wisp.io";
/// Their version.
pub const VERSION: &str = "v1alpha1";
/// The two kinds: kind, plural, namespaced.
pub const KINDS: [(&str, &str, bool); 2] = [
    ("WispPlugin", "wispplugins", true),
    ("ClusterWispPlugin", "clusterwispplugins", false),
];

/// `customResources:` (off when omitted).
#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CustomResourcesConfig {
    /// Read plugins from custom resources (default false).
    #[serde(default)]
    pub enabled: bool,
    /// The namespaces whose `WispPlugin`s are read; omitted = every namespace.
    #[serde(default)]
    pub namespaces: Option<Vec<String>>,
    /// Read `ClusterWispPlugin`s (default true).
    #[serde(default = "yes")]
    pub cluster: bool,
    /// The most a custom resource may ask for; an omitted limit takes the default or, when
    /// that is over the cap, the cap.
    #[serde(default)]
    pub max_limits: MaxLimits,
    /// What custom resources may be granted (each of their grants must be covered by one of
    /// these); default none.
    #[serde(default)]
    pub allowed_grants: Vec<ActionGrant>,
    /// How often each custom resource's status counters are refreshed (default 30s); a
    /// change of condition is written at once.
    #[serde(default)]
    pub status_interval: Option<Dur>,
    /// The directories (relative to the config file, or absolute) a custom resource's module
    /// path may be in; default none: custom resources name only `oci://` modules.
    #[serde(default)]
    pub module_paths: Vec<PathBuf>,
    /// The most custom resources run from one namespace (default 20); past it a new one is
    /// refused in its status, those that run are untouched.
    #[serde(default)]
    pub max_per_namespace: Option<usize>,
    /// The most custom resources run in all (default 200), as `maxPerNamespace`.
    #[serde(default)]
    pub max_total: Option<usize>,
    /// The most custom resources applied at once (pulled, compiled, checked; default 4).
    #[serde(default)]
    pub concurrent_applies: Option<usize>,
    /// The most of one namespace's custom resources applied at once (default 1; the
    /// `ClusterWispPlugin`s count as one namespace): the others' wait for a free apply, taken
    /// in turn by namespace, so one namespace's slow compiles do not hold another's.
    #[serde(default)]
    pub concurrent_applies_per_namespace: Option<usize>,
}

/// The caps on what a custom resource asks (`customResources.maxLimits`); omitted = no cap.
/// Each cap is itself a valid value of its setting (checked with the config).
#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MaxLimits {
    /// `limits.memory`.
    pub memory: Option<Bytes>,
    /// `limits.deadline`.
    pub deadline: Option<Dur>,
    /// `limits.deadlinePerNotification`.
    pub deadline_per_notification: Option<Dur>,
    /// `limits.startupDeadline`.
    pub startup_deadline: Option<Dur>,
    /// `limits.fuel` (with `engine.fuel`): a custom resource without one gets the cap.
    pub fuel: Option<u64>,
    /// `batch`.
    pub batch: Option<usize>,
    /// `queue.max`.
    pub queue: Option<usize>,
    /// `queue.maxBytes`.
    pub queue_bytes: Option<Bytes>,
    /// `onFailure.quarantineAfter`: the most failures in a row before quarantine; a custom
    /// resource's 0 (never) is over any cap.
    pub quarantine_after: Option<u32>,
    /// `onFailure.retries`: the most times a failed call is made again.
    pub retries: Option<u32>,
    /// `actions.rateLimit.perSecond`.
    pub actions_per_second: Option<f64>,
    /// `actions.rateLimit.burst`.
    pub actions_burst: Option<u32>,
    /// `actions.queue`: the most actions waiting to be sent.
    pub actions_queue: Option<usize>,
    /// `actions.retries`: the most further attempts of an action.
    pub actions_retries: Option<u32>,
}

/// The default status refresh of custom resources.
pub const DEFAULT_STATUS_INTERVAL: Duration = Duration::from_secs(30);

/// The default of `customResources.maxPerNamespace`.
pub const DEFAULT_MAX_PER_NAMESPACE: usize = 20;
/// The default of `customResources.maxTotal`.
pub const DEFAULT_MAX_TOTAL: usize = 200;
/// The default of `customResources.concurrentApplies`.
pub const DEFAULT_CONCURRENT_APPLIES: usize = 4;
/// The default of `customResources.concurrentAppliesPerNamespace`.
pub const DEFAULT_CONCURRENT_APPLIES_PER_NAMESPACE: usize = 1;

impl CustomResourcesConfig {
    /// `statusInterval` in force.
    pub fn status_interval(&self) -> Duration {
        self.status_interval
            .map_or(DEFAULT_STATUS_INTERVAL, |d| d.0)
    }

    /// `maxPerNamespace` in force.
    pub fn max_per_namespace(&self) -> usize {
        self.max_per_namespace.unwrap_or(DEFAULT_MAX_PER_NAMESPACE)
    }

    /// `maxTotal` in force.
    pub fn max_total(&self) -> usize {
        self.max_total.unwrap_or(DEFAULT_MAX_TOTAL)
    }

    /// `concurrentApplies` in force.
    pub fn concurrent_applies(&self) -> usize {
        self.concurrent_applies
            .unwrap_or(DEFAULT_CONCURRENT_APPLIES)
    }

    /// `concurrentAppliesPerNamespace` in force (at most `concurrentApplies`).
    pub fn concurrent_applies_per_namespace(&self) -> usize {
        self.concurrent_applies_per_namespace
            .unwrap_or(DEFAULT_CONCURRENT_APPLIES_PER_NAMESPACE)
            .min(self.concurrent_applies())
    }
}

/// Which custom resource a plugin comes from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CustomRef {
    /// `WispPlugin` or `ClusterWispPlugin`.
    pub kind: &'static str,
    /// The namespace of a `WispPlugin`.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

impl CustomRef {
    /// The plugin's name in the host: `NAMESPACE/NAME` for a `WispPlugin`, `NAME` for a
    /// `ClusterWispPlugin` (a config plugin of the same name refuses it).
    pub fn plugin_name(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }
}

impl std::fmt::Display for CustomRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.plugin_name())
    }
}

/// Why a custom resource was refused: a reason for its `Degraded` condition and the error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomRefusal {
    /// `Invalid`, `OverCap`, `NotAllowed`.
    pub reason: &'static str,
    /// What is wrong and where (`spec.…`).
    pub error: ConfigError,
}

impl std::fmt::Display for CustomRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl Config {
    /// The config of one custom resource's plugin: this config's settings, the resource's
    /// inline informers and its plugin (named as [`CustomRef::plugin_name`]), validated as a
    /// file is, confined and capped. Errors name the resource and the `spec` field.
    pub fn custom_plugin(
        &self,
        cr: &CustomRef,
        spec: &serde_json::Value,
    ) -> Result<Config, CustomRefusal> {
        let file = cr.to_string();
        let invalid = |path: String, problem: String| CustomRefusal {
            reason: "Invalid",
            error: ConfigError {
                file: file.clone(),
                path,
                problem,
            },
        };
        let mut spec = spec.clone();
        let Some(obj) = spec.as_object_mut() else {
            return Err(invalid("spec".into(), "must be an object".into()));
        };
        let informers = obj.remove("informers").unwrap_or_default();
        let informers: Vec<InformerConfig> =
            serde_path_to_error::deserialize(informers).map_err(|e| {
                invalid(
                    format!("spec.informers{}", dotted(&e.path().to_string())),
                    e.into_inner().to_string(),
                )
            })?;
        let names: Vec<serde_json::Value> =
            informers.iter().map(|i| i.name.clone().into()).collect();
        obj.insert("informers".into(), names.into());
        obj.insert("name".into(), cr.plugin_name().into());
        let mut plugin: PluginConfig = serde_path_to_error::deserialize(spec).map_err(|e| {
            invalid(
                format!("spec{}", dotted(&e.path().to_string())),
                e.into_inner().to_string(),
            )
        })?;
        let limits = self.custom_resources.clone().unwrap_or_default();
        // Before validation, which looks at the file: a path outside is refused unlooked at.
        let confined = self
            .confine_module(&plugin.module, &limits.module_paths)
            .map_err(|problem| CustomRefusal {
                reason: "NotAllowed",
                ..invalid("spec.module".into(), problem.to_string())
            })?;
        plugin.module = confined.unwrap_or(plugin.module);
        let mut c = self.clone();
        c.file = file.clone();
        c.informers = informers;
        c.plugins = vec![plugin];
        c.confine_to_namespace(cr)?;
        c.validate().map_err(|e| CustomRefusal {
            reason: "Invalid",
            error: custom_path(e),
        })?;
        c.confine(cr, &limits)?;
        Ok(c)
    }

    /// Confines a `WispPlugin`'s informers and grants to its namespace: before validation,
    /// whose checks (the host's own Leases) judge the namespaces they will have.
    fn confine_to_namespace(&mut self, cr: &CustomRef) -> Result<(), CustomRefusal> {
        let Some(ns) = &cr.namespace else {
            return Ok(());
        };
        let refuse = |path: String, problem| refusal(cr, "NotAllowed", &path, problem);
        let cluster_scoped = |api_version: &str, kind: &str| {
            let (group, _) = wisp_kinds::split_api_version(api_version);
            wisp_kinds::builtin_namespaced(group, kind) == Some(false)
        };
        for (i, inf) in self.informers.iter_mut().enumerate() {
            let at = format!("spec.informers[{i}]");
            confine_namespaces(&mut inf.namespaces, ns)
                .map_err(|p| refuse(format!("{at}.namespaces"), p.to_string()))?;
            if cluster_scoped(&inf.api_version, &inf.kind) {
                let why = format!(
                    "{} is cluster-scoped: a WispPlugin sees only its own namespace {ns:?} (a \
                     ClusterWispPlugin may watch it)",
                    inf.kind
                );
                return Err(refuse(format!("{at}.kind"), why));
            }
        }
        for (i, g) in self.plugins[0].actions.grants.iter_mut().enumerate() {
            let at = format!("spec.actions.grants[{i}]");
            confine_namespaces(&mut g.namespaces, ns)
                .map_err(|e| refuse(format!("{at}.namespaces"), e.to_string()))?;
            if cluster_scoped(&g.api_version, &g.kind) {
                let why = format!(
                    "{} is cluster-scoped: a WispPlugin acts only in {ns:?}",
                    g.kind
                );
                return Err(refuse(format!("{at}.kind"), why));
            }
        }
        Ok(())
    }

    /// Confines the one plugin of a custom resource's config, validated, to what the operator
    /// allows.
    fn confine(
        &mut self,
        cr: &CustomRef,
        allowed: &CustomResourcesConfig,
    ) -> Result<(), CustomRefusal> {
        let refuse = |reason, path: &str, problem| refusal(cr, reason, path, problem);
        for (i, inf) in self.informers.iter().enumerate() {
            let at = format!("spec.informers[{i}]");
            if inf.on_panic == OnPanic::Stop {
                return Err(refuse(
                    "NotAllowed",
                    &format!("{at}.onPanic"),
                    "exit would stop the host: only the config file may ask for it".into(),
                ));
            }
            over_default(inf).map_err(|(f, p)| refuse("OverCap", &format!("{at}.{f}"), p))?;
        }
        let p = &mut self.plugins[0];
        for (i, g) in p.actions.grants.iter().enumerate() {
            if !covered(g, &allowed.allowed_grants) {
                return Err(refuse(
                    "NotAllowed",
                    &format!("spec.actions.grants[{i}]"),
                    format!(
                        "{:?} on {} {} {} is not allowed: customResources.allowedGrants does not \
                         cover it",
                        g.verbs,
                        g.api_version,
                        g.kind,
                        g.namespaces
                            .as_ref()
                            .map_or("in every namespace".into(), |n| format!("in {n:?}"))
                    ),
                ));
            }
        }
        cap_limits(p, &allowed.max_limits)
            .map_err(|(f, e)| refuse("OverCap", &format!("spec.{f}"), e))
    }
}

/// A refusal of custom resource `cr` for `reason` at `path`.
fn refusal(cr: &CustomRef, reason: &'static str, path: &str, problem: String) -> CustomRefusal {
    CustomRefusal {
        reason,
        error: ConfigError {
            file: cr.to_string(),
            path: path.to_owned(),
            problem,
        },
    }
}

/// A namespace a `WispPlugin` asks for besides its own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a WispPlugin sees and acts only in its own namespace {own:?}; it asks for {asked:?}")]
struct OtherNamespace {
    own: String,
    asked: String,
}

/// `namespaces` of a `WispPlugin`'s informer or grant: omitted = its own namespace; any other
/// namespace is refused.
fn confine_namespaces(
    namespaces: &mut Option<Vec<String>>,
    ns: &str,
) -> Result<(), OtherNamespace> {
    match namespaces {
        None => {
            *namespaces = Some(vec![ns.to_owned()]);
            Ok(())
        }
        Some(list) => match list.iter().find(|n| *n != ns) {
            Some(other) => Err(OtherNamespace {
                own: ns.to_owned(),
                asked: other.clone(),
            }),
            None => Ok(()),
        },
    }
}

/// Whether one of `allowed` covers every verb of `g` on its kind, in its namespaces.
fn covered(g: &ActionGrant, allowed: &[ActionGrant]) -> bool {
    g.verbs.iter().all(|verb| {
        allowed.iter().any(|a| {
            a.verbs.contains(verb)
                && a.api_version == g.api_version
                && a.kind == g.kind
                && match (&a.namespaces, &g.namespaces) {
                    (None, _) => true,
                    (Some(_), None) => false,
                    (Some(a), Some(g)) => g.iter().all(|n| a.contains(n)),
                }
        })
    })
}

/// An informer's response caps may not be raised by a custom resource.
fn over_default(inf: &InformerConfig) -> Result<(), (&'static str, String)> {
    use crate::informer::lister_watcher::ListCaps;
    use crate::source::kube::SizeCaps;
    let over = |b: &Option<Bytes>, d: u64| b.as_ref().is_some_and(|b| b.0 > d);
    for (field, v, d) in [
        (
            "maxEventSize",
            &inf.max_event_size,
            SizeCaps::DEFAULT_WATCH_EVENT as u64,
        ),
        (
            "maxListSize",
            &inf.max_list_size,
            SizeCaps::DEFAULT_LIST_BODY as u64,
        ),
        (
            "maxListTotalSize",
            &inf.max_list_total_size,
            ListCaps::DEFAULT_BYTES,
        ),
    ] {
        if over(v, d) {
            return Err((field, format!("over the host's default of {d} bytes")));
        }
    }
    if inf
        .max_list_objects
        .is_some_and(|n| n > ListCaps::DEFAULT_OBJECTS)
    {
        return Err((
            "maxListObjects",
            format!("over the host's default of {}", ListCaps::DEFAULT_OBJECTS),
        ));
    }
    Ok(())
}

/// Refuses a limit over its cap; fills an omitted one with the default, or the cap when the
/// default is over it.
fn cap_limits(p: &mut PluginConfig, max: &MaxLimits) -> Result<(), (&'static str, String)> {
    cap_call_limits(&mut p.limits, max)?;
    let count = |c: usize| c.to_string();
    cap(
        ("batch", "batch"),
        &mut p.batch,
        DEFAULT_BATCH_MAX,
        max.batch,
        count,
    )?;
    let q = &mut p.queue;
    cap(
        ("queue", "queue.max"),
        &mut q.max,
        DEFAULT_QUEUE_MAX,
        max.queue,
        count,
    )?;
    cap(
        ("queueBytes", "queue.maxBytes"),
        &mut q.max_bytes,
        Bytes(DEFAULT_QUEUE_BYTES as u64),
        max.queue_bytes,
        |c| format!("{} bytes", c.0),
    )?;
    if max.quarantine_after.is_some() {
        // 0 is never: as many failures as there can be.
        let never = |n: u32| if n == 0 { u32::MAX } else { n };
        let mut after = p.on_failure.quarantine_after.map(never);
        cap(
            ("quarantineAfter", "onFailure.quarantineAfter"),
            &mut after,
            OnFailure::default().quarantine_after,
            max.quarantine_after,
            |c| format!("{c}; 0 is never, over any cap"),
        )?;
        p.on_failure.quarantine_after = after;
    }
    cap(
        ("retries", "onFailure.retries"),
        &mut p.on_failure.retries,
        DEFAULT_RETRIES,
        max.retries,
        |c| c.to_string(),
    )?;
    let d = ActionSpec::default();
    let a = &mut p.actions;
    cap(
        ("actionsQueue", "actions.queue"),
        &mut a.queue,
        d.queue,
        max.actions_queue,
        count,
    )?;
    cap(
        ("actionsRetries", "actions.retries"),
        &mut a.retries,
        d.retries,
        max.actions_retries,
        |c| c.to_string(),
    )?;
    cap_rate_limit(&mut a.rate_limit, max)
}

/// `limits` (memory, deadlines, fuel) under their caps.
fn cap_call_limits(l: &mut LimitsConfig, max: &MaxLimits) -> Result<(), (&'static str, String)> {
    let d = Limits::default();
    let bytes = |c: Bytes| format!("{} bytes", c.0);
    cap(
        ("memory", "limits.memory"),
        &mut l.memory,
        Bytes(d.memory),
        max.memory,
        bytes,
    )?;
    for (key, field, value, default, cap_of) in [
        (
            "deadline",
            "limits.deadline",
            &mut l.deadline,
            d.deadline,
            max.deadline,
        ),
        (
            "deadlinePerNotification",
            "limits.deadlinePerNotification",
            &mut l.deadline_per_notification,
            d.deadline_per_notification,
            max.deadline_per_notification,
        ),
        (
            "startupDeadline",
            "limits.startupDeadline",
            &mut l.startup_deadline,
            d.startup_deadline,
            max.startup_deadline,
        ),
    ] {
        cap((key, field), value, Dur(default), cap_of, |c| {
            format!("{:?}", c.0)
        })?;
    }
    // No fuel is no limit: an omitted one gets the cap.
    cap(
        ("fuel", "limits.fuel"),
        &mut l.fuel,
        u64::MAX,
        max.fuel,
        |c| c.to_string(),
    )
}

/// `actions.rateLimit` under `actionsPerSecond` and `actionsBurst`: an omitted one gets the
/// default rate and burst, each capped.
fn cap_rate_limit(
    r: &mut Option<RateLimitConfig>,
    max: &MaxLimits,
) -> Result<(), (&'static str, String)> {
    if max.actions_per_second.is_none() && max.actions_burst.is_none() {
        return Ok(());
    }
    let d = ActionSpec::default();
    let (mut per_second, mut burst) = (
        r.as_ref().map(|r| r.per_second),
        r.as_ref().map(|r| r.burst),
    );
    cap(
        ("actionsPerSecond", "actions.rateLimit.perSecond"),
        &mut per_second,
        d.per_second,
        max.actions_per_second,
        |c| c.to_string(),
    )?;
    cap(
        ("actionsBurst", "actions.rateLimit.burst"),
        &mut burst,
        d.burst,
        max.actions_burst,
        |c| c.to_string(),
    )?;
    *r = Some(RateLimitConfig {
        per_second: per_second.unwrap_or(d.per_second),
        burst: burst.unwrap_or(d.burst),
    });
    Ok(())
}

/// One cap of `customResources.maxLimits.<key>` on `spec.<field>`: a value over it is refused
/// naming both; an omitted value gets `default`, or the cap when that is less.
fn cap<T: Copy + PartialOrd>(
    (key, field): (&'static str, &'static str),
    value: &mut Option<T>,
    default: T,
    cap: Option<T>,
    show: impl Fn(T) -> String,
) -> Result<(), (&'static str, String)> {
    let Some(cap) = cap else {
        return Ok(());
    };
    let asked = value.unwrap_or(if default > cap { cap } else { default });
    if asked > cap {
        return Err((
            field,
            format!("over customResources.maxLimits.{key} ({})", show(cap)),
        ));
    }
    *value = Some(asked);
    Ok(())
}

/// serde_path_to_error's path (`limits.deadline`, `.`) as a suffix of `spec`.
fn dotted(path: &str) -> String {
    match path {
        "." | "" => String::new(),
        p if p.starts_with('[') => p.to_owned(),
        p => format!(".{p}"),
    }
}

/// A validation error of a custom resource's config, its path in the resource's terms.
fn custom_path(mut e: ConfigError) -> ConfigError {
    e.path = if let Some(rest) = e.path.strip_prefix("plugins[0].") {
        format!("spec.{rest}")
    } else if e.path.starts_with("informers") {
        format!("spec.{}", e.path)
    } else if e.path == "plugins[0]" {
        "spec".into()
    } else {
        e.path
    };
    e
}

#[cfg(test)]
mod tests;
