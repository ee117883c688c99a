//! A plugin that imports `wasi:http` (outgoing-handler and types), as a default JavaScript build
//! (ComponentizeJS) does, for the host's sandbox tests: it must load, and every request it makes
//! must be refused without reaching the network.
//!
//! Settings: `{"url": "http://127.0.0.1:9/"}` (authority and path of a GET; `http` scheme). It
//! sends the request in `init` and on every notification, and logs the answer:
//! `http GET <url>: <answer>`, counting it in `http_total{result}` (`denied`, `error`,
//! `response`).

use serde::Deserialize;
use wasip2::http::outgoing_handler;
use wasip2::http::types::{ErrorCode, Fields, OutgoingRequest, Scheme};
use wisp_sdk::{Context, Object, Plugin, PluginInfo, metrics};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
struct Settings {
    url: Option<String>,
}

struct Http {
    settings: Settings,
}

/// Sends a GET to `url` and says what came back.
fn get(url: &str) -> (&'static str, String) {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let req = OutgoingRequest::new(Fields::new());
    let _ = req.set_scheme(Some(&Scheme::Http));
    let _ = req.set_authority(Some(authority));
    let _ = req.set_path_with_query(Some(path));
    let fut = match outgoing_handler::handle(req, None) {
        Ok(f) => f,
        Err(ErrorCode::HttpRequestDenied) => return ("denied", "refused at once".into()),
        Err(e) => return ("error", format!("{e:?}")),
    };
    fut.subscribe().block();
    match fut.get() {
        Some(Ok(Ok(resp))) => ("response", format!("status {}", resp.status())),
        Some(Ok(Err(ErrorCode::HttpRequestDenied))) => ("denied", "HttpRequestDenied".into()),
        Some(Ok(Err(e))) => ("error", format!("{e:?}")),
        Some(Err(())) => ("error", "response taken twice".into()),
        None => ("error", "no response yet".into()),
    }
}

impl Http {
    fn try_it(&self) {
        if let Some(url) = &self.settings.url {
            let (result, detail) = get(url);
            metrics::counter_add("http_total", &[("result", result)], 1);
            wisp_sdk::info!("http GET {url}: {result}: {detail}");
        }
    }
}

impl Plugin for Http {
    fn describe() -> PluginInfo {
        wisp_sdk::info("test-http", env!("CARGO_PKG_VERSION"), &[])
    }

    fn init(settings: &str) -> Result<Self, String> {
        let me = Self {
            settings: wisp_sdk::parse_settings(settings)?,
        };
        me.try_it();
        Ok(me)
    }

    fn on_add(&mut self, _cx: &Context, _obj: &Object, _initial: bool) -> Result<(), String> {
        self.try_it();
        Ok(())
    }

    fn on_update(
        &mut self,
        _cx: &Context,
        _old: &Object,
        _new: &Object,
        _resync: bool,
    ) -> Result<(), String> {
        self.try_it();
        Ok(())
    }

    fn on_delete(&mut self, _cx: &Context, _obj: &Object, _unknown: bool) -> Result<(), String> {
        self.try_it();
        Ok(())
    }
}

wisp_sdk::export_plugin!(Http);
