//! Scale-out over Leases (`sharding: {mode: leader}`): several hosts started from one config
//! against one test API server, each through its own real `kube::Client`. One leads (runs the
//! plugins and acts); the others keep warm caches; a standby takes over when the leader stops
//! or cannot renew, and a leader that cannot renew stops acting before anyone takes over.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};
use wisp_host::app::{self, RunOptions};
use wisp_host::config::Config;
use wisp_tests::{TestApiServer, pod};

const LEASE_DURATION: Duration = Duration::from_secs(2);

/// A server with namespace `shop` (label team=payments) and `pods` unlabelled pods in it.
async fn server(pods: usize) -> TestApiServer {
    let server = TestApiServer::start().await.unwrap();
    server
        .create(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "shop", "labels": {"team": "payments"}}}))
        .unwrap();
    for i in 0..pods {
        server.create(pod("shop", &format!("web-{i}"))).unwrap();
    }
    server
}

/// The config of replica `identity`: the team labeler on pods, its audit log in `dir`.
fn config(dir: &std::path::Path, identity: &str) -> Config {
    let config = format!(
        r#"source: kube
informers:
  - {{name: pods, apiVersion: v1, kind: Pod}}
  - {{name: namespaces, apiVersion: v1, kind: Namespace}}
plugins:
  - name: labeler
    module: {module}
    informers: [pods, namespaces]
    actions:
      grants: [{{verbs: [patch], apiVersion: v1, kind: Pod, namespaces: [shop]}}]
      rateLimit: {{perSecond: 1000, burst: 1000}}
sharding:
  mode: leader
  leaseName: wisp
  leaseNamespace: default
  identity: {identity}
  leaseDuration: 2s
  renewDeadline: 1500ms
  retryPeriod: 300ms
admin: {{listen: ""}}
audit: {{file: audit-{identity}.jsonl}}
"#,
        module = plugin_path("team_labeler").display(),
    );
    let path = dir.join(format!("wisp-{identity}.yaml"));
    std::fs::write(&path, config).unwrap();
    Config::load(&path).unwrap()
}

struct Replica {
    name: String,
    host: app::Host,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Replica {
    async fn start(dir: &std::path::Path, name: &str, client: kube::Client) -> Self {
        let (stop, rx) = tokio::sync::oneshot::channel::<()>();
        let opts = RunOptions {
            client: Some(client),
            ..RunOptions::default()
        };
        let host = app::start(&config(dir, name), &opts, async {
            let _ = rx.await;
        })
        .await
        .unwrap();
        Self {
            name: name.to_owned(),
            host,
            stop: Some(stop),
        }
    }

    fn leads(&self) -> bool {
        self.host.leadership.as_ref().unwrap().is_leader()
    }

    fn plugins(&self) -> usize {
        self.host.plugins.read().unwrap().len()
    }

    async fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.host
            .finish(tokio::time::Instant::now() + Duration::from_secs(5))
            .await;
    }
}

fn holder(server: &TestApiServer) -> Option<String> {
    server
        .get("coordination.k8s.io/v1", "Lease", Some("default"), "wisp")
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
}

fn labelled(server: &TestApiServer) -> usize {
    server
        .objects("v1", "Pod")
        .iter()
        .filter(|p| p["metadata"]["labels"]["team"] == "payments")
        .count()
}

/// Every `applied` patch in the replicas' audit logs, by pod name, with who sent it.
fn applied(dir: &std::path::Path) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(who) = name
            .strip_prefix("audit-")
            .and_then(|n| n.strip_suffix(".jsonl"))
        else {
            continue;
        };
        for line in std::fs::read_to_string(entry.path()).unwrap().lines() {
            let e: Value = serde_json::from_str(line).unwrap();
            if e["result"] == "applied" {
                out.entry(e["name"].as_str().unwrap().to_owned())
                    .or_default()
                    .push(who.to_owned());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_of_three_replicas_leads_and_a_standby_takes_over_when_it_stops() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(8).await;
    let mut replicas = Vec::new();
    for name in ["r1", "r2", "r3"] {
        replicas.push(Replica::start(dir.path(), name, server.client()).await);
    }
    until("one leader", || {
        replicas.iter().filter(|r| r.leads()).count() == 1
    })
    .await;
    until("every pod labelled", || labelled(&server) == 8).await;
    let leader = replicas.iter().position(Replica::leads).unwrap();
    assert_eq!(
        holder(&server).as_deref(),
        Some(replicas[leader].name.as_str())
    );
    // Only the leader runs its plugins; the standbys' caches are warm all the same.
    until("every cache warm", || {
        replicas
            .iter()
            .all(|r| r.host.informers[0].cache().len() == 8)
    })
    .await;
    for (i, r) in replicas.iter().enumerate() {
        assert_eq!(r.plugins(), usize::from(i == leader), "{}", r.name);
    }
    // The standbys stay standbys while the leader renews.
    tokio::time::sleep(2 * LEASE_DURATION).await;
    assert_eq!(replicas.iter().filter(|r| r.leads()).count(), 1);

    // The leader stops: it releases the Lease, and a standby takes over well within the
    // lease duration, getting the cache as its plugins' initial list.
    let t = Instant::now();
    replicas[leader].stop().await;
    until("a new leader", || {
        replicas
            .iter()
            .enumerate()
            .any(|(i, r)| i != leader && r.leads() && r.plugins() == 1)
    })
    .await;
    assert!(
        t.elapsed() < LEASE_DURATION,
        "takeover after a release took {:?}",
        t.elapsed()
    );
    let next = replicas.iter().position(Replica::leads).unwrap();
    assert_eq!(
        holder(&server).as_deref(),
        Some(replicas[next].name.as_str())
    );
    // What changes now is acted on by the new leader.
    for i in 8..12 {
        server.create(pod("shop", &format!("web-{i}"))).unwrap();
    }
    until("the new pods labelled", || labelled(&server) == 12).await;

    // No pod was patched twice: the joined audit logs have one applied patch per pod.
    for r in &mut replicas {
        r.stop().await;
    }
    let applied = applied(dir.path());
    assert_eq!(applied.len(), 12, "{applied:?}");
    for (pod, by) in &applied {
        assert_eq!(by.len(), 1, "{pod} patched by {by:?}");
    }
    let first: Vec<&String> = (0..8).map(|i| &applied[&format!("web-{i}")][0]).collect();
    assert!(
        first.iter().all(|w| **w == replicas[leader].name),
        "{applied:?}"
    );
    assert!(
        (8..12).all(|i| applied[&format!("web-{i}")][0] == replicas[next].name),
        "{applied:?}"
    );
}

/// A TCP proxy to the test API server that can be frozen: while frozen, nothing it carries
/// moves in either direction (a replica cut off from the API server).
struct Freezer {
    frozen: Arc<AtomicBool>,
    url: String,
}

impl Freezer {
    async fn start(server: &TestApiServer) -> Self {
        let upstream = server
            .url()
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let frozen = Arc::new(AtomicBool::new(false));
        let f = frozen.clone();
        tokio::spawn(async move {
            while let Ok((down, _)) = l.accept().await {
                let Ok(up) = tokio::net::TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (dr, dw) = down.into_split();
                let (ur, uw) = up.into_split();
                tokio::spawn(pipe(dr, uw, f.clone()));
                tokio::spawn(pipe(ur, dw, f.clone()));
            }
        });
        Self { frozen, url }
    }

    fn client(&self) -> kube::Client {
        let mut config = kube::Config::new(self.url.parse().unwrap());
        config.default_namespace = "default".into();
        kube::Client::try_from(config).unwrap()
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_that_cannot_renew_stops_acting_before_a_standby_takes_over() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(4).await;
    let proxy = Freezer::start(&server).await;
    let mut a = Replica::start(dir.path(), "a", proxy.client()).await;
    until("a leads", || a.leads() && a.plugins() == 1).await;
    let mut b = Replica::start(dir.path(), "b", server.client()).await;
    until("b's cache warm", || b.host.informers[0].cache().len() == 4).await;
    assert!(!b.leads());

    // a is cut off from the API server: its renewals stall.
    proxy.frozen.store(true, Ordering::SeqCst);
    let cut = Instant::now();
    let mut a_stopped = None;
    let mut b_took = None;
    while b_took.is_none() && cut.elapsed() < 4 * LEASE_DURATION {
        if a_stopped.is_none() && !a.leads() {
            a_stopped = Some(cut.elapsed());
        }
        if b.leads() {
            b_took = Some(cut.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (a_stopped, b_took) = (
        a_stopped.expect("a kept leading"),
        b_took.expect("b never led"),
    );
    eprintln!("a stopped acting {a_stopped:?} after the cut; b took over at {b_took:?}");
    assert!(
        a_stopped < b_took,
        "a stopped acting at {a_stopped:?}, after b took over at {b_took:?}"
    );
    // b waited out the lease duration from its last sight of a's renewal, no more than that
    // plus its retry period (with jitter) and the renewal a made before the cut.
    assert!(b_took >= Duration::from_millis(500), "{b_took:?}");
    assert!(
        b_took < LEASE_DURATION + Duration::from_secs(2),
        "{b_took:?}"
    );
    assert_eq!(holder(&server).as_deref(), Some("b"));
    // a's actions are fenced: nothing it sends leaves it while it does not lead.
    let fence = a.host.leadership.as_ref().unwrap().check().unwrap_err();
    assert!(
        fence.contains("lost its Lease: no renewal succeeded"),
        "{fence}"
    );

    // With b stopped and a reconnected, a's labeler sees new unlabelled pods and asks to patch
    // them: each request is refused by the fence, audited, and never reaches the server.
    b.stop().await;
    proxy.frozen.store(false, Ordering::SeqCst);
    for i in 4..6 {
        server.create(pod("shop", &format!("web-{i}"))).unwrap();
    }
    let fenced = || {
        std::fs::read_to_string(dir.path().join("audit-a.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("not sent: this replica lost its Lease"))
            .count()
    };
    until("a's patches of the new pods fenced", || fenced() >= 2).await;
    assert_eq!(labelled(&server), 4, "a fenced patch reached the server");
    a.stop().await;
}
