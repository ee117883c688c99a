//! The admin HTTP server: `/healthz`, `/readyz`, `/metrics` (Prometheus text), `/plugins` (JSON).
//! It only reads: informers' and plugins' stats and status.

use std::sync::{Arc, RwLock};

use crate::informer::SharedInformer;
use crate::plugin::PluginHandle;

/// What the admin server reports on. Plugins can come and go while the host runs.
#[derive(Clone, Default)]
pub struct AdminState {
    /// Every informer of the host.
    pub informers: Vec<Arc<SharedInformer>>,
    /// Every running plugin.
    pub plugins: Arc<RwLock<Vec<Arc<PluginHandle>>>>,
}
