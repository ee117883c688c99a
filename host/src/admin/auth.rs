//! Who may use the admin endpoints that act or reveal data.
//!
//! `/healthz`, `/readyz` and `/metrics` are open: they reveal counts, not objects or logs. Every
//! other endpoint (`/plugins` with the plugins' logs, `/verdicts`, `/audit`, the reloads, and
//! anything added later) is protected:
//!
//! - with `admin.tokenFile`, a request must carry `Authorization: Bearer <token>`, the token
//!   being the file's contents without surrounding whitespace. The file is read again whenever
//!   its modification time or size changes (a rotated Kubernetes Secret takes effect without a
//!   restart); tokens are compared through their SHA-256 digests in constant time. A missing or
//!   wrong token gets 401; an unreadable or empty token file refuses everything (503).
//! - without it, protected endpoints are served only when the admin server listens on a
//!   loopback address (only local processes reach it); on any other address they answer 403
//!   naming `admin.tokenFile`, and the host warns at start.
//!
//! Failed token checks (missing or wrong) are rate-limited per server: [`FAILURE_BURST`] at
//! once, then [`FAILURES_PER_SECOND`]. Past that, every request to a protected endpoint gets 429
//! with `Retry-After` and its token is not looked at, a good one included: a guesser learns
//! nothing from a request answered 429, however many connections it opens. Failures are counted
//! in `wisp_admin_auth_failures_total`, refusals in `wisp_admin_auth_rate_limited_total`; the
//! host warns when a server starts refusing.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::actions::ratelimit::TokenBucket;
use crate::plugin::cache::constant_time_eq;
use crate::sync::lock;

/// How protected endpoints are guarded.
#[derive(Clone, Debug, Default)]
pub struct AdminAuth {
    /// The bearer token's file (`admin.tokenFile`); `None`: no token.
    pub token_file: Option<PathBuf>,
}

/// Failed token checks a server answers at once (401) before it rate-limits them.
pub const FAILURE_BURST: u32 = 20;

/// Failed token checks a server answers per second (401) past [`FAILURE_BURST`]; past that
/// rate, protected endpoints answer 429 whatever the token.
pub const FAILURES_PER_SECOND: f64 = 5.0;

/// Failed token checks (missing or wrong token) answered 401, over every admin server of the
/// process (`wisp_admin_auth_failures_total`).
pub static AUTH_FAILURES: AtomicU64 = AtomicU64::new(0);

/// Requests to protected endpoints answered 429 because failed checks were over their rate
/// (`wisp_admin_auth_rate_limited_total`).
pub static AUTH_RATE_LIMITED: AtomicU64 = AtomicU64::new(0);

/// The guard of one server: the policy plus whether it listens on loopback only, and the token
/// as last read.
#[derive(Clone, Debug)]
pub(crate) struct Guard {
    token: Option<Arc<TokenFile>>,
    loopback: bool,
    /// Failed checks still allowed ([`FAILURE_BURST`], refilled at [`FAILURES_PER_SECOND`]),
    /// and whether the server is refusing now (to warn once per episode).
    failures: Arc<Mutex<(TokenBucket, bool)>>,
}

impl Guard {
    pub(crate) fn new(auth: &AdminAuth, loopback: bool) -> Self {
        Self {
            token: auth.token_file.clone().map(|path| {
                Arc::new(TokenFile {
                    path,
                    seen: Mutex::new(None),
                })
            }),
            loopback,
            failures: Arc::new(Mutex::new((
                TokenBucket::new(FAILURES_PER_SECOND, FAILURE_BURST, Instant::now()),
                false,
            ))),
        }
    }

    /// Takes the allowance of one failed check before the token is compared (given back when
    /// it matches); `Err` with the wait (429) when failures are over their rate.
    fn admit(&self) -> Result<(), Duration> {
        let mut f = lock(&self.failures);
        match f.0.take(Instant::now()) {
            Ok(()) => {
                f.1 = false;
                Ok(())
            }
            Err(wait) => {
                if !std::mem::replace(&mut f.1, true) {
                    tracing::warn!(
                        burst = FAILURE_BURST,
                        per_second = FAILURES_PER_SECOND,
                        "admin server: failed token checks over their rate; protected endpoints \
                         answer 429 until it drops"
                    );
                }
                AUTH_RATE_LIMITED.fetch_add(1, Ordering::Relaxed);
                Err(wait)
            }
        }
    }

    /// A good token: the allowance [`admit`](Self::admit) took is given back.
    fn succeeded(&self) {
        lock(&self.failures).0.give_back();
    }

    /// Whether protected endpoints are refused to everyone (non-loopback, no token).
    pub(crate) fn closed(&self) -> bool {
        self.token.is_none() && !self.loopback
    }
}

/// The token file and the digest of the token it held when last read.
#[derive(Debug)]
struct TokenFile {
    path: PathBuf,
    /// (modification time, size, SHA-256 of the token) at the last read.
    seen: Mutex<Option<(SystemTime, u64, [u8; 32])>>,
}

impl TokenFile {
    /// The digest of the current token, reading the file again when it changed.
    fn digest(&self) -> Result<[u8; 32], String> {
        let md = std::fs::metadata(&self.path)
            .map_err(|e| format!("cannot read {}: {e}", self.path.display()))?;
        let stamp = (md.modified().unwrap_or(SystemTime::UNIX_EPOCH), md.len());
        let mut seen = lock(&self.seen);
        if let Some((t, n, d)) = *seen
            && (t, n) == stamp
        {
            return Ok(d);
        }
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| format!("cannot read {}: {e}", self.path.display()))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(format!("{} is empty", self.path.display()));
        }
        let d: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        *seen = Some((stamp.0, stamp.1, d));
        Ok(d)
    }
}

/// The bearer token of a request, if it sent one.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

fn refuse(code: StatusCode, msg: String) -> Response {
    let mut r = (code, msg).into_response();
    if code == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer realm=\"wisp-admin\""),
        );
    }
    r
}

/// Middleware of the protected routes.
pub(crate) async fn require(State(guard): State<Guard>, req: Request, next: Next) -> Response {
    let Some(file) = &guard.token else {
        if guard.loopback {
            return next.run(req).await;
        }
        return refuse(
            StatusCode::FORBIDDEN,
            format!(
                "{} needs authentication: the admin server listens on a non-loopback address \
                 without a token; set admin.tokenFile (a file holding a bearer token) or listen \
                 on 127.0.0.1\n",
                req.uri().path()
            ),
        );
    };
    let want = match file.digest() {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(error = %e, "admin token file unusable; protected endpoints refused");
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "the admin token file is unusable; see the host's log\n".into(),
            );
        }
    };
    if let Err(wait) = guard.admit() {
        return too_many(wait);
    }
    let good = bearer(req.headers()).map(|t| {
        let got: [u8; 32] = Sha256::digest(t.as_bytes()).into();
        constant_time_eq(&got, &want)
    });
    if good == Some(true) {
        guard.succeeded();
        return next.run(req).await;
    }
    AUTH_FAILURES.fetch_add(1, Ordering::Relaxed);
    let msg = if good.is_none() {
        "missing bearer token: send Authorization: Bearer <the token of admin.tokenFile>\n"
    } else {
        "invalid bearer token\n"
    };
    refuse(StatusCode::UNAUTHORIZED, msg.into())
}

/// 429 with `Retry-After` (whole seconds, at least 1).
fn too_many(wait: Duration) -> Response {
    let secs = wait.as_secs_f64().ceil().clamp(1.0, 3600.0) as u64;
    let mut r = refuse(
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "too many failed token checks on this server (over {FAILURE_BURST} at once, then \
             {FAILURES_PER_SECOND} a second): retry in {secs} s\n"
        ),
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_case_insensitive_and_needs_a_token() {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, "bearer abc ".parse().unwrap());
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, "Bearer ".parse().unwrap());
        assert_eq!(bearer(&h), None);
    }

    #[test]
    fn the_token_file_is_read_again_when_it_changes() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("token");
        std::fs::write(&p, "one\n").unwrap();
        let f = TokenFile {
            path: p.clone(),
            seen: Mutex::new(None),
        };
        let one: [u8; 32] = Sha256::digest(b"one").into();
        assert_eq!(f.digest().unwrap(), one);
        std::fs::write(&p, "second\n").unwrap();
        let two: [u8; 32] = Sha256::digest(b"second").into();
        assert_eq!(f.digest().unwrap(), two, "new size");
        std::fs::write(&p, "  \n").unwrap();
        assert!(f.digest().unwrap_err().contains("is empty"));
    }
}
