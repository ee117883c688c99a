//! Batches of notifications and lists of cached objects in ABI 0.2's layout ([`crate::abi`]):
//! what a plugin receives. Each carries the objects' encodings (made once, when they entered
//! the informer) whole; a batch is written straight into the plugin's memory ([`Batch`]).

use crate::abi::{
    ABSENT, BATCH_ENTRY, BATCH_HEADER, LAYOUT_VERSION, LIST_HEADER, OBJECT_HEADER, field, flag,
    kind, off, put_span, put_u32,
};
use crate::informer::handler::{Delivery, Notification};
use crate::informer::{DeletedObject, Object};

// Lowering a `Batch` as `list<u8>` uses wasmtime 48's doc-hidden `__internal` lowering API
// (`LowerContext::realloc`, `as_slice_mut`, `get`): what its own `[u8]` lowering does, minus the
// host-side buffer. The workspace pins wasmtime to one release for this (Cargo.toml).
use wasmtime::ValRaw;
use wasmtime::component::__internal::{
    CanonicalAbiInfo, InstanceType, InterfaceType, LowerContext,
};
use wasmtime::component::{ComponentType, Lower};

/// A batch of notifications from one informer, in ABI 0.2's layout: written straight into the
/// plugin's memory while wasmtime lowers `handle`'s argument (see [`Batch::lower`]), so each
/// object's cached encoding is copied once per delivery, and no host-side batch buffer exists.
/// [`Batch::to_vec`] writes the same bytes into a vector (tests, benchmarks).
#[derive(Clone, Copy)]
pub struct Batch<'a> {
    informer: &'a str,
    notifications: &'a [Delivery],
    /// Objects without their JSON (a metadata-only plugin).
    metadata_only: bool,
}

/// The bytes of `o` a batch carries: all of them, or, metadata only, all but the JSON.
fn carried(o: &Object, metadata_only: bool) -> &[u8] {
    if metadata_only {
        &o.wire()[..o.json_at()]
    } else {
        o.wire()
    }
}

impl<'a> Batch<'a> {
    /// `notifications` from `informer`; `metadata_only`: objects without their JSON (the JSON
    /// field absent), for plugins that describe themselves `metadata-only`.
    pub fn new(informer: &'a str, notifications: &'a [Delivery], metadata_only: bool) -> Self {
        Self {
            informer,
            notifications,
            metadata_only,
        }
    }

    /// Bytes the batch takes.
    pub fn size(&self) -> usize {
        let meta = self.metadata_only;
        let objects: usize = self
            .notifications
            .iter()
            .map(|d| match &d.notification {
                Notification::Update { old, new } if !std::ptr::eq(&**old, &**new) => {
                    carried(old, meta).len() + carried(new, meta).len()
                }
                n => carried(n.object(), meta).len(),
            })
            .sum();
        BATCH_HEADER + self.notifications.len() * BATCH_ENTRY + self.informer.len() + objects
    }

    /// The batch in a vector of its own.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.size()];
        self.write(&mut v);
        v
    }

    /// Writes the batch into `dst`, which must be [`Batch::size`] bytes long: every byte of it
    /// (memory handed out by the plugin's allocator may hold anything).
    ///
    /// # Panics
    ///
    /// When `dst` has another length.
    pub fn write(&self, dst: &mut [u8]) {
        assert_eq!(dst.len(), self.size(), "a batch's destination");
        let meta = self.metadata_only;
        let n = self.notifications.len();
        dst[..BATCH_HEADER].fill(0);
        dst[0] = LAYOUT_VERSION;
        dst[2..4].copy_from_slice(&(BATCH_HEADER as u16).to_le_bytes());
        put_u32(dst, 4, off(n));
        put_u32(dst, 8, off(BATCH_ENTRY));
        let mut at = BATCH_HEADER + n * BATCH_ENTRY;
        dst[at..at + self.informer.len()].copy_from_slice(self.informer.as_bytes());
        put_span(dst, 12, (off(at), off(self.informer.len())));
        at += self.informer.len();
        let mut append = |dst: &mut [u8], o: &Object| {
            let start = at;
            let bytes = carried(o, meta);
            dst[start..start + bytes.len()].copy_from_slice(bytes);
            if meta {
                // The JSON's span (in the copy) says it is absent.
                put_span(dst, start + OBJECT_HEADER + field::JSON * 8, (ABSENT, 0));
            }
            at += bytes.len();
            (off(start), off(bytes.len()))
        };
        for (i, d) in self.notifications.iter().enumerate() {
            let (kind, flags, obj, old) = match &d.notification {
                Notification::Add { obj, initial_list } => {
                    let flags = if *initial_list { flag::INITIAL_LIST } else { 0 };
                    (kind::ADDED, flags, append(dst, obj), (ABSENT, 0))
                }
                Notification::Update { old, new } => {
                    let flags = if d.notification.is_resync() {
                        flag::RESYNC
                    } else {
                        0
                    };
                    let new_span = append(dst, new);
                    // A resync hands the same object as old and new: carried once.
                    let old_span = if std::ptr::eq(&**old, &**new) {
                        new_span
                    } else {
                        append(dst, old)
                    };
                    (kind::UPDATED, flags, new_span, old_span)
                }
                Notification::Delete { obj } => {
                    let flags = match obj {
                        DeletedObject::Tombstone(_) => flag::FINAL_STATE_UNKNOWN,
                        DeletedObject::Object(_) => 0,
                    };
                    (kind::DELETED, flags, append(dst, obj.object()), (ABSENT, 0))
                }
            };
            let e = &mut dst[BATCH_HEADER + i * BATCH_ENTRY..][..BATCH_ENTRY];
            e.fill(0);
            e[..8].copy_from_slice(&d.seq.to_le_bytes());
            e[8] = kind;
            e[9] = flags;
            put_span(e, 12, obj);
            put_span(e, 20, old);
        }
    }

    /// Lowering (`handle`'s argument, a `list<u8>`): asks the plugin's `realloc` for the
    /// batch's size and writes the batch into that memory. Errors (the plugin's allocator
    /// trapping, out of memory, or answering with memory it does not have) are the call's,
    /// classified as plugin errors like any trap.
    fn lower<T>(&self, cx: &mut LowerContext<'_, T>) -> wasmtime::Result<(usize, usize)> {
        let len = self.size();
        // `realloc` refuses a size over u32 (wasm32) before calling the plugin.
        let ptr = cx.realloc(0, 0, 1, len)?;
        let dst = cx
            .as_slice_mut()
            .get_mut(ptr..)
            .and_then(|m| m.get_mut(..len))
            .ok_or_else(|| wasmtime::Error::msg("realloc return: beyond end of memory"))?;
        self.write(dst);
        Ok((ptr, len))
    }
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
        let (ptr, len) = self.lower(cx)?;
        dst.write([ValRaw::i64(ptr as i64), ValRaw::i64(len as i64)]);
        Ok(())
    }

    fn linear_lower_to_memory<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        _ty: InterfaceType,
        offset: usize,
    ) -> wasmtime::Result<()> {
        let (ptr, len) = self.lower(cx)?;
        *cx.get::<4>(offset) = u32::try_from(ptr)?.to_le_bytes();
        *cx.get::<4>(offset + 4) = u32::try_from(len)?.to_le_bytes();
        Ok(())
    }
}

/// Encodes a list of objects (the answer to a cache read).
pub fn encode_list<'a>(objects: impl ExactSizeIterator<Item = &'a Object> + Clone) -> Vec<u8> {
    let n = objects.len();
    let size: usize = objects.clone().map(|o| o.wire().len()).sum();
    let mut buf = Vec::with_capacity(LIST_HEADER + n * 8 + size);
    buf.extend_from_slice(&[LAYOUT_VERSION, 0]);
    buf.extend_from_slice(&(LIST_HEADER as u16).to_le_bytes());
    buf.extend_from_slice(&off(n).to_le_bytes());
    buf.resize(LIST_HEADER + n * 8, 0);
    for (i, o) in objects.enumerate() {
        let span = (off(buf.len()), off(o.wire().len()));
        buf.extend_from_slice(o.wire());
        put_span(&mut buf, LIST_HEADER + i * 8, span);
    }
    buf
}

#[cfg(test)]
mod tests;
