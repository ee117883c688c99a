//! A batch in the 0.1 WIT form (records), for plugins of world `wisp:plugin/plugin@0.1.0`;
//! 0.2 plugins get the wire form ([`crate::plugin::batch`]).

use crate::informer::{self, DeletedObject};
use crate::plugin::bindings::v01::{
    Added, Deleted, Delivery, Notification, ObjectMetaParam, ObjectParam, OwnerRefParam, Updated,
};

/// The slices a borrowed object needs (the WIT form wants `&[(&str, &str)]` for labels).
struct MetaParts<'a> {
    labels: Vec<(&'a str, &'a str)>,
    annotations: Vec<(&'a str, &'a str)>,
    owners: Vec<OwnerRefParam<'a>>,
}

impl<'a> MetaParts<'a> {
    fn of(o: &'a informer::Object) -> Self {
        let m = o.meta();
        Self {
            labels: m.labels().collect(),
            annotations: m.annotations().collect(),
            owners: m
                .owner_references()
                .map(|r| OwnerRefParam {
                    api_version: r.api_version,
                    kind: r.kind,
                    name: r.name,
                    uid: r.uid,
                    controller: r.controller,
                })
                .collect(),
        }
    }

    fn object(&'a self, o: &'a informer::Object) -> ObjectParam<'a> {
        let m = o.meta();
        ObjectParam {
            meta: ObjectMetaParam {
                api_version: m.api_version(),
                kind: m.kind(),
                namespace: m.namespace(),
                name: m.name(),
                uid: m.uid(),
                resource_version: m.resource_version(),
                labels: &self.labels,
                annotations: &self.annotations,
                owner_references: &self.owners,
            },
            json: o.json(),
        }
    }
}

/// Runs `f` on the 0.1 WIT form of a batch (records), borrowed from the cached objects (no
/// copies).
pub fn with_wit_batch<R>(
    informer: &str,
    batch: &[informer::Delivery],
    f: impl FnOnce(&[Delivery<'_>]) -> R,
) -> R {
    let parts: Vec<(MetaParts<'_>, Option<MetaParts<'_>>)> = batch
        .iter()
        .map(|d| match &d.notification {
            informer::Notification::Add { obj, .. } => (MetaParts::of(obj), None),
            informer::Notification::Update { old, new } => {
                (MetaParts::of(new), Some(MetaParts::of(old)))
            }
            informer::Notification::Delete { obj } => (MetaParts::of(obj.object()), None),
        })
        .collect();
    let wit: Vec<Delivery<'_>> = batch
        .iter()
        .zip(&parts)
        .map(|(d, (p, old_p))| {
            let notification = match &d.notification {
                informer::Notification::Add { obj, initial_list } => Notification::Added(Added {
                    object: p.object(obj),
                    initial_list: *initial_list,
                }),
                informer::Notification::Update { old, new } => Notification::Updated(Updated {
                    old: old_p
                        .as_ref()
                        .map_or_else(|| p.object(new), |op| op.object(old)),
                    new: p.object(new),
                    resync: d.notification.is_resync(),
                }),
                informer::Notification::Delete { obj } => Notification::Deleted(Deleted {
                    object: p.object(obj.object()),
                    final_state_unknown: matches!(obj, DeletedObject::Tombstone(_)),
                }),
            };
            Delivery {
                seq: d.seq,
                informer,
                notification,
            }
        })
        .collect();
    f(&wit)
}
