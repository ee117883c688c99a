//! Where resident memory is, by mapping: `/proc/self/smaps` read before and after, each mapping
//! put in one kind (linear memory, malloc arena, compiled code, ...), the kinds' totals diffed.

use std::collections::BTreeMap;

/// What a mapping holds, told from its name, permissions and neighbours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// A wasm linear memory's pages mapped from its module's data image (copy-on-write).
    LinearImage,
    /// A wasm linear memory's other pages (the guest's heap and stack): anonymous.
    LinearAnon,
    /// The main malloc arena (`[heap]`, grown by brk).
    MainArena,
    /// A malloc thread arena's heap in use (it starts at a 64 MiB boundary).
    ThreadArena,
    /// Executable anonymous pages (compiled wasm, trampolines).
    Code,
    /// A file's pages (the binary, libraries, a precompiled module).
    File,
    /// Any other anonymous mapping (mmap'd large blocks, thread stacks, wasmtime's own).
    OtherAnon,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::LinearImage => "linear memory, data image (CoW from the module)",
            Self::LinearAnon => "linear memory, anonymous (guest heap, stack)",
            Self::MainArena => "malloc main arena ([heap])",
            Self::ThreadArena => "malloc thread arenas (heaps at 64 MiB boundaries)",
            Self::Code => "compiled code (anonymous, executable)",
            Self::File => "files (binary, libraries)",
            Self::OtherAnon => "other anonymous (large blocks, thread stacks)",
        }
    }
}

/// One mapping of `/proc/self/smaps`.
#[derive(Clone, Debug, Default)]
struct Vma {
    start: u64,
    end: u64,
    perms: String,
    path: String,
    rss: u64,
    pss: u64,
    anon: u64,
}

/// Resident bytes per kind: Rss, Pss, and the anonymous part.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Totals {
    pub rss: u64,
    pub pss: u64,
    pub anon: u64,
    pub mappings: u64,
}

/// The process's mappings now, totalled by kind.
pub(crate) fn snapshot() -> BTreeMap<Kind, Totals> {
    let text = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let vmas = parse(&text);
    let mut out: BTreeMap<Kind, Totals> = BTreeMap::new();
    for (v, kind) in classify(&vmas) {
        let t = out.entry(kind).or_default();
        t.rss += v.rss;
        t.pss += v.pss;
        t.anon += v.anon;
        t.mappings += 1;
    }
    out
}

fn parse(text: &str) -> Vec<Vma> {
    let mut vmas: Vec<Vma> = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { continue };
        if let Some((s, e)) = first.split_once('-')
            && let (Ok(start), Ok(end)) = (u64::from_str_radix(s, 16), u64::from_str_radix(e, 16))
        {
            let perms = words.next().unwrap_or_default().to_owned();
            let path = words.skip(3).collect::<Vec<_>>().join(" ");
            vmas.push(Vma {
                start,
                end,
                perms,
                path,
                ..Vma::default()
            });
            continue;
        }
        let kb = || {
            line.split_whitespace()
                .nth(1)
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
                * 1024
        };
        if let Some(v) = vmas.last_mut() {
            match first {
                "Rss:" => v.rss = kb(),
                "Pss:" => v.pss = kb(),
                "Anonymous:" => v.anon = kb(),
                _ => {}
            }
        }
    }
    vmas
}

/// Each mapping with its kind. A wasm linear memory (wasmtime's default, on demand) is a
/// reservation of 4 GiB and more: a 32 MiB guard, the accessible pages (some mapped from the
/// module's data image), then a guard of 1 GiB or more; a malloc thread arena's heap starts at a
/// 64 MiB boundary: the part in use, then the rest of the 64 MiB inaccessible.
fn classify(vmas: &[Vma]) -> Vec<(&Vma, Kind)> {
    let mut kinds: Vec<Option<Kind>> = vec![None; vmas.len()];
    let guard = |v: &Vma| v.path.is_empty() && v.perms.starts_with("---");
    let touching = |i: usize| i > 0 && vmas[i - 1].end == vmas[i].start;
    for (i, v) in vmas.iter().enumerate() {
        if guard(v) && v.end - v.start >= 1 << 30 {
            // Back over the accessible pages to the guard before them.
            let mut j = i;
            while touching(j) && !guard(&vmas[j - 1]) {
                j -= 1;
                kinds[j] = Some(if vmas[j].path.contains("wasm-memory-image") {
                    Kind::LinearImage
                } else {
                    Kind::LinearAnon
                });
            }
            kinds[i] = Some(Kind::LinearAnon);
            if touching(j) {
                kinds[j - 1] = Some(Kind::LinearAnon);
            }
        } else if v.path.is_empty()
            && v.start % (64 << 20) == 0
            && !guard(v)
            && v.end - v.start < 64 << 20
            && vmas
                .get(i + 1)
                .is_some_and(|n| n.start == v.end && guard(n) && n.end - v.start >= 64 << 20)
        {
            // The inaccessible rest may run on into a neighbour's guard: it is never resident.
            kinds[i] = Some(Kind::ThreadArena);
        }
    }
    vmas.iter()
        .zip(kinds)
        .map(|(v, k)| {
            let kind = k.unwrap_or(if v.path == "[heap]" {
                Kind::MainArena
            } else if v.perms.contains('x') && v.path.is_empty() {
                Kind::Code
            } else if v.path.starts_with('/') && !v.path.contains("memfd:") {
                Kind::File
            } else {
                Kind::OtherAnon
            });
            (v, kind)
        })
        .collect()
}

/// Prints, per kind, what `after` holds more than `before`, per one of `n`.
pub(crate) fn print_diff(
    before: &BTreeMap<Kind, Totals>,
    after: &BTreeMap<Kind, Totals>,
    n: usize,
) {
    println!("| mapping (per plugin) | Rss | Pss | of it anonymous | mappings |");
    println!("|---|---|---|---|---|");
    let per = |a: u64, b: u64| (a as f64 - b as f64) / n as f64 / 1024.0;
    let mut total = (0.0, 0.0, 0.0);
    for (kind, a) in after {
        let b = before.get(kind).copied().unwrap_or_default();
        let (r, p, an) = (per(a.rss, b.rss), per(a.pss, b.pss), per(a.anon, b.anon));
        let m = (a.mappings as f64 - b.mappings as f64) / n as f64;
        total = (total.0 + r, total.1 + p, total.2 + an);
        println!(
            "| {} | {r:.1} KiB | {p:.1} KiB | {an:.1} KiB | {m:.1} |",
            kind.name()
        );
    }
    println!(
        "| all | {:.1} KiB | {:.1} KiB | {:.1} KiB | |",
        total.0, total.1, total.2
    );
}
