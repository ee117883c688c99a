//! Scale-out over Leases (`sharding: {mode: leader}`): several hosts started from one config
//! against one test API server, each through its own real `kube::Client`. One leads (runs the
//! plugins and acts); the others keep warm caches; a standby takes over when the leader stops
//! or cannot renew, and a leader that cannot renew stops acting before anyone takes over.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use wisp_host::app::{self};
use wisp_host::config::Config;
use wisp_tests::{TestApiServer, pod};

const LEASE_DURATION: Duration = Duration::from_secs(2);
/// The fence is checked right before a request leaves, but a request can still arrive after
/// the Lease has passed on. Its patch is conditional on the version the old leader saw, so when
/// the new leader has acted on the object meanwhile, the late patch is refused (409) instead of
/// acting a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_patch_that_arrives_after_the_lease_passed_on_is_refused_by_its_precondition() {
    let dir = tempfile::tempdir().unwrap();
    let server = shop_server(2).await;
    let proxy = Freezer::start(&server).await;
    let mut a = Replica::start(dir.path(), "a", proxy.client()).await;
    until("a leads and labelled", || {
        a.leads() && labelled(&server) == 2
    })
    .await;
    let mut b = Replica::start(dir.path(), "b", server.client()).await;
    until("b's cache warm", || b.host.informers[0].cache().len() == 2).await;

    // a's requests are held (its watch still delivers): it sees a new pod while it still
    // leads, and its patch passes the fence but does not arrive.
    proxy.requests_held.store(true, Ordering::SeqCst);
    server.create(pod("shop", "web-late")).unwrap();
    until("b took over and labelled the pod", || {
        b.leads() && labelled(&server) == 3
    })
    .await;
    assert!(!a.leads());

    // Let a's patch arrive: it names the version a saw, which b's patch replaced.
    proxy.requests_held.store(false, Ordering::SeqCst);
    let audit_a = dir.path().join("audit-a.jsonl");
    let late = || {
        std::fs::read_to_string(&audit_a)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|e| e["name"] == "web-late")
    };
    until("a's late patch answered", || late().is_some()).await;
    let e = late().unwrap();
    assert_eq!(e["result"], "failed", "{e}");
    let detail = e["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("HTTP 409") && detail.contains("not retried"),
        "{detail}"
    );
    b.stop().await;
    a.stop().await;
    let applied = applied(dir.path());
    assert_eq!(applied["web-late"], ["b"], "{applied:?}");
}

const SHARD_LEASE_DURATION: Duration = Duration::from_secs(4);

/// The config of replica `identity` in sharding `mode`: the team labeler on pods (with shards,
/// the namespaces informer stays whole), its audit log in `dir`.
fn config_in_mode(dir: &std::path::Path, identity: &str, mode: &str) -> Config {
    let config = format!(
        r#"source: kube
informers:
  - {{name: pods, apiVersion: v1, kind: Pod}}
  - {{name: namespaces, apiVersion: v1, kind: Namespace, shard: false}}
plugins:
  - name: labeler
    module: {module}
    informers: [pods, namespaces]
    actions:
      grants: [{{verbs: [patch], apiVersion: v1, kind: Pod, namespaces: [shop]}}]
      rateLimit: {{perSecond: 1000, burst: 1000}}
sharding:
  mode: {mode}
  leaseName: wisp
  leaseNamespace: default
  identity: {identity}
  leaseDuration: {duration}
  renewDeadline: {deadline}
  retryPeriod: 300ms
admin: {{listen: ""}}
audit: {{file: audit-{identity}.jsonl}}
"#,
        module = plugin_path("team_labeler").display(),
        // Shards: a longer lease, so a replica's drop (seen within a retry period, then a
        // relist after the reflector's backoff) shows in its cache before the gainer takes.
        duration = if mode == "shards" { "4s" } else { "2s" },
        deadline = if mode == "shards" { "3s" } else { "1500ms" },
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
        Self::start_in(dir, name, client, "leader").await
    }

    async fn start_in(dir: &std::path::Path, name: &str, client: kube::Client, mode: &str) -> Self {
        let config = config_in_mode(dir, name, mode);
        let path = dir.join(format!("wisp-{name}.yaml"));
        let (host, stop) = start_host(&config, client, Some(path)).await;
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
        self.host.plugins.len()
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

/// The Lease's holder and its last renewTime.
fn renewal(server: &TestApiServer) -> (String, k8s_openapi::jiff::Timestamp) {
    let lease = server
        .get("coordination.k8s.io/v1", "Lease", Some("default"), "wisp")
        .expect("the Lease");
    let spec = &lease["spec"];
    let at = spec["renewTime"].as_str().expect("a renewTime");
    (
        spec["holderIdentity"].as_str().unwrap_or("").to_owned(),
        at.parse()
            .unwrap_or_else(|e| panic!("renewTime {at:?}: {e}")),
    )
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
    applied_versions(dir)
        .into_iter()
        .map(|(pod, by)| (pod, by.into_iter().map(|(who, _)| who).collect()))
        .collect()
}

/// Every `applied` patch in the replicas' audit logs, by pod name, with who sent it and the
/// resourceVersion the pod had after it.
fn applied_versions(dir: &std::path::Path) -> BTreeMap<String, Vec<(String, String)>> {
    let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
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
                    .push((who.to_owned(), e["detail"].as_str().unwrap().to_owned()));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_of_three_replicas_leads_and_a_standby_takes_over_when_it_stops() {
    let dir = tempfile::tempdir().unwrap();
    let server = shop_server(8).await;
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
    // The standbys stay standbys while the leader renews: watched through two lease durations
    // of the leader's renewals (until its renewTime, stamped on this machine's clock, is two
    // durations past now), time enough for a standby to take a Lease it had seen unrenewed for
    // one. A slow machine makes the watch longer, not shorter.
    let from = k8s_openapi::jiff::Timestamp::now();
    until("the leader renewed through two lease durations", || {
        let (who, at) = renewal(&server);
        assert_eq!(who, replicas[leader].name, "the Lease changed hands");
        at.as_millisecond() - from.as_millisecond() >= 2 * LEASE_DURATION.as_millis() as i64
    })
    .await;
    assert_eq!(replicas.iter().filter(|r| r.leads()).count(), 1);

    // The leader stops: it releases the Lease (the standbys watch for that: no waiting out
    // the lease duration), and a standby takes over, getting the cache as its plugins' initial
    // list.
    let t = Instant::now();
    replicas[leader].stop().await;
    assert_ne!(
        holder(&server).as_deref(),
        Some(replicas[leader].name.as_str()),
        "the stopped leader released the Lease"
    );
    until("a new leader", || {
        replicas
            .iter()
            .enumerate()
            .any(|(i, r)| i != leader && r.leads() && r.plugins() == 1)
    })
    .await;
    eprintln!("takeover after a release: {:?}", t.elapsed());
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

/// A standby keeps the config it started with (it refuses reloads), but takes the Lease with the
/// config file as it is then: a plugin added meanwhile starts with the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standby_takes_the_lease_with_the_config_changed_while_it_stood_by() {
    let dir = tempfile::tempdir().unwrap();
    let server = shop_server(2).await;
    let mut a = Replica::start(dir.path(), "a", server.client()).await;
    until("a leads", || a.leads() && labelled(&server) == 2).await;
    let mut b = Replica::start(dir.path(), "b", server.client()).await;
    until("b's cache warm", || b.host.informers[0].cache().len() == 2).await;

    let path = dir.path().join("wisp-b.yaml");
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "sharding:",
        &format!(
            "  - name: inventory\n    module: {}\n    informers: [pods]\nsharding:",
            plugin_path("inventory").display()
        ),
    );
    std::fs::write(&path, text).unwrap();
    // Nothing can bring the new plugin in while b stands by: it watches no file (its reloader,
    // and with it the file watch, starts when it takes the Lease), and it refuses reloads.
    assert!(b.host.reloader.get().is_none(), "a standby watches no file");
    let reload = b.host.reload.as_ref().expect("a reload action");
    let refused = reload(None);
    assert!(
        matches!(&refused, Err(wisp_host::admin::ReloadError::Refused(m)) if m.contains("stands by")),
        "{refused:?}"
    );
    assert_eq!(b.plugins(), 0, "a standby runs no plugins");

    a.stop().await;
    until("b leads with both plugins", || {
        b.leads() && b.plugins() == 2
    })
    .await;
    let names: Vec<String> = b
        .host
        .plugins
        .list()
        .iter()
        .map(|h| h.name().to_owned())
        .collect();
    assert_eq!(names, ["labeler", "inventory"]);
    b.stop().await;
}

/// A TCP proxy to the test API server that can be frozen: while frozen, nothing it carries
/// moves in either direction (a replica cut off from the API server).
struct Freezer {
    frozen: Arc<AtomicBool>,
    /// Holds only what the replica sends (its requests), while the answers already on their
    /// way (a watch stream's events) still come: requests that passed its fence but arrive
    /// late.
    requests_held: Arc<AtomicBool>,
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
        let requests_held = Arc::new(AtomicBool::new(false));
        let (f, h) = (frozen.clone(), requests_held.clone());
        tokio::spawn(async move {
            while let Ok((down, _)) = l.accept().await {
                let Ok(up) = tokio::net::TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (dr, dw) = down.into_split();
                let (ur, uw) = up.into_split();
                tokio::spawn(pipe(dr, uw, [f.clone(), h.clone()]));
                tokio::spawn(pipe(ur, dw, [f.clone(), f.clone()]));
            }
        });
        Self {
            frozen,
            requests_held,
            url,
        }
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
    held: [Arc<AtomicBool>; 2],
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while held.iter().any(|h| h.load(Ordering::SeqCst)) {
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
    let server = shop_server(4).await;
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
    while b_took.is_none() && cut.elapsed() < patience(4 * LEASE_DURATION) {
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
    // b waited out the lease duration from its last sight of a's renewal (a renewed at most
    // a retry period before the cut). That it took over at all, without a's release, is
    // bounded by the give-up of the loop above: idle, within the lease duration + 2 s.
    assert!(b_took >= Duration::from_millis(500), "{b_took:?}");
    assert_eq!(holder(&server).as_deref(), Some("b"));
    // a's actions are fenced: nothing it sends leaves it while it does not lead.
    let fence = a
        .host
        .leadership
        .as_ref()
        .unwrap()
        .check()
        .unwrap_err()
        .to_string();
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

/// The pod keys in each replica's cache.
fn shares(replicas: &[Replica]) -> Vec<std::collections::BTreeSet<String>> {
    replicas
        .iter()
        .map(|r| {
            r.host.informers[0]
                .cache()
                .list_keys()
                .into_iter()
                .collect()
        })
        .collect()
}

/// Whether the replicas' pod caches are pairwise disjoint (no object held by two).
fn disjoint(shares: &[std::collections::BTreeSet<String>]) -> bool {
    shares.iter().enumerate().all(|(i, a)| {
        shares[i + 1..]
            .iter()
            .all(|b| a.intersection(b).next().is_none())
    })
}

/// Every pod of the server is in exactly one replica's cache.
fn split_exactly(server: &TestApiServer, replicas: &[Replica]) -> bool {
    let shares = shares(replicas);
    let total: usize = shares.iter().map(|s| s.len()).sum();
    disjoint(&shares) && total == server.objects("v1", "Pod").len()
}

async fn sharded_replicas_split_the_pods_and_hand_over(server_side: bool) {
    let dir = tempfile::tempdir().unwrap();
    let server = shop_server(30).await;
    server.faults().ignore_shard_selector(!server_side);
    let mut replicas = Vec::new();
    for name in ["r1", "r2", "r3"] {
        replicas.push(Replica::start_in(dir.path(), name, server.client(), "shards").await);
    }
    until("the pods split among three replicas", || {
        split_exactly(&server, &replicas) && shares(&replicas).iter().all(|s| !s.is_empty())
    })
    .await;
    until("every pod labelled", || labelled(&server) == 30).await;
    // Lists and watches asked the server for the share (it answered with it, or ignored it).
    let sharded: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.path == "/api/v1/pods" && r.query.contains_key("shardSelector"))
        .collect();
    if server_side {
        assert!(!sharded.is_empty(), "no list or watch asked for a shard");
    }

    // A fourth replica joins: the others drop their parts for it at once, it takes them a
    // lease duration later; no pod is ever held by two replicas.
    replicas.push(Replica::start_in(dir.path(), "r4", server.client(), "shards").await);
    let t = Instant::now();
    loop {
        let s = shares(&replicas);
        assert!(
            disjoint(&s),
            "a pod held by two replicas after {:?}",
            t.elapsed()
        );
        if split_exactly(&server, &replicas) && !s[3].is_empty() {
            break;
        }
        assert!(
            t.elapsed() < patience(2 * SHARD_LEASE_DURATION + Duration::from_secs(3)),
            "r4 never got a share"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        t.elapsed() >= SHARD_LEASE_DURATION,
        "r4 took its share after {:?}",
        t.elapsed()
    );

    // r2 stops: its membership Lease is deleted and the others take its part at once (they
    // need not wait out its lease duration).
    let t = Instant::now();
    replicas[1].stop().await;
    assert!(
        server
            .get(
                "coordination.k8s.io/v1",
                "Lease",
                Some("default"),
                "wisp-r2"
            )
            .is_none(),
        "r2's membership Lease deleted at its stop"
    );
    let live: Vec<Replica> = replicas
        .drain(..)
        .enumerate()
        .filter(|(i, _)| *i != 1)
        .map(|(_, r)| r)
        .collect();
    let mut replicas = live;
    until("r2's part taken over", || split_exactly(&server, &replicas)).await;
    eprintln!("r2's part taken over {:?} after its stop", t.elapsed());
    for i in 30..36 {
        server.create(pod("shop", &format!("web-{i}"))).unwrap();
    }
    until("the new pods labelled", || labelled(&server) == 36).await;
    for r in &mut replicas {
        r.stop().await;
    }
    // Every pod is patched by one replica only (no part has two owners), and changed once. A
    // replica may send the same patch twice, and both are applied: when its ranges change it
    // relists, and the pods it keeps come to its plugin as updates with their version unchanged
    // (a resync, as client-go delivers a relist); the labeler asks again at a resync (a patch
    // that failed never comes back). When its first patch is still queued, the second names the
    // version the first replaced, and the sender sends it on the version the first made (the
    // pod differs from it only by this plugin's own write): applied, it changes nothing, so the
    // pod keeps that version. Under load this happened in 5 of 8 runs: "web-21 patched by [r1,
    // r1]", both "resourceVersion 50".
    let applied = applied_versions(dir.path());
    assert_eq!(applied.len(), 36, "{applied:?}");
    for (pod, by) in &applied {
        let who: std::collections::BTreeSet<_> = by.iter().map(|(w, _)| w).collect();
        let after: std::collections::BTreeSet<_> = by.iter().map(|(_, rv)| rv).collect();
        assert_eq!(who.len(), 1, "{pod} patched by two replicas: {by:?}");
        assert_eq!(after.len(), 1, "{pod} changed by a repeated patch: {by:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sharded_replicas_split_the_pods_by_server_side_shard_selectors_and_hand_over() {
    sharded_replicas_split_the_pods_and_hand_over(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sharded_replicas_filter_on_their_side_when_the_server_ignores_shard_selectors() {
    sharded_replicas_split_the_pods_and_hand_over(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sharded_replica_cut_off_stops_acting_before_the_others_take_its_part() {
    let dir = tempfile::tempdir().unwrap();
    let server = shop_server(30).await;
    let proxy = Freezer::start(&server).await;
    let mut replicas = vec![
        Replica::start_in(dir.path(), "r1", server.client(), "shards").await,
        Replica::start_in(dir.path(), "r2", server.client(), "shards").await,
        Replica::start_in(dir.path(), "r3", proxy.client(), "shards").await,
    ];
    until("the pods split among three replicas", || {
        split_exactly(&server, &replicas) && shares(&replicas).iter().all(|s| !s.is_empty())
    })
    .await;

    // r3 is cut off: it cannot renew its membership; the others see its Lease unchanged and,
    // a lease duration later, take its part.
    proxy.frozen.store(true, Ordering::SeqCst);
    let cut = Instant::now();
    let mut r3_stopped = None;
    let mut taken = None;
    while taken.is_none() && cut.elapsed() < patience(3 * SHARD_LEASE_DURATION) {
        if r3_stopped.is_none() && !replicas[2].leads() {
            r3_stopped = Some(cut.elapsed());
        }
        if split_exactly(&server, &replicas[..2]) {
            taken = Some(cut.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (r3_stopped, taken) = (
        r3_stopped.expect("r3 kept acting"),
        taken.expect("r3's part never taken"),
    );
    eprintln!("r3 stopped acting {r3_stopped:?} after the cut; its part taken at {taken:?}");
    // The property is the order; that its part was taken at all (without its Lease deleted) is
    // bounded by the give-up of the loop above: idle, within the lease duration + 2 s.
    assert!(
        r3_stopped < taken,
        "r3 stopped at {r3_stopped:?}, taken at {taken:?}"
    );
    let fence = replicas[2]
        .host
        .leadership
        .as_ref()
        .unwrap()
        .check()
        .unwrap_err()
        .to_string();
    assert!(fence.contains("membership Lease not renewed"), "{fence}");

    proxy.frozen.store(false, Ordering::SeqCst);
    for r in &mut replicas {
        r.stop().await;
    }
}

/// A watch continues its list: when a replica's shard ranges change between the two (here
/// from nothing to everything, as when it first joins), the watch ends at once with
/// `Reselected` so the reflector lists again. Before, the watch went on serving the ranges it
/// read itself, and the objects newly in range, listed under the old ranges, were never seen:
/// a member that joined during that gap served nothing (`policy_reports.rs` caught it).
#[tokio::test]
async fn a_watch_after_the_shard_ranges_changed_since_the_list_relists() {
    use futures::StreamExt;
    use wisp_host::informer::lister_watcher::{
        ListOptions, ListerWatcher, SourceError, WatchOptions,
    };
    use wisp_host::scale::shards::{Ranges, ShardField, ShardView};
    use wisp_host::source::kube::KubeSource;

    let server = shop_server(3).await;
    let view = ShardView::new(ShardField::Uid, Ranges::none());
    let src = KubeSource::new(server.client(), "v1", "Pod", Some("shop")).sharded(view.clone());
    let page = src.list(ListOptions::default()).await.unwrap();
    assert!(page.items.is_empty(), "no ranges, no pods");
    let watch = |rv: String| WatchOptions {
        resource_version: rv,
        timeout_seconds: 5,
        ..WatchOptions::default()
    };

    view.set(Ranges::all());
    let mut w = src
        .watch(watch(page.resource_version.clone()))
        .await
        .unwrap();
    let first = tokio::time::timeout(patience(Duration::from_secs(5)), w.next()).await;
    assert!(
        matches!(first, Ok(Some(Err(SourceError::Reselected(_))))),
        "the watch must end for a relist, got {first:?}"
    );

    // Listed under the ranges it serves, the watch goes on, and ends when they change.
    let page = src.list(ListOptions::default()).await.unwrap();
    assert_eq!(page.items.len(), 3);
    let mut w = src.watch(watch(page.resource_version)).await.unwrap();
    server.create(pod("shop", "web-new")).unwrap();
    let next = tokio::time::timeout(patience(Duration::from_secs(5)), w.next()).await;
    assert!(matches!(next, Ok(Some(Ok(_)))), "an event, got {next:?}");
    view.set(Ranges::none());
    let end = tokio::time::timeout(patience(Duration::from_secs(5)), w.next()).await;
    assert!(
        matches!(end, Ok(Some(Err(SourceError::Reselected(_))))),
        "a change of the ranges ends the watch, got {end:?}"
    );
}

/// A hostile peer (what a plugin granted Leases in the lease namespace did before the config
/// refused such grants) creates a membership Lease for the shard group, with a field manager
/// that is not a Wisp replica's, a holder `evil` and an hour's duration. It is not a member:
/// the only replica keeps every pod (before, it counted two members and dropped about half
/// of them, which then belonged to no replica), says so once in its log, and counts it in
/// `wisp_shard_foreign_members_total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_membership_lease_not_written_by_a_wisp_replica_is_ignored() {
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    use kube::api::{Api, PostParams};
    let dir = tempfile::tempdir().unwrap();
    let server = shop_server(30).await;
    let mut r1 = Replica::start_in(dir.path(), "r1", server.client(), "shards").await;
    let r1s = std::slice::from_ref(&r1);
    until("r1 holds every pod", || split_exactly(&server, r1s)).await;
    until("every pod labelled", || labelled(&server) == 30).await;
    let own = server
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            Some("default"),
            "wisp-r1",
        )
        .expect("r1's membership Lease");
    assert_eq!(
        own["metadata"]["managedFields"][0]["manager"], "wisp",
        "{own}"
    );

    let evil = Lease {
        metadata: kube::api::ObjectMeta {
            name: Some("wisp-evil".into()),
            labels: Some([("wisp.io/shard-group".to_owned(), "wisp".to_owned())].into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("evil".into()),
            lease_duration_seconds: Some(3600),
            renew_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                k8s_openapi::jiff::Timestamp::now(),
            )),
            ..Default::default()
        }),
    };
    let pp = PostParams {
        field_manager: Some("wisp-evil".into()),
        ..Default::default()
    };
    Api::<Lease>::namespaced(server.client(), "default")
        .create(&pp, &evil)
        .await
        .expect("the peer's Lease");
    // Two rounds of the membership (each lists the group's Leases) after the peer's Lease.
    let lease_lists = || {
        server
            .requests()
            .iter()
            .filter(|r| {
                r.path == "/apis/coordination.k8s.io/v1/namespaces/default/leases"
                    && r.query.contains_key("labelSelector")
            })
            .count()
    };
    let seen = lease_lists();
    until("two more membership rounds", || lease_lists() >= seen + 2).await;
    // New pods land anywhere in the hash space: r1 must still serve all of it.
    for i in 30..36 {
        server.create(pod("shop", &format!("web-{i}"))).unwrap();
    }
    let r1s = std::slice::from_ref(&r1);
    until("r1 holds and labels every pod, the new ones too", || {
        split_exactly(&server, r1s) && labelled(&server) == 36
    })
    .await;
    let foreign = r1.host.leadership.as_ref().unwrap().foreign_members();
    assert_eq!(foreign, 1, "the foreign Lease is counted, once");
    r1.stop().await;
}
