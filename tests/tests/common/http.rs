//! A plain HTTP/1.1 GET over TCP, for the admin endpoints.

use std::net::SocketAddr;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{T, patience};

/// An HTTP response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    /// Lowercased names.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// The value of the sample whose name and labels are exactly `series`.
    pub fn sample(&self, series: &str) -> Option<f64> {
        self.body
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map(|v| v.parse().unwrap())
    }
}

/// `GET path` over a fresh connection, HTTP/1.1 with `Connection: close`, read to the end.
pub async fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, "GET", path, None).await
}

/// `method path` (with no body) over a fresh connection, with a bearer token when given, read
/// to the end.
pub async fn request(addr: SocketAddr, method: &str, path: &str, token: Option<&str>) -> Reply {
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    request_with(addr, method, path, &auth).await
}

/// What Prometheus sends as `Accept` when it scrapes (3.x, OpenMetrics preferred).
pub const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0;q=0.6,\
    application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";

/// `GET /metrics` as Prometheus scrapes it (asking for OpenMetrics).
pub async fn scrape_openmetrics(addr: SocketAddr) -> Reply {
    request_with(
        addr,
        "GET",
        "/metrics",
        &format!("Accept: {PROMETHEUS_ACCEPT}\r\n"),
    )
    .await
}

/// [`request`] with `headers` (whole lines, each ending in CRLF) added.
pub async fn request_with(addr: SocketAddr, method: &str, path: &str, headers: &str) -> Reply {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let length = if method == "GET" {
        ""
    } else {
        "Content-Length: 0\r\n"
    };
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}{length}Connection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(patience(T), s.read_to_end(&mut raw))
        .await
        .expect("a reply in time")
        .unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("a header block");
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    Reply {
        status: status.parse().unwrap(),
        headers,
        body: if chunked {
            dechunk(body)
        } else {
            body.to_owned()
        },
    }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, rest) = s.split_once("\r\n").expect("a chunk size");
        let n = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
}
