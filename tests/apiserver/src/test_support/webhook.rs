//! A small HTTPS admission webhook for tests: certificates made by the `openssl` CLI (a CA and
//! a server certificate it signs), and a server that answers each AdmissionReview with what
//! the test's handler says, keeping every review it received.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use wisp_apiserver::test_support::webhook::{Certs, WebhookServer, deny};
//! let Some(certs) = Certs::generate(&["127.0.0.1"]) else { return Ok(()) };
//! let hook = WebhookServer::start(&certs, |_request| deny(403, "no")).await?;
//! let url = hook.url("/validate"); // for clientConfig.url, with certs.ca_bundle()
//! # Ok(()) }
//! ```

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use base64::Engine as _;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};

/// A CA and a server certificate it signed, as PEM.
pub struct Certs {
    /// The CA certificate: what `caBundle` carries.
    pub ca_pem: Vec<u8>,
    /// The server's certificate.
    pub cert_pem: Vec<u8>,
    /// The server's private key.
    pub key_pem: Vec<u8>,
}

fn openssl(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .context("running openssl")?;
    anyhow::ensure!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

impl Certs {
    /// A new CA (P-256) and a server certificate valid for `names`: IP addresses and DNS
    /// names (`guard.webhooks.svc`), made with the `openssl` CLI. `None` (after saying why)
    /// when openssl is missing outside CI.
    pub fn generate(names: &[&str]) -> Option<Self> {
        if Command::new("openssl").arg("version").output().is_err() {
            super::skip_unless_ci("openssl is not installed; install it to run this test");
            return None;
        }
        Some(Self::make(names).expect("openssl makes certificates"))
    }

    fn make(names: &[&str]) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let d = dir.path();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        let mut ca = vec!["req", "-x509"];
        ca.extend(ec);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=wisp-test-ca",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        openssl(d, &ca)?;
        let mut csr = vec!["req"];
        csr.extend(ec);
        csr.extend([
            "-keyout",
            "tls.key",
            "-out",
            "tls.csr",
            "-subj",
            "/CN=webhook",
        ]);
        openssl(d, &csr)?;
        let sans: Vec<String> = names
            .iter()
            .map(|n| {
                if n.parse::<std::net::IpAddr>().is_ok() {
                    format!("IP:{n}")
                } else {
                    format!("DNS:{n}")
                }
            })
            .collect();
        std::fs::write(
            d.join("ext.cnf"),
            format!(
                "subjectAltName={}\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
                sans.join(",")
            ),
        )?;
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "tls.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "tls.crt",
                "-days",
                "2",
                "-extfile",
                "ext.cnf",
            ],
        )?;
        Ok(Self {
            ca_pem: std::fs::read(d.join("ca.crt"))?,
            cert_pem: std::fs::read(d.join("tls.crt"))?,
            key_pem: std::fs::read(d.join("tls.key"))?,
        })
    }

    /// `clientConfig.caBundle`: the CA's PEM in base64.
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }
}

/// What the webhook answers one review with.
pub enum Answer {
    /// An AdmissionReview whose `response` is this (its `uid` filled in from the request).
    Response(Value),
    /// This HTTP status and body, as they are.
    Raw(u16, String),
    /// Nothing, ever: the call times out.
    Hang,
}

/// `{"allowed": true}`.
pub fn allow() -> Answer {
    Answer::Response(json!({"allowed": true}))
}

/// Allowed, with these warnings.
pub fn warn(warnings: &[&str]) -> Answer {
    Answer::Response(json!({"allowed": true, "warnings": warnings}))
}

/// Refused with a Status of this code (`reason` Forbidden for 403) and message.
pub fn deny(code: u16, message: &str) -> Answer {
    let mut status = json!({"code": code, "message": message});
    if code == 403 {
        status["reason"] = json!("Forbidden");
    }
    Answer::Response(json!({"allowed": false, "status": status}))
}

/// Allowed with a JSON patch (`patchType: JSONPatch`, base64 `patch`).
pub fn patch(ops: Value) -> Answer {
    let encoded = base64::engine::general_purpose::STANDARD.encode(ops.to_string());
    Answer::Response(json!({"allowed": true, "patchType": "JSONPatch", "patch": encoded}))
}

type Handler = Arc<dyn Fn(&Value) -> Answer + Send + Sync>;

/// A running HTTPS webhook on `127.0.0.1:0`; stops when dropped.
pub struct WebhookServer {
    addr: SocketAddr,
    reviews: Arc<Mutex<Vec<Value>>>,
    /// The accept loop, which owns the connections' tasks (a JoinSet): aborting it ends all.
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl WebhookServer {
    /// Serves with `certs`' server certificate; `handler` answers each review's `request`.
    pub async fn start(
        certs: &Certs,
        handler: impl Fn(&Value) -> Answer + Send + Sync + 'static,
    ) -> anyhow::Result<Self> {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&certs.cert_pem)
            .collect::<Result<_, _>>()
            .context("server certificate")?;
        let key = PrivateKeyDer::from_pem_slice(&certs.key_pem).context("server key")?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let reviews = Arc::new(Mutex::new(Vec::new()));
        let handler: Handler = Arc::new(handler);
        let seen = Arc::clone(&reviews);
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, handler, seen) =
                    (acceptor.clone(), Arc::clone(&handler), Arc::clone(&seen));
                connections.spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return; // a client that did not trust us
                    };
                    let service = hyper::service::service_fn(move |request| {
                        serve(request, Arc::clone(&handler), Arc::clone(&seen))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
                while connections.try_join_next().is_some() {}
            }
        });
        Ok(Self {
            addr,
            reviews,
            task,
        })
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// Every AdmissionReview received (whole, as sent), in arrival order.
    pub fn reviews(&self) -> Vec<Value> {
        self.reviews
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

async fn serve(
    request: hyper::Request<hyper::body::Incoming>,
    handler: Handler,
    seen: Arc<Mutex<Vec<Value>>>,
) -> Result<hyper::Response<axum::body::Body>, std::convert::Infallible> {
    let bytes = axum::body::to_bytes(axum::body::Body::new(request.into_body()), 64 << 20)
        .await
        .unwrap_or_default();
    let review: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    seen.lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(review.clone());
    let request = review.get("request").cloned().unwrap_or(Value::Null);
    let (code, body) = match handler(&request) {
        Answer::Response(mut response) => {
            response["uid"] = request.get("uid").cloned().unwrap_or(Value::Null);
            let answer = json!({
                "apiVersion": review.get("apiVersion").cloned().unwrap_or(json!("admission.k8s.io/v1")),
                "kind": "AdmissionReview",
                "response": response,
            });
            (200, answer.to_string())
        }
        Answer::Raw(code, body) => (code, body),
        Answer::Hang => std::future::pending().await,
    };
    let response = hyper::Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body))
        .unwrap_or_default();
    Ok(response)
}
