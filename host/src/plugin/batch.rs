//! Batches of notifications and lists of cached objects in ABI 0.2's layout, written by the ABI
//! codec ([`wisp_abi`]): what a plugin receives. Each carries the objects' encodings (made once,
//! when they entered the informer) whole; a batch is written straight into the plugin's memory
//! while wasmtime lowers `handle`'s argument ([`lower`]).

mod lower;

use wisp_abi::{BatchWriter, Entry, Kind};

use crate::informer::handler::{Delivery, Notification};
use crate::informer::{DeletedObject, Object};

/// A batch of notifications from one informer, in ABI 0.2's layout: written straight into the
/// plugin's memory while wasmtime lowers `handle`'s argument ([`lower`]), so each object's
/// cached encoding is copied once per delivery, and no host-side batch buffer exists.
/// [`Batch::to_vec`] writes the same bytes into a vector (tests, benchmarks).
#[derive(Clone, Copy)]
pub struct Batch<'a> {
    informer: &'a str,
    notifications: &'a [Delivery],
    /// Objects without their JSON (a metadata-only plugin).
    metadata_only: bool,
}

/// The codec's entry for a delivery.
#[inline]
fn entry(d: &Delivery) -> Entry<'_> {
    let (kind, object, old) = match &d.notification {
        Notification::Add { obj, initial_list } => (
            Kind::Added {
                initial_list: *initial_list,
            },
            obj,
            None,
        ),
        Notification::Update { old, new } => (
            Kind::Updated {
                resync: d.notification.is_resync(),
            },
            new,
            Some(old.encoded()),
        ),
        Notification::Delete { obj } => (
            Kind::Deleted {
                final_state_unknown: matches!(obj, DeletedObject::Tombstone(_)),
            },
            obj.object(),
            None,
        ),
    };
    Entry {
        seq: d.seq,
        kind,
        object: object.encoded(),
        old,
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

    /// The codec's writer over the deliveries (`entry`'s own type, not a function pointer: it
    /// inlines into the writer's loops; through a pointer the host's share of a JSON
    /// notification read 684 instructions instead of 573).
    #[inline]
    fn writer(&self) -> BatchWriter<'a, impl ExactSizeIterator<Item = Entry<'a>> + Clone + 'a> {
        let entries = self.notifications.iter().map(entry);
        BatchWriter::new(self.informer, entries, self.metadata_only)
    }

    /// Bytes the batch takes.
    pub fn size(&self) -> usize {
        self.writer().size()
    }

    /// The batch in a vector of its own.
    pub fn to_vec(&self) -> Vec<u8> {
        self.writer().to_vec()
    }

    /// Writes the batch into `dst`, which must be [`Batch::size`] bytes long: every byte of it
    /// (memory handed out by the plugin's allocator may hold anything).
    ///
    /// # Panics
    ///
    /// When `dst` has another length.
    pub fn write(&self, dst: &mut [u8]) {
        self.writer().write(dst)
    }
}

/// Encodes a list of objects (the answer to a cache read).
pub fn encode_list<'a>(objects: impl ExactSizeIterator<Item = &'a Object> + Clone) -> Vec<u8> {
    wisp_abi::encode_list(objects.map(Object::wire))
}

#[cfg(test)]
mod tests;
