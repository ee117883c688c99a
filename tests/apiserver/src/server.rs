//! An in-process Kubernetes API server for tests, speaking the real list/watch protocol over
//! HTTP on `127.0.0.1:0`, so tests drive a real `kube::Client`.
//!
//! Layout:
//! - `store`: current objects, the global resourceVersion, open watches; deletion with
//!   finalizers and namespace termination
//! - `history`: the event log behind replays, exact reads and compaction
//! - `object`: stored objects (value + serialized bytes), identity, write errors
//! - `http`: paths and query strings to handlers; recording, delays and injected failures;
//!   request media types
//! - `list`: resourceVersion semantics, selectors, consistent pagination
//! - `meta`: metadata-only reads (`as=PartialObjectMetadata`), as client-go's metadata client asks
//! - `watch`: one task per watch stream: initial events, replay, bookmarks, selector transitions
//! - `write`: GET / POST / PUT / PATCH / DELETE of single objects, dry runs
//! - `patch`: strategic merge patch, JSON patch, the list strategies of built-in types
//! - `admission`: admission webhooks (MutatingWebhookConfigurations, then
//!   ValidatingWebhookConfigurations) called on every write over HTTP
//! - `apply`: server-side apply and managedFields (`Update` entries own the maps and lists they
//!   create, `.` in FieldsV1)
//! - `selector`: label and field selectors (field labels checked per kind)
//! - `validation`: what a real server checks on create and update (422 with causes)
//! - `discovery`: the built-in kinds, CRD-defined kinds, discovery and OpenAPI v3 documents
//! - `table`: server-side printing (`as=Table`) for `kubectl get`
//! - `protobuf`: the protobuf bodies kubectl's typed clients send (every kind of kubernetes/api)
//! - `review`: the reviews of authorization and authentication (`kubectl auth can-i`, `whoami`)
//! - `scale`: the `scale` subresource of Deployments, ReplicaSets, StatefulSets and
//!   ReplicationControllers
//! - `faults`: the fault knobs
//! - `status`: Kubernetes Status bodies
//! - `resource`: plurals, kinds, timestamps, uids
//! - `fixtures`: realistic objects
//!
//! It answers as a kube-apiserver 1.36 does, where tests can tell:
//! - DELETE of an object with finalizers sets `deletionTimestamp` and
//!   `deletionGracePeriodSeconds: 0` and keeps it (watchers see MODIFIED); the update that
//!   removes its last finalizer deletes it (DELETED); new finalizers on it are 422. DeleteOptions
//!   (query or body): `preconditions` (409 Conflict) and `propagationPolicy` (default
//!   Background; Orphan for batch/v1 Jobs and v1 ReplicationControllers). A Foreground or
//!   Orphan delete answers with the object as it marked it (`foregroundDeletion` / `orphan`
//!   finalizer, `deletionTimestamp`), not a Status.
//! - Graceful deletion of Pods (pkg/registry/core/pod/strategy.go `CheckGracefulDelete`): a
//!   DELETE of a scheduled Pod sets `deletionTimestamp` (now + grace) and
//!   `deletionGracePeriodSeconds` (`gracePeriodSeconds`, else `terminationGracePeriodSeconds`,
//!   else 30; 1 when negative), bumps `generation` (MODIFIED), and the Pod goes (DELETED) when
//!   the kubelet would have stopped it: after the grace or [`Faults::pod_stop_time`], whichever
//!   is shorter. An unscheduled or terminated Pod, or `gracePeriodSeconds=0`, goes at once; a
//!   later DELETE may only shorten the grace; finalizers keep the Pod after it
//!   (`deletionGracePeriodSeconds: 0`). The garbage collector, the namespace controller and
//!   [`TestApiServer::delete`] delete Pods with grace 0.
//! - Updates may not change what the API server keeps immutable (the host's
//!   `validation::update_errors`): a Pod's spec but for images and the few fields
//!   `ValidatePodUpdate` allows, a Service's cluster IP, a Job's selector and template, a
//!   StatefulSet's spec but for replicas, template and the like, a claim's spec but for a bound
//!   claim's storage request, the selector of Deployments, ReplicaSets and DaemonSets.
//! - `metadata.generation` only for the kinds whose strategy sets it (Pods, workloads, Ingress,
//!   NetworkPolicy, webhooks, ..., every custom resource); a ConfigMap has none.
//! - A namespaced path for a cluster-scoped kind (`/api/v1/namespaces/default/namespaces`) is
//!   404 whatever the verb.
//! - Garbage collection, synchronous within the write that deletes an owner (`store`): the
//!   dependents (objects whose `metadata.ownerReferences` name the owner's uid) of an owner
//!   deleted in the Background are deleted once it is gone (a dependent with another live
//!   owner only loses its reference); Foreground marks the owner with `foregroundDeletion`,
//!   deletes the dependents and lets the owner go once no `blockOwnerDeletion` dependent is
//!   left; Orphan removes the dependents' references, then the `orphan` finalizer. Watchers see
//!   every DELETED and MODIFIED. Unlike a real collector, references to owners that never
//!   existed are left alone.
//! - DELETE on a collection (`deletecollection`, in discovery's verbs but for Namespaces):
//!   deletes what `labelSelector` / `fieldSelector` select with the request's DeleteOptions and
//!   answers the list of the selected objects as listed; nothing with `dryRun=All`.
//! - The status subresource exists for the kinds that have one (a table in `discovery`, the
//!   CRD's `subresources.status`), else 404. Writes to the main resource keep the stored
//!   `status` of those kinds (and a Namespace's `spec.finalizers`); writes to `status` keep
//!   everything but `status` and metadata for built-ins (also a Pod's ownerReferences and a
//!   Deployment's labels, as their status strategies do), everything but `status` for custom
//!   resources. Custom resources without the subresource write `status` as any other field.
//! - The namespaces `default`, `kube-node-lease`, `kube-public` and `kube-system` exist from
//!   the start (at the initial resourceVersion). A create through the API (POST, or an apply
//!   that creates) in a namespace that does not exist is 404 NotFound `namespaces "X" not
//!   found`, as the NamespaceLifecycle admission answers, before validation; the seeding path
//!   ([`TestApiServer::create`]) creates the missing Namespace instead.
//! - Deleting a Namespace marks it Terminating, deletes its content (respecting finalizers),
//!   then itself; a create in it is 403 Forbidden. `default`, `kube-public` and `kube-system`
//!   may not be deleted (403 Forbidden).
//! - A list at `resourceVersion=N` (NotOlderThan or Exact) or a streaming list from N the
//!   server has not reached waits for it (`Faults::too_large_resource_version_wait`, 3 s), then
//!   answers 504 "Timeout: Too large resource version"; a plain watch from N starts at once and
//!   streams only the events after N, never one at or below it (as the watch cache does). A
//!   continue token whose resourceVersion was compacted is 410 Expired with, in
//!   `metadata.continue`, a token for the rest of the list at the latest resourceVersion.
//! - Label selectors parse with apimachinery's `labels.Parse` grammar (set-based, `gt` / `lt`)
//!   and, when they do not, are 400 BadRequest with its message (`unable to parse requirement:
//!   ...`, `found 'x', expected: ...`).
//! - Field selectors: the labels each kind supports, else 400 with the kind's own message.
//! - Every write over HTTP (create, update, patch, apply) defaults a built-in object as the
//!   API server decodes it ([`crate::defaults`]: a PUT leaving out a defaulted field
//!   gets it back, not a change) and is validated (`validation`); objects created through
//!   [`TestApiServer::create`] are defaulted too (every stored object in a cluster is) but not
//!   validated, so tests can seed anything.
//! - Custom resources are defaulted, pruned and validated by their CRD version's
//!   `openAPIV3Schema` on every write over HTTP (create, update, patch, apply, `status`): 422
//!   in the server's words; unknown fields dropped, each named in a `Warning` header (the
//!   default `fieldValidation=Warn`), refused with 400 under `Strict`, silent under `Ignore`.
//!   A CRD whose schema does not compile is 422.
//! - A stored CRD gets what the API server's controllers give it: `spec.names` defaulted,
//!   `status.acceptedNames`, `status.storedVersions` and the conditions `NamesAccepted`
//!   (`NoConflicts`) and `Established` (`InitialNamesAccepted`) True, at once (a real server
//!   sets them a moment later), so `kubectl wait --for=condition=Established` returns.
//! - Bodies: JSON or YAML; protobuf for every kind of kubernetes/api (what kubectl's typed
//!   clients send); anything else (protobuf custom resources) 415.
//! - `{deployments,replicasets,statefulsets,replicationcontrollers}/{name}/scale`: an
//!   autoscaling/v1 Scale (GET, PUT, PATCH) writing the object's `spec.replicas`.
//! - Admission webhooks (`admission`): every write over HTTP (create, update, patch, apply,
//!   `status`, `scale`, delete, each item of a deletecollection, dry runs too) calls the stored
//!   MutatingWebhookConfigurations' webhooks in order, JSON patches applied, then, once the
//!   object is validated, the ValidatingWebhookConfigurations', over HTTPS with the
//!   `caBundle`; `clientConfig.service`s are reached through
//!   [`TestApiServer::resolve_service`]. Denials, warnings and failed calls are answered in the
//!   API server's words; `matchConditions` are refused (not evaluated). Seeding is not admitted.
//! - SubjectAccessReview, LocalSubjectAccessReview, SelfSubjectAccessReview,
//!   SelfSubjectRulesReview and SelfSubjectReview are create-only and not stored: everything is
//!   allowed (no authz), the caller is `system:anonymous` (no authn).
//! - Discovery: aggregated (v2) to clients asking for it (kubectl), the legacy documents
//!   otherwise (kube-rs), no protobuf advertised; `/openapi/v3` has operations but no schemas,
//!   `/openapi/v2` is 404.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use kube::api::{Api, DynamicObject, ListParams};
//! use kube::core::{ApiResource, GroupVersionKind};
//! use wisp_apiserver::{TestApiServer, pod};
//!
//! let server = TestApiServer::start().await?;
//! server.create(pod("default", "web-1"))?;
//! let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Pod"));
//! let pods: Api<DynamicObject> = Api::namespaced_with(server.client(), "default", &ar);
//! assert_eq!(pods.list(&ListParams::default()).await?.items.len(), 1);
//! # Ok(()) }
//! ```

mod admission;
mod apply;
mod discovery;
mod faults;
mod fixtures;
mod history;
mod http;
mod list;
mod meta;
mod object;
mod patch;
mod protobuf;
mod resource;
mod review;
mod scale;
mod selector;
mod status;
mod store;
mod table;
mod validation;
mod watch;
mod write;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::Context as _;
use serde_json::Value;
use tokio::net::TcpListener;

pub use faults::{DEFAULT_BOOKMARK_INTERVAL, DEFAULT_TOO_LARGE_RV_WAIT, EndlessList, Faults};
pub use fixtures::{config_map, pod};
pub use store::DEFAULT_HISTORY_LIMIT;

use resource::ResourceKey;
use store::Store;

/// What kind of request the server saw; faults are armed per verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// GET on a collection without `watch`.
    List,
    /// GET on a collection with `watch=true` (or `1`).
    Watch,
    /// GET on one object.
    Get,
    /// Anything else: writes, unknown paths.
    Other,
}

/// One request as the server received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// HTTP method, e.g. `GET`.
    pub method: String,
    /// URL path without the query string.
    pub path: String,
    /// How the server classified it.
    pub verb: Verb,
    /// Decoded query parameters (the last value of a repeated key).
    pub query: BTreeMap<String, String>,
}

/// State shared by the handle, the HTTP handlers and the watch tasks.
pub(crate) struct Shared {
    /// Objects, history and open watches.
    pub store: Store,
    /// Armed faults.
    pub faults: Faults,
    /// Every request, in arrival order.
    pub requests: Mutex<Vec<RecordedRequest>>,
    /// Paginated lists in progress.
    pub snapshots: list::SnapshotCache,
    /// Becomes `true` (or its sender drops) when the server stops; ends watches.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// Where the webhooks' `clientConfig.service`s are: (namespace, name, port) to a loopback
    /// address, set by [`TestApiServer::resolve_service`] (there are no Endpoints here).
    pub services: Mutex<HashMap<(String, String, u16), SocketAddr>>,
}

impl Shared {
    fn requests(&self) -> MutexGuard<'_, Vec<RecordedRequest>> {
        self.requests
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn services(&self) -> MutexGuard<'_, HashMap<(String, String, u16), SocketAddr>> {
        self.services
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn record(&self, request: RecordedRequest) {
        self.requests().push(request);
    }

    /// Waits until the server's resourceVersion reaches `rv`, at most the
    /// [`too_large_resource_version_wait`](Faults::too_large_resource_version_wait); returns
    /// whether it did.
    pub(crate) async fn wait_for_resource_version(&self, rv: u64) -> bool {
        let deadline = tokio::time::Instant::now() + self.faults.too_large_rv_wait();
        loop {
            if self.store.resource_version() >= rv {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Owner of the server task: dropping the last handle stops it.
struct Handle {
    shared: Arc<Shared>,
    addr: SocketAddr,
    shutdown: tokio::sync::watch::Sender<bool>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

/// A running test API server. Clones share one server; it stops on [`shutdown`](Self::shutdown)
/// or when the last clone drops.
///
/// Every state change takes the next global resourceVersion, as etcd assigns them; creates set
/// `metadata.uid`, `creationTimestamp` and, for the kinds that track it, `generation: 1`. The collection of an object is named
/// from its kind exactly as `kube::core::ApiResource::from_gvk` names it.
#[derive(Clone)]
pub struct TestApiServer {
    inner: Arc<Handle>,
}

impl std::fmt::Debug for TestApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestApiServer")
            .field("addr", &self.inner.addr)
            .finish()
    }
}

impl TestApiServer {
    /// Binds `127.0.0.1:0` and serves in a background task of the current tokio runtime.
    pub async fn start() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding 127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
        let shared = Arc::new(Shared {
            store: Store::default(),
            faults: Faults::default(),
            requests: Mutex::new(Vec::new()),
            snapshots: list::SnapshotCache::default(),
            shutdown: shutdown_rx.clone(),
            services: Mutex::new(HashMap::new()),
        });
        let app = http::router(Arc::clone(&shared));
        let mut stop = shutdown_rx;
        tokio::spawn(async move {
            let signal = async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
            };
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(signal)
                .await
            {
                tracing::warn!(error = %e, "test API server stopped with an error");
            }
        });
        Ok(Self {
            inner: Arc::new(Handle {
                shared,
                addr,
                shutdown: shutdown_tx,
            }),
        })
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    /// A kubeconfig file's text for this server (no credentials; namespace `default`), as
    /// kubectl and the `wisp` binary read it.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: wisp\n  cluster: {{server: \"{}\"}}\n\
             contexts:\n- name: wisp\n  context: {{cluster: wisp, user: wisp, namespace: default}}\n\
             current-context: wisp\nusers:\n- name: wisp\n  user: {{}}\n",
            self.url()
        )
    }

    /// A kube `Config` for this server, default namespace `default`, kube's retries on.
    pub fn config(&self) -> kube::Config {
        let uri = axum::http::Uri::from_maybe_shared(self.url())
            .unwrap_or_else(|_| axum::http::Uri::from_static("http://127.0.0.1/"));
        let mut config = kube::Config::new(uri);
        config.default_namespace = "default".into();
        config
    }

    /// A real `kube::Client` for this server (default namespace `default`). Its own retry layer
    /// is on: it retries 429/503/504 up to 15 times and honours `Retry-After`.
    pub fn client(&self) -> kube::Client {
        Self::build(self.config())
    }

    /// Like [`client`](Self::client) with kube's retry layer off (`Config::default_retry =
    /// false`): every injected failure reaches the caller.
    pub fn client_no_retry(&self) -> kube::Client {
        let mut config = self.config();
        config.default_retry = false;
        Self::build(config)
    }

    fn build(config: kube::Config) -> kube::Client {
        // Building a plain-HTTP client only fails on TLS or auth settings, which are never set.
        kube::Client::try_from(config).expect("a plain-HTTP kube client always builds")
    }

    /// Creates `obj` (which must carry apiVersion, kind, metadata.name; namespace for namespaced
    /// kinds). Fails if it exists. Returns the stored object.
    ///
    /// Unlike a create through the API (404 NotFound in a namespace that does not exist), this
    /// seeding path first creates the object's Namespace when it is missing (one more ADDED
    /// event, on the namespaces collection). A built-in object gets the API server's defaults,
    /// as every object stored in a cluster has them.
    pub fn create(&self, mut obj: Value) -> anyhow::Result<Value> {
        write::default_built_in(&mut obj);
        Ok(self.shared().store.seed(obj)?)
    }

    /// Replaces an existing object, keeping its uid and creationTimestamp; `metadata.generation`
    /// goes up when `spec` changed. `metadata.resourceVersion` in `obj` is ignored.
    pub fn update(&self, obj: Value) -> anyhow::Result<Value> {
        Ok(self.shared().store.update(obj, false)?)
    }

    /// Deletes an object as a DELETE request with `gracePeriodSeconds=0` would (a Pod goes
    /// without its grace period, as with `kubectl delete --grace-period=0 --force`): at once,
    /// or, when it has finalizers, marked with `deletionTimestamp` until they are removed (a
    /// Namespace first deletes its content). Returns its state after the delete, stamped with
    /// its resourceVersion. A DELETE through the API gives a scheduled Pod its grace period
    /// (see [`Faults::pod_stop_time`]).
    pub fn delete(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> anyhow::Result<Value> {
        let options = store::DeleteOptions {
            grace_period: Some(0),
            ..store::DeleteOptions::default()
        };
        Ok(self.shared().store.delete(
            &ResourceKey::for_kind(api_version, kind),
            namespace,
            name,
            &options,
        )?)
    }

    /// The current state of one object.
    pub fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let obj =
            self.shared()
                .store
                .get(&ResourceKey::for_kind(api_version, kind), namespace, name)?;
        Some(obj.value())
    }

    /// Every current object of a kind, sorted by (namespace, name).
    pub fn objects(&self, api_version: &str, kind: &str) -> Vec<Value> {
        self.shared()
            .store
            .objects(&ResourceKey::for_kind(api_version, kind))
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared().store.resource_version()
    }

    /// The compaction floor: lists and watches at resourceVersions below it get 410 Expired.
    pub fn compaction_floor(&self) -> u64 {
        self.shared().store.floor()
    }

    /// Drops all history up to the current resourceVersion; older RVs are now Expired (exact
    /// lists, continue tokens and watches from them). Open watches carry on.
    pub fn compact(&self) {
        self.shared().store.compact();
    }

    /// Keeps at most `events` events of history (default [`DEFAULT_HISTORY_LIMIT`]), compacting
    /// the oldest beyond it, as etcd's periodic compaction would.
    pub fn history_limit(&self, events: usize) {
        self.shared().store.set_history_limit(events);
    }

    /// Simulates an API server and etcd restart: closes every open watch, clears the history and
    /// jumps the resourceVersion by 1,000,000 (a new epoch). Objects survive.
    pub fn restart(&self) {
        self.shared().store.restart();
    }

    /// Ends every open watch stream cleanly (normal end of body) after the events already queued.
    pub fn close_watches(&self) {
        self.shared().store.close_watches();
    }

    /// Sends an ERROR 410 Expired event on every open watch, then ends it.
    pub fn expire_watches(&self) {
        self.shared().store.expire_watches();
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared().requests().clone()
    }

    /// Forgets the recorded requests.
    pub fn clear_requests(&self) {
        self.shared().requests().clear();
    }

    /// Watches currently registered (receiving events).
    pub fn open_watches(&self) -> usize {
        self.shared().store.open_watches()
    }

    /// Waits until at least `count` watches are open; fails after `timeout`.
    pub async fn wait_for_open_watches(
        &self,
        count: usize,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.open_watches() < count {
            if tokio::time::Instant::now() >= deadline {
                anyhow::bail!(
                    "{} open watches after {timeout:?}, wanted {count}",
                    self.open_watches()
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(())
    }

    /// Makes the admission webhooks whose `clientConfig.service` is `namespace`/`name` on
    /// `port` (443 unless the configuration says otherwise) reach `addr`, a webhook server of
    /// the test, as a cluster's Service would route them; the certificate must still be valid
    /// for `NAME.NAMESPACE.svc`. An unresolved service fails as an unknown host does.
    pub fn resolve_service(&self, namespace: &str, name: &str, port: u16, addr: SocketAddr) {
        self.shared()
            .services()
            .insert((namespace.to_string(), name.to_string(), port), addr);
    }

    /// The fault knobs.
    pub fn faults(&self) -> Faults {
        self.shared().faults.clone()
    }

    /// Stops the server: the listener closes and every watch stream ends.
    pub fn shutdown(&self) {
        let _ = self.inner.shutdown.send(true);
    }
}
