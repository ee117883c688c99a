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
