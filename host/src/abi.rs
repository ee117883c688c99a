//! The byte layout of plugin ABI 0.2 (`docs/abi.md`): how an object, a batch of notifications
//! and a list of objects are encoded in the `list<u8>` values that cross into a plugin.
//!
//! An object is encoded once, when it enters the informer (the informer's `Object` keeps
//! the encoding as its cached form, JSON included); a batch or a cache read copies the encoded
//! objects whole (`plugin::batch`): every offset inside an object is relative to the object's own start, so an
//! encoding is valid wherever it lands.
//!
//! All integers are little-endian. A *span* is `u32 offset, u32 length`; an absent field's
//! span is [`ABSENT`]. The decoders (the SDKs) read the test vectors in `wit/abi-vectors.json`,
//! which the tests here check this encoder against byte for byte.

/// Version of the layout (the first byte of every object, batch and object list).
pub const LAYOUT_VERSION: u8 = 1;

/// The offset of an absent field's span (its length is 0).
pub const ABSENT: u32 = u32::MAX;

/// Object fields, by index in an object's span table.
pub mod field {
    /// `apiVersion` (UTF-8).
    pub const API_VERSION: usize = 0;
    /// `kind`.
    pub const KIND: usize = 1;
    /// `metadata.namespace`; absent for cluster-scoped objects.
    pub const NAMESPACE: usize = 2;
    /// `metadata.name`.
    pub const NAME: usize = 3;
    /// `metadata.uid`.
    pub const UID: usize = 4;
    /// `metadata.resourceVersion`.
    pub const RESOURCE_VERSION: usize = 5;
    /// `metadata.generation`: 8 bytes, i64; absent when the object has none.
    pub const GENERATION: usize = 6;
    /// `metadata.deletionTimestamp` (RFC 3339 text); absent unless the object is being deleted.
    pub const DELETION_TIMESTAMP: usize = 7;
    /// `metadata.labels`: a pair table, sorted by key.
    pub const LABELS: usize = 8;
    /// `metadata.annotations`: a pair table, sorted by key.
    pub const ANNOTATIONS: usize = 9;
    /// `metadata.ownerReferences`: an owner table.
    pub const OWNER_REFERENCES: usize = 10;
    /// The whole object as JSON text (UTF-8); always the last bytes of the encoding.
    pub const JSON: usize = 11;
    /// Fields this version writes.
    pub const COUNT: usize = 12;
}

/// Size of an object's fixed header: version, flags, u16 field count.
pub(crate) const OBJECT_HEADER: usize = 4;
/// Size of one owner-table entry: four spans and a u32 of flags.
pub const OWNER_ENTRY: usize = 36;
/// Owner flag: `controller: true`.
pub const OWNER_CONTROLLER: u32 = 1;
/// Owner flag: `blockOwnerDeletion: true`.
pub const OWNER_BLOCK_OWNER_DELETION: u32 = 2;

/// Size of a batch header.
pub const BATCH_HEADER: usize = 24;
/// Size of one batch entry.
pub const BATCH_ENTRY: usize = 32;
/// Notification kinds in a batch entry.
pub mod kind {
    /// The object appeared.
    pub const ADDED: u8 = 0;
    /// The object changed (or was resynced).
    pub const UPDATED: u8 = 1;
    /// The object is gone.
    pub const DELETED: u8 = 2;
}
/// Batch entry flags.
pub mod flag {
    /// Added: part of the initial list (or of a late-join replay).
    pub const INITIAL_LIST: u8 = 1;
    /// Updated: nothing changed (same resourceVersion): a resync or an unchanged relist.
    pub const RESYNC: u8 = 2;
    /// Deleted: the deletion was missed; the object is the last state known.
    pub const FINAL_STATE_UNKNOWN: u8 = 4;
}

/// Size of an object-list header: version, reserved, u16 header size, u32 count.
pub const LIST_HEADER: usize = 8;

pub(crate) fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_span(buf: &mut [u8], at: usize, span: (u32, u32)) {
    put_u32(buf, at, span.0);
    put_u32(buf, at + 4, span.1);
}

/// Offsets are u32: an object, batch or list over 4 GiB cannot be encoded (the host refuses
/// objects far smaller than that long before).
pub(crate) fn off(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(ABSENT - 1)
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
        let table = self.reserve(4 + pairs.len() * 16);
        put_u32(&mut self.buf, table, off(pairs.len()));
        for (i, (k, v)) in pairs.iter().enumerate() {
            let ks = self.bytes(k.as_bytes());
            let vs = self.bytes(v.as_bytes());
            put_span(&mut self.buf, table + 4 + i * 16, ks);
            put_span(&mut self.buf, table + 4 + i * 16 + 8, vs);
        }
        (off(table), off(4 + pairs.len() * 16))
    }

    fn owners(&mut self, owners: &[OwnerRef]) -> (u32, u32) {
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
                put_span(&mut self.buf, e + j * 8, s);
            }
            let flags = if r.controller { OWNER_CONTROLLER } else { 0 }
                | if r.block_owner_deletion {
                    OWNER_BLOCK_OWNER_DELETION
                } else {
                    0
                };
            put_u32(&mut self.buf, e + 32, flags);
        }
        (off(table), off(size))
    }
}

/// Encodes an object: its metadata and its JSON text (last). Returns the encoding and where the
/// JSON starts in it.
pub fn encode_object(meta: &ObjectMeta, json: &str) -> (Vec<u8>, usize) {
    let pairs_len =
        |p: &[(String, String)]| p.iter().map(|(k, v)| 16 + k.len() + v.len()).sum::<usize>();
    let table = OBJECT_HEADER + field::COUNT * 8;
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
    w.reserve(field::COUNT * 8);
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
    let json_at = w.buf.len();
    spans[field::JSON] = w.bytes(json.as_bytes());
    for (i, s) in spans.into_iter().enumerate() {
        put_span(&mut w.buf, OBJECT_HEADER + i * 8, s);
    }
    (w.buf, json_at)
}

/// A reference from an object to its owner (`metadata.ownerReferences[]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRef {
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

/// Metadata extracted from an object once, when it enters the informer.
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
    /// `metadata.labels`, sorted by key.
    pub labels: Vec<(String, String)>,
    /// `metadata.annotations`, sorted by key.
    pub annotations: Vec<(String, String)>,
    /// `metadata.ownerReferences`.
    pub owner_references: Vec<OwnerRef>,
}
