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
//!
//! `sharding: {mode: shards}`: every replica a member ([`members`]); the hash space
//! ([`shards`], KEP-5866's FNV-1a over uid or namespace) split among members; each informer lists
//! and watches its replica's ranges, and actions are fenced by the membership and the target's
//! shard ([`owner_check`]). See docs/scale-out.md.

pub mod lease;
pub mod members;
/// The hash space and this replica's view of it live with the sources that filter by them.
pub use crate::source::shard as shards;

use std::pin::Pin;
use std::sync::Arc;

use crate::actions::{Action, ActionSink, SendError, Sent};

/// Whether this replica may act on an action's target (`Err`: why not).
pub type OwnerCheck = Arc<dyn Fn(&Action) -> Result<(), lease::Fenced> + Send + Sync>;

/// An [`ActionSink`] that sends only while this replica leads (or its membership is fresh) and,
/// with shards, only about objects of its share; checked right before each request (each retry
/// included).
pub struct FencedSink {
    pub inner: Arc<dyn ActionSink>,
    pub leadership: Arc<lease::Leadership>,
    pub owns: Option<OwnerCheck>,
}

impl ActionSink for FencedSink {
    fn send<'a>(
        &'a self,
        action: &'a Action,
    ) -> Pin<Box<dyn Future<Output = Result<Sent, SendError>> + Send + 'a>> {
        let allowed = self
            .leadership
            .check()
            .and_then(|()| self.owns.as_ref().map_or(Ok(()), |owns| owns(action)));
        match allowed {
            Ok(()) => self.inner.send(action),
            Err(why) => Box::pin(async move { Err(SendError::fenced(why.to_string())) }),
        }
    }
}

/// The share check of `mode: shards`: a target of a kind a sharded informer watches must be in
/// this replica's ranges. By namespace, its namespace's hash tells; by uid, the object must be in
/// that informer's cache (which holds this replica's share only). Kinds no sharded informer
/// watches (Events, say) are not checked. `sharded`: the sharded informers, each with the
/// apiVersion and kind it watches.
pub fn owner_check(
    sharded: Vec<(String, String, Arc<crate::informer::SharedInformer>)>,
    view: Arc<shards::ShardView>,
) -> OwnerCheck {
    use wisp_kinds::api::group_of;
    let watched: Vec<(String, String, Arc<crate::informer::SharedInformer>)> = sharded
        .into_iter()
        .map(|(api_version, kind, i)| (group_of(&api_version).to_owned(), kind, i))
        .collect();
    Arc::new(move |a: &Action| {
        let t = &a.target;
        let group = group_of(&t.api_version);
        let Some((_, _, inf)) = watched.iter().find(|(g, k, _)| g == group && *k == t.kind) else {
            return Ok(());
        };
        let ranges = view.ranges();
        let ns = t.namespace.as_deref().unwrap_or("");
        let mine = match view.field() {
            shards::ShardField::Namespace => ranges.contains(shards::fnv1a64(ns.as_bytes())),
            shards::ShardField::Uid => {
                let key = if ns.is_empty() {
                    t.name.clone()
                } else {
                    format!("{ns}/{}", t.name)
                };
                inf.cache()
                    .get_by_key(&key)
                    .is_some_and(|o| view.keeps(&ranges, &o))
            }
        };
        if mine {
            Ok(())
        } else {
            Err(lease::Fenced::NotInShard {
                kind: t.kind.clone(),
                namespace: ns.to_owned(),
                name: t.name.clone(),
            })
        }
    })
}
