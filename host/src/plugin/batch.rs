//! Batches of notifications and lists of cached objects in ABI 0.2's layout ([`crate::abi`]):
//! what a plugin receives. Each carries the objects' encodings (made once, when they entered
//! the informer) whole.

use crate::abi::{
    ABSENT, BATCH_ENTRY, BATCH_HEADER, LAYOUT_VERSION, LIST_HEADER, OBJECT_HEADER, field, flag,
    kind, off, put_span, put_u32,
};
use crate::informer::handler::{Delivery, Notification};
use crate::informer::{DeletedObject, Object};

/// Room a caught-up plugin's batch buffer keeps (see [`BatchEncoder::trim`]): a few objects.
pub const KEPT_BATCH_BYTES: usize = 8 * 1024;

/// Encodes batches of notifications into a buffer it reuses from call to call.
#[derive(Default)]
pub struct BatchEncoder {
    buf: Vec<u8>,
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

impl BatchEncoder {
    /// A new encoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether objects go without their JSON (the JSON field absent), for plugins that describe
    /// themselves `metadata-only`.
    pub fn set_metadata_only(&mut self, yes: bool) {
        self.metadata_only = yes;
    }

    /// Gives back the buffer when it holds more than [`KEPT_BATCH_BYTES`] of room (the plugin
    /// has caught up: a burst's buffer need not stay with an idle plugin). A buffer no larger is
    /// kept, so a plugin that keeps up with small batches does not reallocate.
    pub fn trim(&mut self) {
        if self.buf.capacity() > KEPT_BATCH_BYTES {
            self.buf = Vec::new();
        }
    }

    /// Room the buffer holds now (for tests of its memory).
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Encodes `batch`, from `informer`, and returns the bytes (valid until the next call).
    pub fn encode(&mut self, informer: &str, batch: &[Delivery]) -> &[u8] {
        let meta = self.metadata_only;
        let objects: usize = batch
            .iter()
            .map(|d| match &d.notification {
                Notification::Update { old, new } if !std::ptr::eq(&**old, &**new) => {
                    carried(old, meta).len() + carried(new, meta).len()
                }
                n => carried(n.object(), meta).len(),
            })
            .sum();
        let entries = BATCH_HEADER + batch.len() * BATCH_ENTRY;
        let buf = &mut self.buf;
        buf.clear();
        buf.reserve(entries + informer.len() + objects);
        buf.resize(entries, 0);
        buf[0] = LAYOUT_VERSION;
        buf[2..4].copy_from_slice(&(BATCH_HEADER as u16).to_le_bytes());
        put_u32(buf, 4, off(batch.len()));
        put_u32(buf, 8, off(BATCH_ENTRY));
        let informer_span = (off(buf.len()), off(informer.len()));
        buf.extend_from_slice(informer.as_bytes());
        put_span(buf, 12, informer_span);
        let append = |buf: &mut Vec<u8>, o: &Object| {
            let start = buf.len();
            let bytes = carried(o, meta);
            buf.extend_from_slice(bytes);
            if meta {
                // The JSON's span (in the copy) says it is absent.
                let json = start + OBJECT_HEADER + field::JSON * 8;
                put_span(buf, json, (ABSENT, 0));
            }
            (off(start), off(bytes.len()))
        };
        for (i, d) in batch.iter().enumerate() {
            let e = BATCH_HEADER + i * BATCH_ENTRY;
            let (kind, flags, obj, old) = match &d.notification {
                Notification::Add { obj, initial_list } => {
                    let flags = if *initial_list { flag::INITIAL_LIST } else { 0 };
                    (kind::ADDED, flags, append(buf, obj), (ABSENT, 0))
                }
                Notification::Update { old, new } => {
                    let flags = if d.notification.is_resync() {
                        flag::RESYNC
                    } else {
                        0
                    };
                    let new_span = append(buf, new);
                    // A resync hands the same object as old and new: encoded once.
                    let old_span = if std::ptr::eq(&**old, &**new) {
                        new_span
                    } else {
                        append(buf, old)
                    };
                    (kind::UPDATED, flags, new_span, old_span)
                }
                Notification::Delete { obj } => {
                    let flags = match obj {
                        DeletedObject::Tombstone(_) => flag::FINAL_STATE_UNKNOWN,
                        DeletedObject::Object(_) => 0,
                    };
                    (kind::DELETED, flags, append(buf, obj.object()), (ABSENT, 0))
                }
            };
            buf[e..e + 8].copy_from_slice(&d.seq.to_le_bytes());
            buf[e + 8] = kind;
            buf[e + 9] = flags;
            put_span(buf, e + 12, obj);
            put_span(buf, e + 20, old);
        }
        &self.buf
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
