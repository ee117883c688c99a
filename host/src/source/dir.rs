//! `dir:PATH`: a directory of Kubernetes manifests (YAML or JSON, several documents per file,
//! `kind: List` expanded) acts as the cluster. Every object is listed at start; creating, editing
//! and deleting files produce add / update / delete through the same informer pipeline, with
//! increasing resourceVersions. The directory is rescanned every `interval` (polling works on
//! every filesystem and never sees a half-written file twice: a file that does not parse keeps
//! its previous objects and is reported; a file that lost objects is believed only once it has
//! been quiet for [`SETTLE`], its modification time and size unchanged, so a rewrite in place
//! caught half way deletes nothing, even from a writer that pauses a few seconds mid-file: a
//! file cut at a document boundary parses whole, so only time tells it from a real deletion).
//!
//! The directory behaves as a Kubernetes 1.36 API server would have stored it: one object per
//! group, kind, namespace and name (in any version of the group; the last definition in path
//! order wins, as `kubectl apply -f` would leave it), placed in its kind's scope, and only
//! objects the API server would admit ([`wisp_apiserver`]): the others are left out and reported
//! in [`DirCluster::errors`]. A built-in object is decoded, defaulted and validated as a create
//! would be ([`wisp_apiserver::decode`]: a type error leaves it out, an unknown field is dropped
//! and reported; [`wisp_apiserver::defaults`]), and an informer on another version of its group
//! gets it converted or, where the kind does not convert, reported ([`wisp_apiserver::convert`]).
//!
//! Whoever writes the directory may be hostile: only regular files of at most `dir.maxFileSize`
//! are read ([`crate::files`]). A FIFO, a device, a socket, a link that leads out of the
//! directory or a larger file is refused (reported once, with why; the file's previous objects
//! are kept) without blocking a scan, and no lock is held while files are read, so the admin
//! endpoints, the informers and shutdown never wait on a file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use super::filter::{ObjectFilter, group_of};
use super::memory::MemorySource;
use crate::files::{self, FileRefused};
use crate::informer::Object;
use crate::sync::lock;

/// Which (group, kind) pairs are cluster-scoped: the built-in ones ([`wisp_kinds::BUILTINS`])
/// and the custom kinds of the directory's CustomResourceDefinitions with `scope: Cluster`.
struct Scopes(std::collections::BTreeSet<(String, String)>);

impl Scopes {
    fn of<'a>(objects: impl Iterator<Item = &'a Value>) -> Self {
        let mut set: std::collections::BTreeSet<(String, String)> = wisp_kinds::BUILTINS
            .iter()
            .filter(|b| !b.namespaced)
            .map(|b| (b.group.to_owned(), b.kind.to_owned()))
            .collect();
        for v in objects {
            if v.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition")
                && v.pointer("/spec/scope").and_then(Value::as_str) == Some("Cluster")
                && let (Some(g), Some(k)) = (
                    v.pointer("/spec/group").and_then(Value::as_str),
                    v.pointer("/spec/names/kind").and_then(Value::as_str),
                )
            {
                set.insert((g.to_owned(), k.to_owned()));
            }
        }
        Self(set)
    }

    /// `v` with the namespace its scope gives it: none for a cluster-scoped kind (whatever it
    /// says), `default` for a namespaced one that names none (or `""`).
    fn place(&self, mut v: Value) -> Value {
        let api_version = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
        let cluster = self
            .0
            .contains(&(group_of(api_version).to_owned(), kind.to_owned()));
        if let Some(md) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            if cluster {
                md.remove("namespace");
            } else if md
                .get("namespace")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                md.insert("namespace".into(), Value::from("default"));
            }
        }
        v
    }
}

/// How long a file that lost objects must be left unchanged (modification time and size)
/// before its loss counts. Longer than a writer's pause mid-rewrite (a second was not: a writer
/// pausing 2 s made every object of the file DELETED then ADDED); a real deletion of documents
/// shows this much later.
const SETTLE: Duration = Duration::from_secs(5);

/// Whether `now` lacks an object the file defined before.
fn lost_objects(before: Option<&FileState>, now: &[Value]) -> bool {
    let Some(before) = before else {
        return false;
    };
    let keys: std::collections::BTreeSet<ObjKey> = now.iter().filter_map(key_of).collect();
    before
        .objects
        .iter()
        .filter_map(key_of)
        .any(|k| !keys.contains(&k))
}

/// Identity of an object across files: API group, kind, namespace, name (one object whichever
/// version of its group it is written in, as in a cluster).
type ObjKey = (String, String, String, String);

struct FileState {
    stamp: (SystemTime, u64),
    objects: Vec<Value>,
    /// What of the file could not be read (the documents left out, or why none could be).
    unread: Vec<String>,
}

/// What a scan says of the files, per file: what was not read (errors), and the objects a
/// file only redefines (notes: the later definition counts, as with `kubectl apply -f`).
struct Reports {
    errors: BTreeMap<PathBuf, String>,
    notes: BTreeMap<PathBuf, String>,
}

/// An object the directory defines, with the resourceVersion of its last change and its uid:
/// one sequence and one uid for the whole directory cluster, whichever informers keep it.
struct Defined {
    value: Value,
    rv: u64,
    uid: String,
}

#[derive(Default)]
struct State {
    files: BTreeMap<PathBuf, FileState>,
    /// The objects the directory defines now.
    current: BTreeMap<ObjKey, Defined>,
    /// The cluster's resourceVersion: one more per change of any object.
    rv: u64,
    /// uids given so far.
    uids: u64,
    sources: Vec<(ObjectFilter, MemorySource)>,
    /// Files that failed to parse, with the error (reported once per change).
    errors: BTreeMap<PathBuf, String>,
    /// Files that only redefine objects defined before them, with which (reported as notes).
    notes: BTreeMap<PathBuf, String>,
    /// Files that lost objects and are not yet quiet: the stamp seen and since when.
    pending: BTreeMap<PathBuf, ((SystemTime, u64), Instant)>,
    /// The last decoding of each object (by file and place in it), so a rescan decodes only
    /// what changed.
    decoded: std::cell::RefCell<std::collections::HashMap<(PathBuf, usize), Decoding>>,
}

/// An object as placed in its scope, and what [`decode_and_default`] made of it.
struct Decoding {
    placed: Value,
    result: Result<Value, ObjectRefused>,
    warnings: Vec<String>,
}

/// What a scan made of one manifest file.
enum Read {
    /// Unchanged since it was last read (same modification time and size).
    Unchanged,
    /// Read again (or refused): its stamp, and its manifests or what of it could not be read.
    Changed {
        stamp: (SystemTime, u64),
        parsed: Result<Manifests, FileUnread>,
    },
}

/// Why a manifest file was not read (its previous objects are kept).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FileUnread {
    /// Refused before parsing (not a regular file, outside the directory, too large).
    #[error(
        "not read (its previous objects are kept): it {source}{}",
        if matches!(source, FileRefused::TooLarge { .. }) { " (dir.maxFileSize)" } else { "" }
    )]
    Refused {
        /// Why.
        #[source]
        source: FileRefused,
    },
    /// YAML that does not parse.
    #[error("does not parse (its previous objects are kept): {0}")]
    Yaml(#[source] wisp_kinds::yaml::YamlError),
}

/// Why an object of the directory is not stored, or not served to an informer: what an API
/// server would answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ObjectRefused {
    /// Kubernetes does not serve its kind at its apiVersion.
    #[error(transparent)]
    NotServed(#[from] NotServed),
    /// A value of the wrong type (`shown` names the object).
    #[error("{shown} is refused: {problem}")]
    Decode {
        /// The object, as messages show it.
        shown: String,
        /// The decoder's message.
        problem: String,
    },
    /// Invalid, in the API server's words.
    #[error("{0}")]
    Invalid(String),
    /// Not convertible to the version an informer asks for.
    #[error("{0}")]
    Convert(String),
    /// Not an object an informer can hold.
    #[error("{0}")]
    Object(String),
}

/// A built-in group's kind at an apiVersion Kubernetes does not serve, with what it serves.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotServed {
    /// The kind, at other versions.
    #[error("Kubernetes 1.36 serves {kind} as {}, not as {api_version:?}", served.join(", "))]
    Version {
        /// The kind.
        kind: String,
        /// The apiVersion given.
        api_version: String,
        /// The apiVersions it is served at.
        served: Vec<String>,
    },
    /// An apiVersion not served at all.
    #[error("Kubernetes 1.36 does not serve apiVersion {0:?}")]
    ApiVersion(String),
    /// Another kind than those of the apiVersion.
    #[error("Kubernetes 1.36 serves no kind {kind:?} in {api_version}; it serves: {}", kinds.join(", "))]
    Kind {
        /// The kind.
        kind: String,
        /// The apiVersion given.
        api_version: String,
        /// The kinds it serves.
        kinds: Vec<String>,
    },
}

/// A kind an informer names that this directory cluster does not serve
/// ([`DirCluster::check_kind`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KindNotServed {
    /// A built-in group's kind Kubernetes does not serve there.
    #[error(transparent)]
    Builtin(#[from] NotServed),
    /// A version the directory's CustomResourceDefinition does not serve.
    #[error(
        "the CustomResourceDefinition of {kind} in {group} serves versions {}, not {version:?}",
        versions.join(", ")
    )]
    CrdVersion {
        /// The kind.
        kind: String,
        /// Its group.
        group: String,
        /// The versions the CRD serves.
        versions: Vec<String>,
        /// The version asked for.
        version: String,
    },
}

/// The default of [`DirCluster::open`]'s cap on a manifest file's size (`dir.maxFileSize`):
/// 16 MiB, a YAML file of some thousands of objects (the API server's etcd request limit is
/// 1.5 MiB per object).
pub const DEFAULT_MAX_FILE_SIZE: u64 = 16 << 20;

/// The `dir:` source's settings (`dir:` in the config).
#[derive(Debug, serde::Deserialize, Clone, Default, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DirSettings {
    /// The largest manifest file read (default 16Mi): a larger one is refused and reported
    /// (its previous objects are kept), without being read.
    pub max_file_size: Option<crate::units::Bytes>,
}

impl DirSettings {
    /// The cap in force, in bytes.
    pub fn max_file_size(&self) -> u64 {
        self.max_file_size.map_or(DEFAULT_MAX_FILE_SIZE, |b| b.0)
    }
}

/// Reads the files of `paths` whose stamp differs from `known`, without any lock held: the
/// regular files inside `root` (the canonical root) of at most `cap` bytes, as
/// [`files::read_regular`] reads them. A link to a file is followed inside `root` only; a link
/// out of it, a FIFO, a device, a socket or a file over `cap` is refused, and reported as the
/// file's error. A path gone (or a dangling link) is left out.
fn read_changed(
    root: &Path,
    paths: Vec<PathBuf>,
    known: &BTreeMap<PathBuf, (SystemTime, u64)>,
    cap: u64,
) -> Vec<(PathBuf, Read)> {
    let mut out = Vec::new();
    for p in paths {
        let target = files::resolve_inside(root, &p);
        // The stamp is what the path leads to (a link's target), stat'ed, never opened.
        let Ok(md) = std::fs::metadata(&p) else {
            continue;
        };
        let stamp = (md.modified().unwrap_or(SystemTime::UNIX_EPOCH), md.len());
        if known.get(&p) == Some(&stamp) {
            out.push((p, Read::Unchanged));
            continue;
        }
        let parsed = target
            .and_then(|t| files::read_regular(&t, cap))
            .map_err(|source| FileUnread::Refused { source })
            .and_then(|t| parse_manifests(&t).map_err(FileUnread::Yaml));
        out.push((p, Read::Changed { stamp, parsed }));
    }
    out
}

impl State {
    /// The stamp of each file read so far, for a scan to read only the files that changed.
    fn stamps(&self) -> BTreeMap<PathBuf, (SystemTime, u64)> {
        self.files
            .iter()
            .map(|(p, f)| (p.clone(), f.stamp))
            .collect()
    }

    /// Takes what a scan read of the files there are ([`read_changed`]) and forgets the files
    /// that are gone; returns the files there are.
    fn take_reads(&mut self, reads: Vec<(PathBuf, Read)>) -> BTreeMap<PathBuf, ()> {
        let mut seen = BTreeMap::new();
        for (p, read) in reads {
            seen.insert(p.clone(), ());
            let Read::Changed { stamp, parsed } = read else {
                continue;
            };
            // A file that lost objects may be being written (a rewrite in place caught at a
            // document boundary): it is read again at each scan until it has been quiet for
            // SETTLE, and its objects are kept until then.
            let loses = matches!(&parsed, Ok(m) if lost_objects(self.files.get(&p), &m.objects));
            if loses && !self.quiet_for_settle(&p, stamp) {
                continue;
            }
            self.pending.remove(&p);
            let file = match parsed {
                Ok(Manifests { objects, skipped }) => FileState {
                    stamp,
                    objects,
                    unread: skipped,
                },
                // The stamp is remembered so the same broken (or refused) content is not read
                // again every scan, and the objects read before are kept.
                Err(e) => FileState {
                    stamp,
                    objects: self
                        .files
                        .get(&p)
                        .map(|f| f.objects.clone())
                        .unwrap_or_default(),
                    unread: vec![e.to_string()],
                },
            };
            self.files.insert(p, file);
        }
        self.files.retain(|p, _| seen.contains_key(p));
        self.pending.retain(|p, _| seen.contains_key(p));
        seen
    }

    /// Whether the file at `path`, now at `stamp`, has been quiet for [`SETTLE`]: by its
    /// modification time, or (a clock that puts it in the future) by the scans that saw this
    /// stamp for that long.
    fn quiet_for_settle(&mut self, path: &Path, stamp: (SystemTime, u64)) -> bool {
        let now = Instant::now();
        let seen = self.pending.entry(path.to_owned()).or_insert((stamp, now));
        if seen.0 != stamp {
            *seen = (stamp, now);
        }
        stamp.0.elapsed().unwrap_or_default() >= SETTLE || now.duration_since(seen.1) >= SETTLE
    }

    /// The objects the files define, and what of each file could not be read.
    ///
    /// Every object placed in its scope and admitted as an API server would; a later
    /// definition of the same object replaces an earlier one, as `kubectl apply -f` of the
    /// directory would, and is reported.
    fn defined(&self) -> (BTreeMap<ObjKey, Value>, Reports) {
        let scopes = Scopes::of(self.files.values().flat_map(|f| f.objects.iter()));
        let schemas = wisp_apiserver::schema::CrdSchemas::of(
            self.files.values().flat_map(|f| f.objects.iter()),
        );
        let mut problems: BTreeMap<PathBuf, Vec<String>> = BTreeMap::new();
        let mut notes: BTreeMap<PathBuf, Vec<String>> = BTreeMap::new();
        let mut defined: BTreeMap<ObjKey, (Value, &Path)> = BTreeMap::new();
        let mut last = self.decoded.take();
        let mut decoded = std::collections::HashMap::new();
        for (path, f) in &self.files {
            let mut unread = f.unread.clone();
            let mut redefined = Vec::new();
            for (i, v) in f.objects.iter().enumerate() {
                let placed = scopes.place(v.clone());
                let d = match last.remove(&(path.clone(), i)) {
                    Some(d) if d.placed == placed => d,
                    _ => {
                        let mut warnings = Vec::new();
                        let result = decode_and_default(placed.clone(), &mut warnings);
                        Decoding {
                            placed,
                            result,
                            warnings,
                        }
                    }
                };
                unread.extend(d.warnings.iter().cloned());
                let v = d.result.clone();
                decoded.insert((path.clone(), i), d);
                let mut v = match v {
                    Ok(v) => v,
                    Err(e) => {
                        unread.push(e.to_string());
                        continue;
                    }
                };
                // Custom resources: defaulted, pruned and validated by their CRD's schema.
                if let Err(e) = schemas.admit(&mut v) {
                    unread.push(e);
                    continue;
                }
                if let Err(e) = admit(&v) {
                    unread.push(e.to_string());
                    continue;
                }
                unread.extend(unservable(&v, self.sources.iter().map(|(f, _)| f)));
                let Some(k) = key_of(&v) else { continue };
                let shown = format!(
                    "{} {}",
                    k.1,
                    if k.2.is_empty() {
                        k.3.clone()
                    } else {
                        format!("{}/{}", k.2, k.3)
                    }
                );
                if let Some((_, earlier)) = defined.insert(k, (v, path)) {
                    let place = if earlier == path.as_path() {
                        "earlier in this file".to_owned()
                    } else {
                        format!("in {}", earlier.display())
                    };
                    redefined.push(format!(
                        "{shown} is also defined {place}; this later definition replaces it"
                    ));
                }
            }
            if !unread.is_empty() {
                problems.insert(path.clone(), unread);
            }
            if !redefined.is_empty() {
                notes.insert(path.clone(), redefined);
            }
        }
        self.decoded.replace(decoded);
        let joined = |m: BTreeMap<PathBuf, Vec<String>>| -> BTreeMap<PathBuf, String> {
            m.into_iter().map(|(p, e)| (p, e.join("; "))).collect()
        };
        let defined: BTreeMap<ObjKey, Value> =
            defined.into_iter().map(|(k, (v, _))| (k, v)).collect();
        (
            defined,
            Reports {
                errors: joined(problems),
                notes: joined(notes),
            },
        )
    }

    /// Logs the files whose errors changed and those of `seen` read whole again, and keeps
    /// `errors`.
    fn report_errors(&mut self, reports: Reports, seen: &BTreeMap<PathBuf, ()>) {
        let Reports { errors, notes } = reports;
        for (p, e) in &errors {
            if self.errors.get(p) != Some(e) {
                tracing::error!(file = %p.display(), error = %e, "manifest not read whole");
            }
        }
        for (p, n) in &notes {
            if self.notes.get(p) != Some(n) {
                tracing::info!(file = %p.display(), note = %n, "manifest redefines objects");
            }
        }
        self.notes = notes;
        for p in self.errors.keys() {
            if !errors.contains_key(p) && seen.contains_key(p) {
                tracing::info!(file = %p.display(), "manifest read whole again");
            }
        }
        self.errors = errors;
    }

    /// Makes `defined` current: each new or changed object gets the next resourceVersion (a
    /// new one a uid) and is applied to every source that keeps it; each object no longer
    /// defined is deleted from them.
    fn publish(&mut self, defined: BTreeMap<ObjKey, Value>) {
        let mut prev = std::mem::take(&mut self.current);
        let mut next: BTreeMap<ObjKey, Defined> = BTreeMap::new();
        for (k, v) in defined {
            let d = match prev.remove(&k) {
                Some(d) if d.value == v => d,
                old => {
                    self.rv += 1;
                    let uid = match &old {
                        Some(d) => d.uid.clone(),
                        None => {
                            self.uids += 1;
                            format!("dir-{:08}", self.uids)
                        }
                    };
                    let d = Defined {
                        value: v,
                        rv: self.rv,
                        uid,
                    };
                    for (f, src) in &self.sources {
                        apply_if_kept(src, f, &d, old.as_ref());
                    }
                    d
                }
            };
            next.insert(k, d);
        }
        // What is left of `prev` is gone.
        for (k, d) in prev {
            self.rv += 1;
            let key = if k.2.is_empty() {
                k.3.clone()
            } else {
                format!("{}/{}", k.2, k.3)
            };
            for (f, src) in &self.sources {
                if kept_by(f, &d.value).is_ok_and(|v| v.is_some()) {
                    src.delete_at(&key, self.rv);
                }
            }
        }
        self.current = next;
    }
}

/// A directory acting as a cluster.
pub struct DirCluster {
    /// The directory, as given (for messages).
    root: PathBuf,
    /// The directory with every link resolved: a link to a file is followed inside it only.
    canonical_root: PathBuf,
    /// The largest manifest file read, in bytes (`dir.maxFileSize`).
    max_file_size: u64,
    /// Held by a scan from start to end, so two scans never interleave; the state lock is
    /// taken only around what needs no file IO, so a slow file never holds up the admin
    /// endpoints or the informers.
    scan: Mutex<()>,
    state: Mutex<State>,
    /// The errors and notes of the last scan, copied out of `state` when it ends: what
    /// `/readyz` and `/metrics` read, never waiting on a scan (whose state lock is held while
    /// thousands of objects are decoded and published).
    reported: Mutex<Arc<Reported>>,
}

/// What a scan reported, per file.
#[derive(Default)]
struct Reported {
    errors: BTreeMap<PathBuf, String>,
    notes: BTreeMap<PathBuf, String>,
}

fn key_of(v: &Value) -> Option<ObjKey> {
    let s = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let name = s("/metadata/name");
    if name.is_empty() || s("/kind").is_empty() || s("/apiVersion").is_empty() {
        return None;
    }
    Some((
        group_of(&s("/apiVersion")).to_owned(),
        s("/kind"),
        s("/metadata/namespace"),
        name,
    ))
}

/// Whether an API server would store `v`: its apiVersion and kind served, if of Kubernetes'
/// own groups (custom kinds are read as written: their CRD may live elsewhere), and the object
/// valid ([`wisp_apiserver::validation`]). The error says why not, as the API server would.
fn admit(v: &Value) -> Result<(), ObjectRefused> {
    use wisp_kinds as kinds;
    let text = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("");
    let (api_version, kind, name) = (text("/apiVersion"), text("/kind"), text("/metadata/name"));
    let (group, version) = kinds::split_api_version(api_version);
    if kinds::is_builtin_group(group) && kinds::builtin(group, version, kind).is_none() {
        return Err(not_served(api_version, kind).into());
    }
    let errs = wisp_apiserver::validation::field_errors(group, kind, v);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ObjectRefused::Invalid(wisp_apiserver::validation::message(
            group, kind, name, &errs,
        )))
    }
}

/// `v` decoded and defaulted as an API server would on create, if of a built-in kind
/// ([`wisp_apiserver::decode`], [`wisp_apiserver::defaults`]): a value of the wrong type refuses
/// it (the error names the object, the field and the types); each unknown field is dropped
/// and named in `warnings`. Objects of other groups, and kinds Kubernetes does not serve (left
/// to [`admit`] to refuse), are returned as they are.
fn decode_and_default(v: Value, warnings: &mut Vec<String>) -> Result<Value, ObjectRefused> {
    use wisp_kinds as kinds;
    let text = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("");
    let (group, version) = kinds::split_api_version(text("/apiVersion"));
    let kind = text("/kind");
    if kinds::builtin(group, version, kind).is_none() {
        return Ok(v);
    }
    let (group, version, kind) = (group.to_owned(), version.to_owned(), kind.to_owned());
    let shown = wisp_apiserver::convert::shown(&v);
    let mut d = wisp_apiserver::decode::decode(&group, &version, &kind, &v).map_err(|problem| {
        ObjectRefused::Decode {
            shown: shown.clone(),
            problem,
        }
    })?;
    warnings.extend(d.warnings.iter().map(|w| {
        format!("{shown}: {w} (dropped, as an API server does with fieldValidation=Warn)")
    }));
    wisp_apiserver::defaults::apply_defaults(&group, &version, &kind, &mut d.value);
    Ok(d.value)
}

/// `v` as an informer of `filter` is served it: converted to the informer's version if `v`
/// is a built-in object written in another version of its group ([`wisp_apiserver::convert`]);
/// `Err` if it cannot be.
fn served(v: &Value, filter: &ObjectFilter) -> Result<Value, ObjectRefused> {
    let written = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let group = group_of(written);
    if filter.api_version.is_empty()
        || filter.api_version == written
        || !wisp_kinds::is_builtin_group(group)
        || group_of(&filter.api_version) != group
    {
        return Ok(v.clone());
    }
    wisp_apiserver::convert::convert(v, &filter.api_version).map_err(ObjectRefused::Convert)
}

/// Why informers of `filters` on the kind of `v`, in another version than it is written in,
/// cannot be served it (one line per version).
fn unservable<'a>(v: &Value, filters: impl Iterator<Item = &'a ObjectFilter>) -> Vec<String> {
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    let mut versions: Vec<&str> = filters
        .filter(|f| f.kind == kind)
        .map(|f| f.api_version.as_str())
        .collect();
    versions.sort_unstable();
    versions.dedup();
    versions
        .into_iter()
        .filter_map(|api_version| {
            let f = ObjectFilter {
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
                ..Default::default()
            };
            served(v, &f).err().map(|e| e.to_string())
        })
        .collect()
}

/// Why Kubernetes serves no `kind` at `api_version` (of one of its own groups), with what it
/// does serve.
fn not_served(api_version: &str, kind: &str) -> NotServed {
    use wisp_kinds as kinds;
    let (group, version) = kinds::split_api_version(api_version);
    let served = kinds::builtin_api_versions(group, kind);
    if !served.is_empty() {
        return NotServed::Version {
            kind: kind.to_owned(),
            api_version: api_version.to_owned(),
            served,
        };
    }
    let kinds = kinds::builtin_kinds(group, version);
    if kinds.is_empty() {
        NotServed::ApiVersion(api_version.to_owned())
    } else {
        NotServed::Kind {
            kind: kind.to_owned(),
            api_version: api_version.to_owned(),
            kinds: kinds.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// A manifest file read: its objects, and what was wrong with the documents left out.
#[derive(Debug, Default, PartialEq)]
pub struct Manifests {
    /// The objects, as written (namespaces are placed by [`DirCluster::rescan`], which knows
    /// the directory's CustomResourceDefinitions).
    pub objects: Vec<Value>,
    /// One line per document left out (the others still count).
    pub skipped: Vec<String>,
}

/// Parses a manifest file into objects: several documents read as kubectl reads them
/// ([`wisp_kinds::yaml`]), `kind: List` expanded, a leading byte-order mark ignored, `generateName` given a name (stable for the
/// file and document, so a rescan changes nothing). A document that is not a valid object is
/// skipped and named in [`Manifests::skipped`]; YAML that does not parse fails the whole file
/// (its previous objects are kept: see [`DirCluster::rescan`]).
pub fn parse_manifests(text: &str) -> Result<Manifests, wisp_kinds::yaml::YamlError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut out = Manifests::default();
    let docs = wisp_kinds::yaml::documents(text)?;
    for (i, v) in docs.into_iter().enumerate() {
        if v.is_null() {
            continue;
        }
        let items = if v
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k.ends_with("List"))
            && v.get("items").is_some()
        {
            v.get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        } else {
            vec![v]
        };
        for (j, mut item) in items.into_iter().enumerate() {
            if !item.is_object() {
                out.skipped
                    .push(format!("document {}: not an object", i + 1));
                continue;
            }
            let generate = item
                .pointer("/metadata/generateName")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if let Some(prefix) = generate
                && item.pointer("/metadata/name").is_none()
            {
                let suffix = stable_suffix(text, i, j);
                item["metadata"]["name"] = Value::from(format!("{prefix}{suffix}"));
            }
            if key_of(&item).is_none() {
                out.skipped.push(format!(
                    "document {}: an object needs apiVersion, kind and metadata.name (or generateName)",
                    i + 1
                ));
                continue;
            }
            out.objects.push(item);
        }
    }
    Ok(out)
}

/// Five characters from `[a-z0-9]` for a `generateName`, the same for the same document of the
/// same file content (the API server picks random ones; a rescan must not rename the object).
fn stable_suffix(text: &str, doc: usize, item: usize) -> String {
    use sha2::Digest;
    let h = sha2::Sha256::digest(format!("{doc}/{item}/{text}").as_bytes());
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    h.iter()
        .take(5)
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}

/// The manifest files under `dir`, as `kubectl apply -R -f dir` finds them: links to
/// directories are not followed (kubectl's walk, cli-runtime's `FileVisitorForSTDIN`/
/// `ExpandPathsToFileVisitors` over `filepath.Walk`, does not follow them; kubectl 1.32
/// checked: neither inside the directory nor out of it). Every other entry with a manifest's
/// extension is listed, whatever its type, for [`read_changed`] to read or refuse and report
/// (kubectl reads links to files wherever they point; a host does not follow them out).
fn manifest_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let hidden = p
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        let Ok(ty) = e.file_type() else { continue };
        if hidden {
            continue;
        }
        if ty.is_dir() {
            manifest_files(&p, out);
        } else if !(ty.is_symlink() && p.is_dir())
            && p.extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| matches!(x, "yaml" | "yml" | "json"))
        {
            out.push(p);
        }
    }
}

impl DirCluster {
    /// Scans `root` once, reading manifest files of at most `max_file_size` bytes
    /// ([`DEFAULT_MAX_FILE_SIZE`] unless configured).
    pub fn open(root: impl Into<PathBuf>, max_file_size: u64) -> std::io::Result<Arc<Self>> {
        let root = root.into();
        if !root.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} is not a directory", root.display()),
            ));
        }
        let c = Arc::new(Self {
            canonical_root: std::fs::canonicalize(&root)?,
            root,
            max_file_size,
            scan: Mutex::default(),
            state: Mutex::default(),
            reported: Mutex::default(),
        });
        c.rescan();
        Ok(c)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// A source of the objects passing `filter`, kept up to date by [`DirCluster::rescan`].
    pub fn source(&self, filter: ObjectFilter) -> MemorySource {
        let mut st = self.lock();
        let src = MemorySource::new();
        for d in st.current.values() {
            apply_if_kept(&src, &filter, d, None);
        }
        st.sources.push((filter, src.clone()));
        // What the new informer cannot be served (an object in a version of its kind that
        // does not convert) is reported now, not at the next rescan.
        let (_, errors) = st.defined();
        let seen = st.files.keys().map(|p| (p.clone(), ())).collect();
        st.report_errors(errors, &seen);
        self.share_reports(&st);
        src
    }

    /// Copies the errors and notes of `st` to where readers find them.
    fn share_reports(&self, st: &State) {
        *lock(&self.reported) = Arc::new(Reported {
            errors: st.errors.clone(),
            notes: st.notes.clone(),
        });
    }

    /// Files not read whole (they do not parse, or documents or objects in them were left
    /// out), with what was wrong, as the last scan left them (never waits on a scan).
    pub fn errors(&self) -> BTreeMap<PathBuf, String> {
        lock(&self.reported).clone().errors.clone()
    }

    /// Files that define objects defined before them (in path order), with which: notes, not
    /// errors (every object of the file was read; the later definition counts).
    pub fn notes(&self) -> BTreeMap<PathBuf, String> {
        lock(&self.reported).clone().notes.clone()
    }

    /// Whether this directory cluster serves `kind` at `api_version`, as discovery would
    /// answer for an API server: Kubernetes' own groups serve their built-in kinds; another
    /// group's kind is served by a CustomResourceDefinition in the directory for the version.
    /// A custom kind no CRD in the directory defines is read as written (`Ok` with a warning:
    /// its CRD may be installed elsewhere); a version that CRD does not serve is an error.
    pub fn check_kind(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<Option<String>, KindNotServed> {
        let (group, version) = wisp_kinds::split_api_version(api_version);
        if wisp_kinds::is_builtin_group(group) {
            return match wisp_kinds::builtin(group, version, kind) {
                Some(_) => Ok(None),
                None => Err(not_served(api_version, kind).into()),
            };
        }
        let st = self.lock();
        let crd = st.files.values().flat_map(|f| f.objects.iter()).find(|v| {
            v.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition")
                && v.pointer("/spec/group").and_then(Value::as_str) == Some(group)
                && v.pointer("/spec/names/kind").and_then(Value::as_str) == Some(kind)
        });
        let Some(crd) = crd else {
            return Ok(Some(format!(
                "no CustomResourceDefinition in {} defines {kind} in {group}; its objects are read as written",
                self.root.display()
            )));
        };
        let versions: Vec<&str> = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.get("name").and_then(Value::as_str))
            .collect();
        if versions.contains(&version) {
            Ok(None)
        } else {
            Err(KindNotServed::CrdVersion {
                kind: kind.to_owned(),
                group: group.to_owned(),
                versions: versions.iter().map(|v| (*v).to_owned()).collect(),
                version: version.to_owned(),
            })
        }
    }

    /// Reads changed files and applies the differences to every source.
    pub fn rescan(&self) {
        let _scan = lock(&self.scan);
        let mut paths = Vec::new();
        manifest_files(&self.root, &mut paths);
        let known = self.lock().stamps();
        let reads = read_changed(&self.canonical_root, paths, &known, self.max_file_size);
        let mut st = self.lock();
        let seen = st.take_reads(reads);
        let (defined, reports) = st.defined();
        st.report_errors(reports, &seen);
        st.publish(defined);
        self.share_reports(&st);
    }

    /// The field labels a custom `kind` served at `api_version` supports, when a
    /// CustomResourceDefinition in the directory defines it: whether it is namespaced, and
    /// its version's `selectableFields` as labels (`spec.color`). `None` for any other kind.
    pub fn selectable_fields(&self, api_version: &str, kind: &str) -> Option<(bool, Vec<String>)> {
        let (group, version) = wisp_kinds::split_api_version(api_version);
        let st = self.lock();
        let crd = st.files.values().flat_map(|f| f.objects.iter()).find(|v| {
            v.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition")
                && v.pointer("/spec/group").and_then(Value::as_str) == Some(group)
                && v.pointer("/spec/names/kind").and_then(Value::as_str) == Some(kind)
        })?;
        let served = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)?
            .iter()
            .find(|v| v.get("name").and_then(Value::as_str) == Some(version))?;
        let fields = served
            .get("selectableFields")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
            .map(|p| p.trim_start_matches('.').to_owned())
            .collect();
        let namespaced = crd.pointer("/spec/scope").and_then(Value::as_str) != Some("Cluster");
        Some((namespaced, fields))
    }

    /// Rescans every `interval` until `shutdown` completes.
    pub async fn watch(
        self: Arc<Self>,
        interval: Duration,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        let me = self.clone();
        let poll = async move {
            loop {
                tokio::time::sleep(interval).await;
                let m = me.clone();
                let rescanned = tokio::task::spawn_blocking(move || m.rescan()).await;
                crate::tasks::report_blocking("dir: rescan", rescanned);
            }
        };
        tokio::select! {
            _ = shutdown => {}
            _ = poll => {}
        }
    }
}

/// `value` as `filter`'s informer is served it, when the informer keeps it.
fn kept_by(filter: &ObjectFilter, value: &Value) -> Result<Option<Value>, ObjectRefused> {
    let value = served(value, filter)?;
    let o = Object::from_value(value.clone(), true)
        .map_err(|e| ObjectRefused::Object(e.to_string()))?;
    Ok(filter.keeps(&o).then_some(value))
}

/// Hands `d` (whose earlier state was `old`) to the informer of `filter` when it keeps it.
fn apply_if_kept(src: &MemorySource, filter: &ObjectFilter, d: &Defined, old: Option<&Defined>) {
    // An object that cannot be served in the filter's version is reported by
    // `State::defined` (`unservable`).
    match kept_by(filter, &d.value) {
        Ok(Some(value)) => {
            if let Err(e) = src.apply_at(value, d.rv, &d.uid) {
                tracing::error!(error = %e, "manifest object refused");
            }
        }
        // An object the informer kept and no longer keeps (its labels or fields stopped
        // matching, or it can no longer be served in the informer's version) leaves it as a
        // watch cache makes it leave: DELETED with its last state at the new resourceVersion
        // (apiserver cacher, cacheWatcher.convertToWatchEvent).
        _ if old.is_some_and(|old| kept_by(filter, &old.value).is_ok_and(|v| v.is_some())) => {
            let md = &d.value["metadata"];
            let name = md["name"].as_str().unwrap_or("");
            let key = match md["namespace"].as_str() {
                Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
                _ => name.to_owned(),
            };
            src.delete_at(&key, d.rv);
        }
        Ok(None) => {}
        Err(e) => tracing::debug!(error = %e, "manifest object not served to an informer"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Makes `f` look unchanged for longer than SETTLE.
    fn quiet(f: &Path) {
        std::fs::File::options()
            .write(true)
            .open(f)
            .unwrap()
            .set_modified(SystemTime::now() - 2 * SETTLE)
            .unwrap();
    }

    fn pods_filter() -> ObjectFilter {
        ObjectFilter {
            api_version: "v1".into(),
            kind: "Pod".into(),
            ..Default::default()
        }
    }

    #[test]
    fn files_define_objects_and_edits_and_deletions_change_them_with_increasing_versions() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("a.yaml"),
            "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c, image: nginx}]}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n",
        )
        .unwrap();
        let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
        let pods = c.source(pods_filter());
        let objs = pods.objects();
        assert_eq!(
            objs.keys().collect::<Vec<_>>(),
            ["default/web"],
            "namespaced kinds default to `default`"
        );
        let rv1 = objs["default/web"].resource_version().to_owned();

        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(
            d.path().join("a.yaml"),
            "apiVersion: v1\nkind: Pod\nmetadata: {name: web, labels: {v: '2'}}\nspec: {containers: [{name: c, image: nginx}]}\n",
        )
        .unwrap();
        quiet(&d.path().join("a.yaml"));
        c.rescan();
        let web = pods.objects()["default/web"].clone();
        assert_eq!(web.meta().label("v"), Some("2"));
        assert!(web.resource_version().parse::<u64>().unwrap() > rv1.parse::<u64>().unwrap());

        std::fs::write(
            d.path().join("bad.yaml"),
            "apiVersion: v1\nkind: Pod\nmetadata: [oops\n",
        )
        .unwrap();
        c.rescan();
        assert_eq!(c.errors().len(), 1, "a broken file is reported");
        assert_eq!(pods.objects().len(), 1, "and changes nothing");

        std::fs::remove_file(d.path().join("a.yaml")).unwrap();
        c.rescan();
        assert!(pods.objects().is_empty());
    }

    /// An object whose labels stop matching an informer's selector leaves that informer, as a
    /// watch with a selector gets DELETED from a real server; matching again adds it back.
    #[test]
    fn an_object_that_stops_matching_a_selector_leaves_the_informer() {
        let d = tempfile::tempdir().unwrap();
        let write = |team: &str| {
            std::fs::write(
                d.path().join("a.yaml"),
                format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c, labels: {{team: {team}}}}}\n"),
            )
            .unwrap();
            quiet(&d.path().join("a.yaml"));
        };
        write("a");
        let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
        let team_a = c.source(ObjectFilter {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            labels: wisp_kinds::selector::LabelSelector::parse("team=a").unwrap(),
            ..Default::default()
        });
        assert_eq!(team_a.objects().keys().collect::<Vec<_>>(), ["default/c"]);
        let rv1: u64 = team_a.objects()["default/c"]
            .resource_version()
            .parse()
            .unwrap();

        write("b");
        c.rescan();
        assert!(
            team_a.objects().is_empty(),
            "relabelled team=b, it left the team=a informer"
        );

        write("a");
        c.rescan();
        let back: u64 = team_a.objects()["default/c"]
            .resource_version()
            .parse()
            .unwrap();
        assert!(
            back > rv1 + 1,
            "back at a newer version: {back} after {rv1}"
        );
    }

    #[test]
    fn one_uid_and_one_resource_version_sequence_for_the_whole_directory() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("a.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, labels: {team: a}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: c}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: c}\nspec: {containers: [{name: c, image: nginx}]}\n",
        )
        .unwrap();
        let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
        let of = |kind: &str, labels: Option<&str>| {
            c.source(ObjectFilter {
                api_version: "v1".into(),
                kind: kind.into(),
                labels: labels
                    .map(|l| wisp_kinds::selector::LabelSelector::parse(l).unwrap())
                    .unwrap_or_default(),
                ..Default::default()
            })
        };
        let (all, team, secrets, pods) = (
            of("ConfigMap", None),
            of("ConfigMap", Some("team=a")),
            of("Secret", None),
            of("Pod", None),
        );
        let id = |s: &MemorySource| {
            let o = s.objects()["default/c"].clone();
            (o.meta().uid().to_owned(), o.resource_version().to_owned())
        };
        assert_eq!(
            id(&all),
            id(&team),
            "one object, one uid and resourceVersion"
        );
        let uids: std::collections::BTreeSet<String> =
            [&all, &secrets, &pods].iter().map(|s| id(s).0).collect();
        assert_eq!(
            uids.len(),
            3,
            "objects of different kinds have their own uids"
        );
        let rvs: std::collections::BTreeSet<String> =
            [&all, &secrets, &pods].iter().map(|s| id(s).1).collect();
        assert_eq!(rvs.len(), 3, "each object its own place in one sequence");

        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(
            d.path().join("a.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, labels: {team: a, v: '2'}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: c}\n",
        )
        .unwrap();
        quiet(&d.path().join("a.yaml"));
        c.rescan();
        assert_eq!(id(&all), id(&team));
        let (uid, rv) = id(&all);
        assert_eq!(uid, id(&team).0, "an edit keeps the uid");
        let pod_gone_rv = pods.resource_version();
        assert!(
            rv.parse::<u64>().unwrap() < pod_gone_rv,
            "the deletion comes after the edit"
        );
        assert!(pods.objects().is_empty());
    }

    #[test]
    fn a_bad_document_skips_only_itself_and_a_bom_generate_name_and_a_list_kind_are_read() {
        let text = "\u{feff}apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\njust a string\n---\napiVersion: v1\nkind: Pod\nmetadata: {generateName: web-}\n---\napiVersion: v1\nkind: Pod\nmetadata: {labels: {a: b}}\n---\napiVersion: example.com/v1\nkind: WidgetList\nmetadata: {name: w}\n";
        let m = parse_manifests(text).unwrap();
        let names: Vec<&str> = m
            .objects
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names.len(), 3, "{names:?} {:?}", m.skipped);
        assert_eq!(names[0], "a");
        assert!(
            names[1].starts_with("web-") && names[1].len() == 9,
            "{names:?}"
        );
        assert_eq!(
            names[2], "w",
            "a kind ending in List without items is an object"
        );
        assert_eq!(m.skipped.len(), 2, "{:?}", m.skipped);
        assert!(m.skipped[0].starts_with("document 2: not an object"));
        assert!(m.skipped[1].starts_with("document 4: an object needs"));
        assert_eq!(
            parse_manifests(text).unwrap(),
            m,
            "generated names are stable"
        );
    }

    /// kubectl reads YAML with go-yaml v2 (YAML 1.1): the manifests written for it mean the
    /// same here.
    #[test]
    fn yaml_is_read_as_kubectl_reads_it() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {quoted: 'yes', octal: '0644'}}\nspec:\n  hostNetwork: yes\n  enableServiceLinks: off\n  defaults: &limits {cpu: 100m, memory: 64Mi}\n  volumes:\n  - name: v\n    secret: {secretName: s, defaultMode: 0644}\n  containers:\n  - name: c\n    image: nginx\n    resources:\n      limits:\n        <<: *limits\n        memory: 128Mi\n    ports: [{containerPort: 0x1F90}]\n";
        let m = parse_manifests(text).unwrap();
        assert!(m.skipped.is_empty(), "{:?}", m.skipped);
        let p = &m.objects[0];
        assert_eq!(
            p["spec"]["volumes"][0]["secret"]["defaultMode"], 420,
            "octal"
        );
        assert_eq!(p["spec"]["hostNetwork"], true);
        assert_eq!(p["spec"]["enableServiceLinks"], false);
        assert_eq!(
            p["spec"]["containers"][0]["resources"]["limits"],
            serde_json::json!({"cpu": "100m", "memory": "128Mi"}),
            "a merge key merges; the mapping's own keys win"
        );
        assert_eq!(
            p["spec"]["containers"][0]["ports"][0]["containerPort"],
            8080
        );
        assert_eq!(
            p["metadata"]["labels"]["quoted"], "yes",
            "quoted stays a string"
        );
        assert_eq!(p["metadata"]["labels"]["octal"], "0644");
    }

    /// kubectl reads a mapping with a duplicate key, the last one winning whole (checked with
    /// kubectl 1.32: `kubectl label --local -o json -f` of this file).
    #[test]
    fn a_duplicate_key_is_read_with_the_last_one_winning_as_kubectl_does() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dup\n  labels:\n    a: one\n    a: two\ndata:\n  x: '1'\ndata:\n  z: '2'\n";
        let m = parse_manifests(text).unwrap();
        assert!(m.skipped.is_empty(), "{:?}", m.skipped);
        assert_eq!(
            m.objects,
            [serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "dup", "labels": {"a": "two"}}, "data": {"z": "2"}})]
        );
    }

    /// A file of 20,000 documents (past the YAML reader's default limits) is read whole.
    #[test]
    fn a_file_of_many_documents_is_read_whole() {
        let text: String = (0..20_000)
            .map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}}}\ndata: {{k: v}}\n---\n"))
            .collect();
        let began = std::time::Instant::now();
        let m = parse_manifests(&text).unwrap();
        assert_eq!(m.objects.len(), 20_000);
        println!("20,000 documents read in {:?}", began.elapsed());
    }

    /// An API server serves one object in every version of its group and kind: an informer on
    /// autoscaling/v2 sees an HPA written as autoscaling/v1, converted to autoscaling/v2.
    #[test]
    fn an_informer_on_autoscaling_v2_sees_an_hpa_written_as_v1_converted() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("hpa.yaml"),
            "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata: {name: web, namespace: shop}\nspec: {maxReplicas: 3, targetCPUUtilizationPercentage: 60, scaleTargetRef: {kind: Deployment, name: web}}\n---\napiVersion: v1\nkind: HorizontalPodAutoscaler\nmetadata: {name: not-autoscaling, namespace: shop}\n",
        )
        .unwrap();
        let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
        let hpas = c.source(ObjectFilter {
            api_version: "autoscaling/v2".into(),
            kind: "HorizontalPodAutoscaler".into(),
            ..Default::default()
        });
        let objs = hpas.objects();
        assert_eq!(
            objs.keys().collect::<Vec<_>>(),
            ["shop/web"],
            "another group is not"
        );
        let web = objs["shop/web"].to_value();
        assert_eq!(web["apiVersion"], "autoscaling/v2");
        assert_eq!(
            web["spec"]["metrics"],
            serde_json::json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}}])
        );
        assert!(web["spec"].get("targetCPUUtilizationPercentage").is_none());
        assert_eq!(web["spec"]["minReplicas"], 1, "defaulted");
        let v1 = c.source(ObjectFilter {
            api_version: "autoscaling/v1".into(),
            kind: "HorizontalPodAutoscaler".into(),
            ..Default::default()
        });
        assert_eq!(
            v1.objects()["shop/web"].to_value()["spec"]["targetCPUUtilizationPercentage"],
            60,
            "and as written to an informer on the version it is written in"
        );
    }

    /// A kind whose versions the dir source does not convert is refused to an informer on
    /// another version, and reported naming the version to write it in.
    #[test]
    fn an_object_in_a_version_that_does_not_convert_is_refused_and_reported() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("ip.yaml"),
            "apiVersion: networking.k8s.io/v1beta1\nkind: IPAddress\nmetadata: {name: 10.0.0.1}\nspec: {parentRef: {resource: services, namespace: default, name: web}}\n",
        )
        .unwrap();
        let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
        assert!(c.errors().is_empty(), "{:?}", c.errors());
        let ips = c.source(ObjectFilter {
            api_version: "networking.k8s.io/v1".into(),
            kind: "IPAddress".into(),
            ..Default::default()
        });
        assert!(ips.objects().is_empty());
        let e = &c.errors()[&d.path().join("ip.yaml")];
        assert!(
            e.contains("IPAddress 10.0.0.1 is written as networking.k8s.io/v1beta1; the dir source does not convert IPAddress to networking.k8s.io/v1: write it as networking.k8s.io/v1"),
            "{e}"
        );
    }

    /// The demo's pods (deploy/demo/cluster) get the API server's defaults: a field selector
    /// on `status.phase=Pending` matches every one of them, as on a cluster that just created
    /// them.
    #[test]
    fn the_demo_pods_are_defaulted_and_match_status_phase_pending() {
        let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/demo/cluster");
        let c = DirCluster::open(&demo, DEFAULT_MAX_FILE_SIZE).unwrap();
        let all = c.source(pods_filter()).objects();
        let pending = c
            .source(ObjectFilter {
                fields: wisp_kinds::selector::FieldSelector::parse("status.phase=Pending").unwrap(),
                ..pods_filter()
            })
            .objects();
        assert_eq!(all.len(), 4);
        assert_eq!(
            pending.keys().collect::<Vec<_>>(),
            all.keys().collect::<Vec<_>>()
        );
        let db = pending["shop/db-0"].to_value();
        assert_eq!(db["spec"]["dnsPolicy"], "ClusterFirst");
        assert_eq!(
            db["spec"]["containers"][0]["imagePullPolicy"], "Always",
            "postgres:latest"
        );
    }

    /// Decoded as the API server decodes: a value of the wrong type refuses the object and is
    /// reported with the file, the object and the field; an unknown field is dropped and
    /// reported (fieldValidation=Warn); the rest of the file counts.
    #[test]
    fn type_errors_refuse_an_object_and_unknown_fields_are_dropped_and_reported() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("a.yaml"),
            concat!(
                "apiVersion: v1\nkind: Pod\nmetadata: {name: numbered, labels: {version: 2}}\nspec: {containers: [{name: c, image: nginx}]}\n---\n",
                "apiVersion: v1\nkind: Pod\nmetadata: {name: iscsi}\nspec:\n  containers: [{name: c, image: nginx}]\n  volumes: [{name: d, iscsi: {targetPortal: '10.0.0.1:3260', iqn: iqn.x, lun: <ADD LUN ID Here>}}]\n---\n",
                "apiVersion: v1\nkind: Pod\nmetadata: {name: typo}\nspec: {containers: [{name: c, image: nginx, protectionDoamin: x}]}\n",
            ),
        )
        .unwrap();
        let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
        let pods = c.source(pods_filter()).objects();
        assert_eq!(pods.keys().collect::<Vec<_>>(), ["default/typo"]);
        assert!(
            pods["default/typo"].to_value()["spec"]["containers"][0]
                .get("protectionDoamin")
                .is_none(),
            "dropped"
        );
        let e = &c.errors()[&d.path().join("a.yaml")];
        for part in [
            "Pod default/numbered is refused: Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal number into field metadata.labels.version of type string",
            "Pod default/iscsi is refused: Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal string into field spec.volumes[0].iscsi.lun of type int32",
            "Pod default/typo: unknown field \"spec.containers[0].protectionDoamin\" (dropped, as an API server does with fieldValidation=Warn)",
        ] {
            assert!(e.contains(part), "{part} not in {e}");
        }
    }

    /// One object per group, kind, namespace and name, whichever version it is written in:
    /// a later definition replaces an earlier one (as `kubectl apply -f` of the directory
    /// would) and is reported.
    #[test]
    fn an_object_written_twice_is_one_object_and_reported() {
        let d = tempfile::tempdir().unwrap();
        let hpa = |v: &str, max: u32| {
            format!(
                "apiVersion: autoscaling/{v}\nkind: HorizontalPodAutoscaler\nmetadata: {{name: web, namespace: shop}}\nspec: {{maxReplicas: {max}, scaleTargetRef: {{kind: Deployment, name: web}}}}\n"
            )
        };
        std::fs::write(d.path().join("a.yaml"), hpa("v1", 3)).unwrap();
        std::fs::write(d.path().join("b.yaml"), hpa("v2", 5)).unwrap();
        let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
        let hpas = c.source(ObjectFilter {
            api_version: "autoscaling/v2".into(),
            kind: "HorizontalPodAutoscaler".into(),
            ..Default::default()
        });
        let objs = hpas.objects();
        assert_eq!(objs.keys().collect::<Vec<_>>(), ["shop/web"]);
        assert_eq!(objs["shop/web"].meta().api_version(), "autoscaling/v2");
        // A note, not an error: every object of b.yaml was read.
        assert_eq!(c.errors(), BTreeMap::new());
        let notes = c.notes();
        assert_eq!(notes.len(), 1, "{notes:?}");
        let e = &notes[&d.path().join("b.yaml")];
        assert!(
            e.contains("HorizontalPodAutoscaler shop/web is also defined in")
                && e.contains("a.yaml"),
            "{e}"
        );
    }

    /// What an API server would refuse is left out and reported, naming the object and why;
    /// the rest of the file counts.
    #[test]
    fn objects_an_api_server_would_refuse_are_left_out_and_reported() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("a.yaml"),
            concat!(
                "apiVersion: v1\nkind: Pod\nmetadata: {name: no-containers}\nspec: {}\n---\n",
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bad, labels: {team: 'a b'}}\n---\n",
                "apiVersion: extensions/v1beta1\nkind: Deployment\nmetadata: {name: old}\n---\n",
                "apiVersion: v1\nkind: Podd\nmetadata: {name: typo}\n---\n",
                "apiVersion: v1\nkind: Pod\nmetadata: {name: Web}\nspec: {containers: [{name: c, image: nginx}]}\n---\n",
                "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n---\n",
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: good}\n",
            ),
        )
        .unwrap();
        let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
        let all = |api_version: &str, kind: &str| {
            let mut keys: Vec<String> = c
                .source(ObjectFilter {
                    api_version: api_version.into(),
                    kind: kind.into(),
                    ..Default::default()
                })
                .objects()
                .into_keys()
                .collect();
            keys.sort();
            keys
        };
        assert!(all("v1", "Pod").is_empty());
        assert_eq!(all("v1", "ConfigMap"), ["default/good"]);
        assert!(all("apps/v1", "Deployment").is_empty());
        assert_eq!(
            all("example.com/v1", "Widget"),
            ["default/w"],
            "a custom kind is read as written"
        );
        let e = &c.errors()[&d.path().join("a.yaml")];
        for part in [
            "Pod \"no-containers\" is invalid: spec.containers: Required value",
            "ConfigMap \"bad\" is invalid: metadata.labels: Invalid value: \"a b\"",
            "Kubernetes 1.36 serves Deployment as apps/v1, not as \"extensions/v1beta1\"",
            "Kubernetes 1.36 serves no kind \"Podd\" in v1; it serves: Binding, ComponentStatus, ConfigMap",
            "Pod \"Web\" is invalid: metadata.name: Invalid value: \"Web\": a lowercase RFC 1123 subdomain",
        ] {
            assert!(e.contains(part), "{part} not in {e}");
        }
    }

    #[test]
    fn the_kinds_an_informer_names_are_checked_against_the_directory_cluster() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("crd.yaml"),
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec: {group: example.com, scope: Namespaced, names: {kind: Widget, plural: widgets}, versions: [{name: v1, served: true, storage: true}]}\n",
        )
        .unwrap();
        let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
        assert_eq!(c.check_kind("apps/v1", "Deployment"), Ok(None));
        assert_eq!(
            c.check_kind("autoscaling/v1", "HorizontalPodAutoscaler"),
            Ok(None)
        );
        assert_eq!(c.check_kind("example.com/v1", "Widget"), Ok(None));
        let e = c.check_kind("v1", "Podd").unwrap_err().to_string();
        assert!(
            e.contains("serves no kind \"Podd\" in v1; it serves: "),
            "{e}"
        );
        let e = c
            .check_kind("apps/v2", "Deployment")
            .unwrap_err()
            .to_string();
        assert!(e.contains("serves Deployment as apps/v1"), "{e}");
        let e = c
            .check_kind("example.com/v2", "Widget")
            .unwrap_err()
            .to_string();
        assert!(e.contains("serves versions v1, not \"v2\""), "{e}");
        let w = c.check_kind("other.io/v1", "Gadget").unwrap().unwrap();
        assert!(w.contains("no CustomResourceDefinition"), "{w}");
    }

    #[test]
    fn scope_comes_from_the_built_in_kinds_and_the_directorys_crds() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("a.yaml"),
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec: {group: example.com, scope: Cluster, names: {kind: Widget, plural: widgets}}\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n---\napiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: r, namespace: edge}\n---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: v}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: ''}\n",
        )
        .unwrap();
        let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
        let keys = |api_version: &str, kind: &str| {
            c.source(ObjectFilter {
                api_version: api_version.into(),
                kind: kind.into(),
                ..Default::default()
            })
            .objects()
            .into_keys()
            .collect::<Vec<_>>()
        };
        assert_eq!(
            keys("example.com/v1", "Widget"),
            ["w"],
            "a CRD with scope: Cluster"
        );
        assert_eq!(
            keys("example.com/v1", "Gadget"),
            ["default/g"],
            "no CRD: namespaced"
        );
        assert_eq!(keys("rbac.authorization.k8s.io/v1", "ClusterRole"), ["r"]);
        assert_eq!(
            keys(
                "admissionregistration.k8s.io/v1",
                "ValidatingAdmissionPolicy"
            ),
            ["v"]
        );
        assert_eq!(
            keys("v1", "ConfigMap"),
            ["default/c"],
            "namespace: '' is default"
        );
    }

    #[test]
    fn a_file_caught_half_rewritten_loses_nothing_until_it_is_quiet() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("p.yaml");
        let three = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: nginx}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec: {containers: [{name: c, image: nginx}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: c}\nspec: {containers: [{name: c, image: nginx}]}\n";
        std::fs::write(&f, three).unwrap();
        let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
        let pods = c.source(pods_filter());
        let rv = pods.resource_version();
        // Caught at a document boundary: one document written so far.
        std::fs::write(&f, &three[..three.find("---").unwrap()]).unwrap();
        c.rescan();
        assert_eq!(pods.objects().len(), 3, "nothing deleted yet");
        // The writer finishes with the same content: no change at all.
        std::fs::write(&f, three).unwrap();
        c.rescan();
        assert_eq!(pods.objects().len(), 3);
        assert_eq!(pods.resource_version(), rv, "no spurious delete and add");
        // A real loss counts once the file has been quiet.
        std::fs::write(&f, &three[..three.find("---").unwrap()]).unwrap();
        quiet(&f);
        c.rescan();
        assert_eq!(pods.objects().keys().collect::<Vec<_>>(), ["default/a"]);
    }

    /// A writer that pauses 2 s mid-rewrite, the file cut at a document boundary (it parses
    /// whole, with fewer objects): nothing is deleted, and once it finishes nothing changed.
    #[test]
    fn a_writer_pausing_two_seconds_mid_rewrite_deletes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("p.yaml");
        let pod = |n: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {n}}}\nspec: {{containers: [{{name: c, image: nginx}}]}}\n"
            )
        };
        let whole = format!("{}---\n{}---\n{}", pod("a"), pod("b"), pod("c"));
        std::fs::write(&f, &whole).unwrap();
        let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
        let pods = c.source(pods_filter());
        let rv = pods.resource_version();
        std::fs::write(&f, format!("{}---\n", pod("a"))).unwrap();
        // The writer has paused for 2 s.
        std::fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(SystemTime::now() - Duration::from_secs(2))
            .unwrap();
        c.rescan();
        assert_eq!(pods.objects().len(), 3, "nothing deleted mid-rewrite");
        std::fs::write(&f, &whole).unwrap();
        c.rescan();
        assert_eq!(pods.resource_version(), rv, "no phantom DELETED and ADDED");
    }

    /// `kubectl apply -R -f DIR` (1.32, checked) follows no link to a directory, inside DIR or
    /// out of it, and reads links to files wherever they point. A host is not a one-off
    /// command: a link to a file out of the directory is refused and reported (it could name
    /// any file the host may read), one inside it is read.
    #[cfg(unix)]
    #[test]
    fn links_to_directories_are_not_followed_and_links_to_files_only_inside_it() {
        let outside = tempfile::tempdir().unwrap();
        let d = tempfile::tempdir().unwrap();
        let pod = |n: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {n}}}\nspec: {{containers: [{{name: c, image: nginx}}]}}\n"
            )
        };
        std::fs::write(outside.path().join("out.yaml"), pod("out")).unwrap();
        std::fs::write(outside.path().join("linked.yaml"), pod("linked")).unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/in.yaml"), pod("in")).unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("outside")).unwrap();
        std::os::unix::fs::symlink(d.path().join("sub"), d.path().join("again")).unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("linked.yaml"),
            d.path().join("file-link.yaml"),
        )
        .unwrap();
        std::fs::write(d.path().join("inner.json"), pod("inner")).unwrap();
        std::os::unix::fs::symlink("../inner.json", d.path().join("sub/inner-link.yaml")).unwrap();
        let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
        let objs = c.source(pods_filter()).objects();
        assert_eq!(
            objs.keys().collect::<Vec<_>>(),
            ["default/in", "default/inner"]
        );
        let errors = c.errors();
        assert_eq!(
            errors.keys().collect::<Vec<_>>(),
            [&d.path().join("file-link.yaml")]
        );
        let e = &errors[&d.path().join("file-link.yaml")];
        assert!(
            e.contains("not read (its previous objects are kept): it resolves to ")
                && e.contains(", outside ")
                && e.contains("(only files inside it are read)"),
            "{e}"
        );
        assert_eq!(
            c.notes().keys().collect::<Vec<_>>(),
            [&d.path().join("sub/inner-link.yaml")],
            "sub/ is read once; the link inside redefines inner.json's pod"
        );
    }

    /// A FIFO, a link to a device (out of the directory; a device itself is refused by
    /// [`files::read_regular`]) and a file over the cap are each refused and reported, at the
    /// first scan and when they appear later; the other files are read; no scan blocks.
    #[cfg(unix)]
    #[test]
    fn only_regular_files_under_the_size_cap_are_read() {
        let d = tempfile::tempdir().unwrap();
        let pod = |n: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {n}}}\nspec: {{containers: [{{name: c, image: nginx}}]}}\n"
            )
        };
        let hostile = |dir: &Path, tag: &str| {
            let fifo = dir.join(format!("pipe{tag}.yaml"));
            crate::files::mkfifo(&fifo);
            std::os::unix::fs::symlink("/dev/zero", dir.join(format!("zero{tag}.yaml"))).unwrap();
            let big = format!("{}# {}\n", pod(&format!("big{tag}")), "x".repeat(600));
            std::fs::write(dir.join(format!("big{tag}.yaml")), big).unwrap();
        };
        let refused = |c: &DirCluster, tag: &str| {
            let errors = c.errors();
            let e = |n: &str| errors[&d.path().join(format!("{n}{tag}.yaml"))].clone();
            assert!(
                e("pipe").contains("it is a FIFO, not a regular file"),
                "{}",
                e("pipe")
            );
            assert!(
                e("zero").contains("resolves to /dev/zero, outside"),
                "{}",
                e("zero")
            );
            assert!(
                e("big").contains("over the cap of 512 bytes (dir.maxFileSize)"),
                "{}",
                e("big")
            );
        };
        std::fs::write(d.path().join("ok.yaml"), pod("ok")).unwrap();
        hostile(d.path(), "");
        let c = DirCluster::open(d.path(), 512).unwrap();
        let pods = c.source(pods_filter());
        assert_eq!(pods.objects().keys().collect::<Vec<_>>(), ["default/ok"]);
        refused(&c, "");
        assert_eq!(c.errors().len(), 3);

        // Added to a running source: refused too, and what else was added is read.
        hostile(d.path(), "-late");
        std::fs::write(d.path().join("late.yaml"), pod("late")).unwrap();
        c.rescan();
        assert_eq!(
            pods.objects().keys().collect::<Vec<_>>(),
            ["default/late", "default/ok"]
        );
        refused(&c, "-late");
        assert_eq!(c.errors().len(), 6);
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_loop_is_not_followed_round() {
        let d = tempfile::tempdir().unwrap();
        let sub = d.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(
            sub.join("p.yaml"),
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: nginx}]}\n",
        )
        .unwrap();
        std::os::unix::fs::symlink(d.path(), sub.join("loop")).unwrap();
        let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
        assert_eq!(c.source(pods_filter()).objects().len(), 1);
    }

    #[test]
    fn a_file_that_breaks_keeps_its_previous_objects() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("p.yaml");
        std::fs::write(&f, "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c, image: nginx}]}\n").unwrap();
        let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
        let pods = c.source(pods_filter());
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&f, "apiVersion: v1\nkind: Pod\nmetadata: {name: web\n").unwrap();
        c.rescan();
        assert_eq!(pods.objects().len(), 1);
        let e = c.errors().values().next().unwrap().clone();
        assert!(e.contains("line 3"), "{e}");
    }

    #[test]
    fn custom_resources_are_defaulted_pruned_and_checked_by_their_crds_schema() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("a.yaml"),
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec: {group: example.com, scope: Namespaced, names: {kind: Widget, plural: widgets}, versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, properties: {replicas: {type: integer, default: 1}, size: {type: string, enum: [low, high]}}}}}}}]}\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: good}\nspec: {size: low, colour: red}\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: bad}\nspec: {size: urgent}\n",
        )
        .unwrap();
        let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
        let widgets = c
            .source(ObjectFilter {
                api_version: "example.com/v1".into(),
                kind: "Widget".into(),
                ..Default::default()
            })
            .objects();
        assert_eq!(widgets.keys().collect::<Vec<_>>(), ["default/good"]);
        assert_eq!(
            widgets["default/good"].to_value()["spec"],
            serde_json::json!({"size": "low", "replicas": 1}),
            "defaulted, the unknown field pruned"
        );
        let e = &c.errors()[&d.path().join("a.yaml")];
        assert!(
            e.contains("Widget.example.com \"bad\" is invalid: spec.size: Unsupported value: \"urgent\": supported values: \"low\", \"high\""),
            "{e}"
        );
    }
}
