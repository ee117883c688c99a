//! Object filters applied on the host side: several namespaces (the API can only list one or
//! all), and field selectors for sources that cannot apply them (the dir source).

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};

use crate::informer::Object;
use crate::informer::lister_watcher::{
    ListOptions, ListPage, ListerWatcher, SourceError, WatchEvent, WatchOptions, WatchStream,
};
use wisp_kinds::selector::{FieldSelector, LabelSelector};

pub(crate) use wisp_kinds::api::group_of;

/// Which objects an informer keeps.
#[derive(Clone, Debug, Default)]
pub struct ObjectFilter {
    /// `apiVersion` to keep (empty: any). Objects of another version of the same group are
    /// kept too: an API server serves one object in every served version of its group and
    /// kind, and an informer on any of them sees it (the dir source converts it first).
    pub api_version: String,
    /// `kind` to keep (empty: any).
    pub kind: String,
    /// Namespaces to keep (`None`: all).
    pub namespaces: Option<Vec<String>>,
    /// Label selector.
    pub labels: LabelSelector,
    /// Field selector, its labels converted for the kind
    /// ([`wisp_kinds::fields::Selectable::convert_selector`]); values are read as the API
    /// server reads them ([`wisp_kinds::fields::value`]).
    pub fields: FieldSelector,
}

impl ObjectFilter {
    /// Whether the object passes the filter (metadata checks first; fields parse the JSON).
    pub fn keeps(&self, o: &Object) -> bool {
        let m = o.meta();
        if (!self.api_version.is_empty()
            && group_of(m.api_version()) != group_of(&self.api_version))
            || (!self.kind.is_empty() && m.kind() != self.kind)
        {
            return false;
        }
        if let Some(ns) = &self.namespaces
            && !ns.iter().any(|n| Some(n.as_str()) == m.namespace())
        {
            return false;
        }
        if !self.labels.matches_by(|k| m.label(k)) {
            return false;
        }
        if self.fields.is_empty() {
            return true;
        }
        let v = o.to_value();
        let group = group_of(m.api_version());
        self.fields
            .matches_by(|label| wisp_kinds::fields::value(group, m.kind(), &v, label))
    }
}

/// A source whose objects pass through a filter (list items and watch events alike).
pub struct Filtered<L> {
    inner: L,
    filter: Arc<ObjectFilter>,
}

impl<L: ListerWatcher> Filtered<L> {
    /// Wraps `inner`.
    pub fn new(inner: L, filter: ObjectFilter) -> Self {
        Self {
            inner,
            filter: Arc::new(filter),
        }
    }
}

impl<L: ListerWatcher> ListerWatcher for Filtered<L> {
    fn list(&self, opts: ListOptions) -> BoxFuture<'_, Result<ListPage, SourceError>> {
        let f = self.filter.clone();
        self.inner
            .list(opts)
            .map(move |r| {
                r.map(|mut p| {
                    p.items.retain(|o| f.keeps(o));
                    p
                })
            })
            .boxed()
    }

    fn watch(&self, opts: WatchOptions) -> BoxFuture<'_, Result<WatchStream, SourceError>> {
        let f = self.filter.clone();
        self.inner
            .watch(opts)
            .map(move |r| {
                r.map(|s| {
                    s.filter(move |ev| {
                        let keep = match ev {
                            Ok(
                                WatchEvent::Added(o)
                                | WatchEvent::Modified(o)
                                | WatchEvent::Deleted(o),
                            ) => f.keeps(o),
                            _ => true,
                        };
                        futures::future::ready(keep)
                    })
                    .boxed()
                })
            })
            .boxed()
    }

    fn describe(&self) -> String {
        match &self.filter.namespaces {
            Some(ns) => format!("{} (namespaces {})", self.inner.describe(), ns.join(", ")),
            None => self.inner.describe(),
        }
    }
}
