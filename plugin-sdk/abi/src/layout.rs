//! The constants of the layout (`docs/abi.md`): version, field indices, header and entry sizes,
//! notification kinds and flags. Integers are little-endian; a *span* is `u32 offset, u32
//! length`, relative to the start of the enclosing encoding; an absent field's span is
//! [`ABSENT`].

/// Version of the layout: the first byte of every object, batch and object list.
pub const LAYOUT_VERSION: u8 = 1;

/// The offset of an absent field's span (its length is 0).
pub const ABSENT: u32 = u32::MAX;

/// Object fields, by index in an object's span table.
pub mod field {
    /// `apiVersion` (text).
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
    /// The whole object as JSON text; always the last bytes of what the encoder writes.
    pub const JSON: usize = 11;
    /// Fields this version writes.
    pub const COUNT: usize = 12;
}

/// Size of an object's fixed header: version, flags, u16 field count.
pub const OBJECT_HEADER: usize = 4;
/// Size of a span: u32 offset, u32 length.
pub const SPAN: usize = 8;
/// Size of a pair-table entry: the key's span and the value's.
pub const PAIR_ENTRY: usize = 16;
/// Size of one owner-table entry in this version: four spans and a u32 of flags (a decoder
/// refuses smaller entries and skips the bytes of larger ones).
pub const OWNER_ENTRY: usize = 36;
/// Owner flag: `controller: true`.
pub const OWNER_CONTROLLER: u32 = 1;
/// Owner flag: `blockOwnerDeletion: true`.
pub const OWNER_BLOCK_OWNER_DELETION: u32 = 2;

/// Size of a batch header in this version (a decoder refuses smaller ones).
pub const BATCH_HEADER: usize = 24;
/// Size of one batch entry in this version (a decoder refuses smaller ones).
pub const BATCH_ENTRY: usize = 32;

/// Notification kinds in a batch entry (its byte 8).
pub mod kind {
    /// The object appeared.
    pub const ADDED: u8 = 0;
    /// The object changed (or was resynced).
    pub const UPDATED: u8 = 1;
    /// The object is gone.
    pub const DELETED: u8 = 2;
}

/// Batch entry flags (its byte 9).
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
