//! [`Meta`]: an object's metadata read in place from its ABI encoding (`docs/abi.md`), so the
//! informer keeps each object's metadata once, in the bytes a plugin gets, not again as owned
//! strings beside them.

use crate::abi::{ABSENT, OBJECT_HEADER, OWNER_BLOCK_OWNER_DELETION, OWNER_CONTROLLER, field};

use super::{ObjectMeta, OwnerRef};

/// An object's metadata, a view over its encoding: every accessor reads the span table and
/// borrows the bytes; nothing is copied. [`Meta::to_owned`] gives an [`ObjectMeta`].
#[derive(Clone, Copy)]
pub struct Meta<'a> {
    /// An encoding made by [`crate::abi::encode_object`] from a `&str`-typed [`ObjectMeta`]:
    /// its spans are in bounds and its text fields are UTF-8 (see [`Meta::text`]).
    wire: &'a [u8],
}

impl<'a> Meta<'a> {
    /// The view of `wire`, which [`crate::abi::encode_object`] made (the only caller is
    /// [`super::Object`], whose encoding is immutable).
    pub(super) fn new(wire: &'a [u8]) -> Self {
        Self { wire }
    }

    fn u32_at(&self, at: usize) -> u32 {
        let mut b = [0; 4];
        b.copy_from_slice(&self.wire[at..at + 4]);
        u32::from_le_bytes(b)
    }

    /// The bytes of span `at` (an offset of a span in the encoding), `None` when absent.
    fn span_at(&self, at: usize) -> Option<&'a [u8]> {
        let start = self.u32_at(at);
        if start == ABSENT {
            return None;
        }
        let (start, len) = (start as usize, self.u32_at(at + 4) as usize);
        Some(&self.wire[start..start + len])
    }

    /// The bytes of object field `f` (an index of [`field`]).
    pub(super) fn field(&self, f: usize) -> Option<&'a [u8]> {
        self.span_at(OBJECT_HEADER + f * 8)
    }

    #[allow(unsafe_code)]
    fn text_of(bytes: &'a [u8]) -> &'a str {
        debug_assert!(std::str::from_utf8(bytes).is_ok());
        // SAFETY: every text span of the encoding was written by `encode_object` from a `&str`
        // (`Writer::bytes(s.as_bytes())`), whole, and the encoding is never changed afterwards;
        // so each text span holds one string's bytes: valid UTF-8.
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }

    /// The text of field `f`, `None` when absent.
    fn text(&self, f: usize) -> Option<&'a str> {
        self.field(f).map(Self::text_of)
    }

    /// `apiVersion`, e.g. `v1` or `apps/v1`.
    pub fn api_version(&self) -> &'a str {
        self.text(field::API_VERSION).unwrap_or_default()
    }

    /// `kind`, e.g. `Pod`.
    pub fn kind(&self) -> &'a str {
        self.text(field::KIND).unwrap_or_default()
    }

    /// `metadata.namespace`; `None` for cluster-scoped objects.
    pub fn namespace(&self) -> Option<&'a str> {
        self.text(field::NAMESPACE)
    }

    /// `metadata.name`.
    pub fn name(&self) -> &'a str {
        self.text(field::NAME).unwrap_or_default()
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> &'a str {
        self.text(field::UID).unwrap_or_default()
    }

    /// `metadata.resourceVersion`: opaque, compared only for equality.
    pub fn resource_version(&self) -> &'a str {
        self.text(field::RESOURCE_VERSION).unwrap_or_default()
    }

    /// `metadata.generation`, when the object has one.
    pub fn generation(&self) -> Option<i64> {
        let b = self.field(field::GENERATION)?;
        Some(i64::from_le_bytes(b.try_into().ok()?))
    }

    /// `metadata.deletionTimestamp` (RFC 3339), set while the object is being deleted.
    pub fn deletion_timestamp(&self) -> Option<&'a str> {
        self.text(field::DELETION_TIMESTAMP)
    }

    fn pairs(&self, f: usize) -> Pairs<'a> {
        let table = self.u32_at(OBJECT_HEADER + f * 8) as usize;
        Pairs {
            meta: *self,
            table,
            next: 0,
            len: self.u32_at(table) as usize,
        }
    }

    /// The whole object as JSON text (always present: `encode_object` writes it).
    pub fn json(&self) -> &'a str {
        self.text(field::JSON).unwrap_or_default()
    }

    /// `metadata.labels`, sorted by key.
    pub fn labels(&self) -> Pairs<'a> {
        self.pairs(field::LABELS)
    }

    /// `metadata.annotations`, sorted by key.
    pub fn annotations(&self) -> Pairs<'a> {
        self.pairs(field::ANNOTATIONS)
    }

    /// The value of label `key`, if set.
    pub fn label(&self, key: &str) -> Option<&'a str> {
        self.labels().get(key)
    }

    /// The value of annotation `key`, if set.
    pub fn annotation(&self, key: &str) -> Option<&'a str> {
        self.annotations().get(key)
    }

    /// `metadata.ownerReferences`.
    pub fn owner_references(&self) -> impl ExactSizeIterator<Item = Owner<'a>> + 'a {
        let me = *self;
        let table = self.u32_at(OBJECT_HEADER + field::OWNER_REFERENCES * 8) as usize;
        let (count, entry) = (me.u32_at(table) as usize, me.u32_at(table + 4) as usize);
        (0..count).map(move |i| {
            let e = table + 8 + i * entry;
            let text = |j: usize| me.span_at(e + j * 8).map(Self::text_of).unwrap_or_default();
            let flags = me.u32_at(e + 32);
            Owner {
                api_version: text(0),
                kind: text(1),
                name: text(2),
                uid: text(3),
                controller: flags & OWNER_CONTROLLER != 0,
                block_owner_deletion: flags & OWNER_BLOCK_OWNER_DELETION != 0,
            }
        })
    }

    /// The metadata as owned values (to change and re-encode, or to keep past the object).
    pub fn to_owned(&self) -> ObjectMeta {
        let owned = |p: Pairs<'a>| p.map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
        ObjectMeta {
            api_version: self.api_version().to_owned(),
            kind: self.kind().to_owned(),
            namespace: self.namespace().map(str::to_owned),
            name: self.name().to_owned(),
            uid: self.uid().to_owned(),
            resource_version: self.resource_version().to_owned(),
            generation: self.generation(),
            deletion_timestamp: self.deletion_timestamp().map(str::to_owned),
            labels: owned(self.labels()),
            annotations: owned(self.annotations()),
            owner_references: self.owner_references().map(|r| r.to_owned()).collect(),
        }
    }
}

impl std::fmt::Debug for Meta<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.to_owned().fmt(f)
    }
}

impl PartialEq for Meta<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.to_owned() == other.to_owned()
    }
}

impl Eq for Meta<'_> {}

/// An entry of `metadata.ownerReferences`, borrowed from the encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner<'a> {
    /// `apiVersion` of the owner.
    pub api_version: &'a str,
    /// `kind` of the owner.
    pub kind: &'a str,
    /// `name` of the owner.
    pub name: &'a str,
    /// `uid` of the owner.
    pub uid: &'a str,
    /// `controller: true`.
    pub controller: bool,
    /// `blockOwnerDeletion: true`.
    pub block_owner_deletion: bool,
}

impl Owner<'_> {
    /// The reference as owned values.
    pub fn to_owned(&self) -> OwnerRef {
        OwnerRef {
            api_version: self.api_version.to_owned(),
            kind: self.kind.to_owned(),
            name: self.name.to_owned(),
            uid: self.uid.to_owned(),
            controller: self.controller,
            block_owner_deletion: self.block_owner_deletion,
        }
    }
}

/// The `(key, value)` pairs of a pair table (labels or annotations), in key order.
#[derive(Clone, Copy)]
pub struct Pairs<'a> {
    meta: Meta<'a>,
    /// Where the table starts: a u32 count, then a key span and a value span per pair.
    table: usize,
    next: usize,
    len: usize,
}

impl<'a> Pairs<'a> {
    fn pair(&self, i: usize) -> (&'a str, &'a str) {
        let at = self.table + 4 + i * 16;
        let text = |at| self.meta.span_at(at).map(Meta::text_of).unwrap_or_default();
        (text(at), text(at + 8))
    }

    /// The value of `key` (a binary search: the table is sorted by key).
    pub fn get(&self, key: &str) -> Option<&'a str> {
        let (mut lo, mut hi) = (0, self.len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (k, v) = self.pair(mid);
            match k.cmp(key) {
                std::cmp::Ordering::Equal => return Some(v),
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
            }
        }
        None
    }
}

impl<'a> Iterator for Pairs<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        if self.next == self.len {
            return None;
        }
        self.next += 1;
        Some(self.pair(self.next - 1))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.len - self.next;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Pairs<'_> {}
