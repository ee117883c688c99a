//! The check an object's encoding passes before any of it is read: every span of the field
//! table and of the label, annotation and owner tables lies within the object, and every text
//! span is UTF-8 (`docs/abi.md`, "Text"). The views ([`crate::Object`]) read text without
//! checking it again, on the strength of this check.
//!
//! Two passes decide the same thing. [`lean`] is the common case, one pass that builds no error:
//! it proves a well-formed object whose text is ASCII (Kubernetes metadata nearly always is),
//! or gives up. [`full`] runs when it gives up: every check in order, with an error naming the
//! first that fails (or it finds non-ASCII text valid UTF-8). What is refused is what `full`
//! refuses; `lean` only spares it the common case, and passes nothing `full` refuses (the
//! tests change every byte of the vectors' objects and hold it to that).

use crate::layout::{ABSENT, OBJECT_HEADER, OWNER_ENTRY, PAIR_ENTRY, SPAN, field};
use crate::{DecodeError, err};

/// The fields that hold text (generation is a number; the tables are checked entry by entry).
const TEXT_FIELDS: [(usize, &str); 7] = [
    (field::API_VERSION, "apiVersion"),
    (field::KIND, "kind"),
    (field::NAMESPACE, "namespace"),
    (field::NAME, "name"),
    (field::UID, "uid"),
    (field::RESOURCE_VERSION, "resourceVersion"),
    (field::DELETION_TIMESTAMP, "deletionTimestamp"),
];

/// The tables: field, name (for errors), the names of each entry's text spans.
const TABLES: [(usize, &str, &[&str]); 3] = [
    (field::LABELS, "labels", &["key", "value"]),
    (field::ANNOTATIONS, "annotations", &["key", "value"]),
    (
        field::OWNER_REFERENCES,
        "ownerReferences",
        &["apiVersion", "kind", "name", "uid"],
    ),
];

/// Checks the object `b`; its field count when well-formed.
#[inline]
pub(crate) fn object(b: &[u8]) -> Result<usize, DecodeError> {
    match lean(b) {
        Some(fields) => Ok(fields),
        None => full(b),
    }
}

/// A span as written (8 bytes, little-endian): offset in the low half, length in the high.
#[inline(always)]
fn span(s: &[u8; 8]) -> u64 {
    u64::from_le_bytes(*s)
}

#[inline(always)]
fn start(s: u64) -> u64 {
    s & 0xffff_ffff
}

/// A span's end (offset + length; an absent span's is at least `ABSENT`, past any object that
/// fits a u32 offset).
#[inline(always)]
fn end(s: u64) -> u64 {
    (s & 0xffff_ffff) + (s >> 32)
}

#[inline(always)]
fn absent(s: u64) -> bool {
    start(s) == u64::from(ABSENT)
}

/// The high bit of every byte of some text, ORed eight bytes at a time (lane by lane): zero
/// while all of it is ASCII.
#[inline]
fn high_bits(b: &[u8]) -> u64 {
    let n = b.len();
    if n >= 8 {
        // Four words per turn (a quarter of the turns, and of a wasm guest's deadline checks:
        // one at every loop header), then the words left, then the last eight bytes again
        // (overlapping the words before them: no byte loop for the tail).
        let mut high = 0;
        let (blocks, rest) = b.as_chunks::<32>();
        for k in blocks {
            let (w, _) = k.as_chunks::<8>();
            high |= span(&w[0]) | span(&w[1]) | span(&w[2]) | span(&w[3]);
        }
        let (words, _) = rest.as_chunks::<8>();
        for w in words {
            high |= span(w);
        }
        match b.last_chunk::<8>() {
            Some(last) => high | span(last),
            None => high,
        }
    } else if n >= 4 {
        match (b.first_chunk::<4>(), b.last_chunk::<4>()) {
            (Some(f), Some(l)) => u64::from(u32::from_le_bytes(*f) | u32::from_le_bytes(*l)),
            _ => 0,
        }
    } else {
        match (b.first(), b.last()) {
            (Some(&f), Some(&l)) => u64::from(f | l | b[n / 2]),
            _ => 0,
        }
    }
}

const HIGH: u64 = 0x8080_8080_8080_8080;

/// The range from the lowest start to the highest end of some spans.
#[derive(Clone, Copy)]
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
    fn cover(self, s: u64) -> Region {
        Region {
            lo: self.lo.min(start(s)),
            hi: self.hi.max(end(s)),
        }
    }

    /// The high bits of the region's bytes (0 when it covers none). `hi` is within `b`.
    #[inline(always)]
    fn high_bits(self, b: &[u8]) -> u64 {
        match b.get(self.lo as usize..self.hi as usize) {
            Some(t) => high_bits(t),
            None => 0,
        }
    }
}

/// The common case in one pass that builds no error: an object of this version's fields (or
/// more) whose spans all lie within it and whose text is all ASCII. `None` sends the object to
/// [`full`], which finds what is wrong and says where (or finds non-ASCII text valid UTF-8).
///
/// Bounds: every span's end is compared once, the largest against the object's size. The
/// fields a host always writes (all but namespace, generation, deletionTimestamp and the JSON)
/// are taken as present: an absent one ends past any object and sends it to [`full`].
///
/// Text is checked by regions, not span by span: each group of text spans (the text fields
/// before `generation`, each table's keys and values) is covered by the range from its lowest
/// start to its highest end, and that range is checked whole, eight bytes at a time. A range may
/// hold more than text (what lies between spans); all ASCII, it proves its spans ASCII, whatever
/// the layout. The encoder writes each group's text in one run, so the ranges hold just the
/// text: one pass over ~250 bytes for a pod.
#[inline]
pub(crate) fn lean(b: &[u8]) -> Option<usize> {
    let len = b.len() as u64;
    let (&[version, _, n0, n1], rest) = b.split_first_chunk::<OBJECT_HEADER>()?;
    let fields = usize::from(u16::from_le_bytes([n0, n1]));
    if version != crate::LAYOUT_VERSION || fields < field::COUNT || len >= u64::from(ABSENT) {
        return None;
    }
    let (known, rest) = rest.split_first_chunk::<{ field::COUNT * SPAN }>()?;
    let (s, _) = known.as_chunks::<SPAN>();
    let s = |f: usize| span(&s[f]);
    let optional = |f: usize| if absent(s(f)) { 0 } else { end(s(f)) };
    let mut last = end(s(field::API_VERSION))
        .max(end(s(field::KIND)))
        .max(end(s(field::NAME)))
        .max(end(s(field::UID)))
        .max(end(s(field::RESOURCE_VERSION)))
        .max(end(s(field::LABELS)))
        .max(end(s(field::ANNOTATIONS)))
        .max(end(s(field::OWNER_REFERENCES)))
        .max(optional(field::NAMESPACE))
        .max(optional(field::GENERATION))
        .max(optional(field::DELETION_TIMESTAMP))
        .max(optional(field::JSON));
    if fields > field::COUNT {
        // Fields of a newer writer: bounds only.
        let (extra, _) = rest
            .get(..(fields - field::COUNT) * SPAN)?
            .as_chunks::<SPAN>();
        for x in extra {
            let x = span(x);
            last = last.max(if absent(x) { 0 } else { end(x) });
        }
    }
    if last > len {
        return None;
    }
    // Every field lies within the object: from here, a span's bytes are `b[start..end]`.
    let mut text = Region::EMPTY
        .cover(s(field::API_VERSION))
        .cover(s(field::KIND))
        .cover(s(field::NAME))
        .cover(s(field::UID))
        .cover(s(field::RESOURCE_VERSION));
    if !absent(s(field::NAMESPACE)) {
        text = text.cover(s(field::NAMESPACE));
    }
    let mut high = text.high_bits(b);
    if !absent(s(field::DELETION_TIMESTAMP)) {
        high |= Region::EMPTY
            .cover(s(field::DELETION_TIMESTAMP))
            .high_bits(b);
    }
    high |= pairs(b, s(field::LABELS))?;
    high |= pairs(b, s(field::ANNOTATIONS))?;
    high |= owners(b, s(field::OWNER_REFERENCES))?;
    (high & HIGH == 0).then_some(fields)
}

/// The bytes of a table whose span (`s`, present) lies within `b`, split after its first `N`
/// bytes (its count, and entry size).
#[inline(always)]
fn table<const N: usize>(b: &[u8], s: u64) -> Option<(&[u8; N], &[u8])> {
    b.get(start(s) as usize..end(s) as usize)?
        .split_first_chunk::<N>()
}

/// [`lean`] for a pair table: the high bits of its text, `None` when a span of it does not lie
/// within `b`.
#[inline(always)]
fn pairs(b: &[u8], s: u64) -> Option<u64> {
    let (&count, entries) = table::<4>(b, s)?;
    let n = u32::from_le_bytes(count) as usize;
    let entries = entries.get(..n.checked_mul(PAIR_ENTRY)?)?;
    // An absent entry span (never written) ends past any object: the bound fails and the full
    // check decides.
    let mut text = Region::EMPTY;
    for e in entries.as_chunks::<PAIR_ENTRY>().0 {
        let (k, v) = e.split_at(SPAN);
        let (Ok(k), Ok(v)) = (<&[u8; SPAN]>::try_from(k), <&[u8; SPAN]>::try_from(v)) else {
            return None;
        };
        text = text.cover(span(k)).cover(span(v));
    }
    (text.hi <= b.len() as u64).then(|| text.high_bits(b))
}

/// [`lean`] for the owner table.
#[inline(always)]
fn owners(b: &[u8], s: u64) -> Option<u64> {
    let (&[c0, c1, c2, c3, z0, z1, z2, z3], entries) = table::<8>(b, s)?;
    let n = u32::from_le_bytes([c0, c1, c2, c3]) as usize;
    let size = u32::from_le_bytes([z0, z1, z2, z3]) as usize;
    if size < OWNER_ENTRY {
        return None;
    }
    let entries = entries.get(..n.checked_mul(size)?)?;
    let mut text = Region::EMPTY;
    for e in entries.chunks_exact(size) {
        let (spans, _) = e.first_chunk::<{ 4 * SPAN }>()?.as_chunks::<SPAN>();
        for x in spans {
            text = text.cover(span(x));
        }
    }
    (text.hi <= b.len() as u64).then(|| text.high_bits(b))
}

/// The bytes of the span at `at` in `b`: `Ok(None)` when absent, an error when out of bounds.
pub(crate) fn span_checked(b: &[u8], at: usize) -> Result<Option<&[u8]>, DecodeError> {
    let Some(s) = at.checked_add(SPAN).and_then(|e| b.get(at..e)) else {
        return err(format!("span at {at} past the end ({} bytes)", b.len()));
    };
    let (off, len) = (
        u32::from_le_bytes([s[0], s[1], s[2], s[3]]),
        u32::from_le_bytes([s[4], s[5], s[6], s[7]]),
    );
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

/// An error naming `what` and the first byte that is not UTF-8, when `b` is not UTF-8.
pub(crate) fn utf8(b: Option<&[u8]>, what: impl FnOnce() -> String) -> Result<(), DecodeError> {
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

/// Every check, in order, with an error naming the first that fails: what is refused.
#[cold]
#[inline(never)]
pub(crate) fn full(b: &[u8]) -> Result<usize, DecodeError> {
    match b.first() {
        Some(&crate::LAYOUT_VERSION) => {}
        Some(v) => {
            return err(format!(
                "object layout version {v}, expected {}",
                crate::LAYOUT_VERSION
            ));
        }
        None => return err("empty object"),
    }
    let Some(&[n0, n1]) = b.get(2..4) else {
        return err("object header cut short");
    };
    let fields = usize::from(u16::from_le_bytes([n0, n1]));
    // Bounds first (the field table, then the tables), then the text: an object with faults of
    // both kinds is refused for its bounds.
    for f in 0..fields {
        span_checked(b, OBJECT_HEADER + f * SPAN)?;
    }
    for (f, _, _) in TABLES {
        if f < fields {
            check_table(b, f, |_, _, _| Ok(()))?;
        }
    }
    for (f, name) in TEXT_FIELDS {
        if f < fields {
            utf8(span_checked(b, OBJECT_HEADER + f * SPAN)?, || {
                format!("field {name}")
            })?;
        }
    }
    for (f, name, parts) in TABLES {
        if f < fields {
            check_table(b, f, |i, s, t| {
                utf8(Some(t), || format!("{name} entry {i}: {}", parts[s]))
            })?;
        }
    }
    Ok(fields)
}

/// Checks table `f`'s bounds and hands `text` each present span of every entry (entry, span
/// index, bytes).
fn check_table(
    b: &[u8],
    f: usize,
    mut text: impl FnMut(usize, usize, &[u8]) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    let Some(t) = span_checked(b, OBJECT_HEADER + f * SPAN)? else {
        return Ok(());
    };
    let u32_at = |at: usize| Some(u32::from_le_bytes(t.get(at..at + 4)?.try_into().ok()?));
    let Some(n) = u32_at(0) else {
        return err(format!("field {f}: table without a count"));
    };
    let (first, size, spans) = if f == field::OWNER_REFERENCES {
        let size = u32_at(4).unwrap_or(0) as usize;
        if size < OWNER_ENTRY {
            return err(format!(
                "owner entries of {size} bytes (at least {OWNER_ENTRY})"
            ));
        }
        (8, size, 4)
    } else {
        (4, PAIR_ENTRY, 2)
    };
    let end = (n as usize)
        .checked_mul(size)
        .and_then(|s| s.checked_add(first));
    if end.is_none_or(|e| e > t.len()) {
        return err(format!("field {f}: {n} entries do not fit its span"));
    }
    // The table's offset (its span was read just above: present and within `b`).
    let at = OBJECT_HEADER + f * SPAN;
    let base = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as usize;
    for i in 0..n as usize {
        for s in 0..spans {
            if let Some(bytes) = span_checked(b, base + first + i * size + s * SPAN)? {
                text(i, s, bytes)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
