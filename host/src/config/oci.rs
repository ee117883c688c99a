//! The config's `oci://` modules: the `oci` section's settings, and the pulls that give each
//! module a local file (`Config::oci_pulled`). The OCI client ([`crate::oci`]) knows nothing of
//! the config: it pulls a reference with settings and returns what it pulled.

use std::collections::BTreeMap;

use super::Config;
use crate::oci::{OciError, Pulled, Reference, ReferenceError, Settings, is_oci, pull};

/// Why [`Config::pull_oci`] pulled nothing for the config; each names the config file and the
/// field. A [`PullError::Pull`] may succeed on a later try (a registry down); the others need
/// the config changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PullError {
    /// The `oci` section does not give usable settings (a key, a trusted root, a bound).
    #[error("{file}: {field}: {problem}")]
    Settings {
        /// The config file.
        file: String,
        /// The field (`oci.keys[0]`).
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// A plugin's module reference does not parse.
    #[error("{file}: plugins[{index}].module: {source}")]
    Reference {
        /// The config file.
        file: String,
        /// The plugin's index in `plugins`.
        index: usize,
        /// Why.
        #[source]
        source: ReferenceError,
    },
    /// A plugin's module could not be pulled (or its signature was refused).
    #[error("{file}: plugins[{index}].module: plugin {name:?}: {source}")]
    Pull {
        /// The config file.
        file: String,
        /// The plugin's index in `plugins`.
        index: usize,
        /// The plugin's name.
        name: String,
        /// Why.
        #[source]
        source: OciError,
    },
}

impl Config {
    /// The settings of the `oci` section (see [`Settings::from_config`]).
    pub fn oci_settings(&self) -> Result<Settings, (String, String)> {
        Settings::from_config(&self.oci, &self.base_dir, self.engine.cache_dir.as_deref())
    }

    /// Pulls every `oci://` module it has not pulled yet (into `oci_pulled`), keeping what was
    /// `previous`ly pulled (another config's `oci_pulled`) for modules still configured. The
    /// references are pulled at once, each within `oci.pullTimeout`: a slow registry holds
    /// only its own. An error names the plugin (the first in config order, when several fail).
    pub async fn pull_oci(
        &mut self,
        previous: Option<&BTreeMap<String, Pulled>>,
    ) -> Result<(), PullError> {
        let settings = self
            .oci_settings()
            .map_err(|(field, problem)| PullError::Settings {
                file: self.file.clone(),
                field,
                problem,
            })?;
        let mut pulled = BTreeMap::new();
        // Each reference once: (module, the first plugin naming it, its index, the reference).
        let mut wanted: Vec<(String, usize, String, Reference)> = Vec::new();
        for (i, p) in self.plugins.iter().enumerate() {
            let Some(m) = p.module.to_str().filter(|m| is_oci(m)) else {
                continue;
            };
            if pulled.contains_key(m) || wanted.iter().any(|w| w.0 == m) {
                continue;
            }
            if let Some(prev) = previous.and_then(|p| p.get(m)) {
                pulled.insert(m.to_owned(), prev.clone());
                continue;
            }
            let r = Reference::parse(m).map_err(|source| PullError::Reference {
                file: self.file.clone(),
                index: i,
                source,
            })?;
            wanted.push((m.to_owned(), i, p.name.clone(), r));
        }
        let got =
            futures::future::join_all(wanted.iter().map(|w| pull::pull(&settings, &w.3))).await;
        for ((m, i, name, _), got) in wanted.into_iter().zip(got) {
            let got = got.map_err(|source| PullError::Pull {
                file: self.file.clone(),
                index: i,
                name: name.clone(),
                source,
            })?;
            tracing::info!(
                plugin = %name,
                reference = %got.reference,
                digest = %got.digest,
                media_type = %got.media_type,
                signed_by = got.signed_by.as_deref().unwrap_or("-"),
                cached = got.from_cache,
                "module pulled"
            );
            pulled.insert(m, got);
        }
        self.oci_pulled = pulled;
        Ok(())
    }
}
