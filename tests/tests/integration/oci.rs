//! Plugin modules from OCI registries, against a real registry: distribution's
//! `docker-registry` (Debian package `docker-registry`, installed by `.ci/run`), one process per
//! test on a free port with its own storage. Signatures are made with the `openssl` CLI and
//! uploaded by an independent uploader (Python's urllib), so Wisp's verifier and puller are
//! checked against content they did not produce.
//!
//! A missing `docker-registry` (or `openssl`, `htpasswd`, `python3`) skips these tests with a
//! message, except under `CI=true`, where it fails them.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::http::get;
use common::rig::variant;
use common::{plugin_path, skip_unless_ci};
use wisp_host::config::Config;
use wisp_host::oci::{self, Reference, Settings};

/// The program's path, or `None` (after saying why) when it is missing outside CI.
fn tool(program: &str, probe: &[&str]) -> Option<String> {
    let ok = Command::new(program)
        .args(probe)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if ok {
        return Some(program.to_owned());
    }
    skip_unless_ci(&format!(
        "{program} is missing (apt-get install docker-registry apache2-utils openssl)"
    ));
    None
}

pub(crate) fn tools() -> bool {
    tool(registry_bin().as_str(), &["--version"]).is_some()
        && tool("openssl", &["version"]).is_some()
        && tool("python3", &["--version"]).is_some()
}

fn registry_bin() -> String {
    std::env::var("WISP_DOCKER_REGISTRY").unwrap_or_else(|_| "docker-registry".into())
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A `docker-registry serve` of its own; killed when dropped.
pub(crate) struct Registry {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub(crate) host: String,
    dir: PathBuf,
    tls: bool,
}

impl Registry {
    /// A plain-http registry, anonymous.
    pub(crate) fn start(dir: &Path) -> Self {
        Self::start_with(dir, "", false)
    }

    fn start_with(dir: &Path, extra: &str, tls: bool) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let host = format!("127.0.0.1:{port}");
        let cfg = dir.join("registry.yml");
        std::fs::write(
            &cfg,
            format!(
                "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {host}\n{extra}",
                dir.join("storage").display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("registry.log")).unwrap();
        let child = Command::new(registry_bin())
            .args(["serve", cfg.to_str().unwrap()])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start docker-registry");
        let r = Self {
            child,
            host,
            dir: dir.to_owned(),
            tls,
        };
        let t0 = Instant::now();
        while std::net::TcpStream::connect(&r.host).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the registry did not listen: {}",
                std::fs::read_to_string(dir.join("registry.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        r
    }

    fn base(&self) -> String {
        format!(
            "{}://{}",
            if self.tls { "https" } else { "http" },
            self.host
        )
    }

    /// How many GETs of `repo`'s manifest `reference` the registry has answered (from its
    /// access log, written as each answer is).
    fn manifest_gets(&self, repo: &str, reference: &str) -> usize {
        let line = format!("\"GET /v2/{repo}/manifests/{reference} HTTP/");
        std::fs::read_to_string(self.dir.join("registry.log"))
            .unwrap_or_default()
            .matches(&line)
            .count()
    }

    pub(crate) fn reference(&self, repo_tag: &str) -> Reference {
        Reference::parse(&format!("oci://{}/{repo_tag}", self.host)).unwrap()
    }

    /// Settings for this registry (plain http unless TLS).
    pub(crate) fn settings(&self, cache: &Path) -> Settings {
        Settings {
            insecure: if self.tls {
                vec![]
            } else {
                vec![self.host.clone()]
            },
            max_module_size: oci::DEFAULT_MAX_MODULE_SIZE,
            cache_dir: cache.to_owned(),
            ..Settings::default()
        }
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
        let _ = &self.dir;
    }
}

/// Uploads an artifact with Python's urllib (not Wisp's client): one config blob, one layer
/// (with annotations), an OCI image manifest at `tag`. Returns the manifest digest.
fn upload(
    reg: &Registry,
    repo: &str,
    tag: &str,
    config: (&str, &[u8]),
    layer: (&str, &[u8]),
    annotations: &[(&str, &str)],
) -> String {
    const SCRIPT: &str = r#"
import sys, json, hashlib, urllib.request
base, repo, tag, cmt, cpath, lmt, lpath = sys.argv[1:8]
ann = dict(a.split('=', 1) for a in sys.argv[8:])
def blob(mt, data):
    d = 'sha256:' + hashlib.sha256(data).hexdigest()
    r = urllib.request.urlopen(urllib.request.Request(base + '/v2/' + repo + '/blobs/uploads/', method='POST', data=b''))
    loc = r.headers['Location']
    if loc.startswith('/'):
        loc = base + loc
    loc += ('&' if '?' in loc else '?') + 'digest=' + d
    urllib.request.urlopen(urllib.request.Request(loc, method='PUT', data=data, headers={'Content-Type': 'application/octet-stream'}))
    return {'mediaType': mt, 'digest': d, 'size': len(data)}
layer = blob(lmt, open(lpath, 'rb').read())
if ann:
    layer['annotations'] = ann
m = {'schemaVersion': 2, 'mediaType': 'application/vnd.oci.image.manifest.v1+json',
     'config': blob(cmt, open(cpath, 'rb').read()), 'layers': [layer]}
body = json.dumps(m).encode()
urllib.request.urlopen(urllib.request.Request(base + '/v2/' + repo + '/manifests/' + tag, method='PUT', data=body,
    headers={'Content-Type': 'application/vnd.oci.image.manifest.v1+json'}))
print('sha256:' + hashlib.sha256(body).hexdigest())
"#;
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let cpath = reg.dir.join(format!("upload-config-{n}"));
    let lpath = reg.dir.join(format!("upload-layer-{n}"));
    std::fs::write(&cpath, config.1).unwrap();
    std::fs::write(&lpath, layer.1).unwrap();
    let mut cmd = Command::new("python3");
    cmd.args(["-c", SCRIPT, &reg.base(), repo, tag, config.0])
        .arg(&cpath)
        .arg(layer.0)
        .arg(&lpath);
    for (k, v) in annotations {
        cmd.arg(format!("{k}={v}"));
    }
    run(&mut cmd).trim().to_owned()
}

/// An ECDSA P-256 key pair made by openssl: (private PKCS#8 PEM, public SPKI PEM).
pub(crate) fn keypair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let key = dir.join(format!("{name}.key.pem"));
    let public = dir.join(format!("{name}.pub.pem"));
    run(Command::new("openssl").args([
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        key.to_str().unwrap(),
    ]));
    run(Command::new("openssl").args([
        "pkey",
        "-in",
        key.to_str().unwrap(),
        "-pubout",
        "-out",
        public.to_str().unwrap(),
    ]));
    (key, public)
}

/// A cosign-style signature of `signed_digest` made with openssl and uploaded (by the
/// independent uploader) at the signature tag of `manifest_digest`.
pub(crate) fn openssl_sign(
    reg: &Registry,
    repo: &str,
    manifest_digest: &str,
    signed_digest: &str,
    key: &Path,
) {
    let (payload, sig_b64) = openssl_signature(reg, repo, signed_digest, key);
    upload(
        reg,
        repo,
        &signature_tag(manifest_digest),
        ("application/vnd.oci.image.config.v1+json", b"{}"),
        (COSIGN_LAYER, payload.as_bytes()),
        &[(COSIGN_ANNOTATION, &sig_b64)],
    );
}

const COSIGN_LAYER: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
const COSIGN_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

fn signature_tag(manifest_digest: &str) -> String {
    format!("sha256-{}.sig", &manifest_digest["sha256:".len()..])
}

/// A cosign payload naming `signed_digest` of `repo`, and its signature by `key` made with
/// openssl (base64 DER).
fn openssl_signature(
    reg: &Registry,
    repo: &str,
    signed_digest: &str,
    key: &Path,
) -> (String, String) {
    let payload = serde_json::json!({
        "critical": {
            "identity": {"docker-reference": format!("{}/{repo}", reg.host)},
            "image": {"docker-manifest-digest": signed_digest},
            "type": "cosign container image signature",
        },
        "optional": {"by": "openssl"},
    })
    .to_string();
    let p = reg.dir.join("payload.json");
    let sig = reg.dir.join("payload.sig");
    std::fs::write(&p, &payload).unwrap();
    run(Command::new("openssl").args([
        "dgst",
        "-sha256",
        "-sign",
        key.to_str().unwrap(),
        "-out",
        sig.to_str().unwrap(),
        p.to_str().unwrap(),
    ]));
    use base64::Engine as _;
    let sig_b64 = base64::engine::general_purpose::STANDARD.encode(std::fs::read(&sig).unwrap());
    (payload, sig_b64)
}

/// Uploads, with Python's urllib, a signature manifest at `tag` whose layers are `layers`
/// (payload, signature annotation), each a cosign layer. Returns the manifest's size.
fn upload_signature(reg: &Registry, repo: &str, tag: &str, layers: &[(String, String)]) -> usize {
    const SCRIPT: &str = r#"
import sys, json, hashlib, urllib.request
base, repo, tag, spec = sys.argv[1:5]
spec = json.load(open(spec))
def blob(mt, data):
    d = 'sha256:' + hashlib.sha256(data).hexdigest()
    r = urllib.request.urlopen(urllib.request.Request(base + '/v2/' + repo + '/blobs/uploads/', method='POST', data=b''))
    loc = r.headers['Location']
    if loc.startswith('/'):
        loc = base + loc
    loc += ('&' if '?' in loc else '?') + 'digest=' + d
    urllib.request.urlopen(urllib.request.Request(loc, method='PUT', data=data, headers={'Content-Type': 'application/octet-stream'}))
    return {'mediaType': mt, 'digest': d, 'size': len(data)}
layers = []
for l in spec['layers']:
    d = blob(spec['layerType'], l['payload'].encode())
    d['annotations'] = {spec['annotation']: l['signature']}
    layers.append(d)
m = {'schemaVersion': 2, 'mediaType': 'application/vnd.oci.image.manifest.v1+json',
     'config': blob('application/vnd.oci.image.config.v1+json', b'{}'), 'layers': layers}
body = json.dumps(m).encode()
urllib.request.urlopen(urllib.request.Request(base + '/v2/' + repo + '/manifests/' + tag, method='PUT', data=body,
    headers={'Content-Type': 'application/vnd.oci.image.manifest.v1+json'}))
print(len(body))
"#;
    let spec = serde_json::json!({
        "layerType": COSIGN_LAYER,
        "annotation": COSIGN_ANNOTATION,
        "layers": layers.iter().map(|(p, s)| serde_json::json!({"payload": p, "signature": s})).collect::<Vec<_>>(),
    });
    let path = reg.dir.join(format!("signature-{tag}.json"));
    std::fs::write(&path, spec.to_string()).unwrap();
    let mut cmd = Command::new("python3");
    cmd.args(["-c", SCRIPT, &reg.base(), repo, tag]).arg(&path);
    run(&mut cmd).trim().parse().unwrap()
}

fn sha256(bytes: &[u8]) -> String {
    oci::client::sha256_digest(bytes)
}

/// Writes a config running `module` as plugin `p` on a `dir:` cluster of one pod.
fn config(dir: &Path, module: &str, oci_extra: &str) -> PathBuf {
    let cluster = dir.join("cluster");
    std::fs::create_dir_all(&cluster).unwrap();
    std::fs::write(
        cluster.join("pod.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default, resourceVersion: \"1\"}\nspec: {containers: [{name: c, image: nginx}]}\n",
    )
    .unwrap();
    let path = dir.join("wisp.yaml");
    std::fs::write(
        &path,
        format!(
            r#"source: dir:cluster
informers:
  - {{name: pods, apiVersion: v1, kind: Pod}}
plugins:
  - name: p
    module: {module}
    informers: [pods]
    limits: {{deadline: 10s}}
admin: {{listen: ""}}
engine: {{cacheDir: {engine}}}
oci: {{cacheDir: {cache}{oci_extra}}}
"#,
            engine = dir.join("engine").display(),
            cache = dir.join("oci").display(),
        ),
    )
    .unwrap();
    path
}

async fn start(
    path: &Path,
) -> anyhow::Result<(wisp_host::app::Host, tokio::sync::oneshot::Sender<()>)> {
    let cfg = Config::load(path)?;
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let opts = wisp_host::app::RunOptions {
        config_path: Some(path.to_owned()),
        ..Default::default()
    };
    let host = wisp_host::app::start(&cfg, &opts, async {
        let _ = rx.await;
    })
    .await?;
    Ok((host, stop))
}

fn faults() -> Vec<u8> {
    std::fs::read(plugin_path("test_faults")).unwrap()
}

async fn until(what: &str, timeout: Duration, cond: impl FnMut() -> bool) {
    assert!(
        wisp_host::informer::shared_informer::wait_for(timeout, cond).await,
        "timed out waiting for {what}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_pulled_by_tag_and_by_digest_runs_and_plugins_shows_its_digest() {
    if !tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(&dir.path().join("reg"));
    let module = faults();
    let r = reg.reference("acme/faults:v1");
    let pushed = oci::push::push(&reg.settings(&dir.path().join("push")), &module, &r, None)
        .await
        .unwrap();
    let insecure = format!(", insecure: [\"{}\"]", reg.host);
    for (name, reference) in [
        ("tag", r.to_string()),
        (
            "digest",
            format!("oci://{}/acme/faults@{}", reg.host, pushed.digest),
        ),
    ] {
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        let (host, stop) = start(&config(&d, &reference, &insecure)).await.unwrap();
        let h = host.plugins.list()[0].clone();
        let view = serde_json::to_value(wisp_host::admin::plugins::view(&h)).unwrap();
        assert_eq!(view["oci"]["reference"], reference.as_str(), "{view}");
        assert_eq!(view["oci"]["digest"], pushed.digest.as_str(), "{view}");
        // The module that runs is the pushed file, kept in the cache by its digest.
        assert_eq!(
            format!("sha256:{}", view["hash"].as_str().unwrap()),
            sha256(&module)
        );
        let path = PathBuf::from(view["module"].as_str().unwrap());
        assert!(path.starts_with(d.join("oci")), "{}", path.display());
        until("the pod delivered", Duration::from_secs(20), || {
            h.status()
                .counters
                .delivered
                .load(std::sync::atomic::Ordering::Relaxed)
                >= 1
        })
        .await;
        let _ = stop.send(());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_older_wasm_media_types_are_read_too() {
    if !tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(&dir.path().join("reg"));
    let module = faults();
    let digest = upload(
        &reg,
        "acme/legacy",
        "v1",
        ("application/vnd.wasm.config.v1+json", b"{}"),
        ("application/vnd.wasm.content.layer.v1+wasm", &module),
        &[],
    );
    let pulled = oci::pull::pull(
        &reg.settings(&dir.path().join("oci")),
        &reg.reference("acme/legacy:v1"),
    )
    .await
    .unwrap();
    assert_eq!(pulled.digest, digest);
    assert_eq!(
        pulled.media_type,
        "application/vnd.wasm.content.layer.v1+wasm"
    );
    assert_eq!(std::fs::read(&pulled.path).unwrap(), module);
    // A manifest without a wasm layer is refused, naming what it has.
    upload(
        &reg,
        "acme/legacy",
        "image",
        ("application/vnd.oci.image.config.v1+json", b"{}"),
        ("application/vnd.oci.image.layer.v1.tar", b"not wasm"),
        &[],
    );
    let e = oci::pull::pull(
        &reg.settings(&dir.path().join("oci")),
        &reg.reference("acme/legacy:image"),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("no wasm layer") && e.contains("layer.v1.tar"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_pin_starts_from_the_cache_with_the_registry_stopped() {
    if !tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut reg = Registry::start(&dir.path().join("reg"));
    let module = faults();
    let pushed = oci::push::push(
        &reg.settings(&dir.path().join("push")),
        &module,
        &reg.reference("acme/faults:v1"),
        None,
    )
    .await
    .unwrap();
    let pin = format!("oci://{}/acme/faults@{}", reg.host, pushed.digest);
    let tag = format!("oci://{}/acme/faults:v1", reg.host);
    let insecure = format!(", insecure: [\"{}\"]", reg.host);
    let first = oci::pull::pull(
        &reg.settings(&dir.path().join("oci")),
        &Reference::parse(&pin).unwrap(),
    )
    .await
    .unwrap();
    assert!(!first.from_cache);
    reg.stop();
    let (host, stop) = start(&config(dir.path(), &pin, &insecure)).await.unwrap();
    let running = host.plugins.list()[0].running();
    assert_eq!(running.origin.unwrap().digest, pushed.digest);
    let _ = stop.send(());
    // A tag needs the registry: the start is refused, naming the plugin and the registry.
    let e = start(&config(dir.path(), &tag, &insecure))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("plugins[0].module") && e.contains(&reg.host),
        "{e}"
    );
    // A cached file that does not match its digest is not used.
    std::fs::write(&first.path, b"\0asm tampered").unwrap();
    let e = oci::pull::pull(
        &reg.settings(&dir.path().join("oci")),
        &Reference::parse(&pin).unwrap(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("blobs/"),
        "went to the registry for the tampered blob: {e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signatures_are_required_with_keys_and_checked_against_them() {
    if !tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(&dir.path().join("reg"));
    let (key, public) = keypair(dir.path(), "good");
    let (other_key, _) = keypair(dir.path(), "other");
    // Each tag gets a module of its own (the same bytes pushed within a second would be the
    // same manifest, signed or not).
    let push = |tag: &str| {
        let r = reg.reference(&format!("acme/signed:{tag}"));
        let s = reg.settings(&dir.path().join("push"));
        let m = std::fs::read(variant(&plugin_path("test_faults"), tag, dir.path())).unwrap();
        async move { oci::push::push(&s, &m, &r, None).await.unwrap().digest }
    };
    let mut settings = reg.settings(&dir.path().join("oci"));
    settings.keys = vec![oci::sign::PublicKey::load(&public).unwrap()];
    let pull = |tag: &str| {
        let r = reg.reference(&format!("acme/signed:{tag}"));
        let s = settings.clone();
        async move { oci::pull::pull(&s, &r).await.map_err(|e| e.to_string()) }
    };

    // Unsigned: refused, saying so and where the signature was looked for.
    let unsigned = push("unsigned").await;
    let e = pull("unsigned").await.unwrap_err();
    assert!(
        e.contains("not signed") && e.contains(&unsigned["sha256:".len()..]),
        "{e}"
    );

    // Signed by openssl with the configured key: accepted.
    let digest = push("good").await;
    openssl_sign(&reg, "acme/signed", &digest, &digest, &key);
    let p = pull("good").await.unwrap();
    assert_eq!(p.signed_by.as_deref(), Some(public.to_str().unwrap()));

    // Signed with another key: refused.
    let digest = push("wrongkey").await;
    openssl_sign(&reg, "acme/signed", &digest, &digest, &other_key);
    let e = pull("wrongkey").await.unwrap_err();
    assert!(
        e.contains("does not verify under any configured key"),
        "{e}"
    );

    // A valid signature of another manifest, put at this one's signature tag: refused.
    let digest = push("moved").await;
    openssl_sign(&reg, "acme/signed", &digest, &unsigned, &key);
    let e = pull("moved").await.unwrap_err();
    assert!(e.contains("payload signs manifest"), "{e}");

    // The host refuses to start on an unsigned module, with the error naming the plugin.
    let insecure = format!(
        ", insecure: [\"{}\"], keys: [{}]",
        reg.host,
        public.display()
    );
    let e = start(&config(
        dir.path(),
        &format!("oci://{}/acme/signed:unsigned", reg.host),
        &insecure,
    ))
    .await
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains("plugin \"p\"") && e.contains("not signed"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wisp_push_signs_what_openssl_verifies_and_what_wisp_pulls() {
    if !tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(&dir.path().join("reg"));
    let (key, public) = keypair(dir.path(), "k");
    let module = faults();
    let r = reg.reference("acme/pushed:v1");
    let pushed = oci::push::push(
        &reg.settings(&dir.path().join("push")),
        &module,
        &r,
        Some(&key),
    )
    .await
    .unwrap();
    // The manifest, read with curl-free urllib: the current convention.
    let script = r#"
import sys, json, urllib.request, base64
base, repo, ref = sys.argv[1:4]
def get(path, accept='application/vnd.oci.image.manifest.v1+json'):
    return urllib.request.urlopen(urllib.request.Request(base + '/v2/' + repo + path, headers={'Accept': accept})).read()
m = json.loads(get('/manifests/' + ref))
assert m['config']['mediaType'] == 'application/vnd.wasm.config.v0+json', m
assert [l['mediaType'] for l in m['layers']] == ['application/wasm'], m
cfg = json.loads(get('/blobs/' + m['config']['digest']))
assert cfg['architecture'] == 'wasm' and cfg['os'] == 'wasip2', cfg
s = json.loads(get('/manifests/' + sys.argv[4]))
l = s['layers'][0]
open(sys.argv[5], 'wb').write(get('/blobs/' + l['digest']))
open(sys.argv[6], 'wb').write(base64.b64decode(l['annotations']['dev.cosignproject.cosign/signature']))
"#;
    let payload = dir.path().join("payload");
    let sig = dir.path().join("sig");
    run(Command::new("python3").args([
        "-c",
        script,
        &reg.base(),
        "acme/pushed",
        "v1",
        pushed.signature_tag.as_deref().unwrap(),
        payload.to_str().unwrap(),
        sig.to_str().unwrap(),
    ]));
    let out = run(Command::new("openssl").args([
        "dgst",
        "-sha256",
        "-verify",
        public.to_str().unwrap(),
        "-signature",
        sig.to_str().unwrap(),
        payload.to_str().unwrap(),
    ]));
    assert!(out.contains("Verified OK"), "{out}");
    let p: serde_json::Value = serde_json::from_slice(&std::fs::read(&payload).unwrap()).unwrap();
    assert_eq!(
        p["critical"]["image"]["docker-manifest-digest"],
        pushed.digest.as_str()
    );
    let mut settings = reg.settings(&dir.path().join("oci"));
    settings.keys = vec![oci::sign::PublicKey::load(&public).unwrap()];
    let pulled = oci::pull::pull(&settings, &r).await.unwrap();
    assert_eq!(pulled.digest, pushed.digest);
    assert_eq!(std::fs::read(&pulled.path).unwrap(), module);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_behind_tls_and_htpasswd_takes_the_docker_config_credentials() {
    if !tools() || tool("htpasswd", &["-nbB", "u", "p"]).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let regdir = d.join("reg");
    std::fs::create_dir_all(&regdir).unwrap();
    // A CA and a server certificate for 127.0.0.1, by openssl.
    let p = |n: &str| d.join(n).to_str().unwrap().to_owned();
    run(Command::new("openssl").args([
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        &p("ca.key"),
        "-out",
        &p("ca.crt"),
        "-days",
        "2",
        "-subj",
        "/CN=wisp-test-ca",
    ]));
    run(Command::new("openssl").args([
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        &p("tls.key"),
        "-out",
        &p("tls.csr"),
        "-subj",
        "/CN=127.0.0.1",
    ]));
    std::fs::write(
        d.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    run(Command::new("openssl").args([
        "x509",
        "-req",
        "-in",
        &p("tls.csr"),
        "-CA",
        &p("ca.crt"),
        "-CAkey",
        &p("ca.key"),
        "-CAcreateserial",
        "-out",
        &p("tls.crt"),
        "-days",
        "2",
        "-extfile",
        &p("ext.cnf"),
    ]));
    let htpasswd = run(Command::new("htpasswd").args(["-nbB", "alice", "s3cret"]));
    std::fs::write(d.join("htpasswd"), htpasswd).unwrap();
    let extra = format!(
        "  tls:\n    certificate: {}\n    key: {}\nauth:\n  htpasswd:\n    realm: wisp-test\n    path: {}\n",
        p("tls.crt"),
        p("tls.key"),
        p("htpasswd")
    );
    let reg = Registry::start_with(&regdir, &extra, true);
    let module = faults();
    let r = reg.reference("private/faults:v1");
    use base64::Engine as _;
    let docker_config = |user: &str, pass: &str| {
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
        serde_json::json!({"auths": {reg.host.clone(): {"auth": auth}}}).to_string()
    };
    let mut settings = reg.settings(&d.join("oci"));
    settings.ca_file = Some(d.join("ca.crt"));

    // Without credentials: refused, saying none were configured.
    let e = oci::push::push(&settings, &module, &r, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("no credentials for this registry"), "{e}");
    // Without the CA: the certificate is not trusted.
    let mut no_ca = settings.clone();
    no_ca.ca_file = None;
    let e = oci::pull::pull(&no_ca, &r).await.unwrap_err().to_string();
    assert!(e.to_lowercase().contains("certificate"), "{e}");
    // With a wrong password: refused as such.
    settings.credentials = oci::auth::parse_docker_config(&docker_config("alice", "nope")).unwrap();
    let e = oci::push::push(&settings, &module, &r, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("were refused"), "{e}");
    // With the docker config: push, then the host pulls with the same file.
    std::fs::write(d.join("docker.json"), docker_config("alice", "s3cret")).unwrap();
    settings.credentials = oci::auth::read_docker_config(&d.join("docker.json")).unwrap();
    let pushed = oci::push::push(&settings, &module, &r, None).await.unwrap();
    let extra = format!(
        ", caFile: {}, dockerConfig: {}",
        p("ca.crt"),
        p("docker.json")
    );
    let (host, stop) = start(&config(d, &r.to_string(), &extra)).await.unwrap();
    assert_eq!(
        host.plugins.list()[0].running().origin.unwrap().digest,
        pushed.digest
    );
    let _ = stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_tag_is_reloaded_and_a_bad_one_leaves_the_running_module() {
    if !tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(&dir.path().join("reg"));
    let r = reg.reference("acme/moving:stable");
    let s = reg.settings(&dir.path().join("push"));
    let v1 = oci::push::push(&s, &faults(), &r, None).await.unwrap();
    let extra = format!(", insecure: [\"{}\"], poll: 100ms", reg.host);
    let (host, stop) = start(&config(dir.path(), &r.to_string(), &extra))
        .await
        .unwrap();
    let h = host.plugins.list()[0].clone();
    assert_eq!(h.running().origin.unwrap().digest, v1.digest);
    assert_eq!(h.running().generation, 1);

    // The tag moves to a new module: pulled and reloaded (generation 2).
    let m2 = std::fs::read(variant(&plugin_path("test_faults"), "v2", dir.path())).unwrap();
    let v2 = oci::push::push(&s, &m2, &r, None).await.unwrap();
    until("the moved tag reloaded", Duration::from_secs(30), || {
        h.running().origin.is_some_and(|o| o.digest == v2.digest)
    })
    .await;
    assert_eq!(h.running().generation, 2);
    assert_eq!(format!("sha256:{}", h.running().hash), sha256(&m2));
    let metrics =
        wisp_host::admin::metrics::encode(&wisp_host::admin::metrics::registry(host.admin.clone()))
            .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("wisp_oci_tags_moved_total ") && !l.ends_with(" 0")),
        "{metrics}"
    );

    // The tag moves to something that is not a plugin: refused, the running version stays.
    let reload_failures_before = h
        .status()
        .counters
        .reload_failures
        .load(std::sync::atomic::Ordering::Relaxed);
    oci::push::push(&s, b"\0asm\x01\0\0\0", &r, None)
        .await
        .unwrap();
    until("the bad module refused", Duration::from_secs(30), || {
        h.status()
            .counters
            .reload_failures
            .load(std::sync::atomic::Ordering::Relaxed)
            > reload_failures_before
    })
    .await;
    assert_eq!(h.running().origin.unwrap().digest, v2.digest);
    assert_eq!(h.running().generation, 2);
    // Not tried again at every poll: only a new digest is. Polls run one after the other, each
    // looking the tag up first: of four more look-ups, at most two are the refused poll's own
    // (its look-up and its pull), so two later polls looked the tag up, and the first of them
    // had ended (a retry of the bad module refused, if it made one) before the second began.
    let lookups = reg.manifest_gets("acme/moving", "stable");
    until("two later polls", Duration::from_secs(30), || {
        reg.manifest_gets("acme/moving", "stable") >= lookups + 4
    })
    .await;
    assert_eq!(h.running().origin.unwrap().digest, v2.digest);
    assert_eq!(h.running().generation, 2);
    assert_eq!(
        h.status()
            .counters
            .reload_failures
            .load(std::sync::atomic::Ordering::Relaxed),
        reload_failures_before + 1
    );
    let _ = stop.send(());
}

/// A token service for distribution's `auth: token` (what Docker Hub, GHCR and most registries
/// do): checks Basic credentials, answers `{"token": JWT}` granting the scope asked for, the JWT
/// signed RS256 by the `openssl` CLI with its certificate in `x5c`. The registry is the real one
/// and verifies the token itself.
const TOKEN_SERVICE: &str = r#"
import base64, json, subprocess, sys, time, http.server, urllib.parse
crt, key, user, password = sys.argv[1:5]
der = subprocess.check_output(['openssl', 'x509', '-in', crt, '-outform', 'DER'])
def b64(b):
    return base64.urlsafe_b64encode(b).rstrip(b'=').decode()
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_GET(self):
        want = 'Basic ' + base64.b64encode((user + ':' + password).encode()).decode()
        if self.headers.get('Authorization') != want:
            self.send_response(401)
            self.end_headers()
            return
        q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        access = []
        for s in ' '.join(q.get('scope', [])).split():
            kind, rest = s.split(':', 1)
            name, actions = rest.rsplit(':', 1)
            access.append({'type': kind, 'name': name, 'actions': actions.split(',')})
        now = int(time.time())
        header = {'typ': 'JWT', 'alg': 'RS256', 'x5c': [base64.b64encode(der).decode()]}
        claims = {'iss': 'wisp-test-issuer', 'sub': user, 'aud': q.get('service', [''])[0],
                  'exp': now + 300, 'nbf': now - 10, 'iat': now, 'jti': str(time.time_ns()),
                  'access': access}
        signing = b64(json.dumps(header).encode()) + '.' + b64(json.dumps(claims).encode())
        sig = subprocess.run(['openssl', 'dgst', '-sha256', '-sign', key], input=signing.encode(),
                             capture_output=True, check=True).stdout
        body = json.dumps({'token': signing + '.' + b64(sig)}).encode()
        self.send_response(200)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_with_token_auth_is_reached_through_the_bearer_flow() {
    if !tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let p = |n: &str| d.join(n).to_str().unwrap().to_owned();
    run(Command::new("openssl").args([
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        &p("token.key"),
        "-out",
        &p("token.crt"),
        "-days",
        "2",
        "-subj",
        "/CN=wisp-test-token",
    ]));
    let mut service = Command::new("python3")
        .args([
            "-c",
            TOKEN_SERVICE,
            &p("token.crt"),
            &p("token.key"),
            "alice",
            "s3cret",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let port = {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(service.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        line.trim().to_owned()
    };
    let extra = format!(
        "auth:\n  token:\n    realm: http://127.0.0.1:{port}/token\n    service: wisp-test\n    issuer: wisp-test-issuer\n    rootcertbundle: {}\n",
        p("token.crt")
    );
    let reg = Registry::start_with(&d.join("reg"), &extra, false);
    let r = reg.reference("private/faults:v1");
    let module = faults();
    let mut settings = reg.settings(&d.join("oci"));
    use base64::Engine as _;
    let docker_config = |pass: &str| {
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("alice:{pass}"));
        serde_json::json!({"auths": {reg.host.clone(): {"auth": auth}}}).to_string()
    };
    // Anonymous: the token service refuses, and the error says no credentials were configured.
    let e = oci::push::push(&settings, &module, &r, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("token from") && e.contains("no credentials"),
        "{e}"
    );
    settings.credentials = oci::auth::parse_docker_config(&docker_config("nope")).unwrap();
    let e = oci::push::push(&settings, &module, &r, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("credentials refused"), "{e}");
    settings.credentials = oci::auth::parse_docker_config(&docker_config("s3cret")).unwrap();
    let pushed = oci::push::push(&settings, &module, &r, None).await.unwrap();
    let pulled = oci::pull::pull(&settings, &r).await.unwrap();
    assert_eq!(pulled.digest, pushed.digest);
    assert_eq!(std::fs::read(&pulled.path).unwrap(), module);
    let _ = service.kill();
    let _ = service.wait();
}

/// The blobs kept in the OCI cache `cache` (modules and signature payloads), by digest.
fn cached_blobs(cache: &Path) -> std::collections::BTreeSet<String> {
    std::fs::read_dir(cache.join("blobs/sha256"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| format!("sha256:{}", e.file_name().to_string_lossy()))
                .collect()
        })
        .unwrap_or_default()
}

/// `n` distinct, valid cosign payloads naming `digest`, each about 2 KiB, with signatures that
/// verify under no key.
fn forged_layers(reg: &Registry, repo: &str, digest: &str, n: usize) -> Vec<(String, String)> {
    use base64::Engine as _;
    (0..n)
        .map(|i| {
            let payload = serde_json::json!({
                "critical": {
                    "identity": {"docker-reference": format!("{}/{repo}", reg.host)},
                    "image": {"docker-manifest-digest": digest},
                    "type": "cosign container image signature",
                },
                "optional": {"n": i, "pad": "x".repeat(2000)},
            })
            .to_string();
            let sig = base64::engine::general_purpose::STANDARD.encode([i as u8; 72]);
            (payload, sig)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signature_layers_and_bytes_are_capped_and_refused_payloads_are_not_kept() {
    if !tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(&dir.path().join("reg"));
    let (key, public) = keypair(dir.path(), "good");
    let repo = "acme/sigbomb";
    let push = |tag: &str| {
        let r = reg.reference(&format!("{repo}:{tag}"));
        let s = reg.settings(&dir.path().join("push"));
        let m = std::fs::read(variant(&plugin_path("test_faults"), tag, dir.path())).unwrap();
        async move { oci::push::push(&s, &m, &r, None).await.unwrap().digest }
    };
    let cache = dir.path().join("oci");
    let mut settings = reg.settings(&cache);
    settings.keys = vec![oci::sign::PublicKey::load(&public).unwrap()];
    let pull = |s: &Settings, tag: &str| {
        let r = reg.reference(&format!("{repo}:{tag}"));
        let s = s.clone();
        async move { oci::pull::pull(&s, &r).await.map_err(|e| e.to_string()) }
    };

    // 40 layers of distinct valid payloads, forged signatures: refused at the default cap of 16
    // layers, before any payload (or the module) is fetched.
    let digest = push("many").await;
    upload_signature(
        &reg,
        repo,
        &signature_tag(&digest),
        &forged_layers(&reg, repo, &digest, 40),
    );
    let e = pull(&settings, "many").await.unwrap_err();
    assert!(
        e.contains("signature refused")
            && e.contains(
                "the signature manifest has 40 layers, more than oci.maxSignatureLayers (16)"
            ),
        "{e}"
    );
    assert_eq!(cached_blobs(&cache), Default::default());

    // Under a cap that lets them through, each is fetched and refused: none is kept, and the
    // module of a refused signature is not downloaded.
    settings.max_signature_layers = 64;
    let e = pull(&settings, "many").await.unwrap_err();
    assert!(
        e.contains("does not verify under any configured key"),
        "{e}"
    );
    assert_eq!(cached_blobs(&cache), Default::default());

    // The bytes cap: 40 payloads of ~2 KiB declare more than 16 KiB together.
    settings.max_signature_bytes = 16 * 1024;
    let e = pull(&settings, "many").await.unwrap_err();
    assert!(
        e.contains("payloads declare") && e.contains("more than oci.maxSignatureBytes (16384)"),
        "{e}"
    );

    // One good signature after five forged ones, at the defaults: accepted; of the payloads only
    // the one that verified is kept, beside the module.
    let settings = Settings {
        keys: settings.keys.clone(),
        ..reg.settings(&cache)
    };
    let digest = push("mixed").await;
    let mut layers = forged_layers(&reg, repo, &digest, 5);
    let good = openssl_signature(&reg, repo, &digest, &key);
    layers.push(good.clone());
    upload_signature(&reg, repo, &signature_tag(&digest), &layers);
    let p = pull(&settings, "mixed").await.unwrap();
    assert_eq!(p.signed_by.as_deref(), Some(public.to_str().unwrap()));
    assert_eq!(
        cached_blobs(&cache),
        [p.layer_digest.clone(), sha256(good.0.as_bytes())].into()
    );
}

/// A registry peer answering every request, after `delay`, with a redirect to itself. Returns
/// its `host:port` and how many answers it gave.
async fn slow_redirector(delay: Duration) -> (String, std::sync::Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = l.local_addr().unwrap().to_string();
    let hops = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = hops.clone();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            let hops = counted.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        match c.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    buf.drain(..end);
                    tokio::time::sleep(delay).await;
                    let n = hops.fetch_add(1, Ordering::SeqCst) + 1;
                    let answer = format!(
                        "HTTP/1.1 307 Temporary Redirect\r\nLocation: /v2/acme/slow/manifests/v1?hop={n}\r\nContent-Length: 0\r\n\r\n"
                    );
                    if c.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (host, hops)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_deadline_bounds_a_whole_pull_across_slow_redirects() {
    // 1.5 s per hop: the 6 requests the redirect limit allows took 9 s.
    let (host, hops) = slow_redirector(Duration::from_millis(1500)).await;
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings {
        insecure: vec![host.clone()],
        cache_dir: dir.path().join("oci"),
        pull_timeout: Duration::from_millis(2500),
        ..Settings::default()
    };
    let r = Reference::parse(&format!("oci://{host}/acme/slow:v1")).unwrap();
    let t = Instant::now();
    let e = oci::pull::pull(&settings, &r)
        .await
        .unwrap_err()
        .to_string();
    let took = t.elapsed();
    assert!(
        e.contains("not pulled within oci.pullTimeout (2.5s)"),
        "{e}"
    );
    assert!(
        took >= Duration::from_millis(2500) && took < Duration::from_millis(4000),
        "{took:?}"
    );
    assert_eq!(hops.load(Ordering::SeqCst), 1);
    // A tag look-up (the poller's) has the same deadline.
    let t = Instant::now();
    let e = oci::pull::resolve(&settings, &r)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("oci.pullTimeout"), "{e}");
    assert!(t.elapsed() < Duration::from_millis(4000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_pull_holds_only_the_plugin_whose_module_it_is() {
    // 2.5 s per hop: the 6 requests the redirect limit allows took 15 s, all of it before any
    // plugin started.
    let (peer, _) = slow_redirector(Duration::from_millis(2500)).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cluster = d.join("cluster");
    std::fs::create_dir_all(&cluster).unwrap();
    std::fs::write(
        cluster.join("pod.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default, resourceVersion: \"1\"}\nspec: {containers: [{name: c, image: nginx}]}\n",
    )
    .unwrap();
    let admin = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let path = d.join("wisp.yaml");
    std::fs::write(
        &path,
        format!(
            r#"source: dir:cluster
informers:
  - {{name: pods, apiVersion: v1, kind: Pod}}
plugins:
  - {{name: local, module: {local}, informers: [pods]}}
  - {{name: remote, module: "oci://{peer}/acme/slow:v1", informers: [pods]}}
admin: {{listen: "{admin}"}}
engine: {{cacheDir: {engine}}}
oci: {{cacheDir: {cache}, insecure: ["{peer}"], pullTimeout: 10s}}
"#,
            local = plugin_path("test_faults").display(),
            engine = d.join("engine").display(),
            cache = d.join("oci").display(),
        ),
    )
    .unwrap();
    let t = Instant::now();
    let starting = tokio::spawn(async move { start(&path).await.map(|_| ()) });

    // The local plugin runs and handles its pod while the other module is still being pulled.
    let delivered = |all: &serde_json::Value| {
        all.as_array()
            .and_then(|a| a.iter().find(|p| p["name"] == "local"))
            .and_then(|p| p["counters"]["delivered"].as_u64())
            .unwrap_or(0)
    };
    loop {
        assert!(
            !starting.is_finished(),
            "the start ended before the local plugin ran: {:?}",
            starting.await
        );
        if tokio::net::TcpStream::connect(admin).await.is_ok()
            && delivered(&get(admin, "/plugins").await.json()) >= 1
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ready = get(admin, "/readyz").await;
    assert_eq!(ready.status, 503, "{ready:?}");
    assert!(
        ready.body.contains("plugin remote: pulling its module"),
        "{}",
        ready.body
    );
    assert!(!starting.is_finished());

    // The pull still refuses the start, at its deadline, naming the plugin.
    let e = starting.await.unwrap().unwrap_err().to_string();
    assert!(
        e.contains("plugin \"remote\"") && e.contains("not pulled within oci.pullTimeout (10s)"),
        "{e}"
    );
    assert!(t.elapsed() < Duration::from_secs(14), "{:?}", t.elapsed());
}
