//! The clock of one plugin call: what its deadline is measured in, and the WASI calls that
//! could block (`wasi:io/poll`'s `poll` and `pollable.block`) made to stop at that deadline.
//!
//! A call's deadline is CPU time of the thread running it, plus the time it spent blocked in
//! the host waiting for a pollable (a clock, a stream): a plugin that sleeps uses no CPU, so the
//! epoch check alone would never cut it, and a thread stuck in a host call never reaches an
//! epoch check at all. wasmtime-wasi's own `poll` and `block` wait without bound; the host
//! links its own over them, which wait at most for what the call has left and then cut the call
//! as a deadline hit. Every other WASI call returns at once here: stdin is closed, stdout and
//! stderr are always ready (see `output`), no file, socket or name lookup is granted.

use std::time::{Duration, Instant};

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource, ResourceTable};
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::p2::bindings::io::poll::{Host as _, HostPollable as _};

use super::state::StoreData;

/// Longest wall-clock time a call may take, whatever CPU time it used: `WALL_CAP_FACTOR` times
/// its deadline, and at least [`MIN_WALL_CAP`].
pub const WALL_CAP_FACTOR: u32 = 20;
/// See [`WALL_CAP_FACTOR`].
pub const MIN_WALL_CAP: Duration = Duration::from_secs(1);

/// The `wasi:io/poll` instance wasmtime-wasi links (the version its WIT declares; components
/// importing any 0.2.x are linked to it).
const WASI_POLL: &str = "wasi:io/poll@0.2.12";

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
    blocked: Duration,
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
            super::cputime::thread_cpu_time().unwrap_or_default(),
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
        let cpu = super::cputime::thread_cpu_time()?;
        Some((cpu.saturating_sub(cpu0) + self.blocked, wall0.elapsed()))
    }

    /// How long the current call may still block.
    fn left(&self) -> Duration {
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

/// Runs `wait` (a wait on the plugin's resources) for at most what the call has left, and
/// counts the time as used. On timeout the call is cut: an interrupt trap, named a deadline hit.
fn within_deadline<R>(
    store: &mut StoreContextMut<'_, StoreData>,
    wait: impl AsyncFnOnce(&mut ResourceTable) -> R,
) -> wasmtime::Result<R> {
    let (table, clock) = store.data_mut().table_and_clock();
    let left = clock.left();
    let began = Instant::now();
    let r =
        wasmtime_wasi::runtime::in_tokio(
            async move { tokio::time::timeout(left, wait(table)).await },
        );
    clock.blocked += began.elapsed();
    r.map_err(|_| {
        clock.cut = true;
        wasmtime::Trap::Interrupt.into()
    })
}

/// Links the host's `poll` and `pollable.block` over wasmtime-wasi's (see the module docs).
pub fn add_to_linker(linker: &mut Linker<StoreData>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut poll = linker.instance(WASI_POLL)?;
    poll.func_wrap(
        "poll",
        |mut store: StoreContextMut<'_, StoreData>, (pollables,): (Vec<Resource<DynPollable>>,)| {
            let ready = within_deadline(&mut store, async |t| t.poll(pollables).await)??;
            Ok((ready,))
        },
    )?;
    poll.func_wrap(
        "[method]pollable.block",
        |mut store: StoreContextMut<'_, StoreData>, (pollable,): (Resource<DynPollable>,)| {
            within_deadline(&mut store, async |t| t.block(pollable).await)??;
            Ok(())
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}
