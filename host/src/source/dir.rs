//! `dir:PATH`: a directory of Kubernetes manifests (YAML or JSON, several documents per file,
//! `kind: List` expanded) acts as the cluster. Every object is listed at start; creating, editing
//! and deleting files produce add / update / delete through the same informer pipeline, with
//! increasing resourceVersions. The directory is rescanned every `interval` (polling works on
//! every filesystem and never sees a half-written file twice: a file that does not parse keeps
//! its previous objects and is reported; a file that lost objects is believed only once it has
//! been quiet for `scan::SETTLE` (5 s), its modification time and size unchanged, so a rewrite in place
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
//!
//! In four parts: `scan` finds the manifest files and reads those that changed (bounded,
//! without a lock held); `parse` makes objects of a file's text as an API server would store
//! them (documents, scope, decoding, defaults, validation, the version an informer is served
//! in); `diff` keeps what the directory defines and hands each scan's differences to the
//! informers' sources; this file, the [`DirCluster`], is what the host watches through: a
//! source per informer, a rescan per interval, and the errors and notes of the last scan.

mod diff;
mod parse;
mod scan;
#[cfg(test)]
mod tests;

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

use diff::*;
use parse::*;
use scan::*;

pub use parse::{KindNotServed, Manifests, NotServed, ObjectRefused, parse_manifests};
pub use scan::FileUnread;

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
