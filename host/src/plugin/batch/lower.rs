//! [`Batch`] lowered as `handle`'s `list<u8>`: the one module that uses wasmtime's doc-hidden
//! lowering API (`wasmtime::component::__internal`: `LowerContext`, `CanonicalAbiInfo`,
//! `InstanceType`, `InterfaceType`).
//!
//! Why: wasmtime's public API lowers a `list<u8>` from a `&[u8]` the host already holds, which
//! means writing every batch into a host buffer first and wasmtime copying it into the plugin's
//! memory after. Implementing `Lower` for [`Batch`] asks the plugin's `realloc` for the batch's
//! size and writes the batch straight into that memory: each object's encoding is copied once
//! per delivery (BENCHMARKS.md, "One copy per notification": the host's share of a JSON
//! notification 3,266 -> 572 instructions). The price: `__internal` is not a stable API, and
//! any wasmtime release may change it. Hence the workspace pins wasmtime to one release
//! (Cargo.toml), and [`tests::wasmtime_is_the_release_the_batch_lowering_was_checked_against`]
//! fails on any other, naming what to check; the integration test
//! `abi::a_batch_arrives_in_the_plugins_memory_byte_for_byte` checks the behaviour end to end.

use wasmtime::ValRaw;
use wasmtime::component::__internal::{
    CanonicalAbiInfo, InstanceType, InterfaceType, LowerContext,
};
use wasmtime::component::{ComponentType, Lower};

use super::Batch;

/// Lowering (`handle`'s argument, a `list<u8>`): asks the plugin's `realloc` for the batch's
/// size and writes the batch into that memory. Errors (the plugin's allocator trapping, out of
/// memory, or answering with memory it does not have) are the call's, classified as plugin
/// errors like any trap.
fn lower<T>(batch: &Batch<'_>, cx: &mut LowerContext<'_, T>) -> wasmtime::Result<(usize, usize)> {
    let len = batch.size();
    // `realloc` refuses a size over u32 (wasm32) before calling the plugin.
    let ptr = cx.realloc(0, 0, 1, len)?;
    let dst = cx
        .as_slice_mut()
        .get_mut(ptr..)
        .and_then(|m| m.get_mut(..len))
        .ok_or_else(|| wasmtime::Error::msg("realloc return: beyond end of memory"))?;
    batch.write(dst);
    Ok((ptr, len))
}

// SAFETY: a `Batch` has `list<u8>`'s canonical ABI (a pointer and a length: `[u8]`'s `ABI`,
// `Lower` and `typecheck`), and its lowering below produces exactly that: a span of the
// plugin's memory allocated through its `realloc`, every byte of which is written.
#[allow(unsafe_code)]
unsafe impl ComponentType for Batch<'_> {
    type Lower = [ValRaw; 2];
    const ABI: CanonicalAbiInfo = <[u8] as ComponentType>::ABI;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <[u8] as ComponentType>::typecheck(ty, types)
    }
}

// SAFETY: see the `ComponentType` impl; the pointer pair is stored as `[u8]`'s lowering stores
// it (two i64 flat values; two little-endian u32 in memory).
#[allow(unsafe_code)]
unsafe impl Lower for Batch<'_> {
    fn linear_lower_to_flat<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        _ty: InterfaceType,
        dst: &mut std::mem::MaybeUninit<[ValRaw; 2]>,
    ) -> wasmtime::Result<()> {
        let (ptr, len) = lower(self, cx)?;
        dst.write([ValRaw::i64(ptr as i64), ValRaw::i64(len as i64)]);
        Ok(())
    }

    fn linear_lower_to_memory<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        _ty: InterfaceType,
        offset: usize,
    ) -> wasmtime::Result<()> {
        let (ptr, len) = lower(self, cx)?;
        *cx.get::<4>(offset) = u32::try_from(ptr)?.to_le_bytes();
        *cx.get::<4>(offset + 4) = u32::try_from(len)?.to_le_bytes();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wasmtime release whose `__internal` lowering API this module was written and
    /// checked against.
    const CHECKED_AGAINST: &str = "48.0.10";

    /// The wasmtime release the workspace resolves (Cargo.lock).
    fn resolved() -> Option<String> {
        let lock = include_str!("../../../../Cargo.lock");
        let mut lines = lock.lines();
        while let Some(l) = lines.next() {
            if l == "name = \"wasmtime\"" {
                let v = lines.next()?.strip_prefix("version = \"")?;
                return Some(v.trim_end_matches('"').to_owned());
            }
        }
        None
    }

    #[test]
    fn wasmtime_is_the_release_the_batch_lowering_was_checked_against() {
        let resolved = resolved().expect("Cargo.lock names a wasmtime package");
        assert!(
            resolved == CHECKED_AGAINST,
            "\n\nwasmtime is {resolved}, but the batch lowering (host/src/plugin/batch/lower.rs) \
             was checked against {CHECKED_AGAINST}.\nIt uses wasmtime's doc-hidden, unstable \
             `component::__internal` API (LowerContext::realloc, as_slice_mut, get; \
             CanonicalAbiInfo; [u8]'s typecheck). Before moving:\n  1. read the new release's \
             `LowerContext` and `[u8]`'s `Lower` impl (crates/wasmtime/src/runtime/component/\
             func/typed.rs) and check this module still does what they do;\n  2. run `cargo \
             test -p wisp-tests --test integration -- abi::` (a batch must arrive in the \
             plugin's memory byte for byte) and `cargo xtask bench --callgrind`;\n  3. then set \
             CHECKED_AGAINST to {resolved}.\n"
        );
    }

    #[test]
    fn a_batch_has_the_canonical_abi_of_a_byte_list() {
        let (b, l) = (
            <Batch<'_> as ComponentType>::ABI,
            <[u8] as ComponentType>::ABI,
        );
        let shape = |a: &CanonicalAbiInfo| (a.size32, a.align32, a.flat_count);
        assert_eq!(shape(&b), shape(&l));
        assert_eq!(
            (
                shape(&l),
                std::mem::size_of::<<Batch<'_> as ComponentType>::Lower>()
            ),
            ((8, 4, Some(2)), 2 * std::mem::size_of::<ValRaw>()),
            "wasmtime lowers a list<u8> otherwise than as a pointer and a length: see \
             CHECKED_AGAINST above"
        );
    }
}
