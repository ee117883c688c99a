//! The router: liveness, readiness, metrics (open); plugin status, verdicts, audit, reloads
//! (protected, see [`super::auth`]); 404 for anything else.

use std::sync::Arc;

use axum::extract::Path;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Router, middleware};
use prometheus_client::registry::Registry;

use super::AdminState;
use super::auth::{self, Guard};
use super::metrics;
use super::plugins::{self, PluginView};
use crate::plugin::PluginState;
use crate::policy::VerdictFilter;

/// What the handlers share: the state read by every endpoint and the metrics registry (its
/// collector reads the state at scrape time, so it is built once).
#[derive(Clone)]
struct Ctx {
    state: AdminState,
    registry: Arc<Registry>,
}

/// The admin router over `state`: health, readiness and metrics open, everything else behind
/// `guard` (see [`super::auth`]).
pub(crate) fn router(state: AdminState, guard: Guard) -> Router {
    let registry = Arc::new(metrics::registry(state.clone()));
    let ctx = Ctx { state, registry };
    let protected = Router::new()
        .route("/plugins", get(plugin_list))
        .route("/verdicts", get(verdict_list))
        .route("/audit", get(audit_list))
        .route("/reload", post(reload_all))
        .route("/plugins/{name}/reload", post(reload_one))
        .route_layer(middleware::from_fn_with_state(guard, auth::require));
    open_routes()
        .merge(protected)
        .fallback(not_found)
        .with_state(ctx)
}

/// Only the open endpoints (`admin.metricsAddress`).
pub(crate) fn metrics_router(state: AdminState) -> Router {
    let registry = Arc::new(metrics::registry(state.clone()));
    open_routes()
        .fallback(not_found)
        .with_state(Ctx { state, registry })
}

fn open_routes() -> Router<Ctx> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(scrape))
}

async fn run_reload(ctx: Ctx, name: Option<String>) -> (StatusCode, String) {
    let Some(f) = ctx.state.reload.clone() else {
        return (
            StatusCode::NOT_FOUND,
            "reloads are not available here\n".into(),
        );
    };
    match tokio::task::spawn_blocking(move || f(name)).await {
        Ok(Ok(done)) => (StatusCode::OK, format!("{done}\n")),
        Ok(Err(super::ReloadError::UnknownPlugin(n))) => {
            (StatusCode::NOT_FOUND, format!("no plugin named {n:?}\n"))
        }
        Ok(Err(super::ReloadError::Refused(why))) => (StatusCode::CONFLICT, format!("{why}\n")),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("reload failed: {e}\n"),
        ),
    }
}

async fn reload_all(State(ctx): State<Ctx>) -> (StatusCode, String) {
    run_reload(ctx, None).await
}

async fn reload_one(State(ctx): State<Ctx>, Path(name): Path<String>) -> (StatusCode, String) {
    run_reload(ctx, Some(name)).await
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(ctx): State<Ctx>) -> (StatusCode, String) {
    let r = readiness(&ctx.state);
    let code = if r.ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, r.to_string())
}

/// `/metrics` in the exposition the scraper's `Accept` asks for ([`metrics::Format`]).
async fn scrape(State(ctx): State<Ctx>, headers: axum::http::HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = metrics::Format::negotiate(accept);
    match metrics::encode(&ctx.registry) {
        Ok(body) => {
            let body = match format {
                metrics::Format::OpenMetrics => body,
                metrics::Format::Prometheus => metrics::to_prometheus_text(&body),
            };
            ([(header::CONTENT_TYPE, format.content_type())], body).into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "encoding the metrics failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "encoding the metrics failed\n",
            )
                .into_response()
        }
    }
}

async fn plugin_list(State(ctx): State<Ctx>) -> axum::Json<Vec<PluginView>> {
    let unread: Vec<String> = ctx
        .state
        .source_errors
        .as_ref()
        .map(|errors| {
            errors()
                .iter()
                .map(|(file, e)| format!("{}: {}", file.display(), one_line(e)))
                .collect()
        })
        .unwrap_or_default();
    axum::Json(
        ctx.state
            .plugins()
            .iter()
            .map(|h| PluginView {
                unread_manifests: unread.clone(),
                ..plugins::view(h)
            })
            .collect(),
    )
}

/// Query of `/verdicts` and `/audit`.
#[derive(Debug, Default, serde::Deserialize)]
struct Filter {
    plugin: Option<String>,
    namespace: Option<String>,
    rule: Option<String>,
}

/// `/verdicts[?plugin=P][&namespace=N][&rule=R]`: current violations.
async fn verdict_list(
    State(ctx): State<Ctx>,
    Query(q): Query<Filter>,
) -> axum::Json<Vec<crate::policy::Verdict>> {
    axum::Json(ctx.state.services.verdicts.list(&VerdictFilter {
        plugin: q.plugin,
        namespace: q.namespace,
        rule: q.rule,
    }))
}

/// `/audit[?plugin=P]`: the last actions taken, oldest first.
async fn audit_list(
    State(ctx): State<Ctx>,
    Query(q): Query<Filter>,
) -> axum::Json<Vec<crate::actions::audit::AuditEntry>> {
    axum::Json(ctx.state.services.audit.entries(q.plugin.as_deref()))
}

async fn not_found() -> (StatusCode, &'static str) {
    (StatusCode::NOT_FOUND, "not found\n")
}

/// What keeps the host from being ready, and what is quarantined (which does not).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// One line per informer or plugin not synced yet.
    pub waiting: Vec<String>,
    /// One line per synced informer, with the last resourceVersion it synced
    /// (client-go's `LastSyncResourceVersion`).
    pub synced: Vec<String>,
    /// One line per quarantined plugin: its name only (the reason holds plugin text, shown
    /// behind the token in `/plugins`).
    pub quarantined: Vec<String>,
    /// One line per manifest file of a `dir:` source that was not read, whole or in part
    /// (shown, not holding readiness back: the other files count, and a file that breaks
    /// keeps its previous objects).
    pub manifest_errors: Vec<String>,
    /// One line per manifest file that only redefines objects defined before it (a note:
    /// the file was read whole, its later definitions count).
    pub manifest_notes: Vec<String>,
    /// With `sharding`, on a replica that does not lead: why (ready all the same: its caches
    /// are warm for when it takes over).
    pub standby: Option<String>,
}

impl Readiness {
    /// Every informer and every running plugin has synced.
    pub fn ready(&self) -> bool {
        self.waiting.is_empty()
    }
}

/// `ready` when ready; then one line per item waiting, per informer synced (with its last
/// resourceVersion), per plugin quarantined, per manifest file not read, then the notes on
/// manifest files that only redefine objects.
impl std::fmt::Display for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.ready() {
            writeln!(f, "ready")?;
        }
        for line in self
            .waiting
            .iter()
            .chain(&self.synced)
            .chain(&self.quarantined)
            .chain(&self.manifest_errors)
            .chain(&self.manifest_notes)
            .chain(&self.standby)
        {
            writeln!(f, "{line}")?;
        }
        Ok(())
    }
}

/// Ready once every informer has synced and every plugin has handled its initial list; a
/// quarantined plugin receives nothing more, so it does not hold readiness back.
pub fn readiness(state: &AdminState) -> Readiness {
    let mut r = Readiness::default();
    for (plugin, doing) in state.startup.pending() {
        r.waiting.push(format!("plugin {plugin}: {doing}"));
    }
    for inf in &state.informers {
        if !inf.has_synced() {
            r.waiting
                .push(format!("informer {}: not synced", inf.name()));
        } else {
            r.synced.push(format!(
                "informer {}: synced, last resourceVersion {}",
                inf.name(),
                inf.stats().last_sync_resource_version
            ));
        }
    }
    for p in state.plugins() {
        match p.state() {
            // The reason carries the plugin's last error (its text, possibly object data it
            // read): only `/plugins`, behind the token, shows it.
            PluginState::Quarantined { .. } => r
                .quarantined
                .push(format!("plugin {}: quarantined (why: /plugins)", p.name())),
            PluginState::Running if !p.has_synced() => r
                .waiting
                .push(format!("plugin {}: initial list not handled", p.name())),
            PluginState::Running => {}
        }
    }
    if let Some(l) = &state.leadership
        && let Err(why) = l.check()
    {
        r.standby = Some(format!(
            "standby: {why}; plugins start when it takes the Lease"
        ));
    }
    if let Some(errors) = &state.source_errors {
        for (file, error) in errors() {
            r.manifest_errors
                .push(format!("manifest {}: {}", file.display(), one_line(&error)));
        }
    }
    if let Some(notes) = &state.source_notes {
        for (file, note) in notes() {
            r.manifest_notes.push(format!(
                "note: manifest {}: {}",
                file.display(),
                one_line(&note)
            ));
        }
    }
    r
}

/// `s` on one line (a reason may carry a plugin's multi-line message).
fn one_line(s: &str) -> String {
    s.split(['\r', '\n'])
        .filter(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::sync::Arc;

    use super::*;

    /// A file that only redefines an object is a note after the real problems, not one of them.
    #[test]
    fn a_file_that_only_redefines_objects_is_a_note_not_a_manifest_error() {
        let files = |pairs: &[(&str, &str)]| -> super::super::SourceErrorsFn {
            let m: BTreeMap<PathBuf, String> = pairs
                .iter()
                .map(|(f, e)| (PathBuf::from(f), (*e).to_owned()))
                .collect();
            Arc::new(move || m.clone())
        };
        let state = AdminState {
            source_errors: Some(files(&[("bad.yaml", "document 2: not an object")])),
            source_notes: Some(files(&[(
                "b.yaml",
                "Pod default/web is also defined in a.yaml; this later definition replaces it",
            )])),
            ..AdminState::default()
        };
        let r = readiness(&state);
        assert_eq!(
            r.manifest_errors,
            ["manifest bad.yaml: document 2: not an object"]
        );
        assert_eq!(
            r.manifest_notes,
            [
                "note: manifest b.yaml: Pod default/web is also defined in a.yaml; this later definition replaces it"
            ]
        );
        let text = r.to_string();
        assert!(
            text.find("manifest bad.yaml") < text.find("note: manifest b.yaml"),
            "{text}"
        );
    }
}
