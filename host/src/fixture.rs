//! `wisp test`: fixture files run against a plugin module, offline.
//!
//! A fixture file (YAML) holds cases. The module is compiled (or taken from the module cache)
//! and linked once per run; each case starts a fresh instance of it with its settings, seeds the
//! informers' caches, feeds notifications one at a time, then compares what the plugin did with
//! what the case expects:
//!
//! ```yaml
//! settings: {denyLatest: true}      # for every case (a case may override); default {}
//! informers: [pods, namespaces]     # granted (a case may override); default: those the
//!                                   #   plugin's describe names and those the file names
//! informer: pods                    # informer of the steps; default: the first granted
//! indexes: {pods: [field:spec.nodeName, ownerUid]}   # as the config's informers declare them
//! actions:                          # grants, as in the config; actions are audited, never sent
//!   grants: [{verbs: [patch], apiVersion: v1, kind: Pod}]
//! cases:
//!   - name: a pod on latest violates latest-tag
//!     cache: {pods: [OBJECT, ...]}  # cached before the first step, not delivered
//!     steps:
//!       - add: OBJECT               # also: list (an add of the initial list), update, resync,
//!       - update: OBJECT            #   delete (OBJECT or "namespace/name"), each with an
//!       - delete: shop/db-0         #   optional `informer:` (and `finalStateUnknown: true`
//!                                   #   for a delete the informer missed)
//!       - admit: {operation: CREATE, object: OBJECT}   # an admission request (`admit`)
//!     expect:
//!       init: "substring"           # init refuses the settings with this message
//!       outcomes: [ok, "error: substring", allowed, "denied: substring"]   # per step;
//!                                   #   default: every notification ok, every admit allowed
//!       admissions: [{allowed: false, message: substring}]   # per admit step (`admit` module)
//!       verdicts:                   # exactly these violations are current at the end
//!         - {rule: latest-tag, object: shop/db-0, severity: high, message: "..."}
//!       actions:                    # exactly these actions were asked for, in order
//!         - {verb: patch, kind: Pod, object: shop/db-0, result: dry-run, body: {...}}
//!       logs: ["warn: violation"]   # in this order, each within a later line
//!       counters: {'policy_violations_total{rule="latest-tag"}': 1}
//!       gauges: {'pods_per_node{node="n1"}': 2}
//! ```
//!
//! An OBJECT is the object itself or `{file: path}`, a YAML or JSON manifest relative to the
//! fixture file's directory, and inside it: an absolute path, a `..` or a link leading out of
//! it, anything but a regular file and a file over 16 MiB are refused, naming the path and why
//! (a fixture may come with a plugin under review). The update of an object has the cached one
//! as its old version.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use serde::Deserialize;
use serde_json::Value;

use crate::actions::{ActionGrant, ActionSpec, HostServices};
use crate::files::{self, FileRefused};
use crate::informer::object::Tombstone;
use crate::informer::{DeletedObject, Delivery, Indexer, Notification, Object, key::object_key};
use crate::plugin::loader::{PreparedFile, check_prepared, prepare_file};
use crate::plugin::runtime::PluginRuntime;
use crate::plugin::state::Grants;
use crate::plugin::{CheckedPlugin, PluginEngine, PluginSpec, PluginStatus};
use crate::policy::VerdictFilter;
use crate::record::{Fed, feed};

mod admit;

/// The largest fixture file, and object file, read: the `dir:` source's default cap.
pub const MAX_FILE_SIZE: u64 = crate::source::dir::DEFAULT_MAX_FILE_SIZE;

/// A fixture file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    settings: Option<Value>,
    #[serde(default)]
    informers: Option<Vec<String>>,
    #[serde(default)]
    informer: Option<String>,
    #[serde(default)]
    actions: Option<Actions>,
    /// Per informer, its indexes as the config writes them (`label:KEY`, `ownerUid`,
    /// `field:a.b.c`).
    #[serde(default)]
    indexes: BTreeMap<String, Vec<String>>,
    cases: Vec<Case>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Actions {
    #[serde(default)]
    grants: Vec<ActionGrant>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    #[serde(default)]
    settings: Option<Value>,
    #[serde(default)]
    informers: Option<Vec<String>>,
    #[serde(default)]
    cache: BTreeMap<String, Vec<Value>>,
    #[serde(default)]
    steps: Vec<Step>,
    #[serde(default)]
    expect: Expect,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Step {
    #[serde(default)]
    informer: Option<String>,
    /// A `delete` the informer missed (a tombstone: the last state known).
    #[serde(default, rename = "finalStateUnknown")]
    final_state_unknown: bool,
    #[serde(flatten)]
    event: Event,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Event {
    Add(Value),
    List(Value),
    Update(Value),
    Resync(Value),
    Delete(Value),
    Admit(admit::AdmitStep),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    #[serde(default)]
    init: Option<String>,
    #[serde(default)]
    outcomes: Option<Vec<String>>,
    #[serde(default)]
    admissions: Option<Vec<admit::ExpectAdmission>>,
    #[serde(default)]
    verdicts: Option<Vec<ExpectVerdict>>,
    #[serde(default)]
    actions: Option<Vec<ExpectAction>>,
    #[serde(default)]
    logs: Vec<String>,
    #[serde(default)]
    counters: BTreeMap<String, u64>,
    #[serde(default)]
    gauges: BTreeMap<String, f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectVerdict {
    rule: String,
    object: String,
    #[serde(default)]
    severity: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectAction {
    verb: String,
    kind: String,
    object: String,
    #[serde(default)]
    result: Option<String>,
    #[serde(default)]
    body: Option<Value>,
    #[serde(default)]
    detail: Option<String>,
}

/// What `wisp test` found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TestSummary {
    /// Cases run.
    pub cases: usize,
    /// Cases whose expectations all held.
    pub passed: usize,
}

/// Runs every case of the fixture file `fixtures` against `module` (loaded once), writing one
/// line per case (and what differed) to `out`. An error is a fixture that cannot be read or a
/// module that cannot be loaded; failed expectations are counted in the summary.
pub fn run(
    engine: &Arc<PluginEngine>,
    module: &Path,
    fixtures: &Path,
    out: &mut dyn Write,
) -> anyhow::Result<TestSummary> {
    let plugin = load(engine, module, out)?;
    run_loaded(engine, &plugin, fixtures, out)
}

/// Loads `module` for [`run_loaded`]: compiled (or taken from the module cache) and linked once,
/// for a fresh instance per case; writes to `out` where it came from and how long it took.
pub fn load(
    engine: &Arc<PluginEngine>,
    module: &Path,
    out: &mut dyn Write,
) -> anyhow::Result<PreparedFile> {
    let plugin = prepare_file(engine, module)?;
    let (source, took) = plugin.prepared.load();
    let what = match &plugin.info {
        Some(i) if i.informers.is_empty() => format!("{} {}", i.name, i.version),
        Some(i) => format!(
            "{} {} (informers: {})",
            i.name,
            i.version,
            i.informers.join(", ")
        ),
        None => "a module that cannot describe itself".into(),
    };
    writeln!(
        out,
        "{}: {what}, {} in {}",
        module.display(),
        source.how(),
        crate::units::human_duration(took)
    )?;
    Ok(plugin)
}

/// [`run`] with a module [`load`]ed once for every fixture file of a run.
pub fn run_loaded(
    engine: &Arc<PluginEngine>,
    plugin: &PreparedFile,
    fixtures: &Path,
    out: &mut dyn Write,
) -> anyhow::Result<TestSummary> {
    let text = std::fs::canonicalize(fixtures)
        .map_err(|e| FileRefused::Io(e.to_string()))
        .and_then(|f| files::read_regular(&f, MAX_FILE_SIZE))
        .with_context(|| format!("fixture file {}", fixtures.display()))?;
    let file: File = wisp_kinds::yaml::from_str(&text)
        .with_context(|| format!("fixture file {}", fixtures.display()))?;
    if file.cases.is_empty() {
        bail!("fixture file {}: no cases", fixtures.display());
    }
    // `fix.yaml`'s parent is "": the current directory.
    let base = fixtures
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let own: &[String] = plugin.info.as_ref().map_or(&[], |i| &i.informers);
    // The steps' informer: the file's, else the first granted, else the plugin's first.
    let default_informer = file
        .informer
        .iter()
        .chain(file.informers.iter().flatten())
        .chain(own)
        .next()
        .cloned()
        .unwrap_or_else(|| "objects".into());
    let mut summary = TestSummary::default();
    writeln!(out, "{}", fixtures.display())?;
    for (i, case) in file.cases.iter().enumerate() {
        let at = format!("{}: case {} ({:?})", fixtures.display(), i + 1, case.name);
        let cx = CaseContext {
            engine,
            plugin,
            file: &file,
            default_informer: &default_informer,
            base,
        };
        let start = std::time::Instant::now();
        let failures = run_case(&cx, case).with_context(|| at.clone())?;
        let took = crate::units::human_duration(start.elapsed());
        summary.cases += 1;
        if failures.is_empty() {
            summary.passed += 1;
            writeln!(out, "ok   {} ({took})", case.name)?;
        } else {
            writeln!(out, "FAIL {} ({took})", case.name)?;
            for f in failures {
                for line in f.lines() {
                    writeln!(out, "     {line}")?;
                }
            }
        }
    }
    writeln!(
        out,
        "{} cases: {} passed, {} failed",
        summary.cases,
        summary.passed,
        summary.cases - summary.passed
    )?;
    Ok(summary)
}

/// What every case of a fixture file runs with.
struct CaseContext<'a> {
    engine: &'a Arc<PluginEngine>,
    plugin: &'a PreparedFile,
    file: &'a File,
    default_informer: &'a str,
    base: &'a Path,
}

/// An object of the fixture: inline, or `{file: path}` relative to the fixture file, read as
/// [`files::read_inside`] reads it: inside the fixture's directory, a regular file of at most
/// [`MAX_FILE_SIZE`].
fn object(v: &Value, base: &Path) -> anyhow::Result<Arc<Object>> {
    let v = match v.as_object().and_then(|o| o.get("file")) {
        Some(Value::String(f)) => {
            let text = files::read_inside(base, Path::new(f), MAX_FILE_SIZE)
                .with_context(|| format!("object file {f:?}"))?;
            wisp_kinds::yaml::from_str::<Value>(&text)
                .with_context(|| format!("object file {f:?}"))?
        }
        _ => v.clone(),
    };
    // YAML read as kubectl reads it makes a plain `n` or `yes` a boolean: a name or namespace
    // written so would key the object as something else, silently.
    for field in ["name", "namespace"] {
        match v.pointer(&format!("/metadata/{field}")) {
            None | Some(Value::String(_)) => {}
            Some(other) => anyhow::bail!(
                "metadata.{field}: expected a string, got {other} (in YAML as kubectl reads it a \
                 plain y, n, yes, no, on or off is a boolean and 0644 a number: quote it)"
            ),
        }
    }
    Object::from_value(v, false)
        .map(Arc::new)
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// The cached object a step names: `"namespace/name"`, or an object (its key).
fn cached(ix: &Indexer, v: &Value, base: &Path) -> anyhow::Result<Arc<Object>> {
    let key = match v {
        Value::String(k) => k.clone(),
        _ => object_key(&*object(v, base)?),
    };
    ix.get_by_key(&key)
        .with_context(|| format!("{key} is not in the cache (add it in a step or under cache)"))
}

/// Runs one case: seeds its caches, starts a fresh instance of the plugin with its settings,
/// feeds its steps, and returns what differed from what it expects (empty when it passed).
fn run_case(cx: &CaseContext, case: &Case) -> anyhow::Result<Vec<String>> {
    let caches = case_caches(cx, case)?;
    let mut spec = case_spec(cx.file, case);
    spec.informers = caches.keys().cloned().collect();
    let services = HostServices::default();
    let grants = Grants {
        caches: Arc::new(caches.iter().map(|(k, v)| (k.clone(), v.cache())).collect()),
        services: services.clone(),
    };
    let mut failures = Vec::new();
    let Some(checked) = init(cx, spec, grants, &case.expect, &mut failures)? else {
        return Ok(failures);
    };
    let plugin = checked.info.name.clone();
    let status = checked.status().clone();
    let mut rt = checked.into_runtime(cx.engine.clone());
    let (outcomes, answers, logs) = run_steps(&mut rt, &status, &caches, cx, case)?;
    let expect = &case.expect;
    check_outcomes(expect.outcomes.as_deref(), &outcomes, &mut failures);
    if let Some(want) = &expect.admissions {
        admit::check(want, &answers, &mut failures);
    }
    check_logs(&expect.logs, &logs, &mut failures);
    if let Some(want) = &expect.verdicts {
        check_verdicts(want, &services, &plugin, &mut failures);
    }
    if let Some(want) = &expect.actions {
        check_actions(want, &services, &plugin, &mut failures);
    }
    compare_series(
        "counter",
        &expect.counters,
        status.guest_counters(),
        &mut failures,
    );
    compare_series(
        "gauge",
        &expect.gauges,
        status.guest_gauges(),
        &mut failures,
    );
    Ok(failures)
}

/// The plugin of a case: its settings (the case's, else the file's, else `{}`) and the file's
/// grants, its actions dry-run and unpaced. Its module and informers are set by the caller.
fn case_spec(file: &File, case: &Case) -> PluginSpec {
    let mut spec = PluginSpec::new("", Path::new(""), &[]);
    spec.settings = case
        .settings
        .clone()
        .or_else(|| file.settings.clone())
        .unwrap_or_else(|| serde_json::json!({}));
    spec.actions = ActionSpec {
        grants: file
            .actions
            .as_ref()
            .map(|a| a.grants.clone())
            .unwrap_or_default(),
        dry_run: true,
        // A fixture's actions are compared, not paced.
        per_second: f64::MAX,
        burst: u32::MAX,
        ..ActionSpec::default()
    };
    spec
}

/// The caches of a case, one per granted informer, with the file's indexes and the case's seeded
/// objects. Granted: the case's `informers`, else the file's, else those the plugin's describe
/// names with the default one and those the case's steps, the file's indexes and the case's
/// cache name. A step or cache naming an informer outside an explicit list is refused.
fn case_caches(cx: &CaseContext, case: &Case) -> anyhow::Result<BTreeMap<String, Indexer>> {
    let (file, base) = (cx.file, cx.base);
    let mut caches: BTreeMap<String, Indexer> = BTreeMap::new();
    let explicit = match (&case.informers, &file.informers) {
        (Some(l), _) => Some(("the case's", l)),
        (None, Some(l)) => Some(("the file's", l)),
        (None, None) => None,
    };
    if let Some((whose, list)) = explicit {
        for i in list {
            caches.entry(i.clone()).or_default();
        }
        let named = case
            .steps
            .iter()
            .enumerate()
            .map(|(n, s)| {
                let inf = s.informer.as_deref().unwrap_or(cx.default_informer);
                (format!("step {}", n + 1), inf)
            })
            .chain(
                case.cache
                    .keys()
                    .map(|i| (format!("cache.{i}"), i.as_str())),
            );
        for (at, inf) in named {
            if !list.iter().any(|i| i == inf) {
                bail!(
                    "{at}: informer {inf:?} is not granted ({whose} informers: {})",
                    if list.is_empty() {
                        "none".to_owned()
                    } else {
                        list.join(", ")
                    }
                );
            }
        }
    } else {
        let own = cx.plugin.info.iter().flat_map(|i| &i.informers);
        let steps = case.steps.iter().filter_map(|s| s.informer.as_ref());
        let named = own
            .chain(steps)
            .chain(file.indexes.keys())
            .chain(case.cache.keys());
        for i in named {
            caches.entry(i.clone()).or_default();
        }
        caches.entry(cx.default_informer.to_owned()).or_default();
    }
    for (inf, names) in &file.indexes {
        // Indexes of an informer a case does not grant are not needed.
        let Some(ix) = caches.get_mut(inf) else {
            continue;
        };
        let mut funcs = Vec::new();
        for n in names {
            let spec = crate::config::IndexSpec::parse(n)
                .map_err(|e| anyhow::anyhow!("indexes.{inf}: {e}"))?;
            funcs.push((n.clone(), spec.func()));
        }
        ix.add_indexers(funcs)
            .map_err(|e| anyhow::anyhow!("indexes.{inf}: {e}"))?;
    }
    for (inf, objects) in &case.cache {
        let ix = caches.entry(inf.clone()).or_default();
        for o in objects {
            ix.add(object(o, base).with_context(|| format!("cache.{inf}"))?);
        }
    }
    Ok(caches)
}

/// Loads and initialises the plugin, checking `expect.init`: `None` (with the failures pushed)
/// when the case ends there, because init refused the settings or was expected to.
fn init(
    cx: &CaseContext,
    spec: PluginSpec,
    grants: Grants,
    expect: &Expect,
    failures: &mut Vec<String>,
) -> anyhow::Result<Option<CheckedPlugin>> {
    let checked = match check_prepared(cx.engine, cx.plugin, spec, grants) {
        Ok(c) => c,
        Err(crate::plugin::PluginError::SettingsRejected { message, .. }) => {
            match &expect.init {
                Some(want) if message.contains(want.as_str()) => {}
                Some(want) => failures.push(format!(
                    "init: expected a refusal containing {want:?}, got {message:?}"
                )),
                None => failures.push(format!("init refused the settings: {message}")),
            }
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(want) = &expect.init {
        failures.push(format!(
            "init: expected a refusal containing {want:?}, but init accepted the settings"
        ));
        return Ok(None);
    }
    Ok(Some(checked))
}

/// The answers of a case's admit steps, in order (`None`: the plugin gave none).
type Answers = Vec<Option<crate::plugin::bindings::v03_admission::Response>>;

/// Feeds the steps of a case to the plugin, one at a time; returns each step's outcome, the
/// answers to its admit steps and the lines the plugin logged.
fn run_steps(
    rt: &mut PluginRuntime,
    status: &PluginStatus,
    caches: &BTreeMap<String, Indexer>,
    cx: &CaseContext,
    case: &Case,
) -> anyhow::Result<(Vec<String>, Answers, Vec<String>)> {
    let (default_informer, base) = (cx.default_informer, cx.base);
    let (mut outcomes, mut answers, mut logs) = (Vec::new(), Vec::new(), Vec::new());
    for (n, step) in case.steps.iter().enumerate() {
        let inf = step.informer.as_deref().unwrap_or(default_informer);
        let ix = &caches[inf];
        let at = || format!("step {}", n + 1);
        if let Event::Admit(a) = &step.event {
            let request = admit::request(a, n + 1, inf, ix, base, &at)?;
            let logs0 = status.logs.total();
            let (outcome, answer) = admit::ask(rt, &request);
            outcomes.push(outcome);
            answers.push(answer);
            logs.extend(status.logs.since(logs0));
            continue;
        }
        let d = Delivery {
            seq: n as u64 + 1,
            notification: notification(step, ix, base, &at)?,
        };
        let (fed, lines) = feed(rt, status, Some(ix), inf, &d);
        outcomes.push(match fed {
            Fed::Ok => "ok".to_owned(),
            Fed::Failed(e) => format!("error: {e}"),
            Fed::Dropped => "dropped (quarantined)".to_owned(),
        });
        logs.extend(lines);
    }
    Ok((outcomes, answers, logs))
}

/// The notification of a step (errors name it with `at`); an update's old object, a resync's
/// and a delete's object come from the informer's cache `ix`.
fn notification(
    step: &Step,
    ix: &Indexer,
    base: &Path,
    at: &dyn Fn() -> String,
) -> anyhow::Result<Notification> {
    Ok(match &step.event {
        Event::Add(v) | Event::List(v) => Notification::Add {
            obj: object(v, base).with_context(at)?,
            initial_list: matches!(step.event, Event::List(_)),
        },
        Event::Update(v) => {
            let new = object(v, base).with_context(at)?;
            let old = ix
                .get(&new)
                .with_context(|| format!("{}: {} is not in the cache", at(), object_key(&new)))?;
            Notification::Update { old, new }
        }
        Event::Resync(v) => {
            let o = cached(ix, v, base).with_context(at)?;
            Notification::Update {
                old: o.clone(),
                new: o,
            }
        }
        Event::Admit(_) => bail!("{}: an admit step is no notification", at()),
        Event::Delete(v) => {
            let o = cached(ix, v, base).with_context(at)?;
            let obj = if step.final_state_unknown {
                DeletedObject::Tombstone(Tombstone {
                    key: object_key(&o),
                    obj: o,
                })
            } else {
                DeletedObject::Object(o)
            };
            Notification::Delete { obj }
        }
    })
}

/// Whether the plugin's current verdicts are exactly `want` (in any order).
fn check_verdicts(
    want: &[ExpectVerdict],
    services: &HostServices,
    plugin: &str,
    failures: &mut Vec<String>,
) {
    let got = services.verdicts.list(&VerdictFilter {
        plugin: Some(plugin.to_owned()),
        ..VerdictFilter::default()
    });
    let got: Vec<String> = got
        .iter()
        .map(|v| {
            format!(
                "{} {} {}: {}",
                v.rule,
                v.subject.key(),
                v.severity.as_str(),
                v.message
            )
        })
        .collect();
    let matches = |w: &ExpectVerdict, g: &String| {
        let head = format!("{} {} ", w.rule, w.object);
        g.starts_with(&head)
            && w.severity
                .as_ref()
                .is_none_or(|s| g[head.len()..].starts_with(&format!("{s}:")))
            && w.message
                .as_ref()
                .is_none_or(|m| g.ends_with(&format!(": {m}")))
    };
    if !exactly(want, &got, matches) {
        failures.push(format!(
            "verdicts: expected\n{}got\n{}",
            list(want.iter().map(|w| format!("{w:?}"))),
            list(got.iter().cloned())
        ));
    }
}

/// Whether the actions the plugin asked for (audited, not sent) are `want`, in order.
fn check_actions(
    want: &[ExpectAction],
    services: &HostServices,
    plugin: &str,
    failures: &mut Vec<String>,
) {
    let got = services.audit.entries(Some(plugin));
    let shown: Vec<String> = got
        .iter()
        .map(|e| {
            let result = serde_json::to_value(e.result).unwrap_or_default();
            format!(
                "{} {} {}: {} {}",
                e.verb,
                e.kind,
                crate::informer::key::key_for(e.namespace.as_deref(), &e.name),
                result.as_str().unwrap_or_default(),
                e.detail
            )
        })
        .collect();
    let ok = want.len() == got.len()
        && want.iter().zip(&got).all(|(w, e)| {
            let result = serde_json::to_value(e.result).unwrap_or_default();
            let sent: Option<Value> = e
                .detail
                .strip_prefix("would send ")
                .and_then(|b| serde_json::from_str(b).ok());
            w.verb == e.verb
                && w.kind == e.kind
                && w.object == crate::informer::key::key_for(e.namespace.as_deref(), &e.name)
                && w.result.as_ref().is_none_or(|r| result == *r.as_str())
                && w.body.as_ref().is_none_or(|b| sent.as_ref() == Some(b))
                && w.detail
                    .as_ref()
                    .is_none_or(|d| e.detail.contains(d.as_str()))
        });
    if !ok {
        failures.push(format!(
            "actions: expected\n{}got\n{}",
            list(want.iter().map(|w| format!("{w:?}"))),
            list(shown.into_iter())
        ));
    }
}

/// Compares the expected series of a kind (counters, gauges) with the plugin's; a series never
/// written reads 0.
fn compare_series<V: Copy + Default + PartialEq + std::fmt::Display>(
    what: &str,
    want: &BTreeMap<String, V>,
    got: BTreeMap<(String, Vec<(String, String)>), V>,
    failures: &mut Vec<String>,
) {
    let got: Vec<(String, V)> = got
        .into_iter()
        .map(|((name, labels), v)| (series_name(&name, &labels), v))
        .collect();
    for (series, want) in want {
        let wanted = normal_series(series);
        let value = got
            .iter()
            .find(|(s, _)| normal_series(s) == wanted)
            .map_or_else(V::default, |(_, v)| *v);
        if value != *want {
            failures.push(format!(
                "{what} {series}: expected {want}, got {value}; the plugin's {what}s:\n{}",
                list(got.iter().map(|(s, v)| format!("{s} = {v}")))
            ));
        }
    }
}

/// `name{k="v",...}`, as Prometheus writes a series.
fn series_name(name: &str, labels: &[(String, String)]) -> String {
    format!("{name}{}", crate::record::fmt_labels(labels))
}

/// A series with its labels in order, however the fixture wrote them.
fn normal_series(s: &str) -> (String, Vec<String>) {
    match s.split_once('{') {
        Some((name, rest)) => {
            let mut labels: Vec<String> = rest
                .trim_end_matches('}')
                .split(',')
                .map(|l| l.trim().to_owned())
                .filter(|l| !l.is_empty())
                .collect();
            labels.sort();
            (name.trim().to_owned(), labels)
        }
        None => (s.trim().to_owned(), Vec::new()),
    }
}

fn list(items: impl Iterator<Item = String>) -> String {
    let mut s = String::new();
    let mut any = false;
    for i in items {
        any = true;
        let _ = writeln!(s, "  {i}");
    }
    if !any {
        s.push_str("  (none)\n");
    }
    s
}

/// Whether each of `want` matches a different one of `got`, and nothing is left over.
fn exactly<W>(want: &[W], got: &[String], matches: impl Fn(&W, &String) -> bool) -> bool {
    if want.len() != got.len() {
        return false;
    }
    let mut used = vec![false; got.len()];
    want.iter().all(|w| {
        let found = got
            .iter()
            .enumerate()
            .find(|(i, g)| !used[*i] && matches(w, g));
        found.map(|(i, _)| used[i] = true).is_some()
    })
}

fn check_outcomes(want: Option<&[String]>, got: &[String], failures: &mut Vec<String>) {
    let ok = match want {
        None => got.iter().all(|g| g == "ok" || g == "allowed"),
        Some(w) => {
            w.len() == got.len()
                && w.iter().zip(got).all(|(w, g)| {
                    w == g
                        || ["error: ", "denied: "].iter().any(|p| {
                            w.starts_with(p) && g.starts_with(p) && g.contains(&w[p.len()..])
                        })
                })
        }
    };
    if !ok {
        let want = match want {
            Some(w) => list(w.iter().cloned()),
            None => "  every notification ok, every admit allowed\n".into(),
        };
        failures.push(format!(
            "outcomes: expected\n{want}got\n{}",
            list(got.iter().cloned())
        ));
    }
}

fn check_logs(want: &[String], got: &[String], failures: &mut Vec<String>) {
    let mut lines = got.iter();
    for w in want {
        if !lines.any(|l| l.contains(w.as_str())) {
            failures.push(format!(
                "logs: no line containing {w:?} (in order); the plugin logged\n{}",
                list(got.iter().cloned())
            ));
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `wisp test` fixture and a `dir:` manifest mean the same object by the same text: both
    /// read YAML as kubectl does ([`wisp_kinds::yaml`]), where they once disagreed on `0644`
    /// and `yes` (the fixture read them as strings, the directory as 420 and true).
    #[test]
    fn fixture_objects_and_dir_manifests_read_every_scalar_alike() {
        let scalars = [
            "0644", "0x1F90", "yes", "no", "on", "off", "y", "n", "'0644'", "\"yes\"", "true",
            "10", "1.5", "~", "100m",
        ];
        let fields: String = scalars
            .iter()
            .enumerate()
            .map(|(i, s)| format!("      f{i}: {s}\n"))
            .collect();
        let object = format!(
            "apiVersion: example.com/v1\nkind: Thing\nmetadata:\n  name: t\nspec:\n{}",
            fields.replace("      ", "  ")
        );
        let fixture = format!(
            "cases:\n- name: c\n  cache:\n    things:\n    - apiVersion: example.com/v1\n      kind: Thing\n      metadata: {{name: t}}\n      spec:\n{}",
            fields.replace("      ", "        ")
        );
        let file: File = wisp_kinds::yaml::from_str(&fixture).unwrap();
        let from_fixture = &file.cases[0].cache["things"][0];
        let manifests = crate::source::dir::parse_manifests(&object).unwrap();
        let from_dir = &manifests.objects[0];
        assert_eq!(from_fixture, from_dir);
        assert_eq!(from_dir["spec"]["f0"], 420);
        assert_eq!(from_dir["spec"]["f2"], true);
        assert_eq!(from_dir["spec"]["f8"], "0644");
    }
}
