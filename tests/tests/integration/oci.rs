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
use common::{patience, plugin_path, skip_unless_ci};
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
                t0.elapsed() < common::patience(Duration::from_secs(20)),
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
    common::until_within(what, timeout, cond).await;
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
    let signing = oci::push::Signing {
        key: &key,
        legacy: true,
    };
    let pushed = oci::push::push(
        &reg.settings(&dir.path().join("push")),
        &module,
        &r,
        Some(signing),
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
/// its `host:port` and how many requests it was sent.
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
                    let n = hops.fetch_add(1, Ordering::SeqCst) + 1;
                    tokio::time::sleep(delay).await;
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
    // 2 s per hop: the 6 requests the redirect limit allows took 12 s. One deadline of 3 s
    // for the whole pull cuts it during its second request, 1 s before that request's answer
    // would lead to a third: the requests made, not the time taken, show which deadline cut.
    let (host, requests) = slow_redirector(Duration::from_secs(2)).await;
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings {
        insecure: vec![host.clone()],
        cache_dir: dir.path().join("oci"),
        pull_timeout: Duration::from_secs(3),
        ..Settings::default()
    };
    let r = Reference::parse(&format!("oci://{host}/acme/slow:v1")).unwrap();
    let t = Instant::now();
    let e = oci::pull::pull(&settings, &r)
        .await
        .unwrap_err()
        .to_string();
    let took = t.elapsed();
    assert!(e.contains("not pulled within oci.pullTimeout (3s)"), "{e}");
    assert!(
        took >= Duration::from_secs(3) && took < patience(Duration::from_secs(10)),
        "{took:?}"
    );
    assert_eq!(requests.load(Ordering::SeqCst), 2);
    // A tag look-up (the poller's) has the same deadline.
    let t = Instant::now();
    let e = oci::pull::resolve(&settings, &r)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("oci.pullTimeout"), "{e}");
    let took = t.elapsed();
    assert!(
        took >= Duration::from_secs(3) && took < patience(Duration::from_secs(10)),
        "{took:?}"
    );
    assert_eq!(requests.load(Ordering::SeqCst), 4);
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

    // The pull still refuses the start, at its deadline (not after its 15 s of redirects: the
    // error names the deadline), naming the plugin.
    let e = starting.await.unwrap().unwrap_err().to_string();
    assert!(
        e.contains("plugin \"remote\"") && e.contains("not pulled within oci.pullTimeout (10s)"),
        "{e}"
    );
    assert!(t.elapsed() >= Duration::from_secs(10), "{:?}", t.elapsed());
}

/// The Sigstore test data (tests/fixtures/sigstore; real sigstore-conformance bundles).
fn sigstore_fixture(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/sigstore")
        .join(path)
}

/// Reads, with Python's urllib (not Wisp's client), what the registry lists as referrers of
/// `digest`: the referrers API's status, the tag schema index's bundle entries, and for the
/// first, its manifest and bundle (written to `out`). Prints JSON.
fn read_referrers(reg: &Registry, repo: &str, digest: &str, out: &Path) -> serde_json::Value {
    const SCRIPT: &str = r#"
import sys, json, urllib.request, urllib.error
base, repo, digest, out = sys.argv[1:5]
def get(path, accept):
    return urllib.request.urlopen(urllib.request.Request(base + '/v2/' + repo + path, headers={'Accept': accept})).read()
try:
    get('/referrers/' + digest, 'application/vnd.oci.image.index.v1+json')
    api = 200
except urllib.error.HTTPError as e:
    api = e.code
index = json.loads(get('/manifests/' + digest.replace(':', '-'), 'application/vnd.oci.image.index.v1+json'))
bundles = [m for m in index['manifests'] if m.get('artifactType') == 'application/vnd.dev.sigstore.bundle.v0.3+json']
m = json.loads(get('/manifests/' + bundles[0]['digest'], 'application/vnd.oci.image.manifest.v1+json'))
open(out, 'wb').write(get('/blobs/' + m['layers'][0]['digest'], '*/*'))
print(json.dumps({'api': api, 'index': index, 'bundles': len(bundles), 'manifest': m}))
"#;
    let o = run(Command::new("python3").args([
        "-c",
        SCRIPT,
        &reg.base(),
        repo,
        digest,
        out.to_str().unwrap(),
    ]));
    serde_json::from_str(&o).unwrap()
}

/// `wisp push --sign` attaches a keyed v0.3 bundle as cosign 3 does; the registry (distribution
/// 2.8) has no referrers API, so it goes to the referrers tag schema's index, where Python reads
/// it, openssl verifies its DSSE signature, and Wisp's pull finds and accepts it (never asking
/// for the legacy `.sig` tag). A second signature is appended to the index, not put over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wisp_push_attaches_a_sigstore_bundle_that_openssl_verifies_and_wisp_pulls() {
    if !tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(&dir.path().join("reg"));
    let (key, public) = keypair(dir.path(), "k");
    let (other_key, other_public) = keypair(dir.path(), "other");
    let module = faults();
    let r = reg.reference("acme/bundled:v1");
    let push_settings = reg.settings(&dir.path().join("push"));
    let signing = oci::push::Signing {
        key: &key,
        legacy: false,
    };
    let pushed = oci::push::push(&push_settings, &module, &r, Some(signing))
        .await
        .unwrap();
    assert_eq!(
        pushed.signature_tag, None,
        "no legacy signature unless asked"
    );
    let bundle_file = dir.path().join("bundle.json");
    let seen = read_referrers(&reg, "acme/bundled", &pushed.digest, &bundle_file);
    assert_eq!(
        seen["api"], 404,
        "distribution 2.8 has no referrers API: {seen}"
    );
    assert_eq!(seen["bundles"], 1, "{seen}");
    let m = &seen["manifest"];
    assert_eq!(
        m["artifactType"],
        "application/vnd.dev.sigstore.bundle.v0.3+json"
    );
    assert_eq!(m["subject"]["digest"], pushed.digest.as_str());
    assert_eq!(
        m["config"]["mediaType"],
        "application/vnd.oci.empty.v1+json"
    );
    assert_eq!(
        seen["index"]["manifests"][0]["digest"],
        pushed.bundle.as_deref().unwrap()
    );
    // The bundle: a DSSE in-toto statement naming the manifest, its signature verified by
    // openssl over DSSE's pre-authentication encoding.
    let b: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&bundle_file).unwrap()).unwrap();
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let env = &b["dsseEnvelope"];
    let payload = b64.decode(env["payload"].as_str().unwrap()).unwrap();
    let st: serde_json::Value = serde_json::from_slice(&payload).unwrap();
    assert_eq!(
        st["subject"][0]["digest"]["sha256"],
        &pushed.digest["sha256:".len()..]
    );
    assert_eq!(st["predicateType"], "https://sigstore.dev/cosign/sign/v1");
    let t = env["payloadType"].as_str().unwrap();
    let mut pae = format!("DSSEv1 {} {t} {} ", t.len(), payload.len()).into_bytes();
    pae.extend_from_slice(&payload);
    std::fs::write(dir.path().join("pae"), &pae).unwrap();
    let sig = b64
        .decode(env["signatures"][0]["sig"].as_str().unwrap())
        .unwrap();
    std::fs::write(dir.path().join("sig"), sig).unwrap();
    let out = run(Command::new("openssl").args([
        "dgst",
        "-sha256",
        "-verify",
        public.to_str().unwrap(),
        "-signature",
        dir.path().join("sig").to_str().unwrap(),
        dir.path().join("pae").to_str().unwrap(),
    ]));
    assert!(out.contains("Verified OK"), "{out}");

    // Pulled with the key: accepted through the referrers tag; the legacy tag is not asked for.
    let mut settings = reg.settings(&dir.path().join("oci"));
    settings.keys = vec![oci::sign::PublicKey::load(&public).unwrap()];
    let pulled = oci::pull::pull(&settings, &r).await.unwrap();
    assert_eq!(pulled.signed_by.as_deref(), Some(public.to_str().unwrap()));
    assert_eq!(std::fs::read(&pulled.path).unwrap(), module);
    let legacy_tag = format!("{}.sig", pushed.digest.replace(':', "-"));
    assert_eq!(reg.manifest_gets("acme/bundled", &legacy_tag), 0);

    // Under another key only: refused, naming the bundle, where it was found and the check.
    let mut other = reg.settings(&dir.path().join("oci-other"));
    other.keys = vec![oci::sign::PublicKey::load(&other_public).unwrap()];
    let e = oci::pull::pull(&other, &r).await.unwrap_err().to_string();
    assert!(
        e.contains(pushed.bundle.as_deref().unwrap())
            && e.contains("referrers tag")
            && e.contains("signature check failed")
            && e.contains("no legacy signature"),
        "{e}"
    );

    // Signed again with that key: the index now lists both, and the other key accepts it.
    let signing = oci::push::Signing {
        key: &other_key,
        legacy: false,
    };
    let pinned = reg.reference(&format!("acme/bundled@{}", pushed.digest));
    let again = oci::push::sign(&push_settings, &pinned, signing)
        .await
        .unwrap();
    assert_eq!(again.digest, pushed.digest);
    assert_ne!(again.bundle, pushed.bundle);
    let seen = read_referrers(&reg, "acme/bundled", &pushed.digest, &bundle_file);
    assert_eq!(seen["bundles"], 2, "{seen}");
    let pulled = oci::pull::pull(&other, &r).await.unwrap();
    assert_eq!(
        pulled.signed_by.as_deref(),
        Some(other_public.to_str().unwrap())
    );
}

/// Attaches `bundle` to `subject` (a manifest digest of `repo`) as cosign 3 does, with Python's
/// urllib: an empty config, the bundle as the one layer, artifactType and subject set, put by
/// digest; then the referrers tag schema index (distribution 2.8 has no referrers API).
fn attach_like_cosign(reg: &Registry, repo: &str, subject: &str, bundle: &Path) -> String {
    const SCRIPT: &str = r#"
import sys, json, hashlib, urllib.request, urllib.error
base, repo, subject, path = sys.argv[1:5]
BT = 'application/vnd.dev.sigstore.bundle.v0.3+json'
def req(method, path, data=None, headers={}):
    return urllib.request.urlopen(urllib.request.Request(base + path, method=method, data=data, headers=headers))
def blob(data):
    d = 'sha256:' + hashlib.sha256(data).hexdigest()
    loc = req('POST', '/v2/' + repo + '/blobs/uploads/', b'').headers['Location']
    if loc.startswith('http'):
        loc = loc[len(base):]
    req('PUT', loc + ('&' if '?' in loc else '?') + 'digest=' + d, data, {'Content-Type': 'application/octet-stream'})
    return d
sm = req('GET', '/v2/' + repo + '/manifests/' + subject, headers={'Accept': 'application/vnd.oci.image.manifest.v1+json'}).read()
b = open(path, 'rb').read()
m = {'schemaVersion': 2, 'mediaType': 'application/vnd.oci.image.manifest.v1+json', 'artifactType': BT,
     'config': {'mediaType': 'application/vnd.oci.empty.v1+json', 'digest': blob(b'{}'), 'size': 2},
     'layers': [{'mediaType': BT, 'digest': blob(b), 'size': len(b)}],
     'subject': {'mediaType': 'application/vnd.oci.image.manifest.v1+json', 'digest': subject, 'size': len(sm)},
     'annotations': {'dev.sigstore.bundle.content': 'dsse-envelope', 'dev.sigstore.bundle.predicateType': 'https://sigstore.dev/cosign/sign/v1'}}
body = json.dumps(m).encode()
d = 'sha256:' + hashlib.sha256(body).hexdigest()
req('PUT', '/v2/' + repo + '/manifests/' + d, body, {'Content-Type': 'application/vnd.oci.image.manifest.v1+json'})
tag = subject.replace(':', '-')
try:
    index = json.loads(req('GET', '/v2/' + repo + '/manifests/' + tag, headers={'Accept': 'application/vnd.oci.image.index.v1+json'}).read())
except urllib.error.HTTPError:
    index = {'schemaVersion': 2, 'mediaType': 'application/vnd.oci.image.index.v1+json', 'manifests': []}
index['manifests'].append({'mediaType': 'application/vnd.oci.image.manifest.v1+json', 'digest': d, 'size': len(body), 'artifactType': BT})
req('PUT', '/v2/' + repo + '/manifests/' + tag, json.dumps(index).encode(), {'Content-Type': 'application/vnd.oci.image.index.v1+json'})
print(d)
"#;
    run(Command::new("python3").args([
        "-c",
        SCRIPT,
        &reg.base(),
        repo,
        subject,
        bundle.to_str().unwrap(),
    ]))
    .trim()
    .to_owned()
}

/// Real keyless bundles (Fulcio certificate, Rekor v1 entry: sigstore-conformance's, signing
/// `a.txt`) attached to a module as referrers reach the whole check through the registry: found
/// by the tag schema after the referrers API's 404, fetched within the bounds, and refused
/// because they sign another artifact, naming the bundle and the check; without a bundle or
/// a keyless match the refusal says so. The host refuses to start on them, naming the plugin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_keyless_bundles_attached_as_referrers_are_checked_and_refused_naming_the_check() {
    if !tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(&dir.path().join("reg"));
    let push_settings = reg.settings(&dir.path().join("push"));
    let push = |tag: &'static str| {
        let r = reg.reference(&format!("acme/keyless:{tag}"));
        let s = push_settings.clone();
        let m = std::fs::read(variant(&plugin_path("test_faults"), tag, dir.path())).unwrap();
        async move { oci::push::push(&s, &m, &r, None).await.unwrap().digest }
    };
    let mut settings = reg.settings(&dir.path().join("oci"));
    settings.keyless = vec![oci::sigstore::Keyless {
        issuer: oci::sigstore::Matcher::Exact("https://token.actions.githubusercontent.com".into()),
        identity: oci::sigstore::Matcher::regex(
            r"https://github\.com/sigstore-conformance/.*@refs/heads/main",
        )
        .unwrap(),
    }];
    settings.trusted_root = Some(std::sync::Arc::new(
        oci::sigstore::TrustedRoot::load(&sigstore_fixture("trusted_root.json")).unwrap(),
    ));
    let pull = |tag: &str| {
        let r = reg.reference(&format!("acme/keyless:{tag}"));
        let s = settings.clone();
        async move { oci::pull::pull(&s, &r).await.map_err(|e| e.to_string()) }
    };

    // Nothing attached: not signed, saying where bundles were looked for.
    let bare = push("bare").await;
    let e = pull("bare").await.unwrap_err();
    assert!(
        e.contains("not signed")
            && e.contains(&bare.replace(':', "-"))
            && e.contains("oci.keyless"),
        "{e}"
    );

    // A message-signature bundle (v0.3) and a DSSE one, both real, both of a.txt.
    for (tag, case, check) in [
        ("msg", "happy-path-v0.3", "artifact digest check failed"),
        (
            "dsse",
            "happy-path-intoto-in-dsse-v3",
            "subject check failed",
        ),
    ] {
        let digest = push(tag).await;
        let b = sigstore_fixture(&format!("{case}/bundle.sigstore.json"));
        let referrer = attach_like_cosign(&reg, "acme/keyless", &digest, &b);
        let e = pull(tag).await.unwrap_err();
        assert!(
            e.contains(&referrer) && e.contains("referrers tag") && e.contains(check),
            "{case}: {e}"
        );
    }

    // A bundle over oci.maxSignatureBytes is not fetched.
    let digest = push("big").await;
    let b = sigstore_fixture("happy-path-v0.3/bundle.sigstore.json");
    attach_like_cosign(&reg, "acme/keyless", &digest, &b);
    let mut small = settings.clone();
    small.max_signature_bytes = 100;
    let r = reg.reference("acme/keyless:big");
    let e = oci::pull::pull(&small, &r).await.unwrap_err().to_string();
    assert!(e.contains("oci.maxSignatureBytes"), "{e}");

    // More bundles listed than oci.maxSignatureLayers: none is fetched.
    let dsse = sigstore_fixture("happy-path-intoto-in-dsse-v3/bundle.sigstore.json");
    attach_like_cosign(&reg, "acme/keyless", &digest, &dsse);
    attach_like_cosign(&reg, "acme/keyless", &digest, &dsse);
    let mut few = settings.clone();
    few.max_signature_layers = 2;
    let e = oci::pull::pull(&few, &r).await.unwrap_err().to_string();
    assert!(
        e.contains(
            "3 Sigstore bundles are attached (referrers tag), more than oci.maxSignatureLayers (2)"
        ),
        "{e}"
    );

    // The host refuses to start on it, naming the plugin and the check.
    let extra = format!(
        ", insecure: [\"{}\"], trustedRoot: {}, keyless: [{{issuer: https://token.actions.githubusercontent.com, identityRegexp: 'https://github\\.com/.*'}}]",
        reg.host,
        sigstore_fixture("trusted_root.json").display()
    );
    let e = start(&config(
        dir.path(),
        &format!("oci://{}/acme/keyless:msg", reg.host),
        &extra,
    ))
    .await
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains("plugin \"p\"") && e.contains("artifact digest check failed"),
        "{e}"
    );
}

/// The `wisp` binary beside this test's directory (`target/debug/wisp`), built when missing.
fn wisp_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().and_then(Path::parent).unwrap().join("wisp");
    if !bin.exists() {
        run(
            Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())).args([
                "build",
                "-p",
                "wisp-host",
                "--bin",
                "wisp",
            ]),
        );
    }
    bin
}

/// `wisp push --sign KEY --legacy-signature`, run as a process: both signatures written (the
/// bundle in the referrers tag index, the `.sig` tag), said on stdout, and each accepted by a
/// pull; `--legacy-signature` alone is refused by the command line, and `--help` documents it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wisp_push_cli_writes_the_bundle_and_the_legacy_signature_when_asked() {
    if !tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(&dir.path().join("reg"));
    let (key, public) = keypair(dir.path(), "k");
    let reference = format!("oci://{}/acme/cli:v1", reg.host);
    let module = plugin_path("test_faults");
    let out = run(Command::new(wisp_bin()).args([
        "push",
        module.to_str().unwrap(),
        &reference,
        "--sign",
        key.to_str().unwrap(),
        "--legacy-signature",
        "--insecure",
    ]));
    let digest = out
        .lines()
        .find_map(|l| l.strip_prefix(&format!("pushed {reference}@")))
        .unwrap_or_else(|| panic!("{out}"))
        .to_owned();
    let legacy = format!("{}.sig", digest.replace(':', "-"));
    assert!(
        out.contains("signed: Sigstore bundle")
            && out.contains(&format!("signed (legacy): {}/acme/cli:{legacy}", reg.host)),
        "{out}"
    );
    let seen = read_referrers(&reg, "acme/cli", &digest, &dir.path().join("bundle"));
    assert_eq!(seen["bundles"], 1, "{seen}");
    let r = reg.reference("acme/cli:v1");
    let mut settings = reg.settings(&dir.path().join("oci"));
    settings.keys = vec![oci::sign::PublicKey::load(&public).unwrap()];
    let pulled = oci::pull::pull(&settings, &r).await.unwrap();
    assert_eq!(pulled.digest, digest);
    assert_eq!(
        reg.manifest_gets("acme/cli", &legacy),
        0,
        "the bundle came first"
    );
    // The legacy signature is there too, as cosign 2 reads it.
    let sig = reg.base() + "/v2/acme/cli/manifests/" + &legacy;
    let m = run(Command::new("python3").args([
        "-c",
        "import sys, urllib.request; print(urllib.request.urlopen(urllib.request.Request(sys.argv[1], headers={'Accept': 'application/vnd.oci.image.manifest.v1+json'})).read().decode())",
        &sig,
    ]));
    assert!(m.contains("dev.cosignproject.cosign/signature"), "{m}");

    let o = Command::new(wisp_bin())
        .args([
            "push",
            module.to_str().unwrap(),
            &reference,
            "--legacy-signature",
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("--sign"), "{e}");
    let help = run(Command::new(wisp_bin()).args(["push", "--help"]));
    assert!(
        help.contains("--legacy-signature") && help.contains("Sigstore bundle"),
        "{help}"
    );
}

/// A keyless bundle of the manifest `digest` made by the `openssl` CLI (driven by Python) as
/// Fulcio, Rekor and cosign 3 would make it: a CA, a leaf certificate of `identity` (SAN URI)
/// and `issuer` (Fulcio's extension 1.3.6.1.4.1.57264.1.8) with the code-signing EKU, a DSSE
/// in-toto statement naming the digest signed by the leaf key, a Rekor v1 `dsse` entry with its
/// SET and an inclusion proof (a one-leaf tree) with a checkpoint signed by a log key; and the
/// trusted root of that CA and log. Writes `bundle.json` and `trusted_root.json` in `dir`.
fn openssl_keyless_bundle(dir: &Path, digest: &str, identity: &str, issuer: &str) {
    const SCRIPT: &str = r#"
import subprocess, json, base64, hashlib, time, os, sys
d, digest, identity, issuer = sys.argv[1:5]
def sh(*a, inp=None):
    return subprocess.run(a, input=inp, check=True, capture_output=True).stdout
def p(n):
    return os.path.join(d, n)
b64 = lambda b: base64.b64encode(b).decode()
sha = lambda b: hashlib.sha256(b).digest()
canon = lambda v: json.dumps(v, sort_keys=True, separators=(',', ':')).encode()
def sign(key, data):
    open(p('tbs'), 'wb').write(data)
    return sh('openssl', 'dgst', '-sha256', '-sign', key, p('tbs'))
ec = ['-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256']
sh('openssl', 'genpkey', *ec, '-out', p('ca.key'))
sh('openssl', 'req', '-x509', '-new', '-key', p('ca.key'), '-subj', '/O=wisp-test/CN=test-fulcio', '-days', '30',
   '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign', '-out', p('ca.pem'))
sh('openssl', 'genpkey', *ec, '-out', p('leaf.key'))
sh('openssl', 'req', '-new', '-key', p('leaf.key'), '-subj', '/O=wisp-test', '-out', p('leaf.csr'))
open(p('ext.cnf'), 'w').write('[ext]\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n'
    'extendedKeyUsage=codeSigning\nsubjectAltName=critical,URI:%s\n1.3.6.1.4.1.57264.1.8=ASN1:UTF8String:%s\n' % (identity, issuer))
sh('openssl', 'x509', '-req', '-in', p('leaf.csr'), '-CA', p('ca.pem'), '-CAkey', p('ca.key'), '-CAcreateserial', '-days', '1',
   '-extfile', p('ext.cnf'), '-extensions', 'ext', '-out', p('leaf.pem'))
leaf_pem = open(p('leaf.pem'), 'rb').read()
leaf_der = sh('openssl', 'x509', '-in', p('leaf.pem'), '-outform', 'DER')
ca_der = sh('openssl', 'x509', '-in', p('ca.pem'), '-outform', 'DER')
statement = canon({'_type': 'https://in-toto.io/Statement/v1', 'subject': [{'name': 'module', 'digest': {'sha256': digest.split(':')[1]}}],
                   'predicateType': 'https://sigstore.dev/cosign/sign/v1', 'predicate': {}})
pt = 'application/vnd.in-toto+json'
pae = b'DSSEv1 %d %s %d ' % (len(pt), pt.encode(), len(statement)) + statement
sig = sign(p('leaf.key'), pae)
body = canon({'apiVersion': '0.0.1', 'kind': 'dsse', 'spec': {
    'envelopeHash': {'algorithm': 'sha256', 'value': hashlib.sha256(b'envelope').hexdigest()},
    'payloadHash': {'algorithm': 'sha256', 'value': hashlib.sha256(statement).hexdigest()},
    'signatures': [{'signature': b64(sig), 'verifier': b64(leaf_pem)}]}})
sh('openssl', 'genpkey', *ec, '-out', p('log.key'))
log_der = sh('openssl', 'pkey', '-in', p('log.key'), '-pubout', '-outform', 'DER')
log_id = sha(log_der)
t = int(time.time()) + 2
set_ = sign(p('log.key'), canon({'body': b64(body), 'integratedTime': t, 'logID': log_id.hex(), 'logIndex': 0}))
root = sha(b'\x00' + body)
note = 'test-log - 1\n1\n%s\n' % b64(root)
env = note + '\n' + '\u2014 test-log %s\n' % b64(log_id[:4] + sign(p('log.key'), note.encode()))
bundle = {'mediaType': 'application/vnd.dev.sigstore.bundle.v0.3+json',
  'verificationMaterial': {'certificate': {'rawBytes': b64(leaf_der)}, 'tlogEntries': [{
    'logIndex': '0', 'logId': {'keyId': b64(log_id)}, 'kindVersion': {'kind': 'dsse', 'version': '0.0.1'},
    'integratedTime': str(t), 'inclusionPromise': {'signedEntryTimestamp': b64(set_)},
    'inclusionProof': {'logIndex': '0', 'rootHash': b64(root), 'treeSize': '1', 'hashes': [], 'checkpoint': {'envelope': env}},
    'canonicalizedBody': b64(body)}]},
  'dsseEnvelope': {'payload': b64(statement), 'payloadType': pt, 'signatures': [{'sig': b64(sig)}]}}
start = {'start': '2020-01-01T00:00:00Z'}
trusted = {'mediaType': 'application/vnd.dev.sigstore.trustedroot+json;version=0.1',
  'tlogs': [{'baseUrl': 'https://log.test', 'hashAlgorithm': 'SHA2_256', 'publicKey': {'rawBytes': b64(log_der),
             'keyDetails': 'PKIX_ECDSA_P256_SHA_256', 'validFor': start}, 'logId': {'keyId': b64(log_id)}}],
  'certificateAuthorities': [{'subject': {}, 'uri': 'https://fulcio.test', 'certChain': {'certificates': [{'rawBytes': b64(ca_der)}]},
                              'validFor': start}]}
json.dump(bundle, open(p('bundle.json'), 'w'))
json.dump(trusted, open(p('trusted_root.json'), 'w'))
"#;
    std::fs::create_dir_all(dir).unwrap();
    run(Command::new("python3").args([
        "-c",
        SCRIPT,
        dir.to_str().unwrap(),
        digest,
        identity,
        issuer,
    ]));
}

/// A keyless signature accepted end to end: a bundle made with openssl as Fulcio, Rekor and
/// cosign 3 make theirs (see [`openssl_keyless_bundle`]), attached as cosign attaches it, pulled
/// through the registry's referrers tag and accepted under the matching identity; refused under
/// another identity, another issuer, or the public-good trusted root, each naming the check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyless_bundle_made_by_openssl_as_fulcio_and_rekor_is_accepted_through_the_registry() {
    if !tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(&dir.path().join("reg"));
    let module = faults();
    let r = reg.reference("acme/signed-keyless:v1");
    let pushed = oci::push::push(&reg.settings(&dir.path().join("push")), &module, &r, None)
        .await
        .unwrap();
    let identity = "https://github.com/acme/plugins/.github/workflows/release.yml@refs/heads/main";
    let issuer = "https://token.actions.githubusercontent.com";
    let made = dir.path().join("made");
    openssl_keyless_bundle(&made, &pushed.digest, identity, issuer);
    let referrer = attach_like_cosign(
        &reg,
        "acme/signed-keyless",
        &pushed.digest,
        &made.join("bundle.json"),
    );
    let policy = |root: &str, identity: &str, issuer: &str, cache: &str| {
        let mut s = reg.settings(&dir.path().join(cache));
        s.keyless = vec![oci::sigstore::Keyless {
            issuer: oci::sigstore::Matcher::Exact(issuer.into()),
            identity: oci::sigstore::Matcher::regex(identity).unwrap(),
        }];
        s.trusted_root = Some(std::sync::Arc::new(
            oci::sigstore::TrustedRoot::load(Path::new(root)).unwrap(),
        ));
        s
    };
    let own_root = made.join("trusted_root.json");
    let own_root = own_root.to_str().unwrap();
    let s = policy(own_root, r"https://github\.com/acme/.*", issuer, "ok");
    let pulled = oci::pull::pull(&s, &r).await.unwrap();
    assert_eq!(
        pulled.signed_by.as_deref(),
        Some(format!("{identity} (issuer {issuer})").as_str())
    );
    assert_eq!(std::fs::read(&pulled.path).unwrap(), module);
    // Started again from the cache by digest: verified again, without the registry.
    let pinned = reg.reference(&format!("acme/signed-keyless@{}", pushed.digest));
    let again = oci::pull::pull(&s, &pinned).await.unwrap();
    assert!(again.from_cache && again.signed_by == pulled.signed_by);

    for (root, id, iss, check) in [
        (
            own_root,
            r"https://github\.com/other/.*",
            issuer,
            "certificate identity check failed",
        ),
        (
            own_root,
            r"https://github\.com/acme/.*",
            "https://accounts.google.com",
            "certificate issuer check failed",
        ),
    ] {
        let s = policy(root, id, iss, check);
        let e = oci::pull::pull(&s, &r).await.unwrap_err().to_string();
        assert!(e.contains(&referrer) && e.contains(check), "{e}");
    }
    let public_good = sigstore_fixture("trusted_root.json");
    let s = policy(
        public_good.to_str().unwrap(),
        r"https://github\.com/acme/.*",
        issuer,
        "pg",
    );
    let e = oci::pull::pull(&s, &r).await.unwrap_err().to_string();
    assert!(e.contains("tlog key check failed"), "{e}");
}
