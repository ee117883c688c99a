//! `sharding: {mode: shards}`: each replica holds a membership Lease
//! (`<leaseName>-<identity>`, labelled `wisp.io/shard-group: <leaseName>`) and renews it with
//! client-go's timings; the members are the Leases of the group whose record a replica has seen
//! change within their duration (client-go's observed-time rule, [`super::lease`]). Members
//! sorted by name split the hash space into equal parts ([`super::shards::assignment`]).
//!
//! Handover without two owners: a replica drops what it is no longer assigned at once, and takes
//! a part it gains only `leaseDuration` later if a member still alive had it (by then that member
//! saw the change and dropped it, or could not renew and stopped acting); a part of a member
//! that left (its Lease deleted on a clean stop, or not renewed for `leaseDuration`) is taken at
//! once. So no part is unowned longer than `leaseDuration` plus one list. A replica that cannot
//! renew its own Lease for `renewDeadline` serves nothing until it is a member again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use tokio::time::Instant;

use super::lease::{Leadership, LeaseSettings, Observed, now_micro};
use super::shards::{Ranges, ShardView, assignment};

/// Label of the membership Leases: the group (the configured lease name).
pub const GROUP_LABEL: &str = "wisp.io/shard-group";

/// Field manager of every write of a membership Lease (`metadata.managedFields[].manager`).
/// A Lease of the group that no write by this manager touched is not a member: it was written
/// by something other than a Wisp replica (a plugin's writes carry `wisp-<plugin>`, never this).
pub const FIELD_MANAGER: &str = "wisp";

/// Whether a write by [`FIELD_MANAGER`] is recorded in `l`'s managedFields.
fn written_by_wisp(l: &Lease) -> bool {
    l.metadata
        .managed_fields
        .iter()
        .flatten()
        .any(|m| m.manager.as_deref() == Some(FIELD_MANAGER))
}

/// One replica's membership in a shard group.
pub struct Membership {
    api: Api<Lease>,
    settings: LeaseSettings,
    view: Arc<ShardView>,
    /// Fresh while the own Lease was renewed within `renewDeadline` (the fence's first check).
    fresh: Arc<Leadership>,
    /// Per Lease name: the record last seen and when it was first seen so.
    observed: HashMap<String, Observed>,
    /// The assignment of the last view, if any.
    prev: Option<BTreeMap<String, Ranges>>,
    /// Parts gained from a member still alive, taken at the instant given.
    held: Vec<(Ranges, Instant)>,
    /// Leases of the group not written by a Wisp replica (name and uid), each logged and
    /// counted once while it exists.
    foreign: HashSet<(String, String)>,
}

impl Membership {
    pub fn new(client: kube::Client, settings: LeaseSettings, view: Arc<ShardView>) -> Self {
        Self {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            view,
            fresh: Arc::new(Leadership::default()),
            observed: HashMap::new(),
            prev: None,
            held: Vec::new(),
            foreign: HashSet::new(),
        }
    }

    /// Whether the own Lease is fresh (shared with the action fence).
    pub fn freshness(&self) -> Arc<Leadership> {
        self.fresh.clone()
    }

    fn own_name(&self) -> String {
        format!("{}-{}", self.settings.name, self.settings.identity)
    }

    /// Every write of the own Lease names [`FIELD_MANAGER`].
    fn post_params() -> PostParams {
        PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        }
    }

    /// Whether `l` (named `name`) was written by a Wisp replica; a foreign one is logged and
    /// counted the first time it is seen.
    fn is_wisp_member(&mut self, name: &str, l: &Lease) -> bool {
        if written_by_wisp(l) {
            return true;
        }
        let uid = l.metadata.uid.clone().unwrap_or_default();
        if self.foreign.insert((name.to_owned(), uid)) {
            let managers: Vec<&str> = l
                .metadata
                .managed_fields
                .iter()
                .flatten()
                .filter_map(|m| m.manager.as_deref())
                .collect();
            tracing::warn!(
                lease = %format!("{}/{name}", self.settings.namespace),
                managers = ?managers,
                expected = FIELD_MANAGER,
                "ignoring a Lease of the shard group not written by a Wisp replica (not a member)"
            );
            self.fresh.count_foreign_member();
        }
        false
    }

    /// Creates or renews the own Lease.
    async fn renew(&mut self) -> Result<(), kube::Error> {
        let name = self.own_name();
        let spec = LeaseSpec {
            holder_identity: Some(self.settings.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.settings.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX),
            ),
            renew_time: Some(now_micro()),
            ..LeaseSpec::default()
        };
        match self.api.get_opt(&name).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name),
                        namespace: Some(self.settings.namespace.clone()),
                        labels: Some([(GROUP_LABEL.to_owned(), self.settings.name.clone())].into()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        acquire_time: Some(now_micro()),
                        ..spec
                    }),
                };
                self.api.create(&Self::post_params(), &lease).await?;
            }
            Some(mut l) => {
                let acquire = l.spec.as_ref().and_then(|s| s.acquire_time.clone());
                l.spec = Some(LeaseSpec {
                    acquire_time: acquire.or_else(|| Some(now_micro())),
                    ..spec
                });
                self.api.replace(&name, &Self::post_params(), &l).await?;
            }
        }
        Ok(())
    }

    /// The identities of the group's live members, as this replica sees them.
    async fn members(&mut self) -> Result<Vec<String>, kube::Error> {
        let lp = ListParams::default().labels(&format!("{GROUP_LABEL}={}", self.settings.name));
        let leases = self.api.list(&lp).await?;
        let now = Instant::now();
        let mut live = Vec::new();
        let mut names = Vec::new();
        for l in leases.items {
            let Some(name) = l.metadata.name.clone() else {
                continue;
            };
            names.push(name.clone());
            if !self.is_wisp_member(&name, &l) {
                continue;
            }
            let spec = l.spec.unwrap_or_default();
            let o = Observed::of(self.observed.get(&name), spec, now);
            if let Some(holder) = o.holder()
                && (holder == self.settings.identity || o.current(now))
            {
                live.push(holder.to_owned());
            }
            self.observed.insert(name, o);
        }
        self.observed.retain(|n, _| names.contains(n));
        self.foreign.retain(|(n, _)| names.contains(n));
        live.sort();
        live.dedup();
        Ok(live)
    }

    /// Moves the served ranges towards `members`' assignment (see the module docs).
    fn apply(&mut self, members: &[String], now: Instant) {
        let me = &self.settings.identity;
        let target = assignment(members).remove(me).unwrap_or_default();
        let prev = self.prev.take().unwrap_or_else(|| {
            let others: Vec<String> = members.iter().filter(|m| *m != me).cloned().collect();
            assignment(&others)
        });
        let current = self.view.ranges();
        let already_held = self
            .held
            .iter()
            .fold(Ranges::none(), |acc, (r, _)| acc.union(r));
        let gained = target.minus(&current).minus(&already_held);
        let mut at_once = gained.clone();
        for (m, r) in &prev {
            if m == me {
                continue;
            }
            let part = gained.intersect(r);
            if !part.is_empty() && members.contains(m) {
                at_once = at_once.minus(&part);
                self.held.push((part, now + self.settings.lease_duration));
            }
        }
        let mut matured = Ranges::none();
        self.held.retain(|(r, t)| {
            if *t <= now {
                matured = matured.union(r);
                false
            } else {
                true
            }
        });
        for (r, _) in &mut self.held {
            *r = r.intersect(&target);
        }
        self.held.retain(|(r, _)| !r.is_empty());
        let next = current
            .intersect(&target)
            .union(&at_once)
            .union(&matured)
            .intersect(&target);
        if next != current {
            tracing::info!(
                members = members.len(),
                share = format!("{:.3}", next.share()),
                held = self.held.len(),
                "shard ranges changed"
            );
        }
        self.view.set(next);
        self.prev = Some(assignment(members));
    }

    /// Serves nothing until a member again.
    fn leave_all(&mut self) {
        self.view.set(Ranges::none());
        self.prev = None;
        self.held.clear();
    }

    /// Renews and follows the group every `retryPeriod` until `stop`; then deletes the own
    /// Lease, so the others take its part at once.
    pub async fn run(mut self, stop: impl Future<Output = ()>) {
        let mut stop = std::pin::pin!(stop);
        let mut last_ok: Option<Instant> = None;
        loop {
            let started = Instant::now();
            let deadline = last_ok.map_or(started + self.settings.renew_deadline, |t| {
                t + self.settings.renew_deadline
            });
            match tokio::time::timeout_at(deadline, self.renew()).await {
                Ok(Ok(())) => {
                    last_ok = Some(started);
                    self.fresh
                        .renewed_until(started + self.settings.renew_deadline);
                }
                Ok(Err(e)) => {
                    tracing::warn!(lease = %self.own_name(), error = %e, "cannot renew the membership Lease")
                }
                Err(_) => {}
            }
            if last_ok.is_none_or(|t| Instant::now() >= t + self.settings.renew_deadline) {
                if last_ok.is_some() {
                    tracing::error!(lease = %self.own_name(), "membership not renewed within renewDeadline: serving nothing until a member again");
                    self.fresh
                        .lapse("membership Lease not renewed within renewDeadline".into());
                }
                last_ok = None;
                self.leave_all();
            } else {
                match self.members().await {
                    Ok(members) => self.apply(&members, Instant::now()),
                    Err(e) => tracing::warn!(error = %e, "cannot list the shard group's Leases"),
                }
            }
            tokio::select! {
                _ = &mut stop => break,
                _ = tokio::time::sleep(self.settings.retry_period) => {}
            }
        }
        self.fresh.lapse("stopped".into());
        self.view.set(Ranges::none());
        if let Err(e) = self
            .api
            .delete(&self.own_name(), &DeleteParams::default())
            .await
        {
            tracing::warn!(lease = %self.own_name(), error = %e, "cannot delete the membership Lease");
        }
    }
}
