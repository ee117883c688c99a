//! Leader election over one `coordination.k8s.io/v1` Lease, with client-go's rules
//! (`tools/leaderelection`): a replica takes a Lease that does not exist, that nobody holds, or
//! whose record it has seen unchanged for `leaseDuration` (measured on its own clock from when
//! it saw the record change, never from the record's times); the holder renews every
//! `retryPeriod` and gives up once it could not renew for `renewDeadline`; every write is an
//! update at the resourceVersion read, so two replicas cannot both win. A holder that stops
//! releases the Lease (empty holder), so a standby takes it at its next try.
//!
//! Fencing: [`Leadership::check`] holds only until `renewDeadline` after the start of the last
//! successful renewal. Another replica waits `leaseDuration` (> `renewDeadline`) from when it
//! saw that renewal, which is after it started, so with clocks that run at the same rate the
//! old holder stops acting before a new one can start.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::sync::lock;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use tokio::time::Instant;

/// Timings and names of one election (client-go's defaults: 15 s, 10 s, 2 s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSettings {
    pub namespace: String,
    pub name: String,
    /// This replica's name in the Lease's `holderIdentity`.
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// Lease timings client-go would refuse (`sharding` / `leaderElection` in the config).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseTimingError {
    /// `leaseDuration` not longer than `renewDeadline`.
    #[error("leaseDuration ({lease:?}) must be longer than renewDeadline ({renew:?})")]
    LeaseDuration {
        /// `leaseDuration`.
        lease: Duration,
        /// `renewDeadline`.
        renew: Duration,
    },
    /// `renewDeadline` not longer than 1.2 x `retryPeriod`.
    #[error("renewDeadline ({renew:?}) must be longer than 1.2 x retryPeriod ({retry:?})")]
    RenewDeadline {
        /// `renewDeadline`.
        renew: Duration,
        /// `retryPeriod`.
        retry: Duration,
    },
    /// A zero `retryPeriod`.
    #[error("retryPeriod must be more than 0")]
    RetryPeriod,
    /// An empty identity.
    #[error("identity must not be empty")]
    Identity,
}

/// Why this replica may not act now: it does not lead, or the object is not in its share.
/// Retryable: leadership and shares move.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Fenced {
    /// Its last renewal is too old for it to be sure no other replica leads.
    #[error("this replica could not renew its Lease in time")]
    RenewLate,
    /// It lost the Lease (why).
    #[error("this replica lost its Lease: {0}")]
    Lost(String),
    /// Another replica leads (its identity, when seen).
    #[error("this replica does not lead{}", .0.as_ref().map(|o| format!(" ({o} does)")).unwrap_or_default())]
    Follower(Option<String>),
    /// `mode: shards`: the target is in another replica's share.
    #[error("{kind} {namespace}/{name} is not in this replica's shard")]
    NotInShard {
        /// The target's kind.
        kind: String,
        /// Its namespace (empty when cluster-scoped).
        namespace: String,
        /// Its name.
        name: String,
    },
}

/// client-go's `JitterFactor`: waits between tries are `retryPeriod * (1 + 1.2 * rand)`.
const JITTER: f64 = 1.2;

impl LeaseSettings {
    /// client-go's checks of the timings: `leaseDuration > renewDeadline > 1.2 * retryPeriod`,
    /// each at least one tick.
    pub fn check(&self) -> Result<(), LeaseTimingError> {
        if self.lease_duration <= self.renew_deadline {
            return Err(LeaseTimingError::LeaseDuration {
                lease: self.lease_duration,
                renew: self.renew_deadline,
            });
        }
        if self.renew_deadline.as_secs_f64() <= JITTER * self.retry_period.as_secs_f64() {
            return Err(LeaseTimingError::RenewDeadline {
                renew: self.renew_deadline,
                retry: self.retry_period,
            });
        }
        if self.retry_period.is_zero() {
            return Err(LeaseTimingError::RetryPeriod);
        }
        if self.identity.is_empty() {
            return Err(LeaseTimingError::Identity);
        }
        Ok(())
    }

    /// `namespace/name`.
    pub fn lease_key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Whether this replica leads now, shared with whatever must act only while it does.
#[derive(Debug, Default)]
pub struct Leadership {
    state: Mutex<LeaderState>,
    /// `mode: shards`: Leases of the shard group seen that no Wisp replica wrote, each counted
    /// once (`wisp_shard_foreign_members_total`).
    foreign_members: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Default, Clone)]
struct LeaderState {
    /// Leading until then (the start of the last renewal plus `renewDeadline`).
    until: Option<Instant>,
    /// The holder last seen in the Lease, if another.
    other: Option<String>,
    /// Why this replica stopped leading, once it lost the Lease.
    lost: Option<String>,
}

impl Leadership {
    fn set(&self, f: impl FnOnce(&mut LeaderState)) {
        f(&mut lock(&self.state));
    }

    fn get(&self) -> LeaderState {
        lock(&self.state).clone()
    }

    /// `Ok` while this replica holds the Lease and its last renewal is recent enough that no
    /// other replica can have taken it; otherwise why not.
    pub fn check(&self) -> Result<(), Fenced> {
        let s = self.get();
        match s.until {
            Some(t) if Instant::now() < t => Ok(()),
            Some(_) => Err(Fenced::RenewLate),
            None => match s.lost {
                Some(why) => Err(Fenced::Lost(why)),
                None => Err(Fenced::Follower(s.other.filter(|o| !o.is_empty()))),
            },
        }
    }

    /// Holds until `until` (a renewal that started at `until - renewDeadline` succeeded).
    pub fn renewed_until(&self, until: Instant) {
        self.set(|s| {
            s.until = Some(until);
            s.other = None;
            s.lost = None;
        });
    }

    /// No longer holds, with why.
    pub fn lapse(&self, why: String) {
        self.set(|s| {
            s.until = None;
            s.lost = Some(why);
        });
    }

    /// One more foreign Lease in the shard group (one not written by the members' field manager).
    pub(crate) fn count_foreign_member(&self) {
        self.foreign_members
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Foreign Leases of the shard group seen so far (0 with `mode: leader`).
    pub fn foreign_members(&self) -> u64 {
        self.foreign_members
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether [`Leadership::check`] passes.
    pub fn is_leader(&self) -> bool {
        self.check().is_ok()
    }

    /// The holder of the Lease as last seen, when another replica.
    pub fn other_holder(&self) -> Option<String> {
        self.get().other
    }
}

/// The holder a Lease record names, if any (an empty `holderIdentity` is a released Lease).
fn holder_of(spec: &LeaseSpec) -> Option<&str> {
    spec.holder_identity.as_deref().filter(|h| !h.is_empty())
}

/// client-go's observed-time rule for a Lease record: the holder it names holds it until
/// `leaseDuration` after this replica first saw the record as it is, on this replica's clock.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Observed {
    spec: LeaseSpec,
    since: Instant,
}

impl Observed {
    /// `spec` as seen `now`, keeping the first sight if `before` saw the same record.
    pub(crate) fn of(before: Option<&Observed>, spec: LeaseSpec, now: Instant) -> Self {
        match before {
            Some(o) if o.spec == spec => o.clone(),
            _ => Self { spec, since: now },
        }
    }

    /// The holder, if the record names one.
    pub(crate) fn holder(&self) -> Option<&str> {
        holder_of(&self.spec)
    }

    /// Whether the holder still holds it at `now` (it renewed within its duration, as seen).
    pub(crate) fn current(&self, now: Instant) -> bool {
        let duration = Duration::from_secs(
            u64::try_from(self.spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
        );
        self.holder().is_some() && now < self.since + duration
    }
}

/// How an election ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Shut down before leading, or released the Lease on shutdown.
    Stopped,
    /// Led, then could not renew for `renewDeadline` (or another replica took the Lease).
    Lost(String),
}

/// One replica's side of an election.
pub struct Elector {
    api: Api<Lease>,
    settings: LeaseSettings,
    leadership: Arc<Leadership>,
    /// The Lease record last read and when it was first seen (client-go's observedRecord and
    /// observedTime).
    observed: Option<Observed>,
    /// The resourceVersion of the Lease last read: a standby watches for changes after it.
    seen_version: Option<String>,
}

/// Whether `e` is an API error with status `code`.
fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

pub(crate) fn now_micro() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

/// `base * (1 + 1.2 * r)` for a random `r` in [0, 1).
fn jittered(base: Duration) -> Duration {
    use rand::Rng;
    base.mul_f64(1.0 + JITTER * rand::rng().random::<f64>())
}

impl Elector {
    pub fn new(client: kube::Client, settings: LeaseSettings) -> Self {
        Self {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            leadership: Arc::new(Leadership::default()),
            observed: None,
            seen_version: None,
        }
    }

    /// The shared view of whether this replica leads.
    pub fn leadership(&self) -> Arc<Leadership> {
        self.leadership.clone()
    }

    /// One try (client-go's `tryAcquireOrRenew`): `Ok(true)` when this replica holds the Lease
    /// after it.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let me = &self.settings.identity;
        let spec = |acquire: MicroTime, transitions: i32| LeaseSpec {
            holder_identity: Some(me.clone()),
            lease_duration_seconds: Some(seconds(self.settings.lease_duration)),
            acquire_time: Some(acquire),
            renew_time: Some(now_micro()),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        };
        let Some(current) = self.api.get_opt(&self.settings.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.settings.name.clone()),
                    namespace: Some(self.settings.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec(now_micro(), 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(l) => {
                    self.observed = l.spec.map(|s| Observed::of(None, s, Instant::now()));
                    Ok(true)
                }
                Err(e) if is_status(&e, 409) => Ok(false),
                Err(e) => Err(e),
            };
        };
        self.seen_version = current.metadata.resource_version.clone();
        let seen = current.spec.clone().unwrap_or_default();
        let now = Instant::now();
        let observed = Observed::of(self.observed.as_ref(), seen.clone(), now);
        self.observed = Some(observed.clone());
        let holder = observed.holder().unwrap_or_default().to_owned();
        if holder != *me && observed.current(now) {
            self.leadership.set(|s| s.other = Some(holder));
            return Ok(false);
        }
        let next = if holder == *me {
            spec(
                seen.acquire_time.clone().unwrap_or_else(now_micro),
                seen.lease_transitions.unwrap_or(0),
            )
        } else {
            spec(now_micro(), seen.lease_transitions.unwrap_or(0) + 1)
        };
        let lease = Lease {
            metadata: current.metadata,
            spec: Some(next),
        };
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(l) => {
                self.observed = l.spec.map(|s| Observed::of(None, s, Instant::now()));
                Ok(true)
            }
            Err(e) if is_status(&e, 409) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Tries until this replica holds the Lease (`true`) or `stop` completes (`false`).
    pub async fn acquire(&mut self, stop: &mut (impl Future<Output = ()> + Unpin)) -> bool {
        loop {
            let started = Instant::now();
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    let until = started + self.settings.renew_deadline;
                    self.leadership.set(|s| {
                        s.until = Some(until);
                        s.other = None;
                    });
                    // (`other` is only set again by a current record of another holder.)
                    tracing::info!(lease = %self.settings.lease_key(), identity = %self.settings.identity, "leading");
                    return true;
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(lease = %self.settings.lease_key(), error = %e, "cannot read or take the Lease")
                }
            }
            tokio::select! {
                _ = &mut *stop => return false,
                _ = tokio::time::sleep(jittered(self.settings.retry_period)) => {}
                _ = self.released() => {}
            }
        }
    }

    /// Completes when a watch of the Lease, from the version last read, shows it released (no
    /// holder) or deleted, so a standby takes a released Lease at once instead of at its next
    /// try (client-go only polls: up to 2.2 x `retryPeriod` later). Never completes when there
    /// is no such watch (no version read, a watch refused or ended): the try then comes at its
    /// time.
    async fn released(&self) {
        use futures::StreamExt;
        use kube::api::{WatchEvent, WatchParams};
        if let Some(version) = &self.seen_version {
            let params = WatchParams::default()
                .fields(&format!("metadata.name={}", self.settings.name))
                .timeout(290);
            if let Ok(events) = self.api.watch(&params, version).await {
                let mut events = std::pin::pin!(events);
                while let Some(Ok(event)) = events.next().await {
                    match event {
                        WatchEvent::Deleted(_) => return,
                        WatchEvent::Added(l) | WatchEvent::Modified(l)
                            if l.spec.as_ref().and_then(holder_of).is_none() =>
                        {
                            return;
                        }
                        WatchEvent::Error(_) => break,
                        _ => {}
                    }
                }
            }
        }
        std::future::pending().await
    }

    /// Renews every `retryPeriod` while leading; ends when renewals failed for
    /// `renewDeadline` (lost), or when `stop` completes (the Lease is then released).
    pub async fn renew(&mut self, stop: &mut (impl Future<Output = ()> + Unpin)) -> Ended {
        let mut last = Instant::now();
        loop {
            tokio::select! {
                _ = &mut *stop => {
                    self.release().await;
                    return Ended::Stopped;
                }
                _ = tokio::time::sleep(self.settings.retry_period) => {}
            }
            let deadline = last + self.settings.renew_deadline;
            let started = Instant::now();
            let tried = tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await;
            match tried {
                Ok(Ok(true)) => {
                    last = started;
                    let until = started + self.settings.renew_deadline;
                    self.leadership.set(|s| s.until = Some(until));
                    continue;
                }
                // Another holder whose record is current: it took the Lease.
                Ok(Ok(false)) if self.leadership.other_holder().is_some() => {
                    let holder = self.leadership.other_holder().unwrap_or_default();
                    return self.lost(format!("{holder} holds the Lease now"));
                }
                // A conflicting write: tried again until the deadline.
                Ok(Ok(false)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(lease = %self.settings.lease_key(), error = %e, "cannot renew the Lease");
                }
                Err(_) => {}
            }
            if Instant::now() >= deadline {
                return self.lost(format!(
                    "no renewal succeeded for renewDeadline ({:?})",
                    self.settings.renew_deadline
                ));
            }
        }
    }

    fn lost(&self, why: String) -> Ended {
        self.leadership.set(|s| {
            s.until = None;
            s.lost = Some(why.clone());
        });
        tracing::error!(lease = %self.settings.lease_key(), identity = %self.settings.identity, reason = %why, "lost the Lease");
        Ended::Lost(why)
    }

    /// Gives the Lease up (empty holder, as client-go's `ReleaseOnCancel`), if still held.
    async fn release(&mut self) {
        let was = self.leadership.is_leader();
        self.leadership.set(|s| s.until = None);
        if !was {
            return;
        }
        let Ok(Some(current)) = self.api.get_opt(&self.settings.name).await else {
            return;
        };
        let Some(mut spec) = current.spec.clone() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now_micro());
        spec.acquire_time = Some(now_micro());
        let lease = Lease {
            metadata: current.metadata,
            spec: Some(spec),
        };
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(lease = %self.settings.lease_key(), "released the Lease"),
            Err(e) => {
                tracing::warn!(lease = %self.settings.lease_key(), error = %e, "cannot release the Lease")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(d: u64, r: u64, p: u64) -> LeaseSettings {
        LeaseSettings {
            namespace: "default".into(),
            name: "wisp".into(),
            identity: "a".into(),
            lease_duration: Duration::from_secs(d),
            renew_deadline: Duration::from_secs(r),
            retry_period: Duration::from_secs(p),
        }
    }

    #[test]
    fn timings_are_checked_as_client_go_checks_them() {
        assert_eq!(settings(15, 10, 2).check(), Ok(()));
        assert!(
            settings(10, 10, 2)
                .check()
                .unwrap_err()
                .to_string()
                .contains("leaseDuration")
        );
        assert!(
            settings(15, 2, 2)
                .check()
                .unwrap_err()
                .to_string()
                .contains("1.2 x retryPeriod")
        );
    }

    #[test]
    fn jitter_stays_between_one_and_two_point_two_periods() {
        for _ in 0..100 {
            let j = jittered(Duration::from_secs(1));
            assert!(
                j >= Duration::from_secs(1) && j < Duration::from_millis(2200),
                "{j:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn leadership_lapses_at_its_deadline() {
        let l = Leadership::default();
        assert!(l.check().unwrap_err().to_string().contains("does not lead"));
        l.set(|s| s.until = Some(Instant::now() + Duration::from_secs(10)));
        assert!(l.is_leader());
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(
            l.check()
                .unwrap_err()
                .to_string()
                .contains("could not renew")
        );
    }
}
