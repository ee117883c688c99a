//! `customResources.modulePaths`: the directories a custom resource's path module may be in.
//! None by default: a custom resource then names only `oci://` modules, pulled under the
//! host's signature policy. A path module must be, by its text, under one of the directories
//! (no `..`), and, its directory's links resolved, still under one of them resolved; its last
//! component may not be a link (the loader opens it with `O_NOFOLLOW`). A path outside is
//! refused before anything of it is looked at, so the refusal tells nothing of what is there.

use std::path::{Component, Path, PathBuf};

use super::Config;

impl Config {
    /// The module path of a custom resource, confined to `allowed` (`modulePaths`, as
    /// configured): `None` for an `oci://` module, else the path to read, its directory's links
    /// resolved. Errors say what is wrong for `spec.module`.
    pub(super) fn confine_module(
        &self,
        module: &Path,
        allowed: &[PathBuf],
    ) -> Result<Option<PathBuf>, String> {
        if module.to_str().is_some_and(crate::oci::is_oci) {
            return Ok(None);
        }
        if module.components().any(|c| c == Component::ParentDir) {
            return Err(format!(
                "{} has a `..`: a custom resource's module path may not have one",
                module.display()
            ));
        }
        let roots: Vec<PathBuf> = allowed
            .iter()
            .map(|d| self.resolve(d).components().collect())
            .collect();
        let resolved: Vec<PathBuf> = roots.iter().filter_map(|d| d.canonicalize().ok()).collect();
        let path: PathBuf = self.resolve(module).components().collect();
        let outside = || {
            let dirs: Vec<String> = allowed.iter().map(|d| d.display().to_string()).collect();
            format!(
                "{} is not under a directory of customResources.modulePaths ({})",
                path.display(),
                if dirs.is_empty() {
                    "none: a custom resource may name only oci:// modules".to_owned()
                } else {
                    dirs.join(", ")
                }
            )
        };
        let under = |p: &Path, dirs: &[PathBuf]| dirs.iter().any(|d| p.starts_with(d) && p != d);
        if !under(&path, &roots) && !under(&path, &resolved) {
            return Err(outside());
        }
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(outside());
        };
        let dir = dir
            .canonicalize()
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let target = dir.join(name);
        if !under(&target, &resolved) {
            return Err(format!(
                "{} resolves to {}, not under a directory of customResources.modulePaths",
                path.display(),
                target.display()
            ));
        }
        if std::fs::symlink_metadata(&target).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(format!(
                "{} is a symbolic link: a custom resource's module is read without following one",
                target.display()
            ));
        }
        Ok(Some(target))
    }
}
