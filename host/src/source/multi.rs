//! One informer over several namespaces: one list and one watch per namespace (as client-go's
//! multi-namespace caches do), never a cluster-wide request filtered in the host. So the
//! informer needs `list`/`watch` only in its namespaces, which a Role per namespace grants.
//!
//! The reflector tracks one resourceVersion; for several namespaces it is a composite
//! (`multi:` followed by a JSON array of each namespace's resourceVersion, in the order the
//! namespaces were given). Each watch resumes from its own namespace's resourceVersion, so a
//! namespace whose events arrive later than another's loses nothing when the watches restart.
//! After every event of one namespace the merged stream adds a [`WatchEvent::Progress`]
//! carrying the updated composite, which is how the reflector learns it (it is not counted as a
//! watch event, so `wisp_informer_events` counts each server event once). A plain resourceVersion (`""`, `"0"`) applies
//! to every namespace.

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};

use crate::informer::lister_watcher::{
    ListOptions, ListPage, ListerWatcher, SourceError, WatchEvent, WatchOptions, WatchStream,
};
use crate::sync::lock;

/// Prefix of a composite resourceVersion.
const PREFIX: &str = "multi:";

/// Lists and watches the same resource in several namespaces, one source per namespace.
pub struct MultiNamespace<S> {
    /// (namespace, its source), in the configured order.
    parts: Vec<(String, S)>,
}

impl<S: ListerWatcher + Clone> MultiNamespace<S> {
    /// Over `parts`: each namespace and the source that lists and watches in it.
    pub fn new(parts: Vec<(String, S)>) -> Self {
        Self { parts }
    }

    fn split_rv(&self, rv: &str) -> Vec<String> {
        rv.strip_prefix(PREFIX)
            .and_then(|j| serde_json::from_str::<Vec<String>>(j).ok())
            .filter(|v| v.len() == self.parts.len())
            .unwrap_or_else(|| vec![rv.to_owned(); self.parts.len()])
    }

    async fn list_all(&self, opts: ListOptions) -> Result<ListPage, SourceError> {
        if opts.continue_token.is_some() {
            return Err(SourceError::Request(
                "a list over several namespaces is returned in one page; it has no continuation"
                    .into(),
            ));
        }
        let rvs = self.split_rv(&opts.resource_version);
        let mut budget =
            crate::informer::lister_watcher::ListBudget::new(opts.caps, self.describe());
        let mut items = Vec::new();
        let mut listed = Vec::with_capacity(rvs.len());
        for ((_, src), rv) in self.parts.iter().zip(rvs) {
            let crate::informer::lister_watcher::WholeList {
                items: mut page_items,
                resource_version: list_rv,
                ..
            } = crate::informer::lister_watcher::list_all(src, &rv, opts.limit, &mut budget)
                .await?;
            items.append(&mut page_items);
            listed.push(list_rv);
        }
        Ok(ListPage {
            resource_version: join_rv(&listed),
            continue_token: None,
            items,
        })
    }

    async fn watch_all(&self, opts: WatchOptions) -> Result<WatchStream, SourceError> {
        let rvs = self.split_rv(&opts.resource_version);
        let mut streams = Vec::with_capacity(self.parts.len());
        for (i, ((_, src), rv)) in self.parts.iter().zip(&rvs).enumerate() {
            let s = src
                .watch(WatchOptions {
                    resource_version: rv.clone(),
                    ..opts.clone()
                })
                .await?;
            // Each item tagged with its namespace; `None` marks the end of that watch.
            streams.push(
                s.map(move |item| Some((i, item)))
                    .chain(futures::stream::once(async { None }))
                    .boxed(),
            );
        }
        let state = Arc::new(Mutex::new(Merge {
            rvs,
            initial_ended: vec![false; self.parts.len()],
        }));
        Ok(futures::stream::select_all(streams)
            // The merged watch ends when one of them does; the reflector then watches again,
            // each namespace from its own resourceVersion.
            .take_while(|x| futures::future::ready(x.is_some()))
            .flat_map(move |x| {
                let out = match x {
                    Some((i, item)) => lock(&state).step(i, item),
                    None => Vec::new(),
                };
                futures::stream::iter(out)
            })
            .boxed())
    }
}

/// Where each namespace's watch is.
struct Merge {
    /// The last resourceVersion seen per namespace.
    rvs: Vec<String>,
    /// Per namespace, whether its streaming list sent its initial-events-end bookmark.
    initial_ended: Vec<bool>,
}

impl Merge {
    /// What the merged stream emits for `item` of namespace `i`.
    fn step(
        &mut self,
        i: usize,
        item: Result<WatchEvent, SourceError>,
    ) -> Vec<Result<WatchEvent, SourceError>> {
        let bookmark = |m: &Self, end: bool| {
            Ok(WatchEvent::Bookmark {
                resource_version: join_rv(&m.rvs),
                initial_events_end: end,
            })
        };
        match item {
            Ok(ev @ (WatchEvent::Added(_) | WatchEvent::Modified(_) | WatchEvent::Deleted(_))) => {
                let rv = match &ev {
                    WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                        o.resource_version().to_owned()
                    }
                    _ => String::new(),
                };
                if !rv.is_empty() {
                    self.rvs[i] = rv;
                }
                vec![Ok(ev), Ok(WatchEvent::Progress(join_rv(&self.rvs)))]
            }
            Ok(WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            }) => {
                if !resource_version.is_empty() {
                    self.rvs[i] = resource_version;
                }
                if initial_events_end {
                    self.initial_ended[i] = true;
                }
                let all_ended = initial_events_end && self.initial_ended.iter().all(|e| *e);
                vec![bookmark(self, all_ended)]
            }
            other => vec![other],
        }
    }
}

fn join_rv(rvs: &[String]) -> String {
    format!(
        "{PREFIX}{}",
        serde_json::to_string(rvs).unwrap_or_else(|_| "[]".into())
    )
}

impl<S: ListerWatcher + Clone> ListerWatcher for MultiNamespace<S> {
    fn list(&self, opts: ListOptions) -> BoxFuture<'_, Result<ListPage, SourceError>> {
        self.list_all(opts).boxed()
    }

    fn watch(&self, opts: WatchOptions) -> BoxFuture<'_, Result<WatchStream, SourceError>> {
        self.watch_all(opts).boxed()
    }

    fn describe(&self) -> String {
        let each: Vec<String> = self.parts.iter().map(|(_, s)| s.describe()).collect();
        format!("one list and watch per namespace: {}", each.join("; "))
    }
}
