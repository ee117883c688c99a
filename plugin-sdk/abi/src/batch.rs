//! Batches of notifications (`docs/abi.md`, "Batch"): [`BatchWriter`] writes one (the host,
//! straight into a plugin's memory; the SDK's test kit), [`Batch`] reads one (the SDKs).

use crate::encode::{Encoded, off, put_span, put_u32};
use crate::layout::{
    ABSENT, BATCH_ENTRY, BATCH_HEADER, LAYOUT_VERSION, OBJECT_HEADER, SPAN, field, flag, kind,
};
use crate::object::{Object, span_at, u32_at};
use crate::{DecodeError, check, err};

/// What happened to the object of a notification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// The object appeared; `initial_list`: part of the first list or of a late-join replay.
    Added {
        /// Part of the initial list.
        initial_list: bool,
    },
    /// The object changed; `resync`: nothing changed (a periodic resync or an unchanged relist).
    Updated {
        /// Same resourceVersion.
        resync: bool,
    },
    /// The object is gone; `final_state_unknown`: the deletion was missed and the object is the
    /// last state the host knew.
    Deleted {
        /// The deletion was missed.
        final_state_unknown: bool,
    },
}

impl Kind {
    /// The entry's kind and flags bytes.
    #[inline]
    fn bytes(self) -> (u8, u8) {
        let on = |b: bool, f: u8| if b { f } else { 0 };
        match self {
            Kind::Added { initial_list } => (kind::ADDED, on(initial_list, flag::INITIAL_LIST)),
            Kind::Updated { resync } => (kind::UPDATED, on(resync, flag::RESYNC)),
            Kind::Deleted {
                final_state_unknown,
            } => (
                kind::DELETED,
                on(final_state_unknown, flag::FINAL_STATE_UNKNOWN),
            ),
        }
    }
}

/// One notification to write.
#[derive(Clone, Copy, Debug)]
pub struct Entry<'a> {
    /// Sequence number in the (plugin, informer) stream.
    pub seq: u64,
    /// What happened.
    pub kind: Kind,
    /// The object: the added one, the new state, the deleted one.
    pub object: &'a Encoded,
    /// An update's old state; the same reference as `object` (or `None`) for a resync, whose
    /// two states then share one span. Not written for other kinds.
    pub old: Option<&'a Encoded>,
}

impl<'a> Entry<'a> {
    /// The old state written apart from the object: an update's, when another object.
    #[inline]
    fn old_apart(&self) -> Option<&'a Encoded> {
        match (self.kind, self.old) {
            (Kind::Updated { .. }, Some(old)) if !std::ptr::eq(old, self.object) => Some(old),
            _ => None,
        }
    }
}

/// Writes a batch: the header, an entry per notification, the informer's name and each
/// object's encoding (without its JSON for a metadata-only plugin), every byte of the
/// destination.
#[derive(Clone)]
pub struct BatchWriter<'a, I> {
    informer: &'a str,
    entries: I,
    /// Objects without their JSON (the JSON field absent).
    metadata_only: bool,
}

/// The bytes of `o` a batch carries: all of them, or, metadata only, all but the JSON.
#[inline]
fn carried(o: &Encoded, metadata_only: bool) -> &[u8] {
    let b = o.as_bytes();
    if metadata_only {
        b.get(..o.json_at()).unwrap_or(b)
    } else {
        b
    }
}

impl<'a, I> BatchWriter<'a, I>
where
    I: ExactSizeIterator<Item = Entry<'a>> + Clone,
{
    /// `entries` from `informer`; `metadata_only`: objects without their JSON, for plugins that
    /// describe themselves `metadata-only`.
    pub fn new(informer: &'a str, entries: I, metadata_only: bool) -> Self {
        Self {
            informer,
            entries,
            metadata_only,
        }
    }

    /// Bytes the batch takes.
    pub fn size(&self) -> usize {
        let meta = self.metadata_only;
        let objects: usize = self
            .entries
            .clone()
            .map(|e| {
                carried(e.object, meta).len() + e.old_apart().map_or(0, |o| carried(o, meta).len())
            })
            .sum();
        BATCH_HEADER + self.entries.len() * BATCH_ENTRY + self.informer.len() + objects
    }

    /// The batch in a vector of its own.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.size()];
        self.write(&mut v);
        v
    }

    /// Writes the batch into `dst`, which must be [`BatchWriter::size`] bytes long: every byte
    /// of it (memory handed out by a plugin's allocator may hold anything).
    ///
    /// # Panics
    ///
    /// When `dst` has another length. (Checked as the bytes are written, not by computing the
    /// size again first: that second pass over the entries was ~16 of the host's ~580
    /// instructions per notification.)
    pub fn write(&self, dst: &mut [u8]) {
        let meta = self.metadata_only;
        let n = self.entries.len();
        dst[..BATCH_HEADER].fill(0);
        dst[0] = LAYOUT_VERSION;
        dst[2..4].copy_from_slice(&(BATCH_HEADER as u16).to_le_bytes());
        put_u32(dst, 4, off(n));
        put_u32(dst, 8, off(BATCH_ENTRY));
        let mut at = BATCH_HEADER + n * BATCH_ENTRY;
        dst[at..at + self.informer.len()].copy_from_slice(self.informer.as_bytes());
        put_span(dst, 12, (off(at), off(self.informer.len())));
        at += self.informer.len();
        let mut append = |dst: &mut [u8], o: &Encoded| {
            let start = at;
            let bytes = carried(o, meta);
            dst[start..start + bytes.len()].copy_from_slice(bytes);
            if meta {
                // The JSON's span (in the copy) says it is absent.
                put_span(dst, start + OBJECT_HEADER + field::JSON * SPAN, (ABSENT, 0));
            }
            at += bytes.len();
            (off(start), off(bytes.len()))
        };
        for (i, e) in self.entries.clone().enumerate() {
            let (kind, flags) = e.kind.bytes();
            let obj = append(dst, e.object);
            let old = match (e.kind, e.old_apart()) {
                (_, Some(old)) => append(dst, old),
                // A resync's two states: carried once.
                (Kind::Updated { .. }, None) => obj,
                _ => (ABSENT, 0),
            };
            let d = &mut dst[BATCH_HEADER + i * BATCH_ENTRY..][..BATCH_ENTRY];
            d.fill(0);
            d[..8].copy_from_slice(&e.seq.to_le_bytes());
            d[8] = kind;
            d[9] = flags;
            put_span(d, 12, obj);
            put_span(d, 20, old);
        }
        assert_eq!(at, dst.len(), "a batch's destination");
    }
}

/// One notification of a batch.
#[derive(Clone, Copy, Debug)]
pub struct Notification<'a> {
    /// Sequence number in this (plugin, informer) stream.
    pub seq: u64,
    /// What happened.
    pub kind: Kind,
    /// The object (the new state of an update).
    pub object: Object<'a>,
    /// The previous state (updates only).
    pub old: Option<Object<'a>>,
}

/// A batch of notifications from one informer, read in place.
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    b: &'a [u8],
    count: usize,
    entries: usize,
    entry_size: usize,
    informer: &'a str,
}

impl<'a> Batch<'a> {
    /// Reads a batch's header (its notifications are read and checked as asked for).
    pub fn decode(b: &'a [u8]) -> Result<Self, DecodeError> {
        match b.first() {
            Some(&LAYOUT_VERSION) => {}
            Some(v) => {
                return err(format!(
                    "batch layout version {v}, expected {LAYOUT_VERSION}"
                ));
            }
            None => return err("empty batch"),
        }
        let (Some(header), Some(count), Some(entry_size)) = (
            b.get(2..4).map(|h| u16::from_le_bytes([h[0], h[1]])),
            u32_at(b, 4),
            u32_at(b, 8),
        ) else {
            return err("batch header cut short");
        };
        let (header, count, entry_size) = (header as usize, count as usize, entry_size as usize);
        if header < BATCH_HEADER || entry_size < BATCH_ENTRY {
            return err(format!(
                "batch header of {header} bytes / entries of {entry_size} (at least 24 / 32)"
            ));
        }
        let end = count
            .checked_mul(entry_size)
            .and_then(|n| n.checked_add(header));
        if end.is_none_or(|e| e > b.len()) {
            return err(format!(
                "{count} batch entries do not fit {} bytes",
                b.len()
            ));
        }
        // The informer's name is not metadata of an object: not refused, read as "" when it is
        // not UTF-8.
        let informer = check::span_checked(b, 12)?
            .map(|n| std::str::from_utf8(n).unwrap_or(""))
            .unwrap_or("");
        Ok(Self {
            b,
            count,
            entries: header,
            entry_size,
            informer,
        })
    }

    /// The informer (its name in the host's config) the notifications come from.
    pub fn informer(&self) -> &'a str {
        self.informer
    }

    /// How many notifications.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Notification `i`, its objects checked.
    #[inline]
    pub fn get(&self, i: usize) -> Result<Notification<'a>, DecodeError> {
        if i >= self.count {
            return err(format!("notification {i} of {}", self.count));
        }
        let b = self.b;
        let at = self.entries + i * self.entry_size;
        // Within `b`: `decode` checked that every entry fits.
        let Some(e) = b.get(at..).and_then(<[u8]>::first_chunk::<BATCH_ENTRY>) else {
            return err(format!("notification {i} of {}", self.count));
        };
        let seq = u64::from_le_bytes([e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]]);
        let (k, flags) = (e[8], e[9]);
        let kind = match k {
            kind::ADDED => Kind::Added {
                initial_list: flags & flag::INITIAL_LIST != 0,
            },
            kind::UPDATED => Kind::Updated {
                resync: flags & flag::RESYNC != 0,
            },
            kind::DELETED => Kind::Deleted {
                final_state_unknown: flags & flag::FINAL_STATE_UNKNOWN != 0,
            },
            k => return err(format!("notification {seq}: unknown kind {k}")),
        };
        let object = match span_at(b, at + 12) {
            Some(obj) => Object::decode(obj)?,
            None => return Err(missing(b, at + 12, "notification", seq, "an object")),
        };
        let old = match kind {
            Kind::Updated { .. } => match span_at(b, at + 20) {
                Some(o)
                    if o.as_ptr() == object.as_bytes().as_ptr()
                        && o.len() == object.as_bytes().len() =>
                {
                    Some(object)
                }
                Some(o) => Some(Object::decode(o)?),
                None => return Err(missing(b, at + 20, "update", seq, "its old object")),
            },
            _ => None,
        };
        Ok(Notification {
            seq,
            kind,
            object,
            old,
        })
    }

    /// The notifications, in order.
    pub fn iter(
        &self,
    ) -> impl ExactSizeIterator<Item = Result<Notification<'a>, DecodeError>> + 'a {
        let me = *self;
        (0..me.count).map(move |i| me.get(i))
    }
}

/// Why the span at `at` of entry `seq` gave no object: out of bounds, or absent.
#[cold]
fn missing(b: &[u8], at: usize, what: &str, seq: u64, object: &str) -> DecodeError {
    match check::span_checked(b, at) {
        Err(e) => e,
        Ok(_) => DecodeError(format!("{what} {seq} without {object}")),
    }
}
