//! Sends actions with the real `kube::Client`: requests built with `kube::core::Request` on the
//! collection URL `ApiResource::from_gvk` gives (the same naming as the informers' sources).

use std::future::Future;
use std::pin::Pin;

use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;

use super::{Action, ActionBody, ActionSink, SendError, Target};

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

fn collection(t: &Target) -> kube::core::Request {
    let (group, version) = match t.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", t.api_version.as_str()),
    };
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &t.kind));
    kube::core::Request::new(<DynamicObject as kube::Resource>::url_path(
        &ar,
        t.namespace.as_deref(),
    ))
}

fn request_error(e: impl std::fmt::Display) -> SendError {
    SendError {
        code: Some(400),
        message: format!("cannot build the request: {e}"),
    }
}

impl KubeActionSink {
    async fn send_one(&self, a: &Action) -> Result<String, SendError> {
        let manager = field_manager(&a.plugin);
        let req = match &a.body {
            ActionBody::PatchMetadata(patch) => {
                let pp = PatchParams {
                    field_manager: Some(manager),
                    ..PatchParams::default()
                };
                collection(&a.target).patch(&a.target.name, &pp, &Patch::Merge(patch))
            }
            ActionBody::Apply(obj) => {
                let pp = PatchParams::apply(&manager);
                collection(&a.target).patch(&a.target.name, &pp, &Patch::Apply(obj))
            }
            ActionBody::CreateEvent(ev) => {
                let pp = PostParams {
                    field_manager: Some(manager),
                    ..PostParams::default()
                };
                let bytes = serde_json::to_vec(ev).map_err(request_error)?;
                collection(&a.target).create(&pp, bytes)
            }
        }
        .map_err(request_error)?;
        match self.client.request_text(req).await {
            Ok(text) => {
                let rv = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| {
                        v.pointer("/metadata/resourceVersion")
                            .and_then(|r| r.as_str().map(str::to_owned))
                    });
                Ok(match rv {
                    Some(rv) => format!("resourceVersion {rv}"),
                    None => "done".into(),
                })
            }
            Err(kube::Error::Api(status)) => Err(SendError {
                code: Some(status.code),
                message: if status.message.is_empty() {
                    status.reason.clone()
                } else {
                    status.message.clone()
                },
            }),
            Err(e) => Err(SendError {
                code: None,
                message: e.to_string(),
            }),
        }
    }
}

impl ActionSink for KubeActionSink {
    fn send<'a>(
        &'a self,
        action: &'a Action,
    ) -> Pin<Box<dyn Future<Output = Result<String, SendError>> + Send + 'a>> {
        Box::pin(self.send_one(action))
    }
}
