//! Instruction counts of the delivery rows under `valgrind --tool=callgrind` (`wisp-bench
//! --callgrind`): the figures every delivery-path change is judged by (wall clock moves 2x on
//! the build machine between runs; instruction counts do not).
//!
//! The modules are compiled into a module cache kept beside the executable
//! (`wisp-callgrind-cache`) by `wisp-bench --callgrind-prepare` run under `valgrind
//! --tool=none`: the CPU valgrind emulates (no AVX-512, say) is part of an artifact's
//! compatibility key, so artifacts compiled outside valgrind do not load inside it. A module
//! already in that cache is not compiled again. Then the parent runs itself as `wisp-bench
//! --callgrind-child DIR` under callgrind. The child loads the precompiled modules from the
//! cache (it refuses to compile under callgrind), warms each row up with one batch, and
//! delivers the row's notifications inside [`cg_measured_notifications`], the only function
//! callgrind collects in (`--collect-atstart=no --toggle-collect`); callgrind dumps after each
//! call (`--dump-after`), one file per row. Start-up, loading and warm-up are outside
//! every count. The parent reads the dumps: instructions in code of an ELF object (the
//! `wisp-bench` executable, libc and the other shared libraries) are the host's; instructions in
//! code callgrind knows no object for (`???`: what wasmtime loaded from the cache, the guest's
//! wasm compiled to native code and its trampolines) are the guest's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use anyhow::{Context, bail};
use serde_json::json;
use wisp_host::informer::{Delivery, EventHandler};
use wisp_host::plugin::compile::LoadSource;
use wisp_host::plugin::{EngineConfig, PluginEngine, check_module};

use super::common::*;
use crate::Args;

/// The function callgrind collects in: each row's notifications, delivered in batches.
#[inline(never)]
pub(crate) fn cg_measured_notifications(
    deliver: &mut dyn FnMut(&[Delivery]),
    items: &[Delivery],
    batch: usize,
) {
    for chunk in items.chunks(batch) {
        deliver(chunk);
    }
    std::hint::black_box(());
}

/// What a row delivers to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    /// The host's writing of a batch alone (part of every wasm row).
    Encoder,
    /// The native handler doing the work.
    Native,
    /// The bench plugin (`meta`: the metadata-only build), epochs on or off.
    Wasm { meta: bool, epochs: bool },
}

struct Row {
    work: &'static str,
    batch: usize,
    target: Target,
}

const WORKS: [&str; 6] = ["noop", "labels", "meta", "parse", "pod", "partial"];
const META_WORKS: [&str; 3] = ["noop", "labels", "meta"];

/// The rows, in the order the child runs them (and callgrind dumps them).
fn rows() -> Vec<Row> {
    let mut rows = vec![Row {
        work: "encode",
        batch: 64,
        target: Target::Encoder,
    }];
    for work in WORKS {
        rows.push(Row {
            work,
            batch: 64,
            target: Target::Native,
        });
    }
    for epochs in [true, false] {
        for (meta, works) in [(false, &WORKS[..]), (true, &META_WORKS[..])] {
            for &work in works {
                for batch in [1, 64] {
                    let target = Target::Wasm { meta, epochs };
                    rows.push(Row {
                        work,
                        batch,
                        target,
                    });
                }
            }
        }
    }
    rows
}

/// Whether `--only tiers` asks for the first-load tier's rows (`bench/tiers.rs`) instead of the
/// delivery rows.
fn tier_rows(a: &Args) -> bool {
    a.only.iter().any(|s| s == "tiers")
}

fn notifications(quick: bool) -> usize {
    if quick { 128 } else { 512 }
}

fn engine(cache: &Path, epochs: bool) -> anyhow::Result<Arc<PluginEngine>> {
    Ok(PluginEngine::new(EngineConfig {
        cache_dir: Some(cache.to_owned()),
        epoch_interruption: epochs,
        compiler: None,
        // Compiling under valgrind on two loaded cores outlasts the default (120 s).
        compile_timeout: std::time::Duration::from_secs(900),
        ..EngineConfig::default()
    })?)
}

fn plugin(plugin_dir: &Path, meta: bool) -> PathBuf {
    plugin_dir.join(if meta {
        "bench_meta.wasm"
    } else {
        "bench.wasm"
    })
}

/// Loads (parent: compiles into the cache) both bench plugins into both engines; with
/// `must_hit`, fails unless every one came from the disk cache.
fn load_all(
    plugin_dir: &Path,
    engines: &[(bool, &Arc<PluginEngine>)],
    must_hit: bool,
) -> anyhow::Result<()> {
    for (epochs, engine) in engines {
        for meta in [false, true] {
            let path = plugin(plugin_dir, meta);
            let bytes = std::fs::read(&path).with_context(|| format!("{}", path.display()))?;
            let loaded = engine.load(&bytes).map_err(|e| anyhow::anyhow!("{e:?}"))?;
            if must_hit && !matches!(loaded.source, LoadSource::Disk) {
                bail!(
                    "{} (epochs {epochs}) was not in the module cache: refusing to compile under valgrind",
                    path.display()
                );
            }
        }
    }
    Ok(())
}

/// `--callgrind-prepare`, run under `valgrind --tool=none`: compiles the bench plugins into the
/// cache for the CPU valgrind emulates.
pub(crate) fn prepare(a: &Args, cache: &Path) -> anyhow::Result<()> {
    if tier_rows(a) {
        return super::tiers::cg_prepare(a, cache);
    }
    let on = engine(cache, true)?;
    let off = engine(cache, false)?;
    load_all(&a.plugin_dir, &[(true, &on), (false, &off)], false)
}

/// The child, run under callgrind: every row once, each inside [`cg_measured_notifications`].
pub(crate) fn child(a: &Args, cache: &Path) -> anyhow::Result<()> {
    if tier_rows(a) {
        return super::tiers::cg_child(a, cache);
    }
    let items = deliveries(notifications(a.quick));
    let on = engine(cache, true)?;
    let off = engine(cache, false)?;
    load_all(&a.plugin_dir, &[(true, &on), (false, &off)], true)?;
    for row in rows() {
        match row.target {
            Target::Encoder => {
                // The batch written into a buffer reused from call to call (as the plugin's
                // allocator hands the same memory back): the host's share of every wasm row.
                let mut buf = Vec::new();
                let mut f = |chunk: &[Delivery]| write_batch(&mut buf, chunk);
                f(&items[..row.batch]);
                cg_measured_notifications(&mut f, &items, row.batch);
                std::hint::black_box(buf.len());
            }
            Target::Native => {
                let mut native = Native {
                    work: row.work,
                    total: 0,
                };
                native.handle(&items[..row.batch]);
                let mut f = |chunk: &[Delivery]| native.handle(chunk);
                cg_measured_notifications(&mut f, &items, row.batch);
            }
            Target::Wasm { meta, epochs } => {
                let engine = if epochs { &on } else { &off };
                wasm_row(engine, &plugin(&a.plugin_dir, meta), &row, &items)?;
            }
        }
    }
    Ok(())
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map_or_else(String::new, |f| f.to_string_lossy().into_owned())
}

/// Writes `chunk` as one batch (ABI 0.2) into `buf`, reused.
fn write_batch(buf: &mut Vec<u8>, chunk: &[Delivery]) {
    let batch = wisp_host::plugin::batch::Batch::new("pods", chunk, false);
    buf.resize(batch.size(), 0);
    batch.write(buf);
}

fn wasm_row(
    engine: &Arc<PluginEngine>,
    path: &Path,
    row: &Row,
    items: &[Delivery],
) -> anyhow::Result<()> {
    let checked = check_module(engine, path, json!({ "work": row.work }))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let status = checked.status().clone();
    let mut rt = checked.into_runtime(engine.clone());
    rt.handle("pods", &items[..row.batch]);
    let mut f = |chunk: &[Delivery]| rt.handle("pods", chunk);
    cg_measured_notifications(&mut f, items, row.batch);
    let failed = wisp_host::plugin::status::PluginCounters::get(&status.counters.failed);
    if failed > 0 {
        bail!(
            "the bench plugin failed {failed} notifications: {:?}",
            status.last_error()
        );
    }
    Ok(())
}

/// Instructions of one dump: the host's (code in ELF objects) and the guest's (the rest).
#[derive(Default, Clone, Copy)]
pub(crate) struct Split {
    pub(crate) host: u64,
    pub(crate) guest: u64,
}

impl Split {
    fn total(self) -> u64 {
        self.host + self.guest
    }
}

/// Whether an object callgrind names is host code (an ELF file: the executable, libc, ...).
fn is_host_object(ob: &str) -> bool {
    ob.starts_with('/') && ob != "???"
}

/// Reads one callgrind dump (written with `--compress-strings=no --compress-pos=no`): sums
/// each function's own cost lines by its object; a call's inclusive cost (the line after
/// `calls=`) is skipped, so nothing counts twice. Returns the split and the objects seen.
fn read_dump(text: &str, objects: &mut BTreeMap<String, u64>) -> anyhow::Result<Split> {
    let mut split = Split::default();
    let mut ob = String::from("???");
    let mut skip_next = false;
    let mut totals = None;
    for line in text.lines() {
        let cost = line.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c));
        if !cost {
            skip_next = line.starts_with("calls=");
        }
        if let Some(name) = line.strip_prefix("ob=") {
            ob = name.trim().to_owned();
        } else if let Some(t) = line.strip_prefix("totals:") {
            totals = t.trim().parse::<u64>().ok();
        } else if cost {
            if std::mem::take(&mut skip_next) {
                continue;
            }
            let ir: u64 = match line.split_whitespace().nth(1) {
                Some(n) => n.parse().with_context(|| format!("cost line {line:?}"))?,
                None => 0,
            };
            *objects.entry(ob.clone()).or_default() += ir;
            if is_host_object(&ob) {
                split.host += ir;
            } else {
                split.guest += ir;
            }
        }
    }
    if totals != Some(split.total()) {
        bail!(
            "a callgrind dump's own costs add up to {}, its totals line says {totals:?}",
            split.total()
        );
    }
    Ok(split)
}

/// The dumps callgrind wrote after each measured call (`OUT.1`, `OUT.2`, ...), in order.
fn dumps(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut numbered: Vec<(u32, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        let n = p
            .file_name()
            .and_then(|f| f.to_str())
            .and_then(|f| f.strip_prefix("cg.out."))
            .and_then(|n| n.parse().ok());
        if let Some(n) = n {
            numbered.push((n, p));
        }
    }
    numbered.sort();
    Ok(numbered.into_iter().map(|(_, p)| p).collect())
}

/// Runs the child under callgrind; returns each row's instructions.
fn run_child(a: &Args, dir: &Path, cache: &Path) -> anyhow::Result<Vec<Split>> {
    let exe = std::env::current_exe()?;
    let mut c = Command::new("valgrind");
    c.args([
        "--tool=callgrind",
        "--collect-atstart=no",
        // A leading `*` only: callgrind 3.19's `--dump-after` matches no pattern ending in one.
        "--toggle-collect=*cg_measured_notifications",
        "--dump-after=*cg_measured_notifications",
        "--compress-strings=no",
        "--compress-pos=no",
    ])
    .arg(format!(
        "--callgrind-out-file={}",
        dir.join("cg.out").display()
    ))
    .arg(&exe)
    .arg("--plugins")
    .arg(&a.plugin_dir)
    .arg("--callgrind-child")
    .arg(cache);
    if a.quick {
        c.arg("--quick");
    }
    if tier_rows(a) {
        c.args(["--only", "tiers"]);
    }
    let out = c.output().context("running valgrind (is it installed?)")?;
    if !out.status.success() {
        bail!(
            "the callgrind child failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let files = dumps(dir)?;
    let want = if tier_rows(a) {
        super::tiers::cg_rows(&a.plugin_dir).len()
    } else {
        rows().len()
    };
    if files.len() != want {
        bail!(
            "callgrind wrote {} dumps, expected {want} (one per row)",
            files.len()
        );
    }
    let mut objects = BTreeMap::new();
    let splits = files
        .iter()
        .map(|f| read_dump(&std::fs::read_to_string(f)?, &mut objects))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let guest: Vec<&str> = objects
        .keys()
        .filter(|o| !is_host_object(o))
        .map(String::as_str)
        .collect();
    println!("(objects counted as the guest's: {guest:?})");
    Ok(splits)
}

/// `wisp-bench --callgrind`: compiles into a fresh cache, runs the child under callgrind and
/// prints instructions per notification for every row.
pub(crate) fn callgrind_figures(a: &Args) -> anyhow::Result<()> {
    // `WISP_CALLGRIND_OUT=DIR` keeps the dumps there (`cg.out.N`, row N in the order of
    // `rows()`), for `callgrind_annotate`.
    let tmp = tempfile::tempdir()?;
    let dir = match std::env::var_os("WISP_CALLGRIND_OUT") {
        Some(d) => {
            let d = PathBuf::from(d);
            std::fs::create_dir_all(&d)?;
            for old in dumps(&d)? {
                std::fs::remove_file(old)?;
            }
            d
        }
        None => tmp.path().to_owned(),
    };
    let exe = std::env::current_exe()?;
    let cache = exe.with_file_name("wisp-callgrind-cache");
    let t = std::time::Instant::now();
    let mut prepare = Command::new("valgrind");
    prepare
        .args(["--tool=none", "-q"])
        .arg(&exe)
        .arg("--plugins")
        .arg(&a.plugin_dir)
        .arg("--callgrind-prepare")
        .arg(&cache);
    if tier_rows(a) {
        prepare.args(["--only", "tiers"]);
    }
    let out = prepare
        .output()
        .context("running valgrind (is it installed?)")?;
    if !out.status.success() {
        bail!(
            "compiling under valgrind failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    println!(
        "modules compiled (or found) in {} under valgrind --tool=none: {:.1} s",
        cache.display(),
        t.elapsed().as_secs_f64()
    );
    let files: Vec<String> = if tier_rows(a) {
        let present = super::tiers::plugins(&a.plugin_dir);
        present.map(|p| p.file.to_owned()).collect()
    } else {
        [false, true]
            .map(|meta| file_name(&plugin(&a.plugin_dir, meta)))
            .into()
    };
    provenance(&a.plugin_dir, &files)?;
    let n = if tier_rows(a) {
        super::tiers::cg_notifications(a.quick)
    } else {
        notifications(a.quick)
    };
    let t = std::time::Instant::now();
    let splits = run_child(a, &dir, &cache)?;
    if tier_rows(a) {
        println!(
            "\n## The first-load tier: instructions per notification (callgrind; {n} pod updates per row; {:.1} s under valgrind)\n",
            t.elapsed().as_secs_f64()
        );
        super::tiers::cg_print(a, &splits, n);
        return Ok(());
    }
    println!(
        "\n## Instructions per notification (callgrind; {n} pods of ~2 KB per row; {:.1} s under valgrind)\n",
        t.elapsed().as_secs_f64()
    );
    print_table(&rows(), &splits, n);
    Ok(())
}

/// Says what was measured: the checkout this `wisp-bench` was built from and the bench modules
/// (path and SHA-256), and warns when they come from different checkouts. Two tables compare
/// only when both lines match what was meant: a `wisp-bench` built in one worktree run with
/// another's plugins (or a binary left in a shared target dir) counts one's host code and the
/// other's guest code (issue 31: a "rerun on main" read the host side of an unmerged probe).
fn provenance(plugin_dir: &Path, files: &[String]) -> anyhow::Result<()> {
    use sha2::Digest;
    let built = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("/"));
    println!("wisp-bench built from the checkout {}", built.display());
    for file in files {
        let path = plugin_dir.join(file);
        let bytes = std::fs::read(&path).with_context(|| format!("{}", path.display()))?;
        let hash = sha2::Sha256::digest(&bytes);
        let hex: String = hash[..8].iter().map(|b| format!("{b:02x}")).collect();
        println!("module {} sha256 {hex}...", path.display());
    }
    let dir = std::fs::canonicalize(plugin_dir).unwrap_or_else(|_| plugin_dir.to_owned());
    let checkout = std::fs::canonicalize(built).unwrap_or_else(|_| built.to_owned());
    if !dir.starts_with(&checkout) {
        println!(
            "WARNING: the plugins are not from the checkout wisp-bench was built from: the \
             host column is one checkout's code, the guest column another's"
        );
    }
    Ok(())
}

fn print_table(rows: &[Row], splits: &[Split], n: usize) {
    let per = |s: Split| {
        (
            s.total() as f64 / n as f64,
            s.host as f64 / n as f64,
            s.guest as f64 / n as f64,
        )
    };
    let find = |work: &str, batch: usize, target: Target| {
        rows.iter()
            .position(|r| r.work == work && r.batch == batch && r.target == target)
            .map(|i| splits[i])
    };
    if let Some(enc) = find("encode", 64, Target::Encoder) {
        println!(
            "host batch writing alone, batch 64: {:.0} instructions per notification\n",
            per(enc).0
        );
    }
    println!(
        "| work | plugin | batch | native | wasm | host | guest | wasm/native | epochs off: wasm | guest | on/off |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let Target::Wasm { meta, epochs: true } = r.target else {
            continue;
        };
        let Some(s) = find(r.work, r.batch, r.target) else {
            continue;
        };
        let native = find(r.work, 64, Target::Native).map_or(0.0, |s| per(s).0);
        let off = find(
            r.work,
            r.batch,
            Target::Wasm {
                meta,
                epochs: false,
            },
        )
        .map(per);
        let (total, host, guest) = per(s);
        let ratio = if r.work != "noop" {
            format!("{:.2}x", total / native)
        } else {
            "-".into()
        };
        let (off_total, off_guest, on_off) =
            off.map_or(("-".into(), "-".into(), "-".into()), |o| {
                (
                    format!("{:.0}", o.0),
                    format!("{:.0}", o.2),
                    format!("{:.2}x", total / o.0.max(1.0)),
                )
            });
        println!(
            "| {} | {} | {} | {native:.0} | {total:.0} | {host:.0} | {guest:.0} | {ratio} | {off_total} | {off_guest} | {on_off} |",
            r.work,
            if meta { "metadata-only" } else { "JSON" },
            r.batch
        );
    }
}
