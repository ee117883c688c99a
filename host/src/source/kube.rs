//! A [`ListerWatcher`] over the Kubernetes API through `kube`: any apiVersion/kind, namespaced
//! or cluster-wide, with label and field selectors.
//!
//! Lists go through `kube::Client` with the URL `kube::Api<DynamicObject>` uses; the one
//! difference from `Api::list` is that a first page at resourceVersion "0" keeps its
//! `resourceVersion=0` (as client-go sends it), which `kube` would drop when a limit is set.
//! Watches use `Api::<DynamicObject>::watch`.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, ObjectList, WatchParams};
use kube::core::{GroupVersionKind, Status, WatchEvent as KubeWatchEvent};

use crate::informer::lister_watcher::{
    ListOptions, ListPage, ListerWatcher, SourceError, WatchEvent, WatchOptions, WatchStream,
};
use crate::informer::object::{Object, ObjectMeta, OwnerRef};

/// Annotation on the bookmark that ends a streaming list's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Lists and watches one resource type through a `kube::Client`.
#[derive(Clone)]
pub struct KubeSource {
    client: kube::Client,
    api: Api<DynamicObject>,
    resource: ApiResource,
    namespace: Option<String>,
    label_selector: Option<String>,
    field_selector: Option<String>,
    strip_managed_fields: bool,
}

impl KubeSource {
    /// A source for `api_version` / `kind` (plural derived from the kind, as `kube` does),
    /// in `namespace` or, with `None`, in all namespaces (or cluster-scoped).
    pub fn new(
        client: kube::Client,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Self {
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        Self::with_resource(client, resource, namespace)
    }

    /// A source for an already resolved resource (e.g. from discovery).
    pub fn with_resource(
        client: kube::Client,
        resource: ApiResource,
        namespace: Option<&str>,
    ) -> Self {
        let api = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        Self {
            client,
            api,
            resource,
            namespace: namespace.map(str::to_owned),
            label_selector: None,
            field_selector: None,
            strip_managed_fields: true,
        }
    }

    /// Restricts to objects matching a label selector (e.g. `app=web,tier!=db`).
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into()).filter(|s: &String| !s.is_empty());
        self
    }

    /// Restricts to objects matching a field selector (e.g. `spec.nodeName=n1`).
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.field_selector = Some(selector.into()).filter(|s: &String| !s.is_empty());
        self
    }

    /// Whether `metadata.managedFields` is dropped from every object (default: yes).
    pub fn strip_managed_fields(mut self, strip: bool) -> Self {
        self.strip_managed_fields = strip;
        self
    }

    fn convert(&self, mut o: DynamicObject) -> Result<Arc<Object>, SourceError> {
        if self.strip_managed_fields {
            o.metadata.managed_fields = None;
        }
        // List items from a real API server carry no apiVersion/kind: fill them in.
        if o.types.as_ref().is_none_or(|t| t.kind.is_empty()) {
            o.types = Some(kube::core::TypeMeta {
                api_version: self.resource.api_version.clone(),
                kind: self.resource.kind.clone(),
            });
        }
        let md = &o.metadata;
        let name = md.name.clone().ok_or_else(|| {
            SourceError::Decode(format!(
                "{} object without metadata.name",
                self.resource.kind
            ))
        })?;
        let types = o.types.clone().unwrap_or_default();
        let meta = ObjectMeta {
            api_version: types.api_version,
            kind: types.kind,
            namespace: md.namespace.clone().filter(|n| !n.is_empty()),
            name,
            uid: md.uid.clone().unwrap_or_default(),
            resource_version: md.resource_version.clone().unwrap_or_default(),
            labels: md
                .labels
                .clone()
                .map(|m| m.into_iter().collect())
                .unwrap_or_default(),
            annotations: md
                .annotations
                .clone()
                .map(|m| m.into_iter().collect())
                .unwrap_or_default(),
            owner_references: md
                .owner_references
                .iter()
                .flatten()
                .map(|r| OwnerRef {
                    api_version: r.api_version.clone(),
                    kind: r.kind.clone(),
                    name: r.name.clone(),
                    uid: r.uid.clone(),
                    controller: r.controller.unwrap_or(false),
                })
                .collect(),
        };
        let json = serde_json::to_string(&o).map_err(|e| SourceError::Decode(e.to_string()))?;
        Ok(Arc::new(Object::from_parts(meta, json)))
    }

    async fn list_page(&self, opts: ListOptions) -> Result<ListPage, SourceError> {
        let lp = ListParams {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            limit: opts.limit,
            continue_token: opts.continue_token.clone(),
            resource_version: Some(opts.resource_version.clone()).filter(|rv| !rv.is_empty()),
            ..ListParams::default()
        };
        let mut req = kube::core::Request::new(self.api.resource_url())
            .list(&lp)
            .map_err(|e| SourceError::Request(e.to_string()))?;
        if opts.continue_token.is_none() && opts.resource_version == "0" && opts.limit.is_some() {
            let uri = format!("{}&resourceVersion=0", req.uri());
            *req.uri_mut() = uri
                .parse()
                .map_err(|e: http::uri::InvalidUri| SourceError::Request(e.to_string()))?;
        }
        req.extensions_mut().insert("list");
        let list: ObjectList<DynamicObject> = self.client.request(req).await.map_err(map_error)?;
        let items = list
            .items
            .into_iter()
            .map(|o| self.convert(o))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ListPage {
            resource_version: list.metadata.resource_version.unwrap_or_default(),
            continue_token: list.metadata.continue_.filter(|c| !c.is_empty()),
            items,
        })
    }

    async fn start_watch(&self, opts: WatchOptions) -> Result<WatchStream, SourceError> {
        let wp = WatchParams {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            timeout: Some(opts.timeout_seconds),
            bookmarks: opts.allow_bookmarks || opts.send_initial_events,
            send_initial_events: opts.send_initial_events,
        };
        let stream = self
            .api
            .watch(&wp, &opts.resource_version)
            .await
            .map_err(map_error)?;
        let me = self.clone();
        Ok(stream
            .map(move |item| match item {
                Ok(KubeWatchEvent::Added(o)) => me.convert(o).map(WatchEvent::Added),
                Ok(KubeWatchEvent::Modified(o)) => me.convert(o).map(WatchEvent::Modified),
                Ok(KubeWatchEvent::Deleted(o)) => me.convert(o).map(WatchEvent::Deleted),
                Ok(KubeWatchEvent::Bookmark(b)) => Ok(WatchEvent::Bookmark {
                    initial_events_end: b
                        .metadata
                        .annotations
                        .get(INITIAL_EVENTS_END)
                        .is_some_and(|v| v == "true"),
                    resource_version: b.metadata.resource_version,
                }),
                Ok(KubeWatchEvent::Error(status)) => Ok(WatchEvent::Error(map_status(&status))),
                Err(e) => Err(map_error(e)),
            })
            .boxed())
    }
}

impl ListerWatcher for KubeSource {
    fn list(&self, opts: ListOptions) -> BoxFuture<'_, Result<ListPage, SourceError>> {
        self.list_page(opts).boxed()
    }

    fn watch(&self, opts: WatchOptions) -> BoxFuture<'_, Result<WatchStream, SourceError>> {
        self.start_watch(opts).boxed()
    }

    fn describe(&self) -> String {
        let mut s = format!("{}/{}", self.resource.api_version, self.resource.kind);
        match &self.namespace {
            Some(ns) => s.push_str(&format!(" in namespace {ns}")),
            None => s.push_str(" in all namespaces"),
        }
        if let Some(l) = &self.label_selector {
            s.push_str(&format!(" with labels {l}"));
        }
        if let Some(f) = &self.field_selector {
            s.push_str(&format!(" with fields {f}"));
        }
        s
    }
}

/// Maps a Kubernetes `Status` to the reflector's error kinds.
pub fn map_status(status: &Status) -> SourceError {
    let too_large = status.details.as_ref().is_some_and(|d| {
        d.causes
            .iter()
            .any(|c| c.reason == "ResourceVersionTooLarge")
    }) || status.message.contains("Too large resource version");
    match status.code {
        410 => SourceError::Expired(status.message.clone()),
        _ if status.reason == "Expired" || status.reason == "Gone" => {
            SourceError::Expired(status.message.clone())
        }
        _ if too_large => SourceError::TooLargeResourceVersion(status.message.clone()),
        429 => SourceError::TooManyRequests {
            message: status.message.clone(),
            retry_after: status
                .details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(u64::from(s))),
        },
        code => SourceError::Api {
            code,
            reason: status.reason.clone(),
            message: status.message.clone(),
        },
    }
}

/// Maps a `kube` client error to the reflector's error kinds.
pub fn map_error(e: kube::Error) -> SourceError {
    match e {
        kube::Error::Api(status) => map_status(&status),
        kube::Error::SerdeError(e) => SourceError::Decode(e.to_string()),
        kube::Error::BuildRequest(e) => SourceError::Request(e.to_string()),
        kube::Error::HttpError(e) => SourceError::Request(e.to_string()),
        other => SourceError::Connect(other.to_string()),
    }
}
