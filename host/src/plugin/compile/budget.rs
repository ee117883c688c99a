//! The host's memory plan: what the plugins may take at worst, against the container's memory
//! limit. Each plugin instance may use its whole memory budget, and a reload holds the old and
//! the new instance at once, so the worst case is twice the sum of the budgets; each compile
//! that may run at the same time (at start, one per executor worker) may take up to
//! `engine.compileMemory` in its child process, in the same container. A host whose worst case
//! is over its cgroup's limit can be killed by the kernel instead of refusing a plugin's growth
//! (a compile child is the kernel's first choice, so that costs a refused module first). Checked
//! at start (`wisp run`) and by `wisp check`, as a warning.

use std::path::{Path, PathBuf};

/// The memory limit of the cgroup this process runs in (v2 `memory.max`, else v1
/// `memory.limit_in_bytes`), `None` when there is none.
pub fn cgroup_memory_limit() -> Option<u64> {
    CgroupMemory::of_self().map(|c| c.limit)
}

/// The memory cgroup whose limit this process runs under: the limit, and where the cgroup
/// says what its processes use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupMemory {
    /// The limit, bytes.
    pub limit: u64,
    /// Its `memory.stat`.
    stat: PathBuf,
    /// v2's keys (`anon`, `shmem`), else v1's (`total_rss`, `total_shmem`).
    v2: bool,
}

impl CgroupMemory {
    /// The cgroup of this process (or its nearest parent) with a memory limit, if any.
    pub fn of_self() -> Option<Self> {
        Self::in_root(
            Path::new("/sys/fs/cgroup"),
            &std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default(),
        )
    }

    /// [`CgroupMemory::of_self`] under `root` for the `/proc/self/cgroup` text `membership`.
    pub(super) fn in_root(root: &Path, membership: &str) -> Option<Self> {
        // v2: "0::/path"; v1: "N:memory:/path" (or "N:...,memory,...:/path").
        let v2 = membership.lines().find_map(|l| l.strip_prefix("0::"));
        let v1 = membership.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then_some(path)
        });
        let read = |p: PathBuf| -> Option<u64> {
            let text = std::fs::read_to_string(p).ok()?;
            let v: u64 = text.trim().parse().ok()?;
            // v1 writes "no limit" as a huge page-rounded number.
            (v < (1 << 62)).then_some(v)
        };
        let rel = |p: &str| p.trim_start_matches('/').to_owned();
        if let Some(p) = v2 {
            // The cgroup's own limit, else one of its parents' (the nearest one set).
            let mut dir = root.join(rel(p));
            loop {
                if let Some(limit) = read(dir.join("memory.max")) {
                    let stat = dir.join("memory.stat");
                    return Some(Self {
                        limit,
                        stat,
                        v2: true,
                    });
                }
                if dir == root || !dir.pop() {
                    break;
                }
            }
        }
        if let Some(p) = v1 {
            for base in [root.join("memory").join(rel(p)), root.join("memory")] {
                if let Some(limit) = read(base.join("memory.limit_in_bytes")) {
                    let stat = base.join("memory.stat");
                    return Some(Self {
                        limit,
                        stat,
                        v2: false,
                    });
                }
            }
        }
        None
    }

    /// What the cgroup's processes hold that the kernel cannot reclaim without swap: their
    /// anonymous memory and shared memory (tmpfs), bytes. `None` when it cannot be read.
    pub fn unreclaimable(&self) -> Option<u64> {
        let text = std::fs::read_to_string(&self.stat).ok()?;
        let keys: [&str; 2] = if self.v2 {
            ["anon", "shmem"]
        } else {
            ["total_rss", "total_shmem"]
        };
        let mut sum = 0u64;
        let mut found = false;
        for line in text.lines() {
            let Some((key, value)) = line.split_once(' ') else {
                continue;
            };
            if keys.contains(&key) {
                sum = sum.saturating_add(value.trim().parse().ok()?);
                found = true;
            }
        }
        found.then_some(sum)
    }

    /// How close to the limit the unreclaimable bytes may come while a compile runs: the
    /// page cache the processes run from (their code) needs room, or the cgroup thrashes,
    /// re-reading it for minutes before the kernel kills anything. A tenth of the limit, at
    /// least 32 MiB and at most 256 MiB.
    pub fn reserve(&self) -> u64 {
        (self.limit / 10).clamp(32 << 20, 256 << 20)
    }

    /// Whether the unreclaimable bytes have come within [`CgroupMemory::reserve`] of the limit.
    pub fn is_full(&self) -> bool {
        self.unreclaimable()
            .is_some_and(|u| u.saturating_add(self.reserve()) >= self.limit)
    }
}

/// Compiles that may run at once, and the memory each may take (`engine.compileMemory`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compiles {
    /// How many at once.
    pub at_once: usize,
    /// Bytes each may take.
    pub each: u64,
}

/// What the host itself takes besides the plugins' instances and compiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Host {
    /// Its code, runtime and compiled plugins ([`HOST_BASE`]).
    pub base: u64,
    /// The plugins' queues at their bound: `queue.maxBytes` times the informers of each.
    pub queues: u64,
}

/// The warning to give when the plugins' worst case (`budgets`: name and memory budget of each
/// plugin; twice their sum during a reload) plus the `compiles` that may run at once plus the
/// `host`'s own bytes and the plugins' queues is over `limit`; `None` when it fits or there is
/// no limit.
pub fn over_limit(
    budgets: &[(&str, u64)],
    host: Host,
    compiles: Compiles,
    limit: Option<u64>,
) -> Option<String> {
    let limit = limit?;
    let sum: u64 = budgets.iter().map(|(_, b)| *b).sum();
    let compiling = compiles.each.saturating_mul(compiles.at_once as u64);
    let worst = sum
        .saturating_mul(2)
        .saturating_add(compiling)
        .saturating_add(host.base)
        .saturating_add(host.queues);
    (worst > limit).then(|| {
        format!(
            "the plugins' memory budgets add up to {} MiB ({} plugins), {} MiB during a reload (old and new instance), plus {} MiB for {} compile(s) at once of up to engine.compileMemory {} MiB each, plus {} MiB for the plugins' queues at their queue.maxBytes, plus about {} MiB for the host: {} MiB, over the container's memory limit of {} MiB; the kernel may kill a compile (its module refused) or the host before a plugin's growth is refused: raise the limit or lower limits.memory, queue.maxBytes, engine.compileMemory or executor.workers (compiles at start)",
            sum >> 20,
            budgets.len(),
            sum.saturating_mul(2) >> 20,
            compiling >> 20,
            compiles.at_once,
            compiles.each >> 20,
            host.queues >> 20,
            host.base >> 20,
            worst >> 20,
            limit >> 20
        )
    })
}

/// The bytes `spec`'s queues may hold, each at its `queue.maxBytes` (an unbounded queue counts
/// nothing: it is no plugin's).
pub fn queue_bytes(spec: &crate::plugin::PluginSpec) -> u64 {
    (spec.queue.max_bytes().unwrap_or(0) as u64).saturating_mul(spec.informers.len() as u64)
}

/// What plugin `spec` may hold at worst: its instance's memory twice (the old and the new
/// instance during a reload) and each of its queues full.
pub fn worst_case(spec: &crate::plugin::PluginSpec) -> u64 {
    spec.limits
        .memory
        .saturating_mul(2)
        .saturating_add(queue_bytes(spec))
}

/// What a plugin changing from `old` to `new` may hold at worst meanwhile: both instances, and
/// the larger of their queues.
pub fn worst_case_of_change(
    old: &crate::plugin::PluginSpec,
    new: &crate::plugin::PluginSpec,
) -> u64 {
    old.limits
        .memory
        .saturating_add(new.limits.memory)
        .saturating_add(queue_bytes(old).max(queue_bytes(new)))
}

/// What the host itself is assumed to need besides the plugins (caches excluded, which grow
/// with the cluster): its code, runtime and compiled plugins.
pub const HOST_BASE: u64 = 128 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_read_from_the_cgroup_or_its_nearest_parent_and_its_use_beside_it() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let limit = |m: &str| CgroupMemory::in_root(r, m).map(|c| c.limit);
        std::fs::create_dir_all(r.join("kubepods/pod1/c1")).unwrap();
        std::fs::write(r.join("kubepods/pod1/memory.max"), "536870912\n").unwrap();
        std::fs::write(r.join("kubepods/pod1/c1/memory.max"), "max\n").unwrap();
        assert_eq!(limit("0::/kubepods/pod1/c1\n"), Some(512 << 20));
        // What counts is the limited cgroup's own: anonymous and shared memory, not files.
        std::fs::write(
            r.join("kubepods/pod1/memory.stat"),
            "anon 400000000\nfile 900000000\nkernel 1000\nshmem 70000000\n",
        )
        .unwrap();
        let pod = CgroupMemory::in_root(r, "0::/kubepods/pod1/c1\n").unwrap();
        assert_eq!(pod.unreclaimable(), Some(470_000_000));
        assert_eq!(pod.reserve(), (512u64 << 20) / 10);
        assert!(!pod.is_full());
        std::fs::write(
            r.join("kubepods/pod1/memory.stat"),
            "anon 450000000\nfile 1\nshmem 40000000\n",
        )
        .unwrap();
        assert!(pod.is_full(), "490 MB of 512 MiB with 51 MiB kept free");
        std::fs::create_dir_all(r.join("memory/docker/x")).unwrap();
        std::fs::write(
            r.join("memory/docker/x/memory.limit_in_bytes"),
            "9223372036854771712\n",
        )
        .unwrap();
        assert_eq!(limit("4:memory:/docker/x\n"), None);
        std::fs::write(
            r.join("memory/docker/x/memory.limit_in_bytes"),
            "1073741824",
        )
        .unwrap();
        assert_eq!(limit("4:cpu,memory:/docker/x\n"), Some(1 << 30));
        // v1: the hierarchy's totals (a child cgroup's use counts), not the cgroup's own.
        let docker = CgroupMemory::in_root(r, "4:cpu,memory:/docker/x\n").unwrap();
        assert_eq!(docker.unreclaimable(), None, "no memory.stat yet");
        std::fs::write(
            r.join("memory/docker/x/memory.stat"),
            "cache 5\nrss 1\nshmem 2\ntotal_cache 500\ntotal_rss 1000\ntotal_shmem 20\n",
        )
        .unwrap();
        assert_eq!(docker.unreclaimable(), Some(1020));
        assert_eq!(docker.reserve(), (1u64 << 30) / 10);
        assert_eq!(limit(""), None);
    }

    #[test]
    fn the_reserve_is_a_tenth_of_the_limit_within_32_and_256_mib() {
        let at = |limit| {
            CgroupMemory {
                limit,
                stat: PathBuf::new(),
                v2: true,
            }
            .reserve()
        };
        assert_eq!(at(192 << 20), 32 << 20);
        assert_eq!(at(1 << 30), (1 << 30) / 10);
        assert_eq!(at(16 << 30), 256 << 20);
    }

    #[test]
    fn the_worst_case_is_twice_the_budgets_plus_the_compiles_plus_the_host() {
        let plugins = [("a", 64 << 20), ("b", 64 << 20)];
        let host = Host {
            base: 128 << 20,
            queues: 0,
        };
        let none = Compiles {
            at_once: 0,
            each: 1 << 30,
        };
        assert_eq!(over_limit(&plugins, host, none, None), None);
        assert_eq!(over_limit(&plugins, host, none, Some(384 << 20)), None);
        let w = over_limit(&plugins, host, none, Some(383 << 20)).unwrap();
        assert!(
            w.contains("128 MiB (2 plugins), 256 MiB during a reload"),
            "{w}"
        );
        assert!(
            w.contains("384 MiB, over the container's memory limit of 383 MiB"),
            "{w}"
        );
        // The host: two 64 MiB plugins in 384 MiB fit, until compiles are counted.
        let two = Compiles {
            at_once: 2,
            each: 256 << 20,
        };
        let w = over_limit(&plugins, host, two, Some(384 << 20)).unwrap();
        assert!(
            w.contains(
                "plus 512 MiB for 2 compile(s) at once of up to engine.compileMemory 256 MiB each"
            ),
            "{w}"
        );
        assert!(
            w.contains("896 MiB, over the container's memory limit of 384 MiB"),
            "{w}"
        );
        assert_eq!(over_limit(&plugins, host, two, Some(896 << 20)), None);
        // The queues at their bound count too.
        let queued = Host {
            queues: 64 << 20,
            ..host
        };
        let w = over_limit(&plugins, queued, two, Some(896 << 20)).unwrap();
        assert!(
            w.contains("plus 64 MiB for the plugins' queues at their queue.maxBytes"),
            "{w}"
        );
    }
}
