//! A plugin that imports `wasi:http` (outgoing-handler and types), as a default JavaScript build
//! (ComponentizeJS) does, for the host's sandbox tests: it must load, and every request it makes
//! must be refused without reaching the network.
//!
//! Settings: `{"url": "http://127.0.0.1:9/"}` (authority and path of a GET; `http` scheme). It
//! sends the request in `init` and on every notification, and logs the answer:
//! `http GET <url>: <answer>`, counting it in `http_total{result}` (`denied`, `error`,
//! `response`). `{"bodies": n}`: fill n request bodies (never sent) as far as the host takes
//! writes, and log `bodies: n buffered <bytes> bytes`: what a plugin can make the host hold.

use serde::Deserialize;
use wasip2::http::outgoing_handler;
use wasip2::http::types::{ErrorCode, Fields, OutgoingRequest, Scheme};
use wisp_sdk::{Context, Object, Plugin, PluginInfo, Result, metrics};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
struct Settings {
    url: Option<String>,
    /// Fill this many outgoing request bodies as far as the host lets them be written, without
    /// sending them, and log what the host buffered.
    bodies: u32,
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

/// Writes into a new request's body until the host takes no more; the bytes written.
fn fill_body() -> u64 {
    let req = OutgoingRequest::new(Fields::new());
    let Ok(body) = req.body() else { return 0 };
    let Ok(out) = body.write() else { return 0 };
    let chunk = vec![7u8; 1 << 20];
    let mut written = 0u64;
    loop {
        match out.check_write() {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let n = (n as usize).min(chunk.len());
                if out.write(&chunk[..n]).is_err() {
                    break;
                }
                written += n as u64;
            }
        }
    }
    // Kept alive (never sent) until the instance goes.
    std::mem::forget(out);
    std::mem::forget(body);
    std::mem::forget(req);
    written
}

impl Http {
    fn try_it(&self) {
        if self.settings.bodies > 0 {
            let total: u64 = (0..self.settings.bodies).map(|_| fill_body()).sum();
            wisp_sdk::info!("bodies: {} buffered {total} bytes", self.settings.bodies);
        }
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

    fn init(settings: &str) -> Result<Self> {
        let me = Self {
            settings: wisp_sdk::parse_settings(settings)?,
        };
        me.try_it();
        Ok(me)
    }

    fn on_add(&mut self, _cx: &Context, _obj: &Object, _initial: bool) -> Result<()> {
        self.try_it();
        Ok(())
    }

    fn on_update(
        &mut self,
        _cx: &Context,
        _old: &Object,
        _new: &Object,
        _resync: bool,
    ) -> Result<()> {
        self.try_it();
        Ok(())
    }

    fn on_delete(&mut self, _cx: &Context, _obj: &Object, _unknown: bool) -> Result<()> {
        self.try_it();
        Ok(())
    }
}

wisp_sdk::export_plugin!(Http);
