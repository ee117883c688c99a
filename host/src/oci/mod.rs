//! Plugin modules from OCI registries: `module: oci://REGISTRY/REPO:TAG` or `@sha256:DIGEST`.
//!
//! - [`reference`](mod@reference): parsing references; [`manifest`]: media types of both wasm conventions;
//! - [`client`]: the registry HTTP API with auth ([`auth`]: docker config, challenges);
//! - [`pull`]: manifest, layer, signature, all digests checked; [`store`]: the cache by digest;
//! - [`sign`]: cosign-style signatures (ECDSA P-256) checked and made; [`push`]: `wisp push`;
//! - [`sigstore`]: Sigstore bundles checked offline (keyed, keyless); [`referrers`]: bundles
//!   attached as OCI 1.1 referrers (referrers API, tag schema), found and written;
//! - tag polls (a tag looked up again, a moved tag reloaded through the usual check and probation)
//!   live with the reloader: `crate::reloader::oci_poll`.
//!
//! The plugin runtime knows nothing of this: a pulled module is a file in the cache, and the
//! plugin spec points at it (with its origin, shown in `/plugins`).

pub mod auth;
pub mod client;
pub mod manifest;
pub mod pull;
pub mod push;
pub mod reference;
pub mod referrers;
pub mod sign;
pub mod sigstore;
pub mod store;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use reference::{Reference, ReferenceError, ReferenceProblem, is_oci};

use serde::Deserialize;

use crate::units::{Bytes, Dur};

/// Default bound of a module download (`oci.maxModuleSize`): `engine.maxModuleSize`'s, the
/// largest module file the loader reads.
pub const DEFAULT_MAX_MODULE_SIZE: u64 = crate::plugin::module_file::DEFAULT_MAX_MODULE_SIZE;
/// Default bound of the layers of one signature manifest (`oci.maxSignatureLayers`): one per
/// signer, as `cosign sign` appends them; far more than a module is signed by.
pub const DEFAULT_MAX_SIGNATURE_LAYERS: usize = 16;
/// Default bound of the signature payloads fetched for one reference, together
/// (`oci.maxSignatureBytes`): a cosign payload is under 1 KiB.
pub const DEFAULT_MAX_SIGNATURE_BYTES: u64 = 256 * 1024;
/// Default deadline of one whole pull (`oci.pullTimeout`): manifest, signature and module,
/// with every redirect, challenge and retry.
pub const DEFAULT_PULL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// A failure about one reference: which, and what went wrong.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{reference}: {problem}")]
pub struct OciError {
    /// The reference (or registry) concerned.
    pub reference: String,
    /// What is wrong.
    pub problem: String,
}

impl OciError {
    /// An error about `reference`.
    pub fn new(reference: &Reference, problem: impl std::fmt::Display) -> Self {
        Self {
            reference: reference.to_string(),
            problem: problem.to_string(),
        }
    }
}

/// What pulling needs, read from the `oci` section of the config.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Registries reached over plain http.
    pub insecure: Vec<String>,
    /// A PEM file of CA certificates trusted besides the system's.
    pub ca_file: Option<PathBuf>,
    /// Credentials per registry host.
    pub credentials: BTreeMap<String, auth::Credentials>,
    /// Signature keys; when any (or any keyless signer), every module must carry a valid
    /// signature by one of them.
    pub keys: Vec<sign::PublicKey>,
    /// Keyless signers (Fulcio certificate identity and issuer).
    pub keyless: Vec<sigstore::Keyless>,
    /// The trusted root keyless bundles (and the Rekor entries of keyed ones) are checked against.
    pub trusted_root: Option<Arc<sigstore::TrustedRoot>>,
    /// Largest module layer downloaded.
    pub max_module_size: u64,
    /// Most layers of a signature manifest: more refuses the signature before any is fetched.
    pub max_signature_layers: usize,
    /// Most bytes of signature payloads fetched for one reference, all layers together.
    pub max_signature_bytes: u64,
    /// One deadline for a whole pull (or tag look-up): every request, redirect and layer.
    pub pull_timeout: std::time::Duration,
    /// The cache of pulled content.
    pub cache_dir: PathBuf,
}

impl Default for Settings {
    /// The defaults of the `oci` section, caching in [`default_cache_dir`].
    fn default() -> Self {
        Self {
            insecure: Vec::new(),
            ca_file: None,
            credentials: BTreeMap::new(),
            keys: Vec::new(),
            keyless: Vec::new(),
            trusted_root: None,
            max_module_size: DEFAULT_MAX_MODULE_SIZE,
            max_signature_layers: DEFAULT_MAX_SIGNATURE_LAYERS,
            max_signature_bytes: DEFAULT_MAX_SIGNATURE_BYTES,
            pull_timeout: DEFAULT_PULL_TIMEOUT,
            cache_dir: default_cache_dir(),
        }
    }
}

/// `$XDG_CACHE_HOME/wisp/oci` or `$HOME/.cache/wisp/oci`.
pub fn default_cache_dir() -> PathBuf {
    crate::plugin::compile::wisp_cache_dir("oci")
        .unwrap_or_else(|| std::env::temp_dir().join("wisp").join("oci"))
}

impl Settings {
    /// Settings from the config's `oci` section; paths relative to `base`. Without
    /// `oci.cacheDir`, the cache is `oci` beside `engine.cacheDir` (when given: a directory the
    /// deployment made writable), else [`default_cache_dir`]. An error names the field
    /// (`oci.keys[0]`) and the problem.
    pub fn from_config(
        c: &OciConfig,
        base: &Path,
        engine_cache_dir: Option<&Path>,
    ) -> Result<Self, (String, String)> {
        let resolve = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            }
        };
        let credentials = match &c.docker_config {
            Some(p) => auth::read_docker_config(&resolve(p))
                .map_err(|e| ("oci.dockerConfig".to_owned(), e.to_string()))?,
            None => BTreeMap::new(),
        };
        let keys = c
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                sign::PublicKey::load(&resolve(k))
                    .map_err(|e| (format!("oci.keys[{i}]"), e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (keyless, trusted_root) = c.keyless_policy(&resolve)?;
        let ca_file = c.ca_file.as_deref().map(resolve);
        if let Some(ca) = &ca_file
            && !ca.is_file()
        {
            return Err((
                "oci.caFile".into(),
                format!("{} does not exist", ca.display()),
            ));
        }
        let default_cache = match engine_cache_dir {
            Some(d) => resolve(d)
                .parent()
                .map_or_else(default_cache_dir, |p| p.join("oci")),
            None => default_cache_dir(),
        };
        let (max_signature_layers, max_signature_bytes, pull_timeout) = c.bounds()?;
        Ok(Self {
            insecure: c.insecure.clone(),
            ca_file,
            credentials,
            keys,
            keyless,
            trusted_root,
            max_module_size: c.max_module_size.map_or(DEFAULT_MAX_MODULE_SIZE, |b| b.0),
            max_signature_layers,
            max_signature_bytes,
            pull_timeout,
            cache_dir: c.cache_dir.as_deref().map_or(default_cache, resolve),
        })
    }

    /// Whether every module must be signed (keys or keyless signers configured).
    pub fn requires_signature(&self) -> bool {
        !self.keys.is_empty() || !self.keyless.is_empty()
    }

    fn shared(&self) -> Arc<Self> {
        Arc::new(self.clone())
    }
}

/// The modules pulled for a config's plugins, by the module string as configured
/// (`oci://...`). Runtime state, kept by whoever runs the plugins (the host's start, the
/// reloader, a custom resource's apply), never in the config.
pub type PulledModules = std::collections::BTreeMap<String, Pulled>;

/// A module pulled: where it came from and where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pulled {
    /// The reference as configured.
    pub reference: Reference,
    /// The manifest digest it resolved to.
    pub digest: String,
    /// The digest of the wasm layer (the module file's SHA-256).
    pub layer_digest: String,
    /// The layer's media type (which convention).
    pub media_type: String,
    /// The module file in the cache.
    pub path: PathBuf,
    /// Who signed: the key file its signature verified under, or the certificate identity and
    /// issuer of a keyless bundle (`None`: no signers configured).
    pub signed_by: Option<String>,
    /// Nothing was fetched: manifest and module came from the cache.
    pub from_cache: bool,
}

impl Pulled {
    /// How the plugin spec and `/plugins` show it.
    pub fn origin(&self) -> crate::plugin::spec::ModuleOrigin {
        crate::plugin::spec::ModuleOrigin {
            reference: self.reference.to_string(),
            digest: self.digest.clone(),
            signed_by: self.signed_by.clone(),
        }
    }
}

/// [`block_on`] could not run its future to completion.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlockOnError {
    /// The runtime could not be built.
    #[error("cannot start a runtime for OCI requests: {0}")]
    Runtime(#[source] std::io::Error),
    /// The thread running it panicked.
    #[error("OCI request thread panicked")]
    Panicked,
}

/// Runs `f` to completion on a runtime of its own, on a thread of its own: callable from
/// blocking code and from inside another runtime alike.
pub fn block_on<T: Send>(
    f: impl std::future::Future<Output = T> + Send,
) -> Result<T, BlockOnError> {
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map(|rt| rt.block_on(f))
                .map_err(BlockOnError::Runtime)
        })
        .join()
        .unwrap_or(Err(BlockOnError::Panicked))
    })
}

/// Plugin modules from OCI registries (`module: oci://...`); see docs/oci.md.
#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OciConfig {
    /// A docker config JSON (`auths`), e.g. a `kubernetes.io/dockerconfigjson` pull secret
    /// mounted as a file; without it registries are asked anonymously.
    #[serde(default)]
    pub docker_config: Option<PathBuf>,
    /// Registries (`host:port`) reached over plain http; every other one over https.
    #[serde(default)]
    pub insecure: Vec<String>,
    /// PEM CA certificates trusted besides the system's (a private registry's CA).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Public keys (PEM, ECDSA P-256, as `cosign.pub`); when any, every OCI module must carry a
    /// signature (a Sigstore bundle or a legacy `.sig`) that verifies under one of them (or
    /// under a `keyless` signer), or it is refused.
    #[serde(default)]
    pub keys: Vec<PathBuf>,
    /// Keyless signers: a Sigstore bundle whose Fulcio certificate has this issuer and
    /// identity (each exact, or an anchored regex) is accepted; needs `trustedRoot`.
    #[serde(default)]
    pub keyless: Vec<KeylessConfig>,
    /// A Sigstore trusted root JSON (`trusted_root.json`): the Fulcio chains and Rekor keys
    /// bundles are checked against, offline.
    #[serde(default)]
    pub trusted_root: Option<PathBuf>,
    /// How often tags are looked up again (default 5m; 0 = never).
    #[serde(default)]
    pub poll: Option<Dur>,
    /// Largest module downloaded (default 64Mi).
    #[serde(default)]
    pub max_module_size: Option<Bytes>,
    /// Most layers of a module's signature manifest (default 16); more refuses the module
    /// before any payload is fetched.
    #[serde(default)]
    pub max_signature_layers: Option<u32>,
    /// Most bytes of signature payloads fetched for one module, all layers together (default
    /// 256Ki).
    #[serde(default)]
    pub max_signature_bytes: Option<Bytes>,
    /// One deadline for a whole pull: manifest, signature and module, every redirect,
    /// challenge and retry (default 2m).
    #[serde(default)]
    pub pull_timeout: Option<Dur>,
    /// The cache of pulled content by digest (default `~/.cache/wisp/oci`).
    #[serde(default)]
    pub cache_dir: Option<PathBuf>,
}

/// One accepted keyless signer (`oci.keyless[]`): one of `issuer`/`issuerRegexp` and one of
/// `identity`/`identityRegexp`.
#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KeylessConfig {
    /// The OIDC issuer, exactly (e.g. `https://token.actions.githubusercontent.com`).
    #[serde(default)]
    pub issuer: Option<String>,
    /// The OIDC issuer, as a regular expression matching all of it.
    #[serde(default)]
    pub issuer_regexp: Option<String>,
    /// The certificate's identity (SAN: workflow URI, email), exactly.
    #[serde(default)]
    pub identity: Option<String>,
    /// The identity, as a regular expression matching all of it.
    #[serde(default)]
    pub identity_regexp: Option<String>,
}

/// One of an exact value and a regex, from fields `exact`/`regexp` of `at`.
fn matcher(
    at: &str,
    (exact_name, exact): (&str, &Option<String>),
    (re_name, re): (&str, &Option<String>),
) -> Result<sigstore::Matcher, (String, String)> {
    match (exact, re) {
        (Some(e), None) if !e.is_empty() => Ok(sigstore::Matcher::Exact(e.clone())),
        (None, Some(r)) => {
            sigstore::Matcher::regex(r).map_err(|e| (format!("{at}.{re_name}"), e.to_string()))
        }
        (Some(_), Some(_)) => Err((
            at.to_owned(),
            format!("give one of {exact_name} and {re_name}, not both"),
        )),
        _ => Err((
            at.to_owned(),
            format!(
                "needs {exact_name} or {re_name} (a keyless signer names both issuer and identity)"
            ),
        )),
    }
}

impl OciConfig {
    /// `keyless` and `trustedRoot`, checked: each signer complete, each regex valid, the trusted
    /// root read (and required by keyless signers).
    #[allow(clippy::type_complexity)]
    fn keyless_policy(
        &self,
        resolve: &dyn Fn(&Path) -> PathBuf,
    ) -> Result<(Vec<sigstore::Keyless>, Option<Arc<sigstore::TrustedRoot>>), (String, String)>
    {
        let keyless = (self.keyless.iter().enumerate())
            .map(|(i, k)| {
                let at = format!("oci.keyless[{i}]");
                Ok::<_, (String, String)>(sigstore::Keyless {
                    issuer: matcher(
                        &at,
                        ("issuer", &k.issuer),
                        ("issuerRegexp", &k.issuer_regexp),
                    )?,
                    identity: matcher(
                        &at,
                        ("identity", &k.identity),
                        ("identityRegexp", &k.identity_regexp),
                    )?,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let root = match &self.trusted_root {
            Some(p) => Some(Arc::new(
                sigstore::TrustedRoot::load(&resolve(p))
                    .map_err(|e| ("oci.trustedRoot".to_owned(), e.to_string()))?,
            )),
            None => None,
        };
        if !keyless.is_empty() && root.is_none() {
            return Err((
                "oci.keyless".into(),
                "keyless signers need oci.trustedRoot (the Fulcio and Rekor trust they are checked against)".into(),
            ));
        }
        Ok((keyless, root))
    }

    /// `maxSignatureLayers`, `maxSignatureBytes` and `pullTimeout` with their defaults; zero is
    /// refused, naming the field (it would refuse every signature, or every pull).
    fn bounds(&self) -> Result<(usize, u64, std::time::Duration), (String, String)> {
        let layers = self
            .max_signature_layers
            .map_or(DEFAULT_MAX_SIGNATURE_LAYERS, |n| n as usize);
        if layers == 0 {
            return Err((
                "oci.maxSignatureLayers".into(),
                "must be at least 1 (a signature is one layer)".into(),
            ));
        }
        let bytes = self
            .max_signature_bytes
            .map_or(DEFAULT_MAX_SIGNATURE_BYTES, |b| b.0);
        if bytes == 0 {
            return Err((
                "oci.maxSignatureBytes".into(),
                "must be more than 0 (it bounds the payloads of a signature)".into(),
            ));
        }
        let timeout = self.pull_timeout.map_or(DEFAULT_PULL_TIMEOUT, |d| d.0);
        if timeout.is_zero() {
            return Err((
                "oci.pullTimeout".into(),
                "must be more than 0 (it bounds every pull)".into(),
            ));
        }
        Ok((layers, bytes, timeout))
    }
}
