//! Views of an encoded object (`docs/abi.md`, "Object"): [`Object`] borrows the bytes,
//! [`ObjectBuf`] owns them. Both are made only from bytes that passed the check
//! ([`crate::check`]) or that [`crate::encode_object`] wrote, so every accessor is infallible
//! and reads text without checking it again: nothing is copied or decoded until asked for.

use crate::layout::{
    ABSENT, OBJECT_HEADER, OWNER_BLOCK_OWNER_DELETION, OWNER_CONTROLLER, OWNER_ENTRY, PAIR_ENTRY,
    SPAN, field,
};
use crate::{DecodeError, check};

#[inline(always)]
pub(crate) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(*b.get(at..)?.first_chunk::<4>()?))
}

/// The bytes of the span at `at` in `b`: `None` when absent (or out of bounds, which a checked
/// object's spans never are).
#[inline(always)]
pub(crate) fn span_at(b: &[u8], at: usize) -> Option<&[u8]> {
    let s = b.get(at..)?.first_chunk::<SPAN>()?;
    let (off, len) = (
        u32::from_le_bytes([s[0], s[1], s[2], s[3]]),
        u32::from_le_bytes([s[4], s[5], s[6], s[7]]),
    );
    if off == ABSENT {
        return None;
    }
    let off = off as usize;
    b.get(off..off.checked_add(len as usize)?)
}

/// Text of a checked object: a text span of the field table or of a table entry.
#[inline(always)]
#[allow(unsafe_code)]
fn text(b: &[u8]) -> &str {
    debug_assert!(
        std::str::from_utf8(b).is_ok(),
        "a text span of a checked object"
    );
    // SAFETY: `text` is only given text spans (the text fields, the keys and values of the pair
    // tables, the four text spans of each owner entry) of an `Object` or `ObjectBuf`, which are
    // made only from bytes that passed `check::object` (every such span within the object and
    // UTF-8) or that `encode_object` wrote (each such span the bytes of one `&str`), and whose
    // bytes are never changed afterwards (`Object` holds a shared borrow; `ObjectBuf` and
    // `Encoded` keep their box private). So the bytes are UTF-8.
    unsafe { std::str::from_utf8_unchecked(b) }
}

/// A view of an encoded object: its metadata and its JSON, read from the bytes as asked.
#[derive(Clone, Copy)]
pub struct Object<'a> {
    b: &'a [u8],
    /// Fields in the span table (the field count of the header).
    fields: usize,
}

impl std::fmt::Debug for Object<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Object")
            .field("apiVersion", &self.api_version())
            .field("kind", &self.kind())
            .field("namespace", &self.namespace())
            .field("name", &self.name())
            .field("resourceVersion", &self.resource_version())
            .finish()
    }
}

impl<'a> Object<'a> {
    /// Reads an encoded object, checking its header, that every span lies within it and that
    /// its text is UTF-8 (`docs/abi.md`, "Text").
    #[inline]
    pub fn decode(b: &'a [u8]) -> Result<Self, DecodeError> {
        let fields = check::object(b)?;
        Ok(Self { b, fields })
    }

    /// The view of bytes known to be well-formed (checked, or written by the encoder).
    #[inline]
    pub(crate) fn trusted(b: &'a [u8]) -> Self {
        let fields = b
            .get(2..4)
            .map_or(0, |n| usize::from(u16::from_le_bytes([n[0], n[1]])));
        Self { b, fields }
    }

    /// The whole encoding.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.b
    }

    /// The bytes of field `f` (an index of [`field`]): `None` when absent, or unknown to the
    /// writer.
    #[inline]
    pub fn field(&self, f: usize) -> Option<&'a [u8]> {
        if f >= self.fields {
            return None;
        }
        span_at(self.b, OBJECT_HEADER + f * SPAN)
    }

    #[inline]
    fn text_field(&self, f: usize) -> Option<&'a str> {
        self.field(f).map(text)
    }

    /// `apiVersion`, e.g. `v1` or `apps/v1`.
    pub fn api_version(&self) -> &'a str {
        self.text_field(field::API_VERSION).unwrap_or_default()
    }

    /// `kind`, e.g. `Pod`.
    pub fn kind(&self) -> &'a str {
        self.text_field(field::KIND).unwrap_or_default()
    }

    /// `metadata.namespace` (`None` when cluster-scoped).
    pub fn namespace(&self) -> Option<&'a str> {
        self.text_field(field::NAMESPACE)
    }

    /// `metadata.name`.
    pub fn name(&self) -> &'a str {
        self.text_field(field::NAME).unwrap_or_default()
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> &'a str {
        self.text_field(field::UID).unwrap_or_default()
    }

    /// `metadata.resourceVersion`: opaque, compared only for equality.
    pub fn resource_version(&self) -> &'a str {
        self.text_field(field::RESOURCE_VERSION).unwrap_or_default()
    }

    /// `metadata.generation`, when the object has one.
    pub fn generation(&self) -> Option<i64> {
        let b = self.field(field::GENERATION)?;
        Some(i64::from_le_bytes(b.try_into().ok()?))
    }

    /// `metadata.deletionTimestamp` (RFC 3339), set while the object is being deleted.
    pub fn deletion_timestamp(&self) -> Option<&'a str> {
        self.text_field(field::DELETION_TIMESTAMP)
    }

    /// Where the entries of table `f` start, and how many there are.
    #[inline]
    fn table(&self, f: usize, first: usize) -> (usize, usize) {
        let base = if f < self.fields {
            u32_at(self.b, OBJECT_HEADER + f * SPAN).filter(|&o| o != ABSENT)
        } else {
            None
        };
        match base {
            Some(o) => (
                o as usize + first,
                u32_at(self.b, o as usize).unwrap_or(0) as usize,
            ),
            None => (0, 0),
        }
    }

    fn pairs(&self, f: usize) -> Pairs<'a> {
        let (at, left) = self.table(f, 4);
        Pairs {
            b: self.b,
            at,
            left,
        }
    }

    /// `metadata.labels`, sorted by key.
    pub fn labels(&self) -> Pairs<'a> {
        self.pairs(field::LABELS)
    }

    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&'a str> {
        self.labels().get(key)
    }

    /// `metadata.annotations`, sorted by key.
    pub fn annotations(&self) -> Pairs<'a> {
        self.pairs(field::ANNOTATIONS)
    }

    /// The value of annotation `key`.
    pub fn annotation(&self, key: &str) -> Option<&'a str> {
        self.annotations().get(key)
    }

    /// `metadata.ownerReferences`.
    pub fn owner_refs(&self) -> OwnerRefs<'a> {
        let (at, left) = self.table(field::OWNER_REFERENCES, 8);
        let size = match at {
            0 => OWNER_ENTRY,
            at => u32_at(self.b, at - 4).map_or(OWNER_ENTRY, |s| s as usize),
        };
        OwnerRefs {
            b: self.b,
            at,
            size,
            left,
        }
    }

    /// The owner that is the managing controller, if any.
    pub fn controller(&self) -> Option<OwnerRef<'a>> {
        self.owner_refs().find(|o| o.controller)
    }

    /// The whole object as JSON bytes; empty when absent. Not checked here (parsing it refuses
    /// what is not UTF-8).
    pub fn json(&self) -> &'a [u8] {
        self.field(field::JSON).unwrap_or_default()
    }

    /// Whether the object came with its JSON (not when the plugin is metadata-only).
    pub fn has_json(&self) -> bool {
        self.field(field::JSON).is_some()
    }
}

/// An encoded object that owns its bytes (checked when made): [`ObjectBuf::view`] reads it.
#[derive(Clone)]
pub struct ObjectBuf {
    b: Box<[u8]>,
    fields: usize,
}

impl std::fmt::Debug for ObjectBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.view().fmt(f)
    }
}

impl ObjectBuf {
    /// Like [`Object::decode`], keeping the bytes.
    pub fn decode(b: Vec<u8>) -> Result<Self, DecodeError> {
        let fields = check::object(&b)?;
        Ok(Self {
            b: b.into_boxed_slice(),
            fields,
        })
    }

    /// The view of the object.
    #[inline]
    pub fn view(&self) -> Object<'_> {
        Object {
            b: &self.b,
            fields: self.fields,
        }
    }

    /// The bytes.
    pub fn into_vec(self) -> Vec<u8> {
        self.b.into_vec()
    }
}

impl From<Object<'_>> for ObjectBuf {
    fn from(o: Object<'_>) -> Self {
        Self {
            b: o.b.into(),
            fields: o.fields,
        }
    }
}

/// Key/value pairs (labels or annotations), sorted by key.
#[derive(Clone)]
pub struct Pairs<'a> {
    b: &'a [u8],
    at: usize,
    left: usize,
}

impl<'a> Pairs<'a> {
    /// The value of `key`: a binary search (the encoder sorts the pairs by key, bytewise).
    pub fn get(&self, key: &str) -> Option<&'a str> {
        let (b, at) = (self.b, self.at);
        let (mut lo, mut hi) = (0, self.left);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            // Keys compare as bytes (the order of `str`'s); only the value found is read as text.
            let k = span_at(b, at + mid * PAIR_ENTRY).unwrap_or_default();
            match k.cmp(key.as_bytes()) {
                std::cmp::Ordering::Equal => {
                    return Some(span_at(b, at + mid * PAIR_ENTRY + SPAN).map_or("", text));
                }
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
        if self.left == 0 {
            return None;
        }
        let k = span_at(self.b, self.at).map_or("", text);
        let v = span_at(self.b, self.at + SPAN).map_or("", text);
        self.at += PAIR_ENTRY;
        self.left -= 1;
        Some((k, v))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Pairs<'_> {}

/// An owner reference (`metadata.ownerReferences[]`), borrowed from the encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnerRef<'a> {
    /// `apiVersion` of the owner.
    pub api_version: &'a str,
    /// `kind` of the owner.
    pub kind: &'a str,
    /// `name` of the owner.
    pub name: &'a str,
    /// `uid` of the owner.
    pub uid: &'a str,
    /// This owner is the managing controller.
    pub controller: bool,
    /// `blockOwnerDeletion`.
    pub block_owner_deletion: bool,
}

/// The owner references of an object.
#[derive(Clone)]
pub struct OwnerRefs<'a> {
    b: &'a [u8],
    at: usize,
    size: usize,
    left: usize,
}

impl<'a> Iterator for OwnerRefs<'a> {
    type Item = OwnerRef<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        let s = |i: usize| span_at(self.b, self.at + i * SPAN).map_or("", text);
        let flags = u32_at(self.b, self.at + 4 * SPAN).unwrap_or(0);
        let r = OwnerRef {
            api_version: s(0),
            kind: s(1),
            name: s(2),
            uid: s(3),
            controller: flags & OWNER_CONTROLLER != 0,
            block_owner_deletion: flags & OWNER_BLOCK_OWNER_DELETION != 0,
        };
        self.at += self.size;
        self.left -= 1;
        Some(r)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for OwnerRefs<'_> {}
