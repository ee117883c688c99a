//! The config's `oci` section as the OCI client's settings. What is pulled with them, and kept,
//! is not the config's: `crate::reloader::modules` pulls a config's `oci://` modules. The OCI
//! client ([`crate::oci`]) knows nothing of the config.

use super::Config;
use crate::oci::Settings;

impl Config {
    /// The settings of the `oci` section (see [`Settings::from_config`]).
    pub fn oci_settings(&self) -> Result<Settings, (String, String)> {
        Settings::from_config(&self.oci, &self.base_dir, self.engine.cache_dir.as_deref())
    }
}
