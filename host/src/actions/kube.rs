//! Sends actions with the real `kube::Client`: requests built with `kube::core::Request` on the
//! collection URL of `ApiResource::from_gvk` (the same naming as the informers' sources), every
//! path segment percent-encoded, so that even a name that passed no validation stays one segment
//! and cannot begin a query or a fragment. The query (field manager, nothing else) is the host's.

use std::future::Future;
use std::pin::Pin;

use kube::api::{Patch, PatchParams, PostParams};

use super::{Action, ActionBody, ActionSink, SendError, Sent, Target};

/// Field manager of a plugin's server-side applies and patches.
pub fn field_manager(plugin: &str) -> String {
    // Field managers are at most 128 characters.
    let mut m = format!("wisp-{plugin}");
    m.truncate(128);
    m
}

/// Sends actions to the API server of `client`.
#[derive(Clone)]
pub struct KubeActionSink {
    client: kube::Client,
}

impl KubeActionSink {
    /// A sink on `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

pub use wisp_kinds::api::{collection_at, path_segment};

/// The collection of `t`.
fn collection(t: &Target) -> kube::core::Request {
    let ar = wisp_kinds::api::api_resource(&t.api_version, &t.kind);
    collection_at(&ar.group, &ar.version, t.namespace.as_deref(), &ar.plural)
}

/// The request that carries `body` to `t` for `plugin` (the query is the field manager only).
fn request(
    t: &Target,
    plugin: &str,
    body: &ActionBody,
) -> Result<http::Request<Vec<u8>>, SendError> {
    let manager = field_manager(plugin);
    let name = path_segment(&t.name);
    match body {
        ActionBody::PatchMetadata(patch) => {
            let pp = PatchParams {
                field_manager: Some(manager),
                ..PatchParams::default()
            };
            collection(t).patch(&name, &pp, &Patch::Merge(patch))
        }
        ActionBody::Apply(obj) => {
            let pp = PatchParams::apply(&manager);
            collection(t).patch(&name, &pp, &Patch::Apply(obj))
        }
        ActionBody::CountEvent { patch, .. } => {
            let pp = PatchParams {
                field_manager: Some(manager),
                ..PatchParams::default()
            };
            collection(t).patch(&name, &pp, &Patch::Merge(patch))
        }
        ActionBody::CreateEvent(ev) => {
            let pp = PostParams {
                field_manager: Some(manager),
                ..PostParams::default()
            };
            let bytes = serde_json::to_vec(ev).map_err(request_error)?;
            collection(t).create(&pp, bytes)
        }
    }
    .map_err(request_error)
}

fn request_error(e: impl std::fmt::Display) -> SendError {
    SendError::new(Some(400), format!("cannot build the request: {e}"))
}

impl KubeActionSink {
    async fn send_one(&self, a: &Action) -> Result<Sent, SendError> {
        match self.send_body(a, &a.body).await {
            // The Event a repeat counts is gone (expired, deleted): create it whole.
            Err(e) if e.code == Some(404) => match &a.body {
                ActionBody::CountEvent { event, .. } => {
                    self.send_body(a, &ActionBody::CreateEvent(event.clone()))
                        .await
                }
                _ => Err(e),
            },
            r => r,
        }
    }

    async fn send_body(&self, a: &Action, body: &ActionBody) -> Result<Sent, SendError> {
        let req = request(&a.target, &a.plugin, body)?;
        match self.client.request_text(req).await {
            Ok(text) => Ok(Sent {
                resource_version: serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| {
                        v.pointer("/metadata/resourceVersion")
                            .and_then(|r| r.as_str().map(str::to_owned))
                    }),
            }),
            Err(kube::Error::Api(status)) => Err(SendError {
                code: Some(status.code),
                message: if status.message.is_empty() {
                    status.reason.clone()
                } else {
                    status.message.clone()
                },
                field_manager_conflict: status.code == 409
                    && status.details.as_ref().is_some_and(|d| {
                        d.causes.iter().any(|c| c.reason == "FieldManagerConflict")
                    }),
                fenced: false,
            }),
            Err(e) => Err(SendError::new(None, e.to_string())),
        }
    }
}

impl ActionSink for KubeActionSink {
    fn send<'a>(
        &'a self,
        action: &'a Action,
    ) -> Pin<Box<dyn Future<Output = Result<Sent, SendError>> + Send + 'a>> {
        Box::pin(self.send_one(action))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str) -> Target {
        Target {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: Some(ns.into()),
            name: name.into(),
        }
    }

    #[test]
    fn a_name_that_escaped_validation_stays_one_segment_and_the_query_is_the_hosts() {
        let body = ActionBody::PatchMetadata(serde_json::json!({"metadata": {}}));
        for (name, path) in [
            (
                "x/../../../../kube-system/pods/coredns",
                "/api/v1/namespaces/shop/pods/x%2F..%2F..%2F..%2F..%2Fkube-system%2Fpods%2Fcoredns",
            ),
            (
                "x?fieldManager=kube-controller-manager&dryRun=All",
                "/api/v1/namespaces/shop/pods/x%3FfieldManager%3Dkube-controller-manager%26dryRun%3DAll",
            ),
            ("x#", "/api/v1/namespaces/shop/pods/x%23"),
            ("..", "/api/v1/namespaces/shop/pods/%2E%2E"),
            ("x%2F", "/api/v1/namespaces/shop/pods/x%252F"),
            ("web-1.a", "/api/v1/namespaces/shop/pods/web-1.a"),
        ] {
            let r = request(&pod("shop", name), "p", &body).unwrap();
            assert_eq!(r.uri().path(), path);
            let q: Vec<(String, String)> = form_urlencoded_pairs(r.uri().query().unwrap_or(""));
            assert_eq!(
                q,
                vec![("fieldManager".to_owned(), "wisp-p".to_owned())],
                "{name}"
            );
        }
        let r = request(&pod("a/../b", "n"), "p", &body).unwrap();
        assert_eq!(r.uri().path(), "/api/v1/namespaces/a%2F..%2Fb/pods/n");
    }

    /// The escaping of path segments, pinned on inputs that test every class of byte (what the
    /// hand-written encoder produced).
    #[test]
    fn path_segments_escape_all_but_unreserved_and_colon() {
        for (segment, want) in [
            ("", ""),
            (".", "%2E"),
            ("..", "%2E%2E"),
            ("...", "..."),
            (".a", ".a"),
            ("a..", "a.."),
            ("a/b", "a%2Fb"),
            ("a b", "a%20b"),
            ("50%", "50%25"),
            ("ns:name", "ns:name"),
            ("~-_.:AZaz09", "~-_.:AZaz09"),
            (
                "?#[]@!$&'()*+,;=",
                "%3F%23%5B%5D%40%21%24%26%27%28%29%2A%2B%2C%3B%3D",
            ),
            ("\0\x7f\n\t", "%00%7F%0A%09"),
            ("é", "%C3%A9"),
            ("日本", "%E6%97%A5%E6%9C%AC"),
            ("😀", "%F0%9F%98%80"),
            ("\"<>\\^`{|}", "%22%3C%3E%5C%5E%60%7B%7C%7D"),
            (
                "repository:team/app:pull,push",
                "repository:team%2Fapp:pull%2Cpush",
            ),
        ] {
            assert_eq!(path_segment(segment), want, "{segment:?}");
        }
    }

    fn form_urlencoded_pairs(q: &str) -> Vec<(String, String)> {
        q.split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (k.to_owned(), v.to_owned())
            })
            .collect()
    }
}
