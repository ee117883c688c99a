//! `customResources.modulePaths`: the directories a custom resource's path module may be in.
//! None by default: a custom resource then names only `oci://` modules, pulled under the
//! host's signature policy. A path module must be, by its text, under one of the directories
//! (no `..`), and, its directory's links resolved, still under one of them resolved; its last
//! component may not be a link (the loader opens it with `O_NOFOLLOW`). A path outside is
//! refused before anything of it is looked at, so the refusal tells nothing of what is there.

use std::path::{Component, Path, PathBuf};

use super::Config;

/// A custom resource's module path that is not allowed (the message a refusal shows for
/// `spec.module`).
#[derive(Debug, thiserror::Error)]
pub(in crate::config) enum ModulePathError {
    /// The path has a `..`.
    #[error("{} has a `..`: a custom resource's module path may not have one", .0.display())]
    ParentDir(PathBuf),
    /// The path is not under a directory of `modulePaths` (as configured).
    #[error(
        "{} is not under a directory of customResources.modulePaths ({})",
        path.display(),
        if allowed.is_empty() {
            "none: a custom resource may name only oci:// modules".to_owned()
        } else {
            allowed.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
        }
    )]
    Outside {
        path: PathBuf,
        allowed: Vec<PathBuf>,
    },
    /// Its directory cannot be resolved.
    #[error("{}: {source}", dir.display())]
    Dir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Its directory's links lead out of the allowed directories.
    #[error(
        "{} resolves to {}, not under a directory of customResources.modulePaths",
        path.display(),
        target.display()
    )]
    ResolvesOutside { path: PathBuf, target: PathBuf },
    /// The module file itself is a link.
    #[error(
        "{} is a symbolic link: a custom resource's module is read without following one",
        .0.display()
    )]
    Link(PathBuf),
}

impl Config {
    /// The module path of a custom resource, confined to `allowed` (`modulePaths`, as
    /// configured): `None` for an `oci://` module, else the path to read, its directory's links
    /// resolved. Errors say what is wrong for `spec.module`.
    pub(super) fn confine_module(
        &self,
        module: &Path,
        allowed: &[PathBuf],
    ) -> Result<Option<PathBuf>, ModulePathError> {
        if module.to_str().is_some_and(crate::oci::is_oci) {
            return Ok(None);
        }
        if module.components().any(|c| c == Component::ParentDir) {
            return Err(ModulePathError::ParentDir(module.to_owned()));
        }
        let roots: Vec<PathBuf> = allowed
            .iter()
            .map(|d| self.resolve(d).components().collect())
            .collect();
        let resolved: Vec<PathBuf> = roots.iter().filter_map(|d| d.canonicalize().ok()).collect();
        let path: PathBuf = self.resolve(module).components().collect();
        let outside = || ModulePathError::Outside {
            path: path.clone(),
            allowed: allowed.to_vec(),
        };
        let under = |p: &Path, dirs: &[PathBuf]| dirs.iter().any(|d| p.starts_with(d) && p != d);
        if !under(&path, &roots) && !under(&path, &resolved) {
            return Err(outside());
        }
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(outside());
        };
        let dir = dir.canonicalize().map_err(|source| ModulePathError::Dir {
            dir: dir.to_owned(),
            source,
        })?;
        let target = dir.join(name);
        if !under(&target, &resolved) {
            return Err(ModulePathError::ResolvesOutside { path, target });
        }
        if std::fs::symlink_metadata(&target).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(ModulePathError::Link(target));
        }
        Ok(Some(target))
    }
}
