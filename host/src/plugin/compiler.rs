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
//!   memory loses the compile, not the host;
//! - **time**: the parent kills the child at `engine.compileTimeout` (wall clock, from its
//!   start); a CPU-time limit (`RLIMIT_CPU`, the timeout times the cores) and death with its
//!   parent (`PR_SET_PDEATHSIG`) keep an orphan from burning on;
//! - **share**: the child runs at nice 10, so the plugins that run meanwhile keep their CPU.
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

use super::engine::LoadError;

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
    /// `engine.firstLoadTier`): ~6x faster to compile, ~1.75x slower to run. Its artifacts load
    /// only into an engine on Winch.
    pub baseline: bool,
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
    let engine = match wasmtime::Engine::new(&super::engine::wasm_config(settings)) {
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
    /// Wall-clock bound of one compile (`engine.compileTimeout`).
    pub timeout: Duration,
    /// Address-space bound of one compile (`engine.compileMemory`), bytes.
    pub memory: u64,
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
    /// The parent killed it at the deadline.
    timed_out: bool,
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
    ) -> Result<ChildCompiled, LoadError> {
        let start = Instant::now();
        let mut child = self.command(settings).spawn().map_err(|e| {
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
    fn command(&self, settings: ArtifactSettings) -> Command {
        let mut c = Command::new(&self.exe);
        c.args(settings.args())
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group: a terminal's Ctrl-C reaches the parent, which the child dies with.
            .process_group(0);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        let cpu = self
            .timeout
            .as_secs()
            .saturating_add(1)
            .saturating_mul(cores);
        limit_child(&mut c, self.memory, cpu);
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
        let deadline = start + self.timeout;
        let limit = self.memory;
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
            let wait = deadline.saturating_duration_since(Instant::now());
            let (artifact, mut timed_out) = match rx.recv_timeout(wait) {
                Ok(art) => (art, false),
                Err(_) => (Vec::new(), true),
            };
            let too_big = artifact.len() as u64 > limit;
            if timed_out || too_big {
                let _ = child.kill();
            }
            let (status, usage) = reap(child, deadline, &mut timed_out);
            let stderr = err.join().unwrap_or_default();
            let ended = Ended {
                code: status.and_then(|s| s.code()),
                signal: status.and_then(|s| s.signal()),
                timed_out,
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
/// (setting `timed_out`), and reaps it with its resource usage. `None`: it could not be reaped.
fn reap(
    child: &mut Child,
    deadline: Instant,
    timed_out: &mut bool,
) -> (Option<std::process::ExitStatus>, Usage) {
    let pid = child.id() as libc::pid_t;
    loop {
        match wait4(pid, libc::WNOHANG) {
            Ok(Some(done)) => return done,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(None) => {
                *timed_out = true;
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

/// Sets the child's limits between fork and exec: address space `memory`, CPU `cpu` seconds,
/// no core file, killed with the thread that spawned it, nice 10, and the kernel's first choice
/// when the container runs out of memory (`oom_score_adj` 1000: this compile, not the host;
/// raising one's own score needs no privilege, and where it fails the limits still hold).
#[allow(unsafe_code)]
fn limit_child(c: &mut Command, memory: u64, cpu: u64) {
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
            // Best effort: a host already at nice 10 or more stays where it is.
            let _ = libc::setpriority(libc::PRIO_PROCESS, 0, 10);
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
        if self.timed_out || self.signal == Some(libc::SIGXCPU) {
            return Err(LoadError::TooSlow(limits.timeout));
        }
        if self.too_big {
            return Err(LoadError::TooBig(limits.memory));
        }
        let said = if self.stderr.is_empty() {
            "nothing on stderr".to_owned()
        } else {
            self.stderr.clone()
        };
        match (self.code, self.signal) {
            (Some(0), _) => Ok(()),
            _ if out_of_memory(&self.stderr) => Err(LoadError::TooBig(limits.memory)),
            (Some(EXIT_INVALID), _) => Err(LoadError::Invalid(said)),
            (_, Some(libc::SIGKILL)) => Err(LoadError::Crashed(format!(
                "the compiler process was killed (SIGKILL), most likely by the kernel at the \
                 container's memory limit: give the container more memory or lower \
                 engine.compileMemory ({})",
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
            timed_out: false,
            too_big: false,
            stderr: stderr.into(),
        }
    }

    fn limits() -> ChildCompiler {
        ChildCompiler {
            exe: "wisp".into(),
            timeout: Duration::from_secs(7),
            memory: 300 << 20,
        }
    }

    #[test]
    fn each_way_a_child_ends_names_the_bound_or_its_message() {
        let l = limits();
        assert!(ended(Some(0), None, "").verdict(&l).is_ok());
        let mut t = ended(None, Some(libc::SIGKILL), "");
        t.timed_out = true;
        assert!(matches!(t.verdict(&l), Err(LoadError::TooSlow(d)) if d == l.timeout));
        assert!(matches!(
            ended(None, Some(libc::SIGXCPU), "").verdict(&l),
            Err(LoadError::TooSlow(_))
        ));
        for oom in [
            "memory allocation of 1048576 bytes failed",
            "failed to mmap: Cannot allocate memory (os error 12)",
        ] {
            assert!(
                matches!(ended(None, Some(libc::SIGABRT), oom).verdict(&l), Err(LoadError::TooBig(m)) if m == 300 << 20),
                "{oom}"
            );
        }
        let mut big = ended(None, Some(libc::SIGKILL), "");
        big.too_big = true;
        assert!(matches!(big.verdict(&l), Err(LoadError::TooBig(_))));
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
