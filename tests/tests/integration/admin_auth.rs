//! The admin endpoints that act or reveal data need a bearer token unless the admin server
//! listens on loopback only; health, readiness and metrics stay open.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::http::request;
use wisp_host::admin::{self, AdminAuth, AdminState};

/// A protected endpoint: method and path.
const PROTECTED: &[(&str, &str)] = &[
    ("GET", "/plugins"),
    ("GET", "/verdicts"),
    ("GET", "/audit"),
    ("POST", "/reload"),
    ("POST", "/plugins/audit/reload"),
];

/// (status, body) of `method path` with an optional bearer token.
async fn call(addr: SocketAddr, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let r = request(addr, method, path, token).await;
    (r.status, r.body)
}

/// Admin state whose reload action counts its calls.
fn state(reloads: Arc<AtomicUsize>) -> AdminState {
    AdminState {
        reload: Some(Arc::new(move |_| {
            reloads.fetch_add(1, Ordering::SeqCst);
            Ok("reloaded".to_owned())
        })),
        ..AdminState::default()
    }
}

/// Serves on every interface (a non-loopback address); returns the address to connect to.
async fn serve_everywhere(state: AdminState, auth: AdminAuth) -> SocketAddr {
    let l = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(admin::serve_with_auth(
        l,
        state,
        auth,
        std::future::pending(),
    ));
    SocketAddr::from(([127, 0, 0, 1], port))
}

#[tokio::test]
async fn without_a_token_a_non_loopback_admin_refuses_protected_endpoints_but_serves_metrics() {
    let reloads = Arc::new(AtomicUsize::new(0));
    let l = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], l.local_addr().unwrap().port()));
    tokio::spawn(admin::serve(
        l,
        state(reloads.clone()),
        std::future::pending(),
    ));
    for (m, p) in PROTECTED {
        let (code, body) = call(addr, m, p, None).await;
        assert_eq!(code, 403, "{m} {p}: {body}");
        assert!(body.contains("admin.tokenFile"), "{m} {p}: {body}");
    }
    assert_eq!(reloads.load(Ordering::SeqCst), 0, "no reload ran");
    assert_eq!(call(addr, "GET", "/healthz", None).await.0, 200);
    assert_eq!(call(addr, "GET", "/readyz", None).await.0, 200);
    let (code, body) = call(addr, "GET", "/metrics", None).await;
    assert_eq!(code, 200);
    assert!(body.contains("# TYPE wisp_"), "{body}");
}

#[tokio::test]
async fn with_a_token_file_protected_endpoints_need_that_token_read_again_when_it_changes() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("token");
    std::fs::write(&file, "s3cret-one\n").unwrap();
    let reloads = Arc::new(AtomicUsize::new(0));
    let addr = serve_everywhere(
        state(reloads.clone()),
        AdminAuth {
            token_file: Some(file.clone()),
        },
    )
    .await;
    for (m, p) in PROTECTED {
        let (code, body) = call(addr, m, p, None).await;
        assert_eq!(code, 401, "{m} {p} without a token: {body}");
        let (code, body) = call(addr, m, p, Some("s3cret-on")).await;
        assert_eq!(code, 401, "{m} {p} with a wrong token: {body}");
    }
    assert_eq!(reloads.load(Ordering::SeqCst), 0);
    for (m, p) in &PROTECTED[..4] {
        let (code, body) = call(addr, m, p, Some("s3cret-one")).await;
        assert_eq!(code, 200, "{m} {p} with the token: {body}");
    }
    assert_eq!(reloads.load(Ordering::SeqCst), 1, "POST /reload ran");
    assert_eq!(call(addr, "GET", "/metrics", None).await.0, 200);

    // A rotated token (a new Secret mounted) takes effect without a restart.
    std::fs::write(&file, "s3cret-two-rotated\n").unwrap();
    assert_eq!(call(addr, "GET", "/audit", Some("s3cret-one")).await.0, 401);
    assert_eq!(
        call(addr, "GET", "/audit", Some("s3cret-two-rotated"))
            .await
            .0,
        200
    );
}

#[tokio::test]
async fn on_loopback_without_a_token_every_endpoint_answers() {
    let reloads = Arc::new(AtomicUsize::new(0));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(admin::serve(
        l,
        state(reloads.clone()),
        std::future::pending(),
    ));
    for (m, p) in &PROTECTED[..4] {
        assert_eq!(call(addr, m, p, None).await.0, 200, "{m} {p}");
    }
    assert_eq!(reloads.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_metrics_address_serves_only_the_open_endpoints() {
    let l = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], l.local_addr().unwrap().port()));
    tokio::spawn(admin::serve_metrics(
        l,
        state(Arc::new(AtomicUsize::new(0))),
        std::future::pending(),
    ));
    assert_eq!(call(addr, "GET", "/metrics", None).await.0, 200);
    assert_eq!(call(addr, "GET", "/healthz", None).await.0, 200);
    for (m, p) in PROTECTED {
        assert_eq!(call(addr, m, p, Some("anything")).await.0, 404, "{m} {p}");
    }
}

/// A peer guessing tokens: the first 20 failures get 401, then every request to a protected
/// endpoint gets 429 with `Retry-After` without its token being looked at (the right one
/// included, so a guess answered 429 tells nothing), at most ~5 failures a second get an
/// answer, both are counted in `/metrics`, and once the rate drops the right token works.
#[tokio::test]
async fn token_guesses_past_the_failure_rate_get_429_whatever_the_token_and_are_counted() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("token");
    std::fs::write(&file, "the-right-token\n").unwrap();
    let addr = serve_everywhere(
        state(Arc::new(AtomicUsize::new(0))),
        AdminAuth {
            token_file: Some(file),
        },
    )
    .await;
    for i in 0..admin::auth::FAILURE_BURST {
        let (code, body) = call(addr, "GET", "/plugins", Some(&format!("guess-{i}"))).await;
        assert_eq!(code, 401, "guess {i}: {body}");
    }
    let r = request(addr, "GET", "/plugins", Some("guess-x")).await;
    assert_eq!(r.status, 429, "{r:?}");
    assert!(r.header("retry-after").is_some(), "{r:?}");
    assert!(r.body.contains("too many failed token checks"), "{r:?}");
    let r = request(addr, "GET", "/plugins", Some("the-right-token")).await;
    assert_eq!(
        r.status, 429,
        "the token is not checked while limited: {r:?}"
    );

    // A flood until 200 guesses were refused 429: 401s (answers about a guess) stay within the
    // refill rate over the time it took, however long a busy machine makes that.
    let start = std::time::Instant::now();
    let (mut unauthorized, mut limited) = (0u32, 0u32);
    while limited < 200 {
        assert!(
            start.elapsed() < common::patience(common::T),
            "{unauthorized} 401s, {limited} 429s"
        );
        match call(addr, "GET", "/audit", Some("guess-y")).await.0 {
            401 => unauthorized += 1,
            429 => limited += 1,
            other => panic!("unexpected {other}"),
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let bound = (admin::auth::FAILURES_PER_SECOND * secs).ceil() as u32 + 1;
    eprintln!("flood: {unauthorized} answered 401, {limited} answered 429 in {secs:.2} s");
    assert!(unauthorized <= bound, "{unauthorized} 401s in {secs:.2} s");
    let r = request(addr, "GET", "/metrics", None).await;
    assert!(
        r.sample("wisp_admin_auth_failures_total").unwrap() >= f64::from(20 + unauthorized),
        "{}",
        r.body
    );
    assert!(
        r.sample("wisp_admin_auth_rate_limited_total").unwrap() >= f64::from(limited + 2),
        "{}",
        r.body
    );

    // After the Retry-After pause the right token is served, and does not use up the allowance.
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    for _ in 0..30 {
        assert_eq!(
            call(addr, "GET", "/plugins", Some("the-right-token"))
                .await
                .0,
            200
        );
    }
}
