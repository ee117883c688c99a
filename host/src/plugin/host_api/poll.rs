//! `wasi:io/poll`: the host's `poll` and `pollable.block`, linked over wasmtime-wasi's (which
//! wait without bound), wait at most for what the call has left and then cut the call as a
//! deadline hit (see [`crate::plugin::sandbox::clock`]).

use std::time::Instant;

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource, ResourceTable};
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::p2::bindings::io::poll::{Host as _, HostPollable as _};

use crate::plugin::sandbox::state::StoreData;

/// The `wasi:io/poll` instance wasmtime-wasi links (the version its WIT declares; components
/// importing any 0.2.x are linked to it).
const WASI_POLL: &str = "wasi:io/poll@0.2.12";

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
