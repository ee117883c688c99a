//! A watch event line or a list response over its cap is refused without being read whole; the
//! informer reports it, relists after backoff, and recovers once the server behaves.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use wisp_host::informer::SharedInformer;
use wisp_host::source::kube::{KubeSource, SizeCaps, oversized_responses};

const CAP_EVENT: usize = 64 << 10;
const CAP_LIST: usize = 256 << 10;
/// The hostile watch event line: 64 MiB, a thousand times the cap.
const HUGE_LINE: usize = 64 << 20;

/// A tiny API server: the first list is 1 MiB, the first watch sends one 64 MiB line; after
/// that it serves one pod and a normal event.
#[derive(Default)]
struct Peer {
    lists: AtomicUsize,
    watches: AtomicUsize,
    /// Bytes of the huge line the client accepted before it hung up.
    huge_written: AtomicU64,
}

fn pod(name: &str, rv: u64) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"default","uid":"u-{name}","resourceVersion":"{rv}"}}}}"#
    )
}

async fn chunk(w: &mut tokio::net::TcpStream, data: &[u8]) -> std::io::Result<()> {
    w.write_all(format!("{:x}\r\n", data.len()).as_bytes())
        .await?;
    w.write_all(data).await?;
    w.write_all(b"\r\n").await
}

async fn handle(peer: Arc<Peer>, mut s: tokio::net::TcpStream) -> std::io::Result<()> {
    let mut r = BufReader::new(&mut s);
    let mut first = String::new();
    r.read_line(&mut first).await?;
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).await? == 0 || l == "\r\n" {
            break;
        }
    }
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    s.write_all(head.as_bytes()).await?;
    if first.contains("watch=") {
        if peer.watches.fetch_add(1, Ordering::SeqCst) == 0 {
            let start = r#"{"type":"ADDED","object":{"metadata":{"name":"huge","namespace":"default","resourceVersion":"6","annotations":{"x":""#;
            chunk(&mut s, start.as_bytes()).await?;
            let block = vec![b'A'; 64 << 10];
            let mut sent = 0;
            while sent < HUGE_LINE {
                chunk(&mut s, &block).await?;
                sent += block.len();
                peer.huge_written.store(sent as u64, Ordering::SeqCst);
            }
            chunk(&mut s, b"\"}}}}\n").await?;
        } else {
            let ev = format!("{{\"type\":\"ADDED\",\"object\":{}}}\n", pod("p-2", 7));
            chunk(&mut s, ev.as_bytes()).await?;
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
    } else if peer.lists.fetch_add(1, Ordering::SeqCst) == 0 {
        let big = "B".repeat(1 << 20);
        let body = format!(
            r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"5"}},"items":[{{"metadata":{{"name":"big","namespace":"default","annotations":{{"x":"{big}"}}}}}}]}}"#
        );
        for c in body.as_bytes().chunks(16 << 10) {
            chunk(&mut s, c).await?;
        }
    } else {
        let body = format!(
            r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"5"}},"items":[{}]}}"#,
            pod("p-1", 5)
        );
        chunk(&mut s, body.as_bytes()).await?;
    }
    s.write_all(b"0\r\n\r\n").await?;
    Ok(())
}

#[tokio::test]
async fn oversized_watch_lines_and_lists_are_cut_at_the_cap_and_the_informer_recovers() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let peer = Arc::new(Peer::default());
    let p = peer.clone();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            tokio::spawn(handle(p.clone(), s));
        }
    });
    let mut cfg = kube::Config::new(format!("http://{addr}").parse().unwrap());
    cfg.default_namespace = "default".into();
    let client = kube::Client::try_from(cfg).unwrap();
    let src = KubeSource::new(client, "v1", "Pod", Some("default"))
        .named("capped-pods")
        .size_caps(SizeCaps {
            watch_event: CAP_EVENT,
            list_body: CAP_LIST,
        });
    let inf = SharedInformer::new("capped-pods", Arc::new(src), fast_config());
    let _stop = start(&inf);
    until("recovered", || {
        cache_state(&inf).keys().cloned().collect::<Vec<_>>() == ["default/p-1", "default/p-2"]
    })
    .await;

    assert_eq!(
        oversized_responses().get("capped-pods").copied(),
        Some(2),
        "the list and the watch event, each refused and counted"
    );
    assert!(
        peer.lists.load(Ordering::SeqCst) >= 3,
        "relisted after each"
    );
    let written = peer.huge_written.load(Ordering::SeqCst);
    eprintln!("the host took {written} bytes of a {HUGE_LINE}-byte watch line (cap {CAP_EVENT})");
    assert!(
        written < (HUGE_LINE / 4) as u64,
        "the host stopped reading at the cap: it took {written} bytes of a {HUGE_LINE}-byte line"
    );
}

/// The test API server's `endless_lists` fault, through the real `kube::Client`: pages of 500
/// new 4 KiB objects with a continue token every time, and a streaming list whose initial
/// events never end (the server would give up only after 256 MiB per list). One informer lists
/// in pages, one streams, each under a whole-list cap of 8 MiB: each list stops at the cap,
/// nothing of it reaches the cache, each stop is counted, the informers relist after backoff
/// (the paged one reads no more than the pages the cap allows each time, and the streaming one
/// never falls back to a list), and once the server behaves both list its pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_without_end_stop_at_the_whole_list_cap_are_counted_and_relist_after_backoff() {
    use wisp_host::informer::lister_watcher::ListCaps;
    use wisp_host::informer::reflector::lists_over_cap;
    use wisp_tests::Verb;
    const OBJECT: usize = 4 << 10;
    let server = server_with_pods(3).await;
    server.faults().endless_lists(Some(wisp_tests::EndlessList {
        object_bytes: OBJECT,
        give_up_after: 256 << 20,
    }));
    let config = |watch_list: bool| {
        let mut c = fast_config();
        c.reflector.use_watch_list = watch_list;
        c.reflector.list_caps = ListCaps {
            bytes: 8 << 20,
            objects: 1_000_000,
        };
        c
    };
    let paged = informer_of(&server, "endless-paged", "v1", "Pod", config(false));
    let streamed = informer_of(&server, "endless-streamed", "v1", "Pod", config(true));
    let (_p, _s) = (start(&paged), start(&streamed));
    let over = |n: &str| lists_over_cap().get(n).copied().unwrap_or(0);
    until("three lists of each over the cap", || {
        over("endless-paged") >= 3 && over("endless-streamed") >= 3
    })
    .await;
    assert!(cache_state(&paged).is_empty() && cache_state(&streamed).is_empty());
    assert_eq!((paged.stats().lists, streamed.stats().lists), (0, 0));

    let requests = server.requests();
    let pages = requests
        .iter()
        .filter(|r| r.verb == Verb::List && r.path == "/api/v1/pods")
        .count() as u64;
    let firsts = requests
        .iter()
        .filter(|r| r.verb == Verb::List && !r.query.contains_key("continue"))
        .count() as u64;
    // 8 MiB of 4 KiB objects is ~2,000 objects: the list stops on the 5th page of 500.
    let per_list = (8 << 20) / (OBJECT as u64 * 500) + 1;
    assert!(
        pages <= firsts * per_list,
        "{pages} pages read in {firsts} lists (at most {per_list} each)"
    );
    let streams = requests
        .iter()
        .filter(|r| {
            r.query
                .get("sendInitialEvents")
                .is_some_and(|v| v == "true")
        })
        .count() as u64;
    assert!(streams >= 3, "{streams} streaming lists");
    assert_eq!(
        requests
            .iter()
            .filter(|r| r.verb == Verb::List && r.query.contains_key("limit"))
            .count() as u64,
        pages,
        "every list is the paged informer's: the streaming one never fell back to a list"
    );

    server.faults().endless_lists(None);
    until("both informers hold the server's pods", || {
        cache_state(&paged).len() == 3 && cache_state(&streamed).len() == 3
    })
    .await;
}
