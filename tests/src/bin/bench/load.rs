//! Plugin load: compile, disk-cache hit, memory hit, fresh instance.

use std::time::Instant;

use anyhow::Context;
use wisp_host::plugin::{EngineConfig, LoadSource, PluginEngine};

use super::common::*;
use crate::Args;

pub(crate) fn load_figures(a: &Args) -> anyhow::Result<()> {
    println!("\n## Plugin load (median; module -> running instance)\n");
    println!(
        "| plugin | size | compile | disk cache hit | memory hit | fresh instance | describe+init |"
    );
    println!("|---|---|---|---|---|---|---|");
    let rounds = if a.quick { 3 } else { 15 };
    for name in ["audit_log", "image_policy", "bench"] {
        let path = a.plugin_dir.join(format!("{name}.wasm"));
        let bytes = std::fs::read(&path)
            .with_context(|| format!("{} (run `cargo xtask plugins`)", path.display()))?;
        let (mut compile, mut disk, mut mem) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let dir = tempfile::tempdir()?;
            let cfg = || EngineConfig {
                cache_dir: Some(dir.path().into()),
                ..EngineConfig::default()
            };
            let e1 = PluginEngine::new(cfg())?;
            let l = e1.load(&bytes).map_err(|e| anyhow::anyhow!("{e:?}"))?;
            assert_eq!(l.source, LoadSource::Compiled);
            compile.push(l.elapsed);
            let l = e1.load(&bytes).map_err(|e| anyhow::anyhow!("{e:?}"))?;
            mem.push(l.elapsed);
            let e2 = PluginEngine::new(cfg())?;
            let l = e2.load(&bytes).map_err(|e| anyhow::anyhow!("{e:?}"))?;
            assert_eq!(l.source, LoadSource::Disk);
            disk.push(l.elapsed);
        }
        let engine = PluginEngine::new(EngineConfig {
            cache_dir: None,
            ..EngineConfig::default()
        })?;
        let prepared = Prepared::new(&engine, &path, &bytes, name)?;
        let mut inst_times = Vec::new();
        let mut init_times = Vec::new();
        for _ in 0..rounds * 20 {
            let api = prepared.api();
            let t = Instant::now();
            let mut inst = prepared.instance(&engine, api)?;
            inst_times.push(t.elapsed());
            let t = Instant::now();
            inst.describe().map_err(|e| anyhow::anyhow!("{e}"))?;
            let _ = inst.init("{}").map_err(|e| anyhow::anyhow!("{e}"))?;
            init_times.push(t.elapsed());
        }
        println!(
            "| {name} | {} KB | {} | {} | {} | {} | {} |",
            bytes.len() / 1024,
            ms(median(compile)),
            ms(median(disk)),
            us(median(mem)),
            us(median(inst_times)),
            us(median(init_times))
        );
    }
    Ok(())
}
