//! The clock of one plugin call: what its deadline is measured in. The WASI calls that could
//! block (`wasi:io/poll`'s `poll` and `pollable.block`) stop at that deadline
//! (the host API's `poll` interface).
//!
//! A call's deadline is CPU time of the thread running it, plus the time it spent blocked in
//! the host waiting for a pollable (a clock, a stream): a plugin that sleeps uses no CPU, so the
//! epoch check alone would never cut it, and a thread stuck in a host call never reaches an
//! epoch check at all. wasmtime-wasi's own `poll` and `block` wait without bound; the host
//! links its own over them, which wait at most for what the call has left and then cut the call
//! as a deadline hit. Every other WASI call returns at once here: stdin is closed, stdout and
//! stderr are always ready (see `output`), no file, socket or name lookup is granted.

use std::time::{Duration, Instant};

/// Longest wall-clock time a call may take, whatever CPU time it used: `WALL_CAP_FACTOR` times
/// its deadline, and at least [`MIN_WALL_CAP`].
pub const WALL_CAP_FACTOR: u32 = 20;
/// See [`WALL_CAP_FACTOR`].
pub const MIN_WALL_CAP: Duration = Duration::from_secs(1);

/// Time accounting of the call in progress.
#[derive(Debug)]
pub struct CallClock {
    /// The deadline of every call.
    pub deadline: Duration,
    /// The wall-clock cap of every call (see [`WALL_CAP_FACTOR`]).
    pub wall_cap: Duration,
    /// When the current call started: the thread's CPU time and the wall clock.
    start: Option<(Duration, Instant)>,
    /// Time the current call spent blocked in host calls.
    pub blocked: Duration,
    /// The current call was cut in a host call for its deadline.
    pub cut: bool,
}

impl CallClock {
    /// The clock of calls with this deadline.
    pub fn new(deadline: Duration) -> Self {
        let mut clock = Self {
            deadline,
            wall_cap: MIN_WALL_CAP,
            start: None,
            blocked: Duration::ZERO,
            cut: false,
        };
        clock.set_deadline(deadline);
        clock
    }

    /// Sets the deadline (and with it the wall-clock cap) of the next calls.
    pub fn set_deadline(&mut self, deadline: Duration) {
        self.deadline = deadline;
        self.wall_cap = deadline
            .checked_mul(WALL_CAP_FACTOR)
            .unwrap_or(Duration::MAX)
            .max(MIN_WALL_CAP);
    }

    /// Starts timing a call.
    pub fn start(&mut self) {
        self.start = Some((
            crate::plugin::compile::cputime::thread_cpu_time().unwrap_or_default(),
            Instant::now(),
        ));
        self.blocked = Duration::ZERO;
        self.cut = false;
    }

    /// What the current call has used of its deadline (CPU time plus time blocked in the
    /// host), and of its wall-clock cap; `None` outside a call or where the thread's CPU time
    /// cannot be read (then the deadline is wall-clock time: see `instance::deadline_check`).
    pub fn used(&self) -> Option<(Duration, Duration)> {
        let (cpu0, wall0) = self.start?;
        let cpu = crate::plugin::compile::cputime::thread_cpu_time()?;
        Some((cpu.saturating_sub(cpu0) + self.blocked, wall0.elapsed()))
    }

    /// How long the current call may still block.
    pub fn left(&self) -> Duration {
        match (self.used(), self.start) {
            (Some((used, wall)), _) => self
                .deadline
                .saturating_sub(used)
                .min(self.wall_cap.saturating_sub(wall)),
            (None, Some((_, wall0))) => self.deadline.saturating_sub(wall0.elapsed()),
            (None, None) => self.deadline,
        }
    }
}
