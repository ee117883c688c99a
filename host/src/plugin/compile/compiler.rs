//! Compiles in a child process. Cranelift cannot be cancelled, and a valid module can be made to
//! compile for minutes in gigabytes (thousands of locals live across thousands of nested loops):
//! in the host's own process such a compile bomb would burn a core until it ends and could get
//! the whole host, with every plugin, killed by the kernel at the container's memory limit.
//!
//! So a host compiles each module in a child of its own binary (`wisp __compile`, never shown in
//! `--help`), bounded three ways:
//!
//! - **memory**: the child's address space is limited to `engine.compileMemory` (`RLIMIT_AS`,
//!   set between fork and exec), so an allocation over it fails in the child; and the child gives
//!   itself the kernel's highest OOM score (`oom_score_adj` 1000), so a container short of
//!   memory loses the compile, not the host. In a container with a memory limit the parent
//!   also stops the child when the container's anonymous and shared memory come within a
//!   reserve of the limit ([`CgroupMemory::reserve`]): without swap the kernel reclaims the
//!   code pages the processes run from before it kills, and a compile near the limit can
//!   thrash the whole container for minutes, reading its code back from disk while its CPU
//!   time hardly grows;
//! - **time**: `engine.compileTimeout` bounds the child's CPU time (all its threads): the parent
//!   reads it every [`CPU_POLL`] and kills the child past the bound, so the machine's load (a
//!   pod's CPU quota, other work) does not decide whether a module compiles. A wall-clock
//!   backstop, [`WALL_BACKSTOP`] times the bound, ends a compile starved of CPU or stuck; a
//!   kernel CPU limit (`RLIMIT_CPU`, a second over the bound) and death with its parent
//!   (`PR_SET_PDEATHSIG`) keep an orphan from burning on;
//! - **share**: the child runs at nice 10 (a background tier-up at 19), so the plugins that run
//!   meanwhile keep their CPU.
//!
//! The child reads the module on stdin, compiles it with the engine settings that decide whether
//! an artifact loads ([`ArtifactSettings`]) and writes the serialized artifact on stdout. The
//! parent reads at most `compileMemory` bytes of it, loads it into its own engine and puts it
//! into the authenticated module cache, as it would its own compile. A child over a bound is
//! killed (or fails) and the module is refused naming the bound; nothing else in the host
//! waits for it or is touched by it.

use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wasmtime::Config;

use super::budget::CgroupMemory;
use super::config::{BoundNames, WALL_BACKSTOP};

use super::loaded::LoadError;

/// The hidden subcommand of the `wisp` binary that runs one compile.
pub const SUBCOMMAND: &str = "__compile";

/// The child's exit code when the module does not compile (wasmtime's message on stderr).
pub const EXIT_INVALID: i32 = 2;
/// The child's exit code when it could not read the module or write the artifact.
pub const EXIT_IO: i32 = 3;

/// How much of the child's stderr is kept: the first bytes (the message) and the last (an abort).
const STDERR_KEPT: usize = 4096;

/// The engine settings that decide whether an artifact loads into an engine: a child compiles
/// with the parent's, or the parent's `Component::deserialize` refuses the artifact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArtifactSettings {
    /// Epoch interruption (the deadlines' checks are compiled in).
    pub epoch_interruption: bool,
    /// Fuel metering (its checks are compiled in).
    pub fuel: bool,
    /// Compiled by Winch, wasmtime's baseline compiler (the first-load tier,
    /// `engine.firstLoadTier`): ~6x faster to compile, 1.6-2.2x the guest instructions to run. Its artifacts load
    /// only into an engine on Winch.
    pub baseline: bool,
}

/// The wasmtime settings of an engine: the parent's and a compile child's are made here, so an
/// artifact the child writes loads into the parent's engine.
pub fn wasm_config(s: ArtifactSettings) -> Config {
    let mut c = Config::new();
    c.wasm_component_model(true);
    c.epoch_interruption(s.epoch_interruption);
    c.consume_fuel(s.fuel);
    if s.baseline {
        // Winch compiles the same epoch checks (function entries, loop headers) and fuel.
        c.strategy(wasmtime::Strategy::Winch);
    }
    c
}

impl ArtifactSettings {
    /// The arguments of `wisp __compile` that give these settings.
    pub fn args(self) -> Vec<&'static str> {
        let mut args = vec![SUBCOMMAND];
        if self.fuel {
            args.push("--fuel");
        }
        if !self.epoch_interruption {
            args.push("--no-epoch-interruption");
        }
        if self.baseline {
            args.push("--baseline");
        }
        args
    }
}

/// The executable of this process, to run compiles in: `/proc/self/exe` where there is one (it
/// stays the binary that runs even when the file was replaced on disk by an upgrade), else the
/// path it was started from.
pub fn own_executable() -> Option<PathBuf> {
    let proc = Path::new("/proc/self/exe");
    if proc.exists() {
        return Some(proc.to_owned());
    }
    std::env::current_exe().ok()
}

/// The child's side (`wisp __compile`): the module on stdin, the artifact on stdout. Returns the
/// exit code: 0 when compiled, [`EXIT_INVALID`] when the module does not compile (wasmtime's
/// message on stderr), [`EXIT_IO`] when stdin or stdout failed.
pub fn child_main(settings: ArtifactSettings) -> i32 {
    let mut bytes = Vec::new();
    if let Err(e) = std::io::stdin().lock().read_to_end(&mut bytes) {
        eprintln!("reading the module from stdin: {e}");
        return EXIT_IO;
    }
    let engine = match wasmtime::Engine::new(&wasm_config(settings)) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("the compiler's engine: {e:#}");
            return EXIT_IO;
        }
    };
    match engine.precompile_component(&bytes) {
        Ok(artifact) => {
            let mut out = std::io::stdout().lock();
            match out.write_all(&artifact).and_then(|()| out.flush()) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("writing the artifact to stdout: {e}");
                    EXIT_IO
                }
            }
        }
        Err(e) => {
            eprintln!("{e:#}");
            EXIT_INVALID
        }
    }
}

/// Runs compiles in child processes of `exe` (the `wisp` binary), within `timeout` and `memory`.
#[derive(Clone, Debug)]
pub struct ChildCompiler {
    /// The executable (`wisp`), run as `exe __compile`.
    pub exe: PathBuf,
    /// CPU-time bound of one compile (`engine.compileTimeout`); its wall clock is bounded at
    /// [`WALL_BACKSTOP`] times it.
    pub timeout: Duration,
    /// Address-space bound of one compile (`engine.compileMemory`), bytes.
    pub memory: u64,
    /// How refusals name the bounds.
    pub names: BoundNames,
    /// The memory cgroup the host and its children run in, if it has a limit: a compile is
    /// stopped when the cgroup's unreclaimable memory comes within its reserve of the limit
    /// ([`CgroupMemory::is_full`]), before the kernel thrashes the code pages out or kills.
    pub container: Option<CgroupMemory>,
}

/// How often the parent reads a compiling child's CPU time (and the container's memory).
pub const CPU_POLL: Duration = Duration::from_millis(10);

/// How urgent a compile is: it sets the child's nice value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Urgency {
    /// A start or a reload waits for it: nice 10.
    Foreground,
    /// A background tier-up: nice 19, behind everything else on the machine.
    Background,
}

impl Urgency {
    fn nice(self) -> libc::c_int {
        match self {
            Self::Foreground => 10,
            Self::Background => 19,
        }
    }
}

/// Which bound ended a compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Over {
    /// Its CPU time.
    Cpu,
    /// The wall-clock backstop.
    Wall,
    /// The container's memory: its limit, less the reserve.
    Container,
}

/// What a child compile produced.
#[derive(Debug)]
pub struct ChildCompiled {
    /// The serialized artifact (what `Engine::precompile_component` returns).
    pub artifact: Vec<u8>,
    /// The child's peak resident memory, bytes.
    pub peak_rss: u64,
    /// The child's CPU time (user and system, all its threads).
    pub cpu: Duration,
    /// Wall-clock time from spawn to exit.
    pub elapsed: Duration,
}

/// How the child ended, with what it wrote on stderr.
#[derive(Debug)]
struct Ended {
    /// Its exit code, or `None` when a signal ended it.
    code: Option<i32>,
    /// The signal that ended it.
    signal: Option<i32>,
    /// The parent killed it at a bound (time, or the container's memory).
    over: Option<Over>,
    /// Its stdout went past the memory bound (then the parent killed it).
    too_big: bool,
    /// The head and the tail of its stderr.
    stderr: String,
}

impl ChildCompiler {
    /// Compiles `bytes` in a child with `settings`. Every way the child can fail is a
    /// [`LoadError`] naming the bound it hit, or what it said.
    pub fn compile(
        &self,
        settings: ArtifactSettings,
        bytes: &[u8],
        urgency: Urgency,
    ) -> Result<ChildCompiled, LoadError> {
        let start = Instant::now();
        let mut child = self.command(settings, urgency).spawn().map_err(|e| {
            LoadError::Crashed(format!(
                "cannot start the compiler process {}: {e}",
                self.exe.display()
            ))
        })?;
        let (artifact, ended, usage) = self.supervise(&mut child, bytes, start);
        let elapsed = start.elapsed();
        ended.verdict(self)?;
        Ok(ChildCompiled {
            artifact,
            peak_rss: usage.peak_rss,
            cpu: usage.cpu,
            elapsed,
        })
    }

    /// `exe __compile ...` with its pipes, limits and process group.
    fn command(&self, settings: ArtifactSettings, urgency: Urgency) -> Command {
        let mut c = Command::new(&self.exe);
        c.args(settings.args())
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group: a terminal's Ctrl-C reaches the parent, which the child dies with.
            .process_group(0);
        // The kernel's limit is whole seconds, a second past the bound the parent watches.
        let cpu = self.timeout.as_secs().saturating_add(2);
        limit_child(&mut c, self.memory, cpu, urgency.nice());
        c
    }

    /// Feeds the module, reads the artifact (at most `memory` bytes) and stderr, kills the child
    /// at the deadline, and reaps it.
    fn supervise(
        &self,
        child: &mut Child,
        bytes: &[u8],
        start: Instant,
    ) -> (Vec<u8>, Ended, Usage) {
        let (stdin, stdout, stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let backstop = start + self.timeout.saturating_mul(WALL_BACKSTOP);
        let limit = self.memory;
        let pid = child.id();
        std::thread::scope(|s| {
            s.spawn(move || {
                // A child that dies before reading it all breaks the pipe: its status tells why.
                if let Some(mut w) = stdin {
                    let _ = w.write_all(bytes);
                }
            });
            let err = s.spawn(move || stderr.map(keep_head_and_tail).unwrap_or_default());
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            s.spawn(move || {
                let mut art = Vec::new();
                if let Some(r) = stdout {
                    let _ = r.take(limit.saturating_add(1)).read_to_end(&mut art);
                }
                let _ = tx.send(art);
            });
            let (artifact, mut over) = loop {
                match rx.recv_timeout(CPU_POLL) {
                    Ok(art) => break (art, None),
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                        break (Vec::new(), None);
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                }
                if cpu_time(pid).is_some_and(|cpu| cpu > self.timeout) {
                    break (Vec::new(), Some(Over::Cpu));
                }
                if Instant::now() >= backstop {
                    break (Vec::new(), Some(Over::Wall));
                }
                if self.container.as_ref().is_some_and(CgroupMemory::is_full) {
                    break (Vec::new(), Some(Over::Container));
                }
            };
            let too_big = artifact.len() as u64 > limit;
            if over.is_some() || too_big {
                let _ = child.kill();
            }
            let (status, usage) = reap(child, backstop, &mut over);
            let stderr = err.join().unwrap_or_default();
            let ended = Ended {
                code: status.and_then(|s| s.code()),
                signal: status.and_then(|s| s.signal()),
                over,
                too_big,
                stderr,
            };
            (artifact, ended, usage)
        })
    }
}

/// The child's resource usage, from `wait4`.
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    peak_rss: u64,
    cpu: Duration,
}

/// Waits for the child until `deadline` (its stdout is closed: it is exiting), kills it then
/// (setting `over`), and reaps it with its resource usage. `None`: it could not be reaped.
fn reap(
    child: &mut Child,
    deadline: Instant,
    over: &mut Option<Over>,
) -> (Option<std::process::ExitStatus>, Usage) {
    let pid = child.id() as libc::pid_t;
    loop {
        match wait4(pid, libc::WNOHANG) {
            Ok(Some(done)) => return done,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(None) => {
                over.get_or_insert(Over::Wall);
                let _ = child.kill();
                return wait4(pid, 0).ok().flatten().unwrap_or_default();
            }
            Err(_) => return (None, Usage::default()),
        }
    }
}

/// `wait4(pid, flags)`: `None` while it runs (`WNOHANG`), else its status and resource usage.
#[allow(unsafe_code)] // one libc call on local out-parameters
fn wait4(
    pid: libc::pid_t,
    flags: libc::c_int,
) -> std::io::Result<Option<(Option<std::process::ExitStatus>, Usage)>> {
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `status` and `ru` are live locals the call writes into; `pid` is our child,
        // not yet reaped (so not reused).
        let r = unsafe { libc::wait4(pid, &mut status, flags, &mut ru) };
        if r == 0 {
            return Ok(None);
        }
        if r == pid {
            let tv = |t: libc::timeval| {
                Duration::from_secs(t.tv_sec.max(0) as u64)
                    + Duration::from_micros(t.tv_usec.max(0) as u64)
            };
            let usage = Usage {
                // Linux gives kilobytes.
                peak_rss: (ru.ru_maxrss.max(0) as u64) << 10,
                cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
            };
            return Ok(Some((
                Some(std::process::ExitStatus::from_raw(status)),
                usage,
            )));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// CPU time (user and system, every thread) of process `pid` so far, from `/proc/PID/stat`;
/// `None` where it cannot be read (then only the wall-clock backstop and `RLIMIT_CPU` hold).
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name (in parentheses, which may hold anything): state is field 3,
    // utime field 14, stime field 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let ticks: u64 = fields.next()?.parse::<u64>().ok()? + fields.next()?.parse::<u64>().ok()?;
    let hz = clock_ticks_per_second();
    Some(Duration::from_secs(ticks / hz) + Duration::from_nanos((ticks % hz) * 1_000_000_000 / hz))
}

/// The unit of `/proc/PID/stat`'s times (`USER_HZ`).
fn clock_ticks_per_second() -> u64 {
    Some(rustix::param::clock_ticks_per_second())
        .filter(|&h| h > 0)
        .unwrap_or(100)
}

/// Sets the child's limits between fork and exec: address space `memory`, CPU `cpu` seconds,
/// no core file, killed with the thread that spawned it, nice `nice`, and the kernel's first choice
/// when the container runs out of memory (`oom_score_adj` 1000: this compile, not the host;
/// raising one's own score needs no privilege, and where it fails the limits still hold).
#[allow(unsafe_code)]
fn limit_child(c: &mut Command, memory: u64, cpu: u64, nice: libc::c_int) {
    let limits = [
        (libc::RLIMIT_AS, memory, memory),
        (libc::RLIMIT_CPU, cpu, cpu.saturating_add(1)),
        (libc::RLIMIT_CORE, 0, 0),
    ];
    // SAFETY: the closure runs in the forked child before exec. It makes only async-signal-safe
    // system calls (getrlimit, setrlimit, prctl, setpriority, open, write, close) on values
    // copied into it, static strings and its own stack, and neither allocates nor takes a lock
    // (an `io::Error` of an OS code does not allocate).
    unsafe {
        c.pre_exec(move || {
            for (resource, soft, hard) in limits {
                let mut cur = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                if libc::getrlimit(resource, &mut cur) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // Never above a hard limit already set (raising it needs privilege).
                let hard = (hard as libc::rlim_t).min(cur.rlim_max);
                let new = libc::rlimit {
                    rlim_cur: (soft as libc::rlim_t).min(hard),
                    rlim_max: hard,
                };
                if libc::setrlimit(resource, &new) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            #[cfg(target_os = "linux")]
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Best effort: a host already at that nice value or more stays where it is.
            let _ = libc::setpriority(libc::PRIO_PROCESS, 0, nice);
            let fd = libc::open(
                c"/proc/self/oom_score_adj".as_ptr(),
                libc::O_WRONLY | libc::O_CLOEXEC,
            );
            if fd >= 0 {
                let _ = libc::write(fd, b"1000".as_ptr().cast(), 4);
                libc::close(fd);
            }
            Ok(())
        });
    }
}

/// Reads `r` to its end, keeping its first and last [`STDERR_KEPT`] bytes.
fn keep_head_and_tail(mut r: impl Read) -> String {
    let (mut head, mut tail) = (Vec::new(), Vec::new());
    let mut buf = [0u8; 4096];
    let mut cut = false;
    while let Ok(n) = r.read(&mut buf) {
        if n == 0 {
            break;
        }
        let mut chunk = &buf[..n];
        if head.len() < STDERR_KEPT {
            let take = chunk.len().min(STDERR_KEPT - head.len());
            head.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
        }
        tail.extend_from_slice(chunk);
        if tail.len() > STDERR_KEPT {
            tail.drain(..tail.len() - STDERR_KEPT);
            cut = true;
        }
    }
    let mut text = String::from_utf8_lossy(&head).into_owned();
    if cut {
        text.push_str("\n[...]\n");
    }
    text.push_str(&String::from_utf8_lossy(&tail));
    text.trim().to_owned()
}

/// What a child's stderr says when an allocation failed under its address-space limit: Rust's
/// "memory allocation of N bytes failed", an OS error ENOMEM from a mapping, a thread whose
/// stack could not be mapped.
fn out_of_memory(stderr: &str) -> bool {
    [
        "memory allocation of",
        "Cannot allocate memory",
        "out of memory",
        "os error 12",
        "failed to spawn thread",
    ]
    .iter()
    .any(|m| stderr.contains(m))
}

impl Ended {
    /// The bound the child hit, or what it said; `Ok` when it compiled.
    fn verdict(&self, limits: &ChildCompiler) -> Result<(), LoadError> {
        let too_slow = |wall| LoadError::TooSlow {
            limit: limits.timeout,
            setting: limits.names.timeout,
            wall,
        };
        let too_big = LoadError::TooBig {
            limit: limits.memory,
            setting: limits.names.memory,
        };
        if self.over == Some(Over::Cpu) || self.signal == Some(libc::SIGXCPU) {
            return Err(too_slow(false));
        }
        if self.over == Some(Over::Wall) {
            return Err(too_slow(true));
        }
        if self.over == Some(Over::Container)
            && let Some(c) = &limits.container
        {
            return Err(LoadError::Crashed(format!(
                "the compile was stopped when the container's memory (anonymous and shared, of \
                 every process in its cgroup) came within {} of its limit of {}, the room kept \
                 for the code the processes run from: past it the kernel thrashes or kills; \
                 give the container more memory",
                mib(c.reserve()),
                mib(c.limit)
            )));
        }
        if self.too_big {
            return Err(too_big);
        }
        let said = if self.stderr.is_empty() {
            "nothing on stderr".to_owned()
        } else {
            self.stderr.clone()
        };
        match (self.code, self.signal) {
            (Some(0), _) => Ok(()),
            _ if out_of_memory(&self.stderr) => Err(too_big),
            (Some(EXIT_INVALID), _) => Err(LoadError::Invalid(said)),
            (_, Some(libc::SIGKILL)) => Err(LoadError::Crashed(format!(
                "the compiler process was killed (SIGKILL), most likely by the kernel at the \
                 container's memory limit: give the container more memory or lower \
                 {} ({})",
                limits.names.memory,
                mib(limits.memory)
            ))),
            (Some(code), _) => Err(LoadError::Crashed(format!(
                "the compiler process exited with code {code}: {said}"
            ))),
            (None, Some(sig)) => Err(LoadError::Crashed(format!(
                "the compiler process ended with signal {sig}: {said}"
            ))),
            (None, None) => Err(LoadError::Crashed(
                "the compiler process could not be waited for".into(),
            )),
        }
    }
}

/// `n` bytes in MiB, as the bounds are written in errors (`1024 MiB`).
pub fn mib(n: u64) -> String {
    format!("{} MiB", n >> 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(code: Option<i32>, signal: Option<i32>, stderr: &str) -> Ended {
        Ended {
            code,
            signal,
            over: None,
            too_big: false,
            stderr: stderr.into(),
        }
    }

    fn limits() -> ChildCompiler {
        ChildCompiler {
            exe: "wisp".into(),
            timeout: Duration::from_secs(7),
            memory: 300 << 20,
            names: BoundNames::FLAGS,
            container: None,
        }
    }

    #[test]
    fn a_compile_stopped_at_the_containers_memory_names_the_limit_and_the_reserve() {
        let dir = tempfile::tempdir().unwrap();
        let cgroup = dir.path().join("pod");
        std::fs::create_dir(&cgroup).unwrap();
        std::fs::write(cgroup.join("memory.max"), format!("{}\n", 192u64 << 20)).unwrap();
        let membership = "0::/pod\n";
        let container = CgroupMemory::in_root(dir.path(), membership).unwrap();
        let l = ChildCompiler {
            container: Some(container),
            ..limits()
        };
        let mut t = ended(None, Some(libc::SIGKILL), "");
        t.over = Some(Over::Container);
        match t.verdict(&l) {
            Err(LoadError::Crashed(why)) => assert!(
                why.contains("within 32 MiB of its limit of 192 MiB")
                    && why.contains("give the container more memory"),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_way_a_child_ends_names_the_bound_or_its_message() {
        let l = limits();
        assert!(ended(Some(0), None, "").verdict(&l).is_ok());
        let mut t = ended(None, Some(libc::SIGKILL), "");
        t.over = Some(Over::Cpu);
        assert!(
            matches!(t.verdict(&l), Err(LoadError::TooSlow { limit, setting: "--compile-timeout", wall: false }) if limit == l.timeout)
        );
        t.over = Some(Over::Wall);
        assert!(matches!(
            t.verdict(&l),
            Err(LoadError::TooSlow { wall: true, .. })
        ));
        assert!(matches!(
            ended(None, Some(libc::SIGXCPU), "").verdict(&l),
            Err(LoadError::TooSlow { wall: false, .. })
        ));
        for oom in [
            "memory allocation of 1048576 bytes failed",
            "failed to mmap: Cannot allocate memory (os error 12)",
        ] {
            assert!(
                matches!(ended(None, Some(libc::SIGABRT), oom).verdict(&l), Err(LoadError::TooBig { limit, setting: "--compile-memory" }) if limit == 300 << 20),
                "{oom}"
            );
        }
        let mut big = ended(None, Some(libc::SIGKILL), "");
        big.too_big = true;
        assert!(matches!(big.verdict(&l), Err(LoadError::TooBig { .. })));
        match ended(
            Some(EXIT_INVALID),
            None,
            "failed to parse WebAssembly module",
        )
        .verdict(&l)
        {
            Err(LoadError::Invalid(m)) => assert_eq!(m, "failed to parse WebAssembly module"),
            other => panic!("{other:?}"),
        }
        match ended(None, Some(libc::SIGKILL), "").verdict(&l) {
            Err(LoadError::Crashed(m)) => {
                assert!(
                    m.contains("killed (SIGKILL)") && m.contains("300 MiB"),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
        match ended(None, Some(libc::SIGSEGV), "").verdict(&l) {
            Err(LoadError::Crashed(m)) => {
                assert!(m.contains("signal 11: nothing on stderr"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn stderr_keeps_its_head_and_its_tail() {
        let text = format!(
            "{}{}{}",
            "a".repeat(5000),
            "b".repeat(10_000),
            "c".repeat(100)
        );
        let kept = keep_head_and_tail(text.as_bytes());
        assert!(kept.starts_with(&"a".repeat(4096)), "head");
        assert!(kept.ends_with(&"c".repeat(100)), "tail");
        assert!(kept.contains("[...]"));
        assert!(kept.len() < 2 * STDERR_KEPT + 16);
        assert_eq!(keep_head_and_tail(&b"short\n"[..]), "short");
    }

    #[test]
    fn the_child_is_given_the_engines_settings() {
        let s = ArtifactSettings {
            epoch_interruption: true,
            fuel: false,
            baseline: false,
        };
        assert_eq!(s.args(), ["__compile"]);
        let s = ArtifactSettings {
            epoch_interruption: false,
            fuel: true,
            baseline: true,
        };
        assert_eq!(
            s.args(),
            [
                "__compile",
                "--fuel",
                "--no-epoch-interruption",
                "--baseline"
            ]
        );
    }
}
