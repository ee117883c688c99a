//! The first-load tier's price (issue 42 item 6): the same plugin on its Winch code (the
//! first-load tier, [`Tier::Baseline`]) and on its Cranelift code, delivering the same updates;
//! per notification, wall clock here and instructions under `--callgrind --only tiers`
//! (`bench/callgrind.rs`), with the compile each tier costs.
//!
//! The tier is pinned by two engines, neither setting anything a host does not: the Winch one
//! has the first-load tier on for every size (`first_load_tier_min: 0`) and no module cache,
//! with its background Cranelift compiles held ([`PluginEngine::hold_tier_up`]) for the whole
//! process, so every module loads and stays on its Winch code; the Cranelift one has the tier
//! off. Each load is checked to come from the tier it is measured as.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use wisp_host::informer::{Delivery, Notification, Object};
use wisp_host::plugin::compile::{LoadSource, Tier};
use wisp_host::plugin::runtime::PluginRuntime;
use wisp_host::plugin::{EngineConfig, PluginEngine};

use super::common::*;
use crate::Args;

/// A plugin the section measures: its label, file and settings.
pub(crate) struct TierPlugin {
    pub(crate) label: &'static str,
    pub(crate) file: &'static str,
    pub(crate) settings: fn() -> Value,
}

fn no_settings() -> Value {
    json!({})
}

/// The audit-log example in three languages (image-policy's verdicts need an informer granted,
/// which a plugin checked offline has not).
pub(crate) const PLUGINS: [TierPlugin; 3] = [
    TierPlugin {
        label: "audit-log, Rust",
        file: "audit_log.wasm",
        settings: no_settings,
    },
    TierPlugin {
        label: "audit-log, Python",
        file: "audit-log-py.wasm",
        settings: no_settings,
    },
    TierPlugin {
        label: "audit-log, JavaScript",
        file: "audit-log-js.wasm",
        settings: no_settings,
    },
];

/// The plugins of [`PLUGINS`] in `dir` (`cargo xtask plugins` builds them all; the Python and
/// JavaScript ones need their toolchains), those whose file names contain `WISP_TIERS_ONLY`
/// when it is set (`WISP_TIERS_ONLY=-js`: the JavaScript ones).
pub(crate) fn plugins(dir: &Path) -> impl Iterator<Item = &'static TierPlugin> + '_ {
    let only = std::env::var("WISP_TIERS_ONLY").unwrap_or_default();
    PLUGINS.iter().filter(move |p| {
        let there = dir.join(p.file).exists();
        if !there {
            eprintln!("{} is not in {}: not measured", p.file, dir.display());
        }
        there && p.file.contains(&only)
    })
}

/// The batch sizes measured: one notification per call (a host keeping up with a slow write
/// rate) and the host's largest batch (`batch`'s default, 64).
pub(crate) const BATCHES: [usize; 2] = [1, 64];

/// The engine a tier is pinned on (see the module's comment). `cache`: the Cranelift engine's
/// module cache (the callgrind child's, compiled under valgrind), `None`: compile in memory.
pub(crate) fn tier_engine(tier: Tier, cache: Option<&Path>) -> anyhow::Result<Arc<PluginEngine>> {
    let baseline = tier == Tier::Baseline;
    let engine = PluginEngine::new(EngineConfig {
        cache_dir: if baseline {
            None
        } else {
            cache.map(Path::to_owned)
        },
        first_load_tier: baseline,
        first_load_tier_min: 0,
        compiler: None,
        // Compiling under valgrind on two loaded cores outlasts the default (120 s).
        compile_timeout: Duration::from_secs(900),
        ..EngineConfig::default()
    })?;
    if baseline {
        // Never released: the background Cranelift compiles wait for the process to end, so no
        // module leaves its Winch code, and no compile takes a core from what is measured.
        std::mem::forget(engine.hold_tier_up());
    }
    Ok(engine)
}

/// Updates of realistic pods (the fixture's, ~2 KB each), each to a new resourceVersion: what a
/// write to a pod delivers.
pub(crate) fn updates(n: usize) -> Vec<Delivery> {
    deliveries(n)
        .into_iter()
        .map(|d| {
            let new = d.notification.object().clone();
            let mut old = serde_json::from_str::<Value>(new.json()).expect("fixture is JSON");
            old["metadata"]["resourceVersion"] = json!(format!("{}", d.seq + 1_000_000));
            let old = Arc::new(Object::from_value(old, true).expect("fixture is an object"));
            Delivery {
                seq: d.seq,
                notification: Notification::Update { old, new },
            }
        })
        .collect()
}

/// A plugin checked (compiled or from memory, instantiated, `init`) on `engine`, which must
/// give it `tier`'s code; with how long the load took and where it came from. `slow`: its
/// deadlines made long enough for valgrind (the JavaScript plugin takes ~1 s per notification
/// under callgrind, over the default 50 ms); otherwise the defaults.
pub(crate) fn checked_on(
    engine: &Arc<PluginEngine>,
    tier: Tier,
    dir: &Path,
    p: &TierPlugin,
    slow: bool,
) -> anyhow::Result<(
    PluginRuntime,
    Arc<wisp_host::plugin::status::PluginStatus>,
    LoadSource,
    Duration,
)> {
    let path = dir.join(p.file);
    if !path.exists() {
        bail!("{} is missing (run `cargo xtask plugins`)", path.display());
    }
    let mut spec = wisp_host::plugin::PluginSpec::new("", &path, &[]);
    spec.settings = (p.settings)();
    if slow {
        spec.limits.deadline = Duration::from_secs(600);
        spec.limits.deadline_per_notification = Duration::from_secs(60);
        spec.limits.startup_deadline = Duration::from_secs(600);
    }
    let checked = wisp_host::plugin::loader::check_file(engine, spec, Default::default())
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("{}", path.display()))?;
    if checked.report.tier != tier {
        bail!(
            "{} loaded on the {} tier, not {}",
            p.file,
            checked.report.tier.as_str(),
            tier.as_str()
        );
    }
    let (source, load) = (checked.report.source, checked.report.load);
    let status = checked.status().clone();
    Ok((checked.into_runtime(engine.clone()), status, source, load))
}

/// Fails when the plugin failed a notification (a measured figure must be of delivered ones).
pub(crate) fn none_failed(
    status: &wisp_host::plugin::status::PluginStatus,
    what: &str,
) -> anyhow::Result<()> {
    let failed = wisp_host::plugin::status::PluginCounters::get(&status.counters.failed);
    if failed > 0 {
        bail!(
            "{what} failed {failed} notifications: {:?}",
            status.last_error()
        );
    }
    Ok(())
}

/// One timed pass on a fresh instance of `p` on `tier`: `items` delivered in batches of
/// `batch` (after one warm-up batch); fails when a notification failed.
fn pass(
    engine: &Arc<PluginEngine>,
    tier: Tier,
    dir: &Path,
    p: &TierPlugin,
    items: &[Delivery],
    batch: usize,
) -> anyhow::Result<Duration> {
    let (mut rt, status, ..) = checked_on(engine, tier, dir, p, false)?;
    rt.handle("pods", &items[..batch.min(items.len())]);
    let t = Instant::now();
    for chunk in items.chunks(batch) {
        rt.handle("pods", chunk);
    }
    let took = per_item(t.elapsed(), items.len());
    none_failed(&status, &format!("{} on {}", p.label, tier.as_str()))?;
    Ok(took)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

pub(crate) fn tier_figures(a: &Args) -> anyhow::Result<()> {
    // Each pass on a fresh instance: the JavaScript plugins' heap grows with every notification
    // (BENCHMARKS.md, "The first-load tier's price") and runs out of the default 64 MiB after
    // 300-500 of them.
    let n = if a.quick { 64 } else { 192 };
    let rounds = if a.quick { 3 } else { 5 };
    let items = updates(n);
    println!(
        "\n## The first-load tier: Winch vs Cranelift code, per notification ({n} pod updates, \
         median of {rounds} interleaved passes, each on a fresh instance; load average {})\n",
        load_average()
    );
    let winch = tier_engine(Tier::Baseline, None)?;
    let cranelift = tier_engine(Tier::Optimized, None)?;
    println!(
        "| plugin | compile: Winch | Cranelift | instantiate + init: Winch | Cranelift | batch | \
         per notification: Winch | Cranelift | Winch / Cranelift | break-even notifications |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for p in plugins(&a.plugin_dir) {
        // The compile (in this process, the machine's cores), then a fresh instance + init
        // from the component in memory.
        let (_, _, source, w_compile) =
            checked_on(&winch, Tier::Baseline, &a.plugin_dir, p, false)?;
        let (_, _, c_source, c_compile) =
            checked_on(&cranelift, Tier::Optimized, &a.plugin_dir, p, false)?;
        if source != LoadSource::Compiled || c_source != LoadSource::Compiled {
            bail!("{}: expected a compile on each tier", p.file);
        }
        let t = Instant::now();
        checked_on(&winch, Tier::Baseline, &a.plugin_dir, p, false)?;
        let w_init = t.elapsed();
        let t = Instant::now();
        checked_on(&cranelift, Tier::Optimized, &a.plugin_dir, p, false)?;
        let c_init = t.elapsed();
        for batch in BATCHES {
            let (mut w, mut c) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                let dir = &a.plugin_dir;
                w.push(pass(&winch, Tier::Baseline, dir, p, &items, batch)?);
                c.push(pass(&cranelift, Tier::Optimized, dir, p, &items, batch)?);
            }
            let (w, c) = (median(w), median(c));
            // How many notifications the Winch code delivers before its extra cost per
            // notification adds up to the compile time it saved.
            let saved = c_compile.saturating_sub(w_compile).as_secs_f64();
            let extra = w.as_secs_f64() - c.as_secs_f64();
            let even = if extra > 0.0 {
                format!("{:.0}", saved / extra)
            } else {
                "never".into()
            };
            println!(
                "| {} | {} | {} | {} | {} | {batch} | {} | {} | {:.2}x | {even} |",
                p.label,
                ms(w_compile),
                ms(c_compile),
                ms(w_init),
                ms(c_init),
                us(w),
                us(c),
                w.as_secs_f64() / c.as_secs_f64().max(1e-12),
            );
        }
    }
    println!("\n(load average after the section: {})", load_average());
    Ok(())
}

/// Notifications per row under callgrind: the JavaScript plugins take ~1 s each there; and a
/// plugin's instance serves all its rows on a tier (under its heap's limit, see [`tier_figures`]).
pub(crate) fn cg_notifications(quick: bool) -> usize {
    if quick { 16 } else { 64 }
}

/// One callgrind row of `--callgrind --only tiers`: a plugin on a tier, at a batch size.
pub(crate) struct CgRow {
    plugin: &'static TierPlugin,
    tier: Tier,
    batch: usize,
}

/// The rows, in the order the child runs them (and callgrind dumps them): the plugins present
/// in `dir`, each on Cranelift then Winch code, each at every batch size.
pub(crate) fn cg_rows(dir: &Path) -> Vec<CgRow> {
    let mut rows = Vec::new();
    for plugin in plugins(dir) {
        for tier in [Tier::Optimized, Tier::Baseline] {
            for batch in BATCHES {
                rows.push(CgRow {
                    plugin,
                    tier,
                    batch,
                });
            }
        }
    }
    rows
}

/// `--callgrind-prepare CACHE --only tiers`, under `valgrind --tool=none`: the plugins'
/// Cranelift code into the cache. (Their Winch code is compiled by the child: the first-load
/// tier keeps it in memory only.)
pub(crate) fn cg_prepare(a: &Args, cache: &Path) -> anyhow::Result<()> {
    let engine = tier_engine(Tier::Optimized, Some(cache))?;
    for p in plugins(&a.plugin_dir) {
        checked_on(&engine, Tier::Optimized, &a.plugin_dir, p, true)?;
    }
    Ok(())
}

/// `--callgrind-child CACHE --only tiers`, under callgrind: every row once, each inside
/// [`cg_measured_notifications`](super::callgrind::cg_measured_notifications). The Cranelift
/// code comes from the cache (or the child fails); the Winch code is compiled here, outside
/// what callgrind collects.
pub(crate) fn cg_child(a: &Args, cache: &Path) -> anyhow::Result<()> {
    let items = updates(cg_notifications(a.quick));
    let winch = tier_engine(Tier::Baseline, None)?;
    let cranelift = tier_engine(Tier::Optimized, Some(cache))?;
    let rows = cg_rows(&a.plugin_dir);
    for (i, row) in rows.iter().enumerate() {
        // A plugin's runtime on a tier serves its rows of every batch size, in turn.
        if i > 0 && rows[i - 1].plugin.file == row.plugin.file && rows[i - 1].tier == row.tier {
            continue;
        }
        let engine = if row.tier == Tier::Baseline {
            &winch
        } else {
            &cranelift
        };
        let (mut rt, status, source, _) =
            checked_on(engine, row.tier, &a.plugin_dir, row.plugin, true)?;
        if row.tier == Tier::Optimized && source != LoadSource::Disk {
            bail!(
                "{} was not in the module cache: refusing to compile under callgrind",
                row.plugin.file
            );
        }
        for batch in BATCHES {
            rt.handle("pods", &items[..batch.min(items.len())]);
            let mut f = |chunk: &[Delivery]| rt.handle("pods", chunk);
            super::callgrind::cg_measured_notifications(&mut f, &items, batch);
        }
        none_failed(&status, row.plugin.label)?;
    }
    Ok(())
}

/// The table of `--callgrind --only tiers`: host and guest instructions per notification on
/// each tier, and the ratios.
pub(crate) fn cg_print(a: &Args, splits: &[super::callgrind::Split], n: usize) {
    let rows = cg_rows(&a.plugin_dir);
    let per = |i: usize| {
        let s = splits[i];
        (s.host as f64 / n as f64, s.guest as f64 / n as f64)
    };
    let find = |file: &str, tier: Tier, batch: usize| {
        rows.iter()
            .position(|r| r.plugin.file == file && r.tier == tier && r.batch == batch)
            .map(per)
    };
    println!(
        "| plugin | batch | Cranelift: host | guest | Winch: host | guest | guest Winch / Cranelift | whole Winch / Cranelift |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in rows.iter().filter(|r| r.tier == Tier::Optimized) {
        let (Some((ch, cg)), Some((wh, wg))) = (
            find(r.plugin.file, Tier::Optimized, r.batch),
            find(r.plugin.file, Tier::Baseline, r.batch),
        ) else {
            continue;
        };
        println!(
            "| {} | {} | {ch:.0} | {cg:.0} | {wh:.0} | {wg:.0} | {:.2}x | {:.2}x |",
            r.plugin.label,
            r.batch,
            wg / cg.max(1.0),
            (wh + wg) / (ch + cg).max(1.0)
        );
    }
}
