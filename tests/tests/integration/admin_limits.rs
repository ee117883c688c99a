//! Hostile peers of the admin and metrics servers: idle and slowloris connections are cut at
//! their timeouts, connections past `admin.maxConnections` close the oldest idle one (or, when
//! every slot has a request in flight, get one `/healthz` from the reserve), so `/healthz`
//! answers however many connections a peer opens.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::http::{get, request};
use common::patience;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wisp_host::admin::server::{RESERVE, RESERVE_TIMEOUT};
use wisp_host::admin::{self, AdminState, ServerLimits};

fn limits(max_connections: usize, header: Duration, idle: Duration) -> ServerLimits {
    ServerLimits {
        max_connections,
        header_read_timeout: header,
        idle_timeout: idle,
    }
}

/// The metrics server (open endpoints only) with `limits`.
async fn metrics_server(limits: ServerLimits) -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let state = AdminState {
        limits,
        ..AdminState::default()
    };
    tokio::spawn(admin::serve_metrics(l, state, std::future::pending()));
    addr
}

/// Waits up to `within` for the server to close `s` (EOF or reset); the time it took, or
/// `None` if it is still open (with `Duration::ZERO`: whether it is closed already).
async fn closed_within(s: &mut TcpStream, within: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at((start + within).into(), s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(start.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

/// Idle connections, connections idle after a request, and slowloris peers (a header line
/// every 200 ms, never ending the head) are each closed at their timeout (not before it; the
/// slowloris peers at the header timeout, before any idle connection reached the idle one),
/// and counted.
#[tokio::test]
async fn idle_and_slowloris_connections_are_closed_at_their_timeouts() {
    // Far apart, so that the order of the cuts below holds however late the test sees them.
    let (header, idle) = (Duration::from_secs(1), Duration::from_secs(5));
    let addr = metrics_server(limits(128, header, idle)).await;
    let opened = Instant::now();
    let mut idlers = Vec::new();
    for _ in 0..20 {
        idlers.push(TcpStream::connect(addr).await.unwrap());
    }
    // A keep-alive request, answered; then the connection is idle.
    let mut kept = TcpStream::connect(addr).await.unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    while !buf.ends_with(b"ok") {
        let mut b = [0u8; 512];
        let n = kept.read(&mut b).await.unwrap();
        assert!(n > 0, "closed before the answer");
        buf.extend_from_slice(&b[..n]);
    }
    let answered = Instant::now();
    let slow: Vec<_> = (0..20)
        .map(|_| {
            tokio::spawn(async move {
                let mut s = TcpStream::connect(addr).await.unwrap();
                let first = Instant::now();
                s.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
                let (mut r, mut w) = s.into_split();
                let drip = tokio::spawn(async move {
                    while w.write_all(b"X-Slow: 1\r\n").await.is_ok() {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                });
                let mut b = [0u8; 512];
                let end = tokio::time::timeout(patience(Duration::from_secs(10)), async {
                    loop {
                        match r.read(&mut b).await {
                            Ok(0) | Err(_) => break,
                            Ok(_) => {}
                        }
                    }
                })
                .await;
                drip.abort();
                end.ok().map(|()| first.elapsed())
            })
        })
        .collect();
    for t in slow {
        let took = t.await.unwrap().expect("a slowloris peer is cut");
        assert!(
            took >= header - Duration::from_millis(100),
            "slowloris cut after {took:?} (header read timeout {header:?})"
        );
    }
    // Cut by the header timeout, not by the idle one: the server's timers fire in order
    // however late a busy machine runs them, and the idle connections' come 4 s later.
    let mut still_open = 0;
    for s in &mut idlers {
        if closed_within(s, Duration::ZERO).await.is_none() {
            still_open += 1;
        }
    }
    assert_eq!(
        still_open,
        idlers.len(),
        "idle connections closed before the slowloris peers"
    );
    for s in &mut idlers {
        let left = (opened + patience(idle + Duration::from_secs(2)))
            .saturating_duration_since(Instant::now());
        closed_within(s, left)
            .await
            .expect("an idle connection is closed");
        let took = opened.elapsed();
        assert!(
            took >= idle - Duration::from_millis(100),
            "closed at {took:?}"
        );
    }
    closed_within(&mut kept, patience(Duration::from_secs(5)))
        .await
        .expect("a connection idle after its request is closed");
    let took = answered.elapsed();
    assert!(
        took >= idle - Duration::from_millis(100),
        "idle after a request, closed at {took:?}"
    );
    let r = get(addr, "/metrics").await;
    let timed_out = r.sample("wisp_admin_connections_timed_out_total").unwrap();
    assert!(timed_out >= 41.0, "{timed_out}");
}

/// 300 idle connections to a server capped at 16: each past the cap closes the oldest idle
/// one, so the server holds 16 and `/healthz` answers on a 301st (with timeouts of an hour,
/// it answers only because connections are shed, not because they time out).
#[tokio::test]
async fn at_the_cap_a_new_connection_closes_the_oldest_idle_one_and_healthz_answers() {
    let long = Duration::from_secs(3600);
    let addr = metrics_server(limits(16, long, long)).await;
    let mut conns = Vec::new();
    for _ in 0..300 {
        conns.push(TcpStream::connect(addr).await.unwrap());
    }
    let start = Instant::now();
    let r = get(addr, "/healthz").await;
    assert_eq!((r.status, r.body.as_str()), (200, "ok"));
    eprintln!("/healthz past 300 idle connections: {:?}", start.elapsed());
    // The shed connections close as their tasks see it; then the newest stay (one of them
    // closed for /healthz's), with nothing else to close them for an hour.
    let give_up = Instant::now() + patience(common::T);
    let open = loop {
        let mut open = 0;
        for s in &mut conns {
            if closed_within(s, Duration::ZERO).await.is_none() {
                open += 1;
            }
        }
        if open <= 16 || Instant::now() > give_up {
            break open;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(open <= 16, "{open} connections still open");
    assert!(open >= 14, "only {open} connections still open");
    let r = get(addr, "/metrics").await;
    assert!(r.sample("wisp_admin_connections_shed_total").unwrap() >= 285.0);
}

/// Every slot has a request in flight (reloads that take seconds): `/healthz` and `/readyz` are
/// served from the reserve; a peer holding the reserve too gets the next connection closed at
/// once (counted), and the reserve frees itself within its timeout. The requests in flight are
/// not cut.
#[tokio::test]
async fn with_every_slot_busy_the_reserve_answers_healthz_and_frees_itself() {
    let release = Arc::new(AtomicBool::new(false));
    let running = Arc::new(AtomicUsize::new(0));
    let (rel, run) = (release.clone(), running.clone());
    let state = AdminState {
        reload: Some(Arc::new(move |_| {
            run.fetch_add(1, Ordering::SeqCst);
            while !rel.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok("reloaded".to_owned())
        })),
        limits: limits(4, Duration::from_secs(60), Duration::from_secs(60)),
        ..AdminState::default()
    };
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(admin::serve(l, state, std::future::pending()));
    let reloads: Vec<_> = (0..4)
        .map(|_| tokio::spawn(async move { request(addr, "POST", "/reload", None).await }))
        .collect();
    common::until("4 reloads in flight", || {
        running.load(Ordering::SeqCst) == 4
    })
    .await;
    for path in ["/healthz", "/readyz"] {
        let r = get(addr, path).await;
        assert_eq!(r.status, 200, "{path}: {r:?}");
    }
    // The reserve, taken by idle peers, then one more: closed at accept. (The server accepts
    // in the order the connections were made, so the reserve is taken when it comes.)
    let mut hold = Vec::new();
    for _ in 0..RESERVE {
        hold.push(TcpStream::connect(addr).await.unwrap());
    }
    let mut extra = TcpStream::connect(addr).await.unwrap();
    closed_within(&mut extra, patience(RESERVE_TIMEOUT))
        .await
        .expect("a connection past the cap and the reserve is closed");
    // At once: before the reserve's own connections, accepted just before it, reached their
    // timeout.
    for s in &mut hold {
        assert!(
            closed_within(s, Duration::ZERO).await.is_none(),
            "a reserve connection closed before the one past the reserve"
        );
    }
    for s in &mut hold {
        closed_within(s, patience(RESERVE_TIMEOUT + Duration::from_secs(1)))
            .await
            .expect("a reserve connection idle past its timeout is closed");
    }
    let r = get(addr, "/metrics").await;
    assert_eq!(r.status, 200);
    assert!(r.sample("wisp_admin_connections_refused_total").unwrap() >= 1.0);
    release.store(true, Ordering::SeqCst);
    for r in reloads {
        let r = r.await.unwrap();
        assert_eq!((r.status, r.body.as_str()), (200, "reloaded\n"));
    }
}
