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

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::plugin::cache::constant_time_eq;
use crate::sync::lock;

/// How protected endpoints are guarded.
#[derive(Clone, Debug, Default)]
pub struct AdminAuth {
    /// The bearer token's file (`admin.tokenFile`); `None`: no token.
    pub token_file: Option<PathBuf>,
}

/// The guard of one server: the policy plus whether it listens on loopback only, and the token
/// as last read.
#[derive(Clone, Debug)]
pub(crate) struct Guard {
    token: Option<Arc<TokenFile>>,
    loopback: bool,
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
        }
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
    match bearer(req.headers()) {
        None => refuse(
            StatusCode::UNAUTHORIZED,
            "missing bearer token: send Authorization: Bearer <the token of admin.tokenFile>\n"
                .into(),
        ),
        Some(t) => {
            let got: [u8; 32] = Sha256::digest(t.as_bytes()).into();
            if constant_time_eq(&got, &want) {
                next.run(req).await
            } else {
                refuse(StatusCode::UNAUTHORIZED, "invalid bearer token\n".into())
            }
        }
    }
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
