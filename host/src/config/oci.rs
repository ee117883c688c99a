//! The config's `oci://` modules: the `oci` section's settings, and the pulls that give each
//! module a local file (`Config::oci_pulled`). The OCI client ([`crate::oci`]) knows nothing of
//! the config: it pulls a reference with settings and returns what it pulled.

use std::collections::BTreeMap;

use super::Config;
use crate::oci::{Pulled, Reference, Settings, is_oci, pull};

impl Config {
    /// The settings of the `oci` section (see [`Settings::from_config`]).
    pub fn oci_settings(&self) -> Result<Settings, (String, String)> {
        Settings::from_config(&self.oci, &self.base_dir, self.engine.cache_dir.as_deref())
    }

    /// Pulls every `oci://` module it has not pulled yet (into `oci_pulled`), keeping what was
    /// `previous`ly pulled (another config's `oci_pulled`) for modules still configured. An
    /// error names the plugin.
    pub async fn pull_oci(
        &mut self,
        previous: Option<&BTreeMap<String, Pulled>>,
    ) -> Result<(), String> {
        let settings = self
            .oci_settings()
            .map_err(|(field, e)| format!("{}: {field}: {e}", self.file))?;
        let mut pulled = BTreeMap::new();
        for (i, p) in self.plugins.iter().enumerate() {
            let Some(m) = p.module.to_str().filter(|m| is_oci(m)) else {
                continue;
            };
            if pulled.contains_key(m) {
                continue;
            }
            if let Some(prev) = previous.and_then(|p| p.get(m)) {
                pulled.insert(m.to_owned(), prev.clone());
                continue;
            }
            let at = format!("{}: plugins[{i}].module", self.file);
            let r = Reference::parse(m).map_err(|e| format!("{at}: {e}"))?;
            let got = pull::pull(&settings, &r)
                .await
                .map_err(|e| format!("{at}: plugin {:?}: {e}", p.name))?;
            tracing::info!(
                plugin = %p.name,
                reference = %got.reference,
                digest = %got.digest,
                media_type = %got.media_type,
                signed_by = got.signed_by.as_deref().unwrap_or("-"),
                cached = got.from_cache,
                "module pulled"
            );
            pulled.insert(m.to_owned(), got);
        }
        self.oci_pulled = pulled;
        Ok(())
    }
}
