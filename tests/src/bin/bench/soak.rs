//! Memory behind a slow plugin (issue 42 item 2's bound): the `wisp` binary as a process against
//! the test API server over TCP, a writer updating pods at a steady rate, and one plugin 100
//! times slower than that rate (test-faults, `mode: busy`, one notification per call) on the
//! default queue bound (64 MiB, `coalesce`: level-triggered delivery). The host's RSS is read
//! every 10 s: once its queue has reached its byte bound, it stays flat; when the writer stops,
//! the plugin catches up and ends with the server's final state (its view's checksum against
//! the server's). Run by name only (`--only soak`): 30 minutes (`WISP_SOAK_MINUTES`), 3 with
//! `--quick`.

use std::time::{Duration, Instant};

use serde_json::json;
use wisp_tests::TestApiServer;

use super::process::{Host, get, wisp_binary};
use crate::Args;

/// Pods the writer updates, in turn.
const PODS: usize = 300;
/// Updates per second.
const RATE: u64 = 100;
/// The plugin's time per notification: 100 times the writer's interval.
const BUSY_MS: u64 = 1000;

/// The host's resident memory (`VmRSS`), bytes.
fn rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb << 10)
}

/// The value of the sample `name{plugin="slow"...}` in a `/metrics` text (the first one).
fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?;
        if !rest.starts_with('{') || !rest.contains("plugin=\"slow\"") {
            return None;
        }
        rest.rsplit(' ').next()?.parse().ok()
    })
}

/// A ~2 KB pod, its annotation `wisp.test/n` at `n`.
fn pod(i: usize, n: u64) -> serde_json::Value {
    let mut p = wisp_tests::pod("shop", &format!("web-{i}"));
    p["metadata"]["annotations"] = json!({
        "wisp.test/n": n.to_string(),
        "wisp.test/padding": "x".repeat(1500),
    });
    p
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / f64::from(1 << 20))
}

pub(crate) async fn soak_figures(a: &Args) -> anyhow::Result<()> {
    let wisp = wisp_binary()?;
    let minutes: u64 = match std::env::var("WISP_SOAK_MINUTES") {
        Ok(m) => m.parse()?,
        Err(_) if a.quick => 3,
        Err(_) => 30,
    };
    let faults = std::fs::canonicalize(&a.plugin_dir)?.join("test_faults.wasm");
    let server = TestApiServer::start().await?;
    for i in 0..PODS {
        server.create(pod(i, 0))?;
    }
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("kubeconfig"), server.kubeconfig())?;
    std::fs::write(
        dir.path().join("wisp.yaml"),
        format!(
            "source: kube\ninformers:\n  - {{name: pods, apiVersion: v1, kind: Pod}}\n\
             plugins:\n  - {{name: slow, module: {}, informers: [pods], batch: 1, \
             settings: {{mode: busy, busyMs: {BUSY_MS}}}, limits: {{deadline: 10s}}, \
             onFailure: {{quarantineAfter: 0}}}}\n\
             engine: {{cacheDir: modules}}\nadmin: {{listen: \"127.0.0.1:0\"}}\n",
            faults.display()
        ),
    )?;
    let mut host = Host::start(&wisp, dir.path(), None)?;
    let admin = host.listening("admin server listening")?;
    let pid = host.pid();
    let metrics = || {
        get(admin, "/metrics", Duration::from_secs(30))
            .map(|(_, body, _)| body)
            .unwrap_or_default()
    };
    let started = Instant::now();
    while sample(&metrics(), "wisp_plugin_view_size").is_none_or(|n| n < PODS as f64) {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "the plugin never saw the {PODS} pods:\n{}",
            host.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "\n## Memory behind a plugin 100x slower than the event rate ({minutes} min)\n\n\
         `wisp run` (release, this bench's sibling) against the test API server over TCP: {PODS} \
         pods of ~2 KB, updated in turn at {RATE} per second; one plugin (test-faults, `mode: \
         busy`, {BUSY_MS} ms per notification, `batch: 1`) on the default queue bound \
         (`queue.maxBytes` 64 MiB, `coalesce`). Load at the start: {}.\n",
        load()
    );
    println!("| minute | host RSS | queued bytes | queued notifications | coalesced | delivered |");
    println!("|---|---|---|---|---|---|");
    let interval = Duration::from_micros(1_000_000 / RATE);
    let began = Instant::now();
    let end = began + Duration::from_secs(minutes * 60);
    let mut next_write = Instant::now();
    let mut next_sample = Instant::now();
    let (mut n, mut written) = (0u64, 0u64);
    let mut rows: Vec<(f64, u64, f64)> = Vec::new();
    while Instant::now() < end {
        let now = Instant::now();
        if now >= next_sample {
            let m = metrics();
            let r = rss(pid);
            let bytes = sample(&m, "wisp_plugin_queue_bytes").unwrap_or(0.0);
            let depth = sample(&m, "wisp_plugin_queue_depth").unwrap_or(0.0);
            let coalesced = sample(&m, "wisp_plugin_queue_coalesced_total").unwrap_or(0.0);
            let delivered = sample(&m, "wisp_plugin_delivered_total").unwrap_or(0.0);
            let minute = began.elapsed().as_secs_f64() / 60.0;
            rows.push((minute, r, coalesced));
            println!(
                "| {minute:.1} | {} | {} | {depth} | {coalesced} | {delivered} |",
                mib(r),
                mib(bytes as u64)
            );
            next_sample += Duration::from_secs(if a.quick { 10 } else { 60 });
        }
        while Instant::now() >= next_write {
            let i = (written as usize) % PODS;
            if i == 0 {
                n += 1;
            }
            server.update(pod(i, n))?;
            written += 1;
            next_write += interval;
        }
        tokio::time::sleep(next_write.saturating_duration_since(Instant::now())).await;
    }
    let wrote_for = began.elapsed();
    // The cap is reached when the queue starts coalescing (its notifications compacted to one
    // per object, the memory given back over the next sample); RSS from the sample after.
    let capped: Vec<&(f64, u64, f64)> = rows.iter().filter(|r| r.2 > 0.0).skip(1).collect();
    let (low, high) = capped
        .iter()
        .fold((u64::MAX, 0), |(lo, hi), r| (lo.min(r.1), hi.max(r.1)));
    println!(
        "\n{written} updates in {:.1} min ({:.1}/s). After the queue reached its bound (from the \
         sample after minute {}, when it started coalescing): RSS {} to {} (max {:+.1} % over \
         min). Load at the end of the writes: {}.",
        wrote_for.as_secs_f64() / 60.0,
        written as f64 / wrote_for.as_secs_f64(),
        rows.iter()
            .find(|r| r.2 > 0.0)
            .map_or("-".into(), |r| format!("{:.1}", r.0)),
        mib(low),
        mib(high),
        if low == u64::MAX {
            0.0
        } else {
            (high as f64 / low as f64 - 1.0) * 100.0
        },
        load()
    );
    let (size, sum) = wisp_tests::view::server_checksum(&server);
    let caught_up = Instant::now();
    loop {
        let m = metrics();
        if sample(&m, "wisp_plugin_view_size") == Some(size as f64)
            && sample(&m, "wisp_plugin_view_checksum") == Some(sum)
        {
            println!(
                "Writer stopped: the plugin ended with the server's final state ({size} pods, every \
                 resourceVersion) {:.0} s later.",
                caught_up.elapsed().as_secs_f64()
            );
            break;
        }
        if caught_up.elapsed() > Duration::from_secs(PODS as u64 * BUSY_MS / 1000 * 3 + 120) {
            println!(
                "Writer stopped: the plugin did NOT end with the server's final state within {:.0} s.",
                caught_up.elapsed().as_secs_f64()
            );
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    host.stop(Duration::from_secs(60))?;
    Ok(())
}

/// `uptime`'s load averages.
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
