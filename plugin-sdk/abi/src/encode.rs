//! The encoder: an object's metadata and JSON into its encoding ([`encode_object`], once, when
//! the object enters the host's informer), and encodings into an object list
//! ([`encode_list`]). Batches are written by [`crate::BatchWriter`].

use crate::layout::{
    ABSENT, LAYOUT_VERSION, LIST_HEADER, OBJECT_HEADER, OWNER_BLOCK_OWNER_DELETION,
    OWNER_CONTROLLER, OWNER_ENTRY, PAIR_ENTRY, SPAN, field,
};
use crate::object::{Object, u32_at};

/// A reference from an object to its owner (`metadata.ownerReferences[]`), owned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnerReference {
    /// `apiVersion` of the owner.
    pub api_version: String,
    /// `kind` of the owner.
    pub kind: String,
    /// `name` of the owner.
    pub name: String,
    /// `uid` of the owner.
    pub uid: String,
    /// Whether this owner is the managing controller.
    pub controller: bool,
    /// `blockOwnerDeletion`.
    pub block_owner_deletion: bool,
}

/// The metadata an encoding carries beside the JSON, owned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectMeta {
    /// `apiVersion`, e.g. `v1` or `apps/v1`.
    pub api_version: String,
    /// `kind`, e.g. `Pod`.
    pub kind: String,
    /// `metadata.namespace`; `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion`: opaque, compared only for equality.
    pub resource_version: String,
    /// `metadata.generation`, when the object has one.
    pub generation: Option<i64>,
    /// `metadata.deletionTimestamp` (RFC 3339), set while the object is being deleted.
    pub deletion_timestamp: Option<String>,
    /// `metadata.labels`, sorted by key (the encoder writes them in this order; decoders
    /// binary-search them).
    pub labels: Vec<(String, String)>,
    /// `metadata.annotations`, sorted by key.
    pub annotations: Vec<(String, String)>,
    /// `metadata.ownerReferences`.
    pub owner_references: Vec<OwnerReference>,
}

impl ObjectMeta {
    /// The metadata of an object, owned (to change and encode again, or to keep past it).
    pub fn of(o: &Object<'_>) -> Self {
        let owned = |p: crate::Pairs<'_>| p.map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
        Self {
            api_version: o.api_version().to_owned(),
            kind: o.kind().to_owned(),
            namespace: o.namespace().map(str::to_owned),
            name: o.name().to_owned(),
            uid: o.uid().to_owned(),
            resource_version: o.resource_version().to_owned(),
            generation: o.generation(),
            deletion_timestamp: o.deletion_timestamp().map(str::to_owned),
            labels: owned(o.labels()),
            annotations: owned(o.annotations()),
            owner_references: o.owner_refs().map(OwnerReference::from).collect(),
        }
    }
}

impl From<crate::OwnerRef<'_>> for OwnerReference {
    fn from(r: crate::OwnerRef<'_>) -> Self {
        Self {
            api_version: r.api_version.to_owned(),
            kind: r.kind.to_owned(),
            name: r.name.to_owned(),
            uid: r.uid.to_owned(),
            controller: r.controller,
            block_owner_deletion: r.block_owner_deletion,
        }
    }
}

/// An object's encoding as [`encode_object`] wrote it: every text span and the JSON are the
/// bytes of a `&str`, and the JSON comes last. Immutable.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Encoded {
    b: Box<[u8]>,
}

impl std::fmt::Debug for Encoded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.view().fmt(f)
    }
}

impl Encoded {
    /// The view of the object (its metadata, read in place).
    #[inline]
    pub fn view(&self) -> Object<'_> {
        Object::trusted(&self.b)
    }

    /// The encoding: what batches and object lists copy whole.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.b
    }

    /// Where the JSON starts (it runs to the end): the bytes before it are the metadata, what a
    /// metadata-only plugin gets.
    #[inline]
    pub fn json_at(&self) -> usize {
        u32_at(&self.b, OBJECT_HEADER + field::JSON * SPAN).map_or(self.b.len(), |o| o as usize)
    }

    /// The JSON text.
    pub fn json(&self) -> &str {
        let json = self.b.get(self.json_at()..).unwrap_or_default();
        debug_assert!(std::str::from_utf8(json).is_ok());
        #[allow(unsafe_code)]
        // SAFETY: `encode_object` wrote these bytes last, from a `&str`, and the box is never
        // changed afterwards (private; no method hands out `&mut`).
        unsafe {
            std::str::from_utf8_unchecked(json)
        }
    }

    /// The encoding's bytes.
    pub fn into_vec(self) -> Vec<u8> {
        self.b.into_vec()
    }
}

/// Offsets are u32: an object, batch or list over 4 GiB cannot be encoded (the host refuses
/// objects far smaller than that long before).
#[inline(always)]
pub(crate) fn off(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(ABSENT - 1)
}

#[inline(always)]
pub(crate) fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

#[inline(always)]
pub(crate) fn put_span(buf: &mut [u8], at: usize, span: (u32, u32)) {
    put_u32(buf, at, span.0);
    put_u32(buf, at + 4, span.1);
}

/// Writes bytes at the end of an encoding under construction and gives their span.
struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    fn bytes(&mut self, b: &[u8]) -> (u32, u32) {
        let at = off(self.buf.len());
        self.buf.extend_from_slice(b);
        (at, off(b.len()))
    }

    /// Reserves `n` zeroed bytes (a table filled in later) and gives where they start.
    fn reserve(&mut self, n: usize) -> usize {
        let at = self.buf.len();
        self.buf.resize(at + n, 0);
        at
    }

    fn pairs(&mut self, pairs: &[(String, String)]) -> (u32, u32) {
        let size = 4 + pairs.len() * PAIR_ENTRY;
        let table = self.reserve(size);
        put_u32(&mut self.buf, table, off(pairs.len()));
        for (i, (k, v)) in pairs.iter().enumerate() {
            let ks = self.bytes(k.as_bytes());
            let vs = self.bytes(v.as_bytes());
            put_span(&mut self.buf, table + 4 + i * PAIR_ENTRY, ks);
            put_span(&mut self.buf, table + 4 + i * PAIR_ENTRY + SPAN, vs);
        }
        (off(table), off(size))
    }

    fn owners(&mut self, owners: &[OwnerReference]) -> (u32, u32) {
        let size = 8 + owners.len() * OWNER_ENTRY;
        let table = self.reserve(size);
        put_u32(&mut self.buf, table, off(owners.len()));
        put_u32(&mut self.buf, table + 4, off(OWNER_ENTRY));
        for (i, r) in owners.iter().enumerate() {
            let e = table + 8 + i * OWNER_ENTRY;
            let spans = [
                self.bytes(r.api_version.as_bytes()),
                self.bytes(r.kind.as_bytes()),
                self.bytes(r.name.as_bytes()),
                self.bytes(r.uid.as_bytes()),
            ];
            for (j, s) in spans.into_iter().enumerate() {
                put_span(&mut self.buf, e + j * SPAN, s);
            }
            let flags = if r.controller { OWNER_CONTROLLER } else { 0 }
                | if r.block_owner_deletion {
                    OWNER_BLOCK_OWNER_DELETION
                } else {
                    0
                };
            put_u32(&mut self.buf, e + 4 * SPAN, flags);
        }
        (off(table), off(size))
    }
}

/// Encodes an object (`docs/abi.md`, "Object"): its metadata, then its JSON text. Each group of
/// text (the text fields, each table's keys and values) is written in one run, which the
/// decoder's check relies on to be quick (not to be right).
pub fn encode_object(meta: &ObjectMeta, json: &str) -> Encoded {
    let pairs_len = |p: &[(String, String)]| {
        p.iter()
            .map(|(k, v)| PAIR_ENTRY + k.len() + v.len())
            .sum::<usize>()
    };
    let table = OBJECT_HEADER + field::COUNT * SPAN;
    let capacity = table
        + meta.api_version.len()
        + meta.kind.len()
        + meta.namespace.as_ref().map_or(0, String::len)
        + meta.name.len()
        + meta.uid.len()
        + meta.resource_version.len()
        + 8
        + meta.deletion_timestamp.as_ref().map_or(0, String::len)
        + 4
        + pairs_len(&meta.labels)
        + 4
        + pairs_len(&meta.annotations)
        + 8
        + meta
            .owner_references
            .iter()
            .map(|r| OWNER_ENTRY + r.api_version.len() + r.kind.len() + r.name.len() + r.uid.len())
            .sum::<usize>()
        + json.len();
    let mut w = Writer {
        buf: Vec::with_capacity(capacity),
    };
    w.buf.extend_from_slice(&[LAYOUT_VERSION, 0]);
    w.buf
        .extend_from_slice(&(field::COUNT as u16).to_le_bytes());
    w.reserve(field::COUNT * SPAN);
    let mut spans = [(ABSENT, 0); field::COUNT];
    spans[field::API_VERSION] = w.bytes(meta.api_version.as_bytes());
    spans[field::KIND] = w.bytes(meta.kind.as_bytes());
    if let Some(ns) = &meta.namespace {
        spans[field::NAMESPACE] = w.bytes(ns.as_bytes());
    }
    spans[field::NAME] = w.bytes(meta.name.as_bytes());
    spans[field::UID] = w.bytes(meta.uid.as_bytes());
    spans[field::RESOURCE_VERSION] = w.bytes(meta.resource_version.as_bytes());
    if let Some(g) = meta.generation {
        spans[field::GENERATION] = w.bytes(&g.to_le_bytes());
    }
    if let Some(ts) = &meta.deletion_timestamp {
        spans[field::DELETION_TIMESTAMP] = w.bytes(ts.as_bytes());
    }
    spans[field::LABELS] = w.pairs(&meta.labels);
    spans[field::ANNOTATIONS] = w.pairs(&meta.annotations);
    spans[field::OWNER_REFERENCES] = w.owners(&meta.owner_references);
    spans[field::JSON] = w.bytes(json.as_bytes());
    for (i, s) in spans.into_iter().enumerate() {
        put_span(&mut w.buf, OBJECT_HEADER + i * SPAN, s);
    }
    Encoded {
        b: w.buf.into_boxed_slice(),
    }
}

/// Encodes a list of object encodings (`docs/abi.md`, "Object list"): the answer to a cache
/// read. Each is copied whole.
pub fn encode_list<'a>(objects: impl ExactSizeIterator<Item = &'a [u8]> + Clone) -> Vec<u8> {
    let n = objects.len();
    let size: usize = objects.clone().map(<[u8]>::len).sum();
    let mut buf = Vec::with_capacity(LIST_HEADER + n * SPAN + size);
    buf.extend_from_slice(&[LAYOUT_VERSION, 0]);
    buf.extend_from_slice(&(LIST_HEADER as u16).to_le_bytes());
    buf.extend_from_slice(&off(n).to_le_bytes());
    buf.resize(LIST_HEADER + n * SPAN, 0);
    for (i, o) in objects.enumerate() {
        let span = (off(buf.len()), off(o.len()));
        buf.extend_from_slice(o);
        put_span(&mut buf, LIST_HEADER + i * SPAN, span);
    }
    buf
}
