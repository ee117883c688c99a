//! A config's `oci://` modules, pulled: the files its plugins' specs point at. What was pulled
//! is runtime state, kept beside the config by whoever runs its plugins (the host's start,
//! the [`Reloader`](super::Reloader), a custom resource's apply) and handed to
//! [`Config::plugin_specs`]; the config itself holds settings only.

use crate::config::Config;
use crate::oci::{PulledModules, Reference, is_oci, pull as oci_pull};

/// Pulls every `oci://` module of `config`'s plugins, keeping what was `previous`ly pulled (for
/// another config) for modules still configured. The references are pulled at once, each
/// within `oci.pullTimeout`: a slow registry holds only its own. An error names the plugin
/// (the first in config order, when several fail).
pub async fn pull(
    config: &Config,
    previous: Option<&PulledModules>,
) -> Result<PulledModules, String> {
    let settings = config
        .oci_settings()
        .map_err(|(field, e)| format!("{}: {field}: {e}", config.file))?;
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
        let r = Reference::parse(m)
            .map_err(|e| format!("{}: plugins[{i}].module: {e}", config.file))?;
        wanted.push((m.to_owned(), i, p.name.clone(), r));
    }
    let got =
        futures::future::join_all(wanted.iter().map(|w| oci_pull::pull(&settings, &w.3))).await;
    for ((m, i, name, _), got) in wanted.into_iter().zip(got) {
        let got =
            got.map_err(|e| format!("{}: plugins[{i}].module: plugin {name:?}: {e}", config.file))?;
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
