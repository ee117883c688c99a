//! Finding a directory's manifest files as `kubectl apply -R -f` does, and reading those that
//! changed since the last scan: regular files of bounded size only, no lock held.

use super::*;

/// How long a file that lost objects must be left unchanged (modification time and size)
/// before its loss counts. Longer than a writer's pause mid-rewrite (a second was not: a writer
/// pausing 2 s made every object of the file DELETED then ADDED); a real deletion of documents
/// shows this much later.
pub(super) const SETTLE: Duration = Duration::from_secs(5);

/// Whether `now` lacks an object the file defined before.
pub(super) fn lost_objects(before: Option<&FileState>, now: &[Value]) -> bool {
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

pub(super) struct FileState {
    pub(super) stamp: (SystemTime, u64),
    pub(super) objects: Vec<Value>,
    /// What of the file could not be read (the documents left out, or why none could be).
    pub(super) unread: Vec<String>,
}

/// What a scan made of one manifest file.
pub(super) enum Read {
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

/// Reads the files of `paths` whose stamp differs from `known`, without any lock held: the
/// regular files inside `root` (the canonical root) of at most `cap` bytes, as
/// [`files::read_regular`] reads them. A link to a file is followed inside `root` only; a link
/// out of it, a FIFO, a device, a socket or a file over `cap` is refused, and reported as the
/// file's error. A path gone (or a dangling link) is left out.
pub(super) fn read_changed(
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

/// The manifest files under `dir`, as `kubectl apply -R -f dir` finds them: links to
/// directories are not followed (kubectl's walk, cli-runtime's `FileVisitorForSTDIN`/
/// `ExpandPathsToFileVisitors` over `filepath.Walk`, does not follow them; kubectl 1.32
/// checked: neither inside the directory nor out of it). Every other entry with a manifest's
/// extension is listed, whatever its type, for [`read_changed`] to read or refuse and report
/// (kubectl reads links to files wherever they point; a host does not follow them out).
pub(super) fn manifest_files(dir: &Path, out: &mut Vec<PathBuf>) {
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
