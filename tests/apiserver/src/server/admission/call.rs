//! The HTTPS call to a webhook, as the API server's webhook client makes it: a POST of the
//! review as JSON to `clientConfig.url`, or to `https://{name}.{namespace}.svc:{port}{path}`
//! for a `clientConfig.service`, its certificate verified against `caBundle` for that host
//! name, `?timeout=Ns` telling the webhook how long it has, and the whole call bounded by the
//! webhook's `timeoutSeconds`.
//!
//! Errors are worded as Go's HTTP client words them after `Post "URL": ` (the part a real
//! server puts after `failed to call webhook: `): `dial tcp ADDR: connect: connection
//! refused`, `context deadline exceeded`, `tls: failed to verify certificate: x509:
//! certificate signed by unknown authority`. A service no test resolved is `dial tcp: lookup
//! NAME.NS.svc: no such host`, as it would be outside a cluster.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, Uri, header};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};

use super::super::Shared;
use super::hooks::Hook;

/// Largest response body read from a webhook.
const MAX_RESPONSE: usize = 16 << 20;

/// Where a webhook is reached.
struct Endpoint {
    /// The URL as messages show it (with `?timeout=`).
    url: String,
    /// The host name (or IP) its certificate must be valid for.
    host: String,
    /// Path and query sent.
    path_and_query: String,
    /// The `Host` header.
    authority: String,
    /// The address to connect to, or why there is none.
    addr: Result<SocketAddr, String>,
}

/// POSTs `body` to the webhook; the 2xx response's body, or the error worded as the API
/// server words what follows `failed calling webhook "NAME": `.
pub(crate) async fn post(shared: &Shared, hook: &Hook, body: Vec<u8>) -> Result<Vec<u8>, String> {
    // The client first (client-go's REST client for the webhook): a CA bundle that is not
    // PEM fails here.
    let config = tls_config(&hook.client.ca_bundle)
        .map_err(|e| format!("could not get REST client: {e}"))?;
    let endpoint = endpoint(shared, hook)
        .await
        .map_err(|e| format!("failed to call webhook: {e}"))?;
    let url = endpoint.url.clone();
    let failed = match tokio::time::timeout(hook.timeout, send(config, endpoint, body)).await {
        Ok(Ok(answer)) => return Ok(answer),
        Ok(Err(CallError::Transport(e))) => format!("Post {url:?}: {e}"),
        Ok(Err(CallError::Status(e))) => e,
        Err(_) => format!("Post {url:?}: context deadline exceeded"),
    };
    Err(format!("failed to call webhook: {failed}"))
}

/// A failed call: in transport (worded after the URL) or an HTTP status that is not 2xx.
enum CallError {
    Transport(String),
    Status(String),
}

/// The endpoint of `clientConfig`: its URL, or its service through
/// [`TestApiServer::resolve_service`](crate::TestApiServer::resolve_service).
async fn endpoint(shared: &Shared, hook: &Hook) -> Result<Endpoint, String> {
    let timeout = format!("timeout={}s", hook.timeout.as_secs().max(1));
    if let Some((namespace, name, path, port)) = &hook.client.service {
        let host = format!("{name}.{namespace}.svc");
        let path = if path.is_empty() { "/" } else { path.as_str() };
        let path_and_query = format!("{path}?{timeout}");
        let url = format!("https://{host}:{port}{path_and_query}");
        let addr = shared
            .services()
            .get(&(namespace.clone(), name.clone(), *port))
            .copied()
            .ok_or_else(|| format!("dial tcp: lookup {host}: no such host"));
        return Ok(Endpoint {
            url,
            authority: format!("{host}:{port}"),
            host,
            path_and_query,
            addr,
        });
    }
    let Some(raw) = hook.client.url.as_deref() else {
        return Err("no clientConfig.url or clientConfig.service".into());
    };
    let uri: Uri = raw
        .parse()
        .map_err(|e| format!("parse {raw:?}: invalid URL: {e}"))?;
    let separator = if uri.query().is_some() { '&' } else { '?' };
    let url = format!("{raw}{separator}{timeout}");
    if uri.scheme_str() != Some("https") {
        return Err(format!(
            "Post {url:?}: unsupported protocol scheme {:?}",
            uri.scheme_str().unwrap_or("")
        ));
    }
    let host = uri
        .host()
        .unwrap_or("")
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(443);
    let path_and_query = format!(
        "{}{separator}{timeout}",
        uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let addr = match tokio::net::lookup_host((host.as_str(), port)).await {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| format!("dial tcp: lookup {host}: no such host")),
        Err(_) => Err(format!("dial tcp: lookup {host}: no such host")),
    };
    Ok(Endpoint {
        url,
        authority: uri.authority().map_or(host.clone(), |a| a.to_string()),
        host,
        path_and_query,
        addr,
    })
}

/// The TLS client: only the CA bundle's certificates are trusted (no system roots).
fn tls_config(ca_bundle: &[u8]) -> Result<rustls::ClientConfig, String> {
    let unparsable = || "unable to load root certificates: unable to parse bytes as PEM block";
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_bundle) {
        let cert = cert.map_err(|_| unparsable())?;
        roots.add(cert).map_err(|_| unparsable())?;
    }
    if !ca_bundle.is_empty() && roots.is_empty() {
        return Err(unparsable().into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// Go's words for a failed handshake.
fn tls_error(e: &std::io::Error, host: &str) -> String {
    let inner = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match inner {
        Some(rustls::Error::InvalidCertificate(cert)) => match cert {
            rustls::CertificateError::UnknownIssuer | rustls::CertificateError::BadSignature => {
                "tls: failed to verify certificate: x509: certificate signed by unknown authority"
                    .into()
            }
            rustls::CertificateError::NotValidForName
            | rustls::CertificateError::NotValidForNameContext { .. } => format!(
                "tls: failed to verify certificate: x509: certificate is not valid for {host}"
            ),
            rustls::CertificateError::Expired | rustls::CertificateError::ExpiredContext { .. } => {
                "tls: failed to verify certificate: x509: certificate has expired or is not yet valid".into()
            }
            other => format!("tls: failed to verify certificate: {other:?}"),
        },
        Some(other) => format!("tls: {other}"),
        None => format!("tls: {e}"),
    }
}

async fn send(
    config: rustls::ClientConfig,
    endpoint: Endpoint,
    body: Vec<u8>,
) -> Result<Vec<u8>, CallError> {
    let transport = CallError::Transport;
    let addr = endpoint.addr.map_err(transport)?;
    let tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| {
        transport(match e.kind() {
            std::io::ErrorKind::ConnectionRefused => {
                format!("dial tcp {addr}: connect: connection refused")
            }
            _ => format!("dial tcp {addr}: {e}"),
        })
    })?;
    let name = ServerName::try_from(endpoint.host.clone())
        .map_err(|e| transport(format!("tls: invalid server name {:?}: {e}", endpoint.host)))?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| transport(tls_error(&e, &endpoint.host)))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| transport(e.to_string()))?;
    // Drives the connection until the answer is read, or until the call times out and this
    // future is dropped: either way the guard aborts it.
    let _driver = AbortOnDrop(tokio::spawn(connection));
    let request = Request::post(endpoint.path_and_query.as_str())
        .header(header::HOST, endpoint.authority.as_str())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, */*")
        .header(header::USER_AGENT, "kube-apiserver-admission")
        .body(Body::from(body))
        .map_err(|e| transport(e.to_string()))?;
    let answer = sender.send_request(request).await;
    let result = match answer {
        Ok(response) => {
            let status = response.status();
            let bytes = axum::body::to_bytes(Body::new(response.into_body()), MAX_RESPONSE)
                .await
                .map_err(|e| transport(e.to_string()))?;
            if status.is_success() {
                Ok(bytes.to_vec())
            } else {
                Err(CallError::Status(status_error(status.as_u16(), &bytes)))
            }
        }
        Err(e) => Err(transport(e.to_string())),
    };
    drop(sender);
    result
}

/// Aborts a task when dropped: the connection task of a call ends with the call.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What client-go's REST client makes of a response that is not 2xx: the message of a
/// Status body, else its words for the code.
fn status_error(code: u16, body: &[u8]) -> String {
    if let Ok(status) = serde_json::from_slice::<serde_json::Value>(body)
        && status.get("kind").and_then(|k| k.as_str()) == Some("Status")
        && let Some(message) = status.get("message").and_then(|m| m.as_str())
    {
        return message.to_string();
    }
    let text = String::from_utf8_lossy(body).trim().to_string();
    match code {
        404 => "the server could not find the requested resource".into(),
        500..=599 if !text.is_empty() => {
            format!("an error on the server ({text:?}) has prevented the request from succeeding")
        }
        _ => format!(
            "the server responded with the status code {code} but did not return more information"
        ),
    }
}
