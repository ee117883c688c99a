//! What the directory defines now, and what each scan changed: one resourceVersion sequence and
//! one uid per object for the whole directory cluster, the files' errors and notes, and the
//! differences handed to every informer's source that keeps the object.

use super::*;

/// What a scan says of the files, per file: what was not read (errors), and the objects a
/// file only redefines (notes: the later definition counts, as with `kubectl apply -f`).
pub(super) struct Reports {
    pub(super) errors: BTreeMap<PathBuf, String>,
    pub(super) notes: BTreeMap<PathBuf, String>,
}

/// An object the directory defines, with the resourceVersion of its last change and its uid:
/// one sequence and one uid for the whole directory cluster, whichever informers keep it.
pub(super) struct Defined {
    pub(super) value: Value,
    pub(super) rv: u64,
    pub(super) uid: String,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) files: BTreeMap<PathBuf, FileState>,
    /// The objects the directory defines now.
    pub(super) current: BTreeMap<ObjKey, Defined>,
    /// The cluster's resourceVersion: one more per change of any object.
    pub(super) rv: u64,
    /// uids given so far.
    pub(super) uids: u64,
    pub(super) sources: Vec<(ObjectFilter, MemorySource)>,
    /// Files that failed to parse, with the error (reported once per change).
    pub(super) errors: BTreeMap<PathBuf, String>,
    /// Files that only redefine objects defined before them, with which (reported as notes).
    pub(super) notes: BTreeMap<PathBuf, String>,
    /// Files that lost objects and are not yet quiet: the stamp seen and since when.
    pub(super) pending: BTreeMap<PathBuf, ((SystemTime, u64), Instant)>,
    /// The last decoding of each object (by file and place in it), so a rescan decodes only
    /// what changed.
    pub(super) decoded: std::cell::RefCell<std::collections::HashMap<(PathBuf, usize), Decoding>>,
}

/// An object as placed in its scope, and what [`decode_and_default`] made of it.
pub(super) struct Decoding {
    pub(super) placed: Value,
    pub(super) result: Result<Value, ObjectRefused>,
    pub(super) warnings: Vec<String>,
}

impl State {
    /// The stamp of each file read so far, for a scan to read only the files that changed.
    pub(super) fn stamps(&self) -> BTreeMap<PathBuf, (SystemTime, u64)> {
        self.files
            .iter()
            .map(|(p, f)| (p.clone(), f.stamp))
            .collect()
    }

    /// Takes what a scan read of the files there are ([`read_changed`]) and forgets the files
    /// that are gone; returns the files there are.
    pub(super) fn take_reads(&mut self, reads: Vec<(PathBuf, Read)>) -> BTreeMap<PathBuf, ()> {
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
    pub(super) fn quiet_for_settle(&mut self, path: &Path, stamp: (SystemTime, u64)) -> bool {
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
    pub(super) fn defined(&self) -> (BTreeMap<ObjKey, Value>, Reports) {
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
    pub(super) fn report_errors(&mut self, reports: Reports, seen: &BTreeMap<PathBuf, ()>) {
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
    pub(super) fn publish(&mut self, defined: BTreeMap<ObjKey, Value>) {
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

/// `value` as `filter`'s informer is served it, when the informer keeps it.
pub(super) fn kept_by(
    filter: &ObjectFilter,
    value: &Value,
) -> Result<Option<Value>, ObjectRefused> {
    let value = served(value, filter)?;
    let o = Object::from_value(value.clone(), true)
        .map_err(|e| ObjectRefused::Object(e.to_string()))?;
    Ok(filter.keeps(&o).then_some(value))
}

/// Hands `d` (whose earlier state was `old`) to the informer of `filter` when it keeps it.
pub(super) fn apply_if_kept(
    src: &MemorySource,
    filter: &ObjectFilter,
    d: &Defined,
    old: Option<&Defined>,
) {
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
