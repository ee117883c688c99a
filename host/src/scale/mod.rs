//! Scaling out on what Kubernetes provides: replicas coordinated through Leases
//! (`coordination.k8s.io/v1`), no protocol of Wisp's own.
//!
//! `sharding: {mode: leader}`: every replica lists and watches (warm caches); the one that holds
//! the Lease ([`lease`]) runs the plugins. A standby attaches its plugins when it takes the
//! Lease, so they get the initial list as adds. A leader that cannot renew in time stops
//! acting at once (actions and verdict Events are fenced by [`lease::Leadership::check`] right
//! before each request) and shuts down with an error, as client-go's `OnStoppedLeading` callers
//! do; its Deployment starts it again as a standby. Its plugins are told the way every stop
//! tells them: their instances are shut down.

pub mod lease;

use std::pin::Pin;
use std::sync::Arc;

use crate::actions::{Action, ActionSink, SendError};

/// An [`ActionSink`] that sends only while this replica leads, checked right before each
/// request (each retry included).
pub struct FencedSink {
    pub inner: Arc<dyn ActionSink>,
    pub leadership: Arc<lease::Leadership>,
}

impl ActionSink for FencedSink {
    fn send<'a>(
        &'a self,
        action: &'a Action,
    ) -> Pin<Box<dyn Future<Output = Result<String, SendError>> + Send + 'a>> {
        match self.leadership.check() {
            Ok(()) => self.inner.send(action),
            Err(why) => Box::pin(async move { Err(SendError::fenced(why)) }),
        }
    }
}
