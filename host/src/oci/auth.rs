//! Registry credentials: a docker config JSON file (`~/.docker/config.json`, or a
//! `kubernetes.io/dockerconfigjson` pull secret mounted as a file) and the challenges a registry
//! answers with (`WWW-Authenticate: Basic ...` or `Bearer realm=...,service=...,scope=...`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// A user name and password (or token) for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// User name.
    pub username: String,
    /// Password or access token.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, <redacted>)", self.username)
    }
}

impl Credentials {
    /// `Basic base64(user:password)`.
    pub fn basic(&self) -> String {
        format!(
            "Basic {}",
            STANDARD.encode(format!("{}:{}", self.username, self.password))
        )
    }
}

/// The host part of a docker config key: `https://index.docker.io/v1/` -> `index.docker.io`.
fn registry_key(k: &str) -> String {
    let k = k
        .strip_prefix("https://")
        .or_else(|| k.strip_prefix("http://"))
        .unwrap_or(k);
    k.split('/').next().unwrap_or(k).to_owned()
}

/// A docker config file that cannot be read or understood.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DockerConfigError {
    /// The file cannot be read.
    #[error("docker config {}: cannot read: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// What is wrong in the file.
    #[error("docker config {}: {source}", path.display())]
    In {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: Box<DockerConfigError>,
    },
    /// The text is not JSON.
    #[error("not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// An `auth` that is not base64.
    #[error("auths.{registry:?}.auth: not base64: {source}")]
    AuthBase64 {
        /// The `auths` key.
        registry: String,
        /// The decoder's complaint.
        #[source]
        source: base64::DecodeError,
    },
    /// An `auth` that is not UTF-8 once decoded.
    #[error("auths.{0:?}.auth: not UTF-8 once decoded")]
    AuthUtf8(String),
    /// An `auth` without `:`.
    #[error("auths.{0:?}.auth: expected base64 of USER:PASSWORD")]
    AuthShape(String),
}

/// Reads `auths` of a docker config file: per registry, `auth` (base64 of `user:password`) or
/// `username` and `password`. Credential helpers (`credsStore`, `credHelpers`) are not run.
pub fn read_docker_config(path: &Path) -> Result<BTreeMap<String, Credentials>, DockerConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| DockerConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_docker_config(&text).map_err(|e| DockerConfigError::In {
        path: path.to_owned(),
        source: Box::new(e),
    })
}

/// [`read_docker_config`] on the file's text.
pub fn parse_docker_config(text: &str) -> Result<BTreeMap<String, Credentials>, DockerConfigError> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(DockerConfigError::NotJson)?;
    let mut out = BTreeMap::new();
    let Some(auths) = v.get("auths").and_then(|a| a.as_object()) else {
        return Ok(out);
    };
    for (k, entry) in auths {
        let s = |f: &str| entry.get(f).and_then(|x| x.as_str()).unwrap_or("");
        let creds = if !s("auth").is_empty() {
            let raw = STANDARD.decode(s("auth").trim()).map_err(|source| {
                DockerConfigError::AuthBase64 {
                    registry: k.clone(),
                    source,
                }
            })?;
            let raw = String::from_utf8(raw).map_err(|_| DockerConfigError::AuthUtf8(k.clone()))?;
            let (u, p) = raw
                .split_once(':')
                .ok_or_else(|| DockerConfigError::AuthShape(k.clone()))?;
            Credentials {
                username: u.to_owned(),
                password: p.to_owned(),
            }
        } else if !s("username").is_empty() {
            Credentials {
                username: s("username").to_owned(),
                password: s("password").to_owned(),
            }
        } else if !s("identitytoken").is_empty() {
            // An OAuth2 refresh token: sent as the password of the token request.
            Credentials {
                username: "<token>".to_owned(),
                password: s("identitytoken").to_owned(),
            }
        } else {
            continue;
        };
        out.insert(registry_key(k), creds);
    }
    Ok(out)
}

/// What a registry's `WWW-Authenticate` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Challenge {
    /// HTTP Basic with the credentials.
    Basic,
    /// A token from `realm`, asked for with `service` and `scope` (and Basic credentials, if any).
    Bearer {
        /// Token endpoint URL.
        realm: String,
        /// `service` parameter.
        service: Option<String>,
        /// `scope` parameter.
        scope: Option<String>,
    },
}

/// Parses a `WWW-Authenticate` header value.
pub fn parse_challenge(h: &str) -> Option<Challenge> {
    let (scheme, params) = h.trim().split_once(' ').unwrap_or((h.trim(), ""));
    if scheme.eq_ignore_ascii_case("basic") {
        return Some(Challenge::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut map = BTreeMap::new();
    let mut rest = params.trim();
    while !rest.is_empty() {
        let (k, r) = rest.split_once('=')?;
        let k = k.trim().trim_start_matches(',').trim().to_ascii_lowercase();
        let r = r.trim_start();
        let (v, r) = if let Some(q) = r.strip_prefix('"') {
            let end = q.find('"')?;
            (&q[..end], &q[end + 1..])
        } else {
            let end = r.find(',').unwrap_or(r.len());
            (&r[..end], &r[end..])
        };
        map.insert(k, v.to_owned());
        rest = r.trim_start().trim_start_matches(',').trim_start();
    }
    Some(Challenge::Bearer {
        realm: map.remove("realm")?,
        service: map.remove("service"),
        scope: map.remove("scope"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_config_auth_and_username_forms_are_read() {
        let auth = STANDARD.encode("alice:s3cret");
        let text = format!(
            r#"{{"auths":{{"https://reg.example:5000/v1/":{{"auth":"{auth}"}},"other.io":{{"username":"bob","password":"pw"}}}}}}"#
        );
        let m = parse_docker_config(&text).unwrap();
        assert_eq!(m["reg.example:5000"].username, "alice");
        assert_eq!(m["reg.example:5000"].password, "s3cret");
        assert_eq!(m["other.io"].password, "pw");
        assert!(
            parse_docker_config(r#"{"auths":{"x":{"auth":"!!"}}}"#)
                .unwrap_err()
                .to_string()
                .contains("auths.\"x\".auth")
        );
    }

    #[test]
    fn bearer_challenges_are_parsed() {
        let c = parse_challenge(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull""#,
        )
        .unwrap();
        assert_eq!(
            c,
            Challenge::Bearer {
                realm: "https://auth.example/token".into(),
                service: Some("registry.example".into()),
                scope: Some("repository:a/b:pull".into()),
            }
        );
        assert_eq!(parse_challenge("Basic realm=\"x\""), Some(Challenge::Basic));
    }
}
