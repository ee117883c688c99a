//! Hot reload latency: the reload itself, and a file change until the new version runs.

use std::time::{Duration, Instant};

use super::common::*;
use crate::Args;

/// A copy of a module with a custom section appended: same code, new hash.
pub(crate) fn variant(bytes: &[u8], tag: u32) -> Vec<u8> {
    let mut b = bytes.to_vec();
    let payload = tag.to_le_bytes();
    b.extend_from_slice(&[0, 1 + 1 + payload.len() as u8, 1, b'w']);
    b.extend_from_slice(&payload);
    b
}

/// File change -> new version live, through the real watcher (debounce included), and the
/// reload itself (check + swap) called directly; cache hit (a module seen before) and miss.
pub(crate) async fn reload_figures(a: &Args) -> anyhow::Result<()> {
    let rounds = if a.quick { 10 } else { 100 };
    let dir = tempfile::tempdir()?;
    std::fs::create_dir(dir.path().join("cluster"))?;
    std::fs::write(
        dir.path().join("cluster/p.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: x}\n",
    )?;
    let base = std::fs::read(a.plugin_dir.join("audit_log.wasm"))?;
    let module = dir.path().join("audit.wasm");
    std::fs::write(&module, &base)?;
    let cfg_path = dir.path().join("wisp.yaml");
    std::fs::write(
        &cfg_path,
        format!(
            "source: dir:cluster\ninformers:\n  - {{name: pods, apiVersion: v1, kind: Pod}}\nplugins:\n  - name: audit\n    module: audit.wasm\n    informers: [pods]\nadmin: {{listen: \"\"}}\nengine: {{cacheDir: {}}}\n",
            dir.path().join("cache").display()
        ),
    )?;
    let cfg = wisp_host::config::Config::load(&cfg_path)?;
    let opts = wisp_host::app::RunOptions {
        config_path: Some(cfg_path.clone()),
        ..Default::default()
    };
    let host = wisp_host::app::start(&cfg, &opts, std::future::pending()).await?;
    let plugin = host.plugins.list()[0].clone();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let gen_now = || plugin.status().version().1;
    println!("\n## Hot reload ({rounds} reloads each; median / p99)\n");
    println!("| path | cache | median | p99 |");
    println!("|---|---|---|---|");
    let mut tag = 0u32;
    for (label, hit) in [("miss (compile)", false), ("hit (compiled before)", true)] {
        let mut file_times = Vec::new();
        let mut api_times = Vec::new();
        let pair = [variant(&base, 900_001), variant(&base, 900_002)];
        for i in 0..rounds {
            // A hit alternates between two compiled variants: the file always gets the first,
            // the API call the second, so each change differs from what runs.
            let bytes = if hit {
                pair[0].clone()
            } else {
                tag += 1;
                variant(&base, tag)
            };
            if hit && i == 0 {
                // Compile both variants first.
                for v in &pair {
                    let mut spec = cfg.plugin_specs(&Default::default()).remove(0);
                    let warm = dir.path().join("warm.wasm");
                    std::fs::write(&warm, v)?;
                    spec.module = warm;
                    let p = plugin.clone();
                    tokio::task::spawn_blocking(move || p.reload(spec))
                        .await?
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                }
            }
            let g = gen_now();
            let t = Instant::now();
            std::fs::write(&module, &bytes)?;
            wait_gen(&plugin, g + 1).await?;
            file_times.push(t.elapsed());
            // The same kind of change through the API (no watcher, no debounce), from a file no
            // plugin watches.
            let api_bytes = if hit {
                pair[1].clone()
            } else {
                tag += 1;
                variant(&base, tag)
            };
            let api_module = dir.path().join("api.wasm");
            std::fs::write(&api_module, &api_bytes)?;
            let mut spec = cfg.plugin_specs(&Default::default()).remove(0);
            spec.module = api_module;
            let t = Instant::now();
            let p = plugin.clone();
            tokio::task::spawn_blocking(move || p.reload(spec))
                .await?
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            api_times.push(t.elapsed());
        }
        println!(
            "| file change -> new version live (watcher, {} ms debounce) | {label} | {} | {} |",
            wisp_host::reloader::DEBOUNCE.as_millis(),
            ms(median(file_times.clone())),
            ms(percentile(file_times, 0.99))
        );
        println!(
            "| reload call -> new version live (check + swap) | {label} | {} | {} |",
            ms(median(api_times.clone())),
            ms(percentile(api_times, 0.99))
        );
    }
    Ok(())
}

pub(crate) async fn wait_gen(
    p: &wisp_host::plugin::PluginHandle,
    target: u64,
) -> anyhow::Result<()> {
    let start = Instant::now();
    while p.status().version().1 < target {
        if start.elapsed() > Duration::from_secs(10) {
            anyhow::bail!(
                "reload to generation {target} did not happen (last error: {:?})",
                p.status().last_error()
            );
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    Ok(())
}
