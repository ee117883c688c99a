//! A config's `oci://` modules, pulled: the files its plugins' specs point at. What was pulled
//! is runtime state, kept beside the config by whoever runs its plugins (the host's start,
//! the [`Reloader`](super::Reloader), a custom resource's apply) and handed to
//! [`Config::plugin_specs`]; the config itself holds settings only.

use crate::config::Config;
use crate::oci::{OciError, PulledModules, Reference, ReferenceError, is_oci, pull as oci_pull};

/// Why [`pull`] pulled nothing for the config; each names the config file and the
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

/// Pulls every `oci://` module of `config`'s plugins, keeping what was `previous`ly pulled (for
/// another config) for modules still configured. The references are pulled at once, each
/// within `oci.pullTimeout`: a slow registry holds only its own. An error names the plugin
/// (the first in config order, when several fail).
pub async fn pull(
    config: &Config,
    previous: Option<&PulledModules>,
) -> Result<PulledModules, PullError> {
    let settings = config
        .oci_settings()
        .map_err(|(field, problem)| PullError::Settings {
            file: config.file.clone(),
            field,
            problem,
        })?;
    let mut pulled = PulledModules::new();
    // Each reference once: (module, the first plugin naming it, its index, the reference).
    let mut wanted: Vec<(String, usize, String, Reference)> = Vec::new();
    for (i, p) in config.plugins.iter().enumerate() {
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
            file: config.file.clone(),
            index: i,
            source,
        })?;
        wanted.push((m.to_owned(), i, p.name.clone(), r));
    }
    let got =
        futures::future::join_all(wanted.iter().map(|w| oci_pull::pull(&settings, &w.3))).await;
    for ((m, i, name, _), got) in wanted.into_iter().zip(got) {
        let got = got.map_err(|source| PullError::Pull {
            file: config.file.clone(),
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
    Ok(pulled)
}
