//! Decoder of the plugin ABI 0.2 byte layout (`docs/abi.md`): zero-copy views over the bytes the
//! host hands over. Nothing here calls the host; it runs (and is tested against the shared test
//! vectors, `wit/abi-vectors.json`) natively as well as in wasm.
//!
//! Decoding never panics: a malformed header, a span out of bounds or a metadata string that is
//! not UTF-8 (docs/abi.md, "Text") is a [`DecodeError`], when the object is taken.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::DeserializeOwned;

/// The layout version this decoder reads (the first byte of every encoding).
pub const LAYOUT_VERSION: u8 = 1;
pub(crate) const ABSENT: u32 = u32::MAX;

pub(crate) const API_VERSION: usize = 0;
pub(crate) const KIND: usize = 1;
pub(crate) const NAMESPACE: usize = 2;
pub(crate) const NAME: usize = 3;
pub(crate) const UID: usize = 4;
pub(crate) const RESOURCE_VERSION: usize = 5;
pub(crate) const GENERATION: usize = 6;
pub(crate) const DELETION_TIMESTAMP: usize = 7;
pub(crate) const LABELS: usize = 8;
pub(crate) const ANNOTATIONS: usize = 9;
pub(crate) const OWNER_REFERENCES: usize = 10;
pub(crate) const JSON: usize = 11;
/// Bytes of an owner reference entry in this layout (more may follow in a later one).
pub(crate) const OWNER_ENTRY: usize = 36;

/// Bytes that are not a valid encoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed ABI bytes: {}", self.0)
    }
}

impl std::error::Error for DecodeError {}

fn err<T>(what: impl Into<String>) -> Result<T, DecodeError> {
    Err(DecodeError(what.into()))
}

#[inline]
fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

#[inline]
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

#[inline]
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The bytes of the span at `at` in `b`: None when absent or out of bounds. What the accessors
/// read with, after [`Object::decode`] checked every span (no error to build, so it inlines).
#[inline(always)]
fn span_at(b: &[u8], at: usize) -> Option<&[u8]> {
    let (off, len) = (u32_at(b, at)?, u32_at(b, at + 4)?);
    span_bytes(b, off, len)
}

/// A span's offset and end (offset + length), as written (8 bytes, little-endian); the offset
/// is [`ABSENT`] for an absent field.
#[inline(always)]
fn split_span(s: &[u8; 8]) -> (u64, u64) {
    let [a, b, c, d, e, f, g, h] = *s;
    let off = u64::from(u32::from_le_bytes([a, b, c, d]));
    (off, off + u64::from(u32::from_le_bytes([e, f, g, h])))
}

/// The range from the lowest start to the highest end of some spans (all within the object).
struct Region {
    lo: u64,
    hi: u64,
}

impl Region {
    const EMPTY: Region = Region {
        lo: u64::MAX,
        hi: 0,
    };

    #[inline(always)]
    fn cover(&mut self, off: u64, end: u64) {
        self.lo = self.lo.min(off);
        self.hi = self.hi.max(end);
    }

    /// The bytes of the range (empty when no span was covered).
    #[inline(always)]
    fn bytes<'b>(&self, b: &'b [u8]) -> &'b [u8] {
        b.get(self.lo as usize..self.hi as usize)
            .unwrap_or_default()
    }
}

/// The bytes `off`..`off + len` of `b`: None when absent (`off` is [`ABSENT`]) or out of bounds.
/// (Apart from [`span_at`] on purpose: written into it, the bench's `meta` row read 13 more
/// guest instructions per notification.)
#[inline(always)]
fn span_bytes(b: &[u8], off: u32, len: u32) -> Option<&[u8]> {
    if off == ABSENT {
        return None;
    }
    let off = off as usize;
    b.get(off..off.checked_add(len as usize)?)
}

/// The bytes of the span at `at` in `b`: `Ok(None)` when absent, an error when out of bounds.
#[inline]
fn span(b: &[u8], at: usize) -> Result<Option<&[u8]>, DecodeError> {
    let (Some(off), Some(len)) = (u32_at(b, at), u32_at(b, at + 4)) else {
        return err(format!("span at {at} past the end ({} bytes)", b.len()));
    };
    if off == ABSENT {
        return Ok(None);
    }
    let (off, len) = (off as usize, len as usize);
    match off.checked_add(len).and_then(|end| b.get(off..end)) {
        Some(s) => Ok(Some(s)),
        None => err(format!(
            "span {off}+{len} at {at} past the end ({} bytes)",
            b.len()
        )),
    }
}

#[inline]
fn text(b: &[u8]) -> &str {
    // Checked when the object was taken (`utf8`): never "" for bytes that are not UTF-8.
    std::str::from_utf8(b).unwrap_or("")
}

/// The fields that hold text (generation is a number; the tables are checked entry by entry).
const TEXT_FIELDS: [(usize, &str); 7] = [
    (API_VERSION, "apiVersion"),
    (KIND, "kind"),
    (NAMESPACE, "namespace"),
    (NAME, "name"),
    (UID, "uid"),
    (RESOURCE_VERSION, "resourceVersion"),
    (DELETION_TIMESTAMP, "deletionTimestamp"),
];

/// [`TEXT_FIELDS`] as a bit set (bit `f` for field `f`).
const TEXT_MASK: u64 = {
    let mut mask = 0;
    let mut i = 0;
    while i < TEXT_FIELDS.len() {
        mask |= 1 << TEXT_FIELDS[i].0;
        i += 1;
    }
    mask
};

/// The high bits of the text bytes seen so far, eight bytes at a time: zero while all of them
/// are ASCII. Kubernetes metadata nearly always is, so a decode ORs every text span in here and
/// validates UTF-8 span by span only when a high bit shows up (`str::from_utf8` goes byte by
/// byte over short strings, which was most of a decode's cost).
#[derive(Default)]
struct HighBits(u64);

impl HighBits {
    /// ORs `b` in: whole words, then the last eight (or four, two) bytes read again overlapping
    /// the words before them, so no byte loop runs for the tail.
    #[inline]
    fn add(&mut self, b: &[u8]) {
        let n = b.len();
        let mut high = self.0;
        if n >= 8 {
            // Four words per turn: a quarter of the loop's turns, and of a wasm guest's
            // deadline checks (one per loop header); then the words left, then the tail.
            let (blocks, rest) = b.as_chunks::<32>();
            for k in blocks {
                let (w, _) = k.as_chunks::<8>();
                let w = |i: usize| u64::from_le_bytes(w[i]);
                high |= w(0) | w(1) | w(2) | w(3);
            }
            let (words, _) = rest.as_chunks::<8>();
            for w in words {
                high |= u64::from_le_bytes(*w);
            }
            if let Some(last) = b.last_chunk::<8>() {
                high |= u64::from_le_bytes(*last);
            }
        } else if n >= 4 {
            let (Some(first), Some(last)) = (b.first_chunk::<4>(), b.last_chunk::<4>()) else {
                return;
            };
            high |= u64::from(u32::from_le_bytes(*first) | u32::from_le_bytes(*last));
        } else if n >= 2 {
            let (Some(first), Some(last)) = (b.first_chunk::<2>(), b.last_chunk::<2>()) else {
                return;
            };
            high |= u64::from(u16::from_le_bytes(*first) | u16::from_le_bytes(*last));
        } else if let Some(&x) = b.first() {
            high |= u64::from(x);
        }
        self.0 = high;
    }

    fn ascii(&self) -> bool {
        self.0 & 0x8080_8080_8080_8080 == 0
    }
}

/// An error naming `what` and the first byte that is not UTF-8, when `b` is not UTF-8.
fn utf8(b: Option<&[u8]>, what: impl FnOnce() -> String) -> Result<(), DecodeError> {
    match b.map(std::str::from_utf8) {
        Some(Err(e)) => err(format!(
            "{}: text that is not UTF-8 (byte {} of {})",
            what(),
            e.valid_up_to(),
            b.map_or(0, <[u8]>::len)
        )),
        _ => Ok(()),
    }
}

/// The name of table `table` and of span `s` of its entries, for errors.
fn entry_part(table: usize, s: usize) -> (&'static str, &'static str) {
    match table {
        LABELS => ("labels", ["key", "value"][s]),
        ANNOTATIONS => ("annotations", ["key", "value"][s]),
        _ => ("ownerReferences", ["apiVersion", "kind", "name", "uid"][s]),
    }
}

/// A Kubernetes object: views of its metadata and JSON, read from its encoding as asked (nothing
/// is copied or parsed up front). Borrowed from a batch while the host's call lasts, or owned
/// (`Object<'static>`) when read from the cache.
#[derive(Clone)]
pub struct Object<'a> {
    b: Cow<'a, [u8]>,
    fields: usize,
}

impl std::fmt::Debug for Object<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Object")
            .field("apiVersion", &self.api_version())
            .field("kind", &self.kind())
            .field("key", &self.key())
            .field("resourceVersion", &self.resource_version())
            .finish()
    }
}

impl<'a> Object<'a> {
    /// Reads an encoded object, checking its header and that every field lies within it.
    pub fn decode(bytes: &'a [u8]) -> Result<Self, DecodeError> {
        Self::check(Cow::Borrowed(bytes))
    }

    /// Like [`Object::decode`], keeping the bytes.
    pub fn decode_owned(bytes: Vec<u8>) -> Result<Object<'static>, DecodeError> {
        Object::check(Cow::Owned(bytes))
    }

    fn check(b: Cow<'a, [u8]>) -> Result<Self, DecodeError> {
        match b.first() {
            Some(&LAYOUT_VERSION) => {}
            Some(v) => {
                return err(format!(
                    "object layout version {v}, expected {LAYOUT_VERSION}"
                ));
            }
            None => return err("empty object"),
        }
        let Some(fields) = u16_at(&b, 2) else {
            return err("object header cut short");
        };
        let fields = fields as usize;
        if Self::well_formed_ascii(&b, fields) {
            return Ok(Self { b, fields });
        }
        Self::check_slow(&b, fields)?;
        Ok(Self { b, fields })
    }

    /// The common case, checked in one lean pass: every span of the field table and of the
    /// label, annotation and owner tables lies within the object, and every text span is ASCII.
    /// `false` sends the object to [`Object::check_slow`], which finds what is wrong and says
    /// where (or finds non-ASCII text valid UTF-8).
    ///
    /// The text is checked by regions, not span by span: each group of text spans (the text
    /// fields before `generation`, and each table's keys and values) is covered by the range
    /// from its lowest start to its highest end, and that range is checked whole, eight bytes
    /// at a time. A range may hold more than text (what lies between spans); all ASCII, it
    /// proves its spans ASCII, whatever the layout. The host writes each group's text in one
    /// run, so the ranges hold just the text and this is one pass over ~250 bytes for a pod.
    /// (Span by span, with a length-dependent tail each, it was ~2,500 of a guest's ~3,000
    /// instructions per notification: BENCHMARKS.md, "Instructions per notification".)
    #[inline]
    fn well_formed_ascii(b: &[u8], fields: usize) -> bool {
        let Some(table) = fields.checked_mul(8).and_then(|n| b.get(4..4 + n)) else {
            return false;
        };
        let (spans, _) = table.as_chunks::<8>();
        // Absent fields (offset ABSENT) count as ending at 0; every other span's end is at
        // most `last`, so one comparison bounds them all.
        let (mut last, mut text) = (0, Region::EMPTY);
        let mut field = |f: usize, s: &[u8; 8]| {
            let (off, end) = split_span(s);
            let end = if off == u64::from(ABSENT) { 0 } else { end };
            last = last.max(end);
            if f <= RESOURCE_VERSION && end != 0 {
                text.cover(off, end);
            }
        };
        // The fields this version writes as a fixed-size array: the loop unrolls, and a wasm
        // guest runs no deadline check per field (one at every loop header).
        match spans.split_first_chunk::<{ JSON + 1 }>() {
            Some((known, rest)) => {
                for (f, s) in known.iter().enumerate() {
                    field(f, s);
                }
                for s in rest {
                    field(JSON + 1, s);
                }
            }
            None => {
                for (f, s) in spans.iter().enumerate() {
                    field(f, s);
                }
            }
        }
        if last > b.len() as u64 {
            return false;
        }
        let mut high = HighBits::default();
        if let Some(dt) = spans.get(DELETION_TIMESTAMP) {
            let (off, end) = split_span(dt);
            if off != u64::from(ABSENT) {
                high.add(&b[off as usize..end as usize]);
            }
        }
        high.add(text.bytes(b));
        for table in [LABELS, ANNOTATIONS, OWNER_REFERENCES] {
            if table < fields && !Self::table_ascii(b, &spans[table], table, &mut high) {
                return false;
            }
        }
        high.ascii()
    }

    /// [`Object::well_formed_ascii`] for one table (`at`: its span in the field table).
    #[inline]
    fn table_ascii(b: &[u8], at: &[u8; 8], table: usize, high: &mut HighBits) -> bool {
        let (off, end) = split_span(at);
        if off == u64::from(ABSENT) {
            return true;
        }
        let Some(t) = b.get(off as usize..end.min(b.len() as u64 + 1) as usize) else {
            return false;
        };
        let Some(&n) = t.first_chunk::<4>() else {
            return false;
        };
        let (first, size, spans) = if table == OWNER_REFERENCES {
            match t.get(4..8) {
                Some(&[a, b, c, d]) => (8, u32::from_le_bytes([a, b, c, d]) as usize, 4),
                _ => return false,
            }
        } else {
            (4, 16, 2)
        };
        if size < OWNER_ENTRY && table == OWNER_REFERENCES {
            return false;
        }
        let n = u32::from_le_bytes(n) as usize;
        let Some(entries) = n.checked_mul(size).and_then(|e| t.get(first..first + e)) else {
            return false;
        };
        // An absent span here (offset ABSENT) ends past any object: the bound fails and the
        // full check decides (entries are never absent in what the host writes).
        let mut text = Region::EMPTY;
        if spans == 2 {
            for e in entries.as_chunks::<16>().0 {
                for s in e.as_chunks::<8>().0 {
                    let (off, end) = split_span(s);
                    text.cover(off, end);
                }
            }
        } else {
            for e in entries.chunks_exact(size) {
                for s in e[..32].as_chunks::<8>().0 {
                    let (off, end) = split_span(s);
                    text.cover(off, end);
                }
            }
        }
        let ok = text.hi <= b.len() as u64;
        if ok {
            high.add(text.bytes(b));
        }
        ok
    }

    /// What [`Object::well_formed_ascii`] did not pass: every check, with an error naming the
    /// first that fails.
    #[cold]
    #[inline(never)]
    fn check_slow(b: &[u8], fields: usize) -> Result<(), DecodeError> {
        let mut high = HighBits::default();
        for f in 0..fields {
            let bytes = span(b, 4 + f * 8)?;
            if let Some(t) = bytes.filter(|_| f < 64 && TEXT_MASK & (1 << f) != 0) {
                high.add(t);
            }
        }
        for table in [LABELS, ANNOTATIONS, OWNER_REFERENCES] {
            if table < fields {
                Self::check_table(b, table, |_, _, t| {
                    high.add(t);
                    Ok(())
                })?;
            }
        }
        if !high.ascii() {
            Self::check_utf8(b, fields)?;
        }
        Ok(())
    }

    /// Every text span is UTF-8, or an error naming the first that is not and its byte.
    #[cold]
    fn check_utf8(b: &[u8], fields: usize) -> Result<(), DecodeError> {
        for (f, name) in TEXT_FIELDS {
            if f < fields {
                utf8(span(b, 4 + f * 8)?, || format!("field {name}"))?;
            }
        }
        for table in [LABELS, ANNOTATIONS, OWNER_REFERENCES] {
            if table < fields {
                Self::check_table(b, table, |i, s, t| {
                    utf8(Some(t), || {
                        let (t, part) = entry_part(table, s);
                        format!("{t} entry {i}: {part}")
                    })
                })?;
            }
        }
        Ok(())
    }

    /// Checks table `table`'s bounds and hands `text` each present span of every entry (entry,
    /// span index, bytes).
    fn check_table(
        b: &[u8],
        table: usize,
        mut text: impl FnMut(usize, usize, &[u8]) -> Result<(), DecodeError>,
    ) -> Result<(), DecodeError> {
        let Some(t) = span(b, 4 + table * 8)? else {
            return Ok(());
        };
        let Some(n) = u32_at(t, 0) else {
            return err(format!("field {table}: table without a count"));
        };
        let (first, size, spans) = if table == OWNER_REFERENCES {
            let size = u32_at(t, 4).unwrap_or(0) as usize;
            if size < OWNER_ENTRY {
                return err(format!(
                    "owner entries of {size} bytes (at least {OWNER_ENTRY})"
                ));
            }
            (8, size, 4)
        } else {
            (4, 16, 2)
        };
        let end = (n as usize)
            .checked_mul(size)
            .and_then(|s| s.checked_add(first));
        if end.is_none_or(|e| e > t.len()) {
            return err(format!("field {table}: {n} entries do not fit its span"));
        }
        let base = u32_at(b, 4 + table * 8).unwrap_or(0) as usize;
        for i in 0..n as usize {
            for s in 0..spans {
                if let Some(bytes) = span(b, base + first + i * size + s * 8)? {
                    text(i, s, bytes)?;
                }
            }
        }
        Ok(())
    }

    /// The bytes of field `f` (None when absent, or unknown to the writer).
    #[inline]
    fn field(&self, f: usize) -> Option<&[u8]> {
        if f >= self.fields {
            return None;
        }
        span_at(&self.b, 4 + f * 8)
    }

    #[inline]
    fn str_field(&self, f: usize) -> &str {
        self.field(f).map_or("", text)
    }

    /// The whole encoding (what the host sent).
    pub fn as_bytes(&self) -> &[u8] {
        &self.b
    }

    /// An owned copy (to keep beyond the call that delivered it).
    pub fn into_owned(self) -> Object<'static> {
        Object {
            b: Cow::Owned(self.b.into_owned()),
            fields: self.fields,
        }
    }

    /// `apiVersion`, e.g. `v1` or `apps/v1`.
    pub fn api_version(&self) -> &str {
        self.str_field(API_VERSION)
    }

    /// `kind`, e.g. `Pod`.
    pub fn kind(&self) -> &str {
        self.str_field(KIND)
    }

    /// `metadata.namespace` (None when cluster-scoped).
    pub fn namespace(&self) -> Option<&str> {
        self.field(NAMESPACE).map(text)
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.str_field(NAME)
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> &str {
        self.str_field(UID)
    }

    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> &str {
        self.str_field(RESOURCE_VERSION)
    }

    /// `metadata.generation`, when the object has one.
    pub fn generation(&self) -> Option<i64> {
        let b = self.field(GENERATION)?;
        Some(i64::from_le_bytes(b.try_into().ok()?))
    }

    /// `metadata.deletionTimestamp` (RFC 3339), set while the object is being deleted.
    pub fn deletion_timestamp(&self) -> Option<&str> {
        self.field(DELETION_TIMESTAMP).map(text)
    }

    /// `namespace/name`, or `name` when cluster-scoped.
    pub fn key(&self) -> String {
        match self.namespace() {
            Some(ns) => format!("{ns}/{}", self.name()),
            None => self.name().to_owned(),
        }
    }

    fn pairs(&self, table: usize) -> Pairs<'_> {
        let base = if table < self.fields {
            u32_at(&self.b, 4 + table * 8).filter(|&o| o != ABSENT)
        } else {
            None
        };
        let n = base.and_then(|o| u32_at(&self.b, o as usize)).unwrap_or(0);
        Pairs {
            b: &self.b,
            at: base.map_or(0, |o| o as usize + 4),
            left: n as usize,
        }
    }

    /// `metadata.labels`, sorted by key.
    pub fn labels(&self) -> Pairs<'_> {
        self.pairs(LABELS)
    }

    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels().find_sorted(key)
    }

    /// `metadata.annotations`, sorted by key.
    pub fn annotations(&self) -> Pairs<'_> {
        self.pairs(ANNOTATIONS)
    }

    /// The value of annotation `key`.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations().find_sorted(key)
    }

    /// `metadata.ownerReferences`.
    pub fn owner_refs(&self) -> OwnerRefs<'_> {
        let base = if OWNER_REFERENCES < self.fields {
            u32_at(&self.b, 4 + OWNER_REFERENCES * 8).filter(|&o| o != ABSENT)
        } else {
            None
        };
        let (n, size) = base.map_or((0, OWNER_ENTRY as u32), |o| {
            (
                u32_at(&self.b, o as usize).unwrap_or(0),
                u32_at(&self.b, o as usize + 4).unwrap_or(OWNER_ENTRY as u32),
            )
        });
        OwnerRefs {
            b: &self.b,
            at: base.map_or(0, |o| o as usize + 8),
            size: size as usize,
            left: n as usize,
        }
    }

    /// The owner that is the managing controller, if any.
    pub fn controller(&self) -> Option<OwnerRef<'_>> {
        self.owner_refs().find(|o| o.controller)
    }

    /// The whole object as JSON bytes (UTF-8); empty when absent.
    pub fn json(&self) -> &[u8] {
        self.field(JSON).unwrap_or_default()
    }

    /// Whether the object came with its JSON (not when the plugin is metadata-only).
    pub fn has_json(&self) -> bool {
        self.field(JSON).is_some()
    }

    fn json_for_parse(&self) -> Result<&[u8], String> {
        match self.field(JSON) {
            Some(j) => Ok(j),
            None => Err(format!(
                "{}: delivered without its JSON (the plugin describes itself metadata-only); \
                 read the object with cache::get to parse it",
                self.key()
            )),
        }
    }

    /// Parses the JSON into `T` (e.g. `k8s_openapi::api::core::v1::Pod`).
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, String> {
        serde_json::from_slice(self.json_for_parse()?)
            .map_err(|e| format!("{}: cannot parse as the requested type: {e}", self.key()))
    }

    /// Parses only what `T` names, borrowing its strings from the object: a struct with the few
    /// fields a plugin needs (`&str` fields borrow; unknown fields are skipped) costs a fraction
    /// of a full parse into a k8s-openapi type.
    ///
    /// ```
    /// # use wisp_sdk::abi::Object;
    /// #[derive(serde::Deserialize)]
    /// struct Images<'a> {
    ///     #[serde(borrow)]
    ///     spec: Spec<'a>,
    /// }
    /// #[derive(serde::Deserialize)]
    /// struct Spec<'a> {
    ///     #[serde(borrow)]
    ///     containers: Vec<Container<'a>>,
    /// }
    /// #[derive(serde::Deserialize)]
    /// struct Container<'a> {
    ///     image: &'a str,
    /// }
    /// # fn f(obj: &Object) -> Result<(), String> {
    /// let images: Images = obj.parse_partial()?;
    /// # Ok(()) }
    /// ```
    pub fn parse_partial<'de, T: Deserialize<'de>>(&'de self) -> Result<T, String> {
        serde_json::from_slice(self.json_for_parse()?)
            .map_err(|e| format!("{}: cannot parse as the requested type: {e}", self.key()))
    }

    /// Parses the JSON into a generic value.
    pub fn value(&self) -> Result<serde_json::Value, String> {
        self.parse()
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
    /// Binary search by key (the host sorts them).
    fn find_sorted(self, key: &str) -> Option<&'a str> {
        let (b, at) = (self.b, self.at);
        let entry = |i: usize| {
            // Keys compare as bytes (the order of `str`'s); only the value found is text.
            let k = span_at(b, at + i * 16).unwrap_or_default();
            (k, at + i * 16 + 8)
        };
        let (mut lo, mut hi) = (0, self.left);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (k, v) = entry(mid);
            match k.cmp(key.as_bytes()) {
                std::cmp::Ordering::Equal => return Some(span_at(b, v).map_or("", text)),
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
        let v = span_at(self.b, self.at + 8).map_or("", text);
        self.at += 16;
        self.left -= 1;
        Some((k, v))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Pairs<'_> {}

/// An owner reference (`metadata.ownerReferences[]`).
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
        let s = |i: usize| span_at(self.b, self.at + i * 8).map_or("", text);
        let flags = u32_at(self.b, self.at + 32).unwrap_or(0);
        let r = OwnerRef {
            api_version: s(0),
            kind: s(1),
            name: s(2),
            uid: s(3),
            controller: flags & 1 != 0,
            block_owner_deletion: flags & 2 != 0,
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

/// What happened to the object of a notification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// One notification of a batch.
#[derive(Clone, Debug)]
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

/// A batch of notifications from one informer.
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    b: &'a [u8],
    count: usize,
    entries: usize,
    entry_size: usize,
    informer: &'a str,
}

impl<'a> Batch<'a> {
    /// Reads a batch's header (its notifications are read as iterated).
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
        let (Some(header), Some(count), Some(entry_size)) =
            (u16_at(b, 2), u32_at(b, 4), u32_at(b, 8))
        else {
            return err("batch header cut short");
        };
        let (header, count, entry_size) = (header as usize, count as usize, entry_size as usize);
        if header < 24 || entry_size < 32 {
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
        let informer = span(b, 12)?.map(text).unwrap_or("");
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

    /// Notification `i`.
    pub fn get(&self, i: usize) -> Result<Notification<'a>, DecodeError> {
        if i >= self.count {
            return err(format!("notification {i} of {}", self.count));
        }
        let b = self.b;
        let e = self.entries + i * self.entry_size;
        let seq = u64_at(b, e).unwrap_or(0);
        let (kind, flags) = (b[e + 8], b[e + 9]);
        let kind = match kind {
            0 => Kind::Added {
                initial_list: flags & 1 != 0,
            },
            1 => Kind::Updated {
                resync: flags & 2 != 0,
            },
            2 => Kind::Deleted {
                final_state_unknown: flags & 4 != 0,
            },
            k => return err(format!("notification {seq}: unknown kind {k}")),
        };
        let object = match span_at(b, e + 12) {
            Some(obj) => Object::decode(obj)?,
            None => return Err(Self::missing(b, e + 12, "notification", seq, "an object")),
        };
        let old = match kind {
            Kind::Updated { .. } => match span_at(b, e + 20) {
                Some(o) => Some(Object::decode(o)?),
                None => return Err(Self::missing(b, e + 20, "update", seq, "its old object")),
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

    /// Why the span at `at` of entry `seq` gave no object: out of bounds, or absent.
    #[cold]
    fn missing(b: &[u8], at: usize, what: &str, seq: u64, object: &str) -> DecodeError {
        match span(b, at) {
            Err(e) => e,
            Ok(_) => DecodeError(format!("{what} {seq} without {object}")),
        }
    }

    /// The notifications, in order.
    pub fn iter(
        &self,
    ) -> impl ExactSizeIterator<Item = Result<Notification<'a>, DecodeError>> + 'a {
        let me = *self;
        (0..me.count).map(move |i| me.get(i))
    }
}

/// Objects read from the cache, in one buffer.
#[derive(Clone)]
pub struct ObjectList {
    b: Vec<u8>,
    count: usize,
    header: usize,
}

impl std::fmt::Debug for ObjectList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl ObjectList {
    /// Reads an object list, checking every object in it.
    pub fn decode(b: Vec<u8>) -> Result<Self, DecodeError> {
        match b.first() {
            Some(&LAYOUT_VERSION) => {}
            Some(v) => {
                return err(format!(
                    "list layout version {v}, expected {LAYOUT_VERSION}"
                ));
            }
            None => return err("empty list"),
        }
        let (Some(header), Some(count)) = (u16_at(&b, 2), u32_at(&b, 4)) else {
            return err("list header cut short");
        };
        let (header, count) = (header as usize, count as usize);
        if header < 8 {
            return err(format!("list header of {header} bytes (at least 8)"));
        }
        for i in 0..count {
            match span(&b, header + i * 8)? {
                Some(o) => {
                    Object::decode(o)?;
                }
                None => return err(format!("list entry {i} absent")),
            }
        }
        Ok(Self { b, count, header })
    }

    /// How many objects.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Object `i`.
    pub fn get(&self, i: usize) -> Option<Object<'_>> {
        if i >= self.count {
            return None;
        }
        let o = span_at(&self.b, self.header + i * 8)?;
        Object::decode(o).ok()
    }

    /// The objects, in the host's order.
    pub fn iter(&self) -> Iter<'_> {
        Iter { list: self, i: 0 }
    }
}

/// The objects of an [`ObjectList`].
pub struct Iter<'a> {
    list: &'a ObjectList,
    i: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = Object<'a>;

    fn next(&mut self) -> Option<Object<'a>> {
        // Every entry was checked by `decode`: none is skipped.
        while self.i < self.list.count {
            self.i += 1;
            if let Some(o) = self.list.get(self.i - 1) {
                return Some(o);
            }
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.list.count - self.i;
        (left, Some(left))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a ObjectList {
    type Item = Object<'a>;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

#[cfg(test)]
pub(crate) mod tests;
