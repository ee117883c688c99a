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

/// The offset and the length of a span (8 bytes, little-endian), widened: offset + length
/// never wraps.
#[inline(always)]
fn parts(s: &[u8; SPAN]) -> (u64, u64) {
    let [a, b, c, d, e, f, g, h] = *s;
    (
        u64::from(u32::from_le_bytes([a, b, c, d])),
        u64::from(u32::from_le_bytes([e, f, g, h])),
    )
}

/// Eight bytes, little-endian.
#[inline(always)]
fn word(w: &[u8; 8]) -> u64 {
    u64::from_le_bytes(*w)
}

/// The words of a block, ORed.
#[inline(always)]
fn or_words<const N: usize>(block: &[u8; N]) -> u64 {
    let (words, _) = block.as_chunks::<8>();
    words.iter().fold(0, |h, w| h | word(w))
}

/// The high bit of every byte of some text, ORed eight bytes at a time (lane by lane): zero
/// while all of it is ASCII.
///
/// No loop runs word by word: a run of text is read as two blocks (its first and its last 8,
/// 16 or 32 bytes, overlapping), or as 64-byte blocks and its last 64 bytes. (A loop of words
/// with a tail, which the compiler unrolls with a word-by-word remainder loop, cost a wasm guest
/// ~13 instructions a word with its deadline check: ~500 of a pod's check.)
#[inline]
fn high_bits(b: &[u8]) -> u64 {
    if let Some(last) = b.last_chunk::<64>() {
        let (blocks, _) = b.as_chunks::<64>();
        let mut high = or_words(last);
        for k in blocks {
            high |= or_words(k);
        }
        return high;
    }
    fn ends<const N: usize>(b: &[u8]) -> Option<u64> {
        Some(or_words(b.first_chunk::<N>()?) | or_words(b.last_chunk::<N>()?))
    }
    if let Some(h) = ends::<32>(b)
        .or_else(|| ends::<16>(b))
        .or_else(|| ends::<8>(b))
    {
        return h;
    }
    match (b.first_chunk::<4>(), b.last_chunk::<4>()) {
        (Some(f), Some(l)) => u64::from(u32::from_le_bytes(*f) | u32::from_le_bytes(*l)),
        _ => match (b.first(), b.last()) {
            (Some(&f), Some(&l)) => u64::from(f | l | b[b.len() / 2]),
            _ => 0,
        },
    }
}

const HIGH: u64 = 0x8080_8080_8080_8080;

/// The common case in one pass that builds no error: an object of this version's fields (or
/// more) laid out as the encoder lays it out, whose text is all ASCII. `None` sends the object
/// to [`full`], which finds what is wrong and says where (or finds it well-formed in another
/// layout, or its non-ASCII text valid UTF-8).
///
/// The layout is checked as a chain: every span of the field table and of the label,
/// annotation and owner tables, in the order the encoder writes them, starts where the one
/// before it ended (the first right after the field table), each table is exactly its count of
/// entries long (owner entries of this version's size), and the chain ends within the object.
/// So every span lies within the object, with no comparison of its own, and the text spans
/// form runs with nothing else in them: the text fields (and `deletionTimestamp` right after
/// them when the object has no generation), then each table's keys and values. Those runs are
/// checked whole for a high bit, eight bytes at a time (~230 bytes for a pod). Fields of a newer
/// writer (past this version's) are only bounded.
///
/// Measured in the bench plugin (wasm, Cranelift, epochs on; the bench's pod, ~230 bytes of
/// text in 22 text spans): 864 guest instructions per object, the code from `lean` through
/// every run's high bits. The pass before this one (the SDK's until the codec) bounded each
/// span on its own and covered each group of text spans by the range from its lowest start to
/// its highest end, and ORed the ranges word by word: 1,069.
#[inline]
pub(crate) fn lean(b: &[u8]) -> Option<usize> {
    let len = b.len() as u64;
    let (&[version, _, n0, n1], rest) = b.split_first_chunk::<OBJECT_HEADER>()?;
    let fields = usize::from(u16::from_le_bytes([n0, n1]));
    if version != crate::LAYOUT_VERSION || fields < field::COUNT || len >= u64::from(ABSENT) {
        return None;
    }
    let (known, extra) = rest.split_first_chunk::<{ field::COUNT * SPAN }>()?;
    let (s, _) = known.as_chunks::<SPAN>();
    let s = |f: usize| parts(&s[f]);
    let mut chain = Chain {
        at: (OBJECT_HEADER + fields * SPAN) as u64,
        bad: 0,
    };
    let text = chain.at;
    chain.link(s(field::API_VERSION));
    chain.link(s(field::KIND));
    chain.link_unless_absent(s(field::NAMESPACE));
    chain.link(s(field::NAME));
    chain.link(s(field::UID));
    chain.link(s(field::RESOURCE_VERSION));
    let mut runs = [(text, chain.at), (0, 0), (0, 0), (0, 0), (0, 0)];
    let generation = s(field::GENERATION).0 != u64::from(ABSENT);
    chain.link_unless_absent(s(field::GENERATION));
    let dt = chain.at;
    chain.link_unless_absent(s(field::DELETION_TIMESTAMP));
    if generation {
        runs[1] = (dt, chain.at);
    } else {
        runs[0].1 = chain.at;
    }
    runs[2] = chain.pairs(b, s(field::LABELS))?;
    runs[3] = chain.pairs(b, s(field::ANNOTATIONS))?;
    runs[4] = chain.owners(b, s(field::OWNER_REFERENCES))?;
    chain.link_unless_absent(s(field::JSON));
    if chain.bad != 0 || chain.at > len {
        return None;
    }
    if fields > field::COUNT {
        // Fields of a newer writer: bounds only.
        let (extra, _) = extra
            .get(..(fields - field::COUNT) * SPAN)?
            .as_chunks::<SPAN>();
        for x in extra {
            let (off, n) = parts(x);
            if off != u64::from(ABSENT) && off + n > len {
                return None;
            }
        }
    }
    // The chain holds: every run lies within `b`.
    let mut high = 0;
    for (lo, hi) in runs {
        high |= high_bits(b.get(lo as usize..hi as usize)?);
    }
    (high & HIGH == 0).then_some(fields)
}

/// The spans of an object in the encoder's order, each starting where the last ended.
struct Chain {
    /// Where the next span must start.
    at: u64,
    /// Nonzero once a span did not start where it must.
    bad: u64,
}

impl Chain {
    #[inline(always)]
    fn link(&mut self, (off, len): (u64, u64)) {
        self.bad |= off ^ self.at;
        self.at = off + len;
    }

    #[inline(always)]
    fn link_unless_absent(&mut self, s: (u64, u64)) {
        if s.0 != u64::from(ABSENT) {
            self.link(s);
        }
    }

    /// The table at span `s`: its header (`N` bytes: the entry count, and for the owner table
    /// the entry size) and entries of `size` bytes, exactly as many as it counts; the chain
    /// moves past it.
    #[inline(always)]
    fn table<'b, const N: usize>(
        &mut self,
        b: &'b [u8],
        s: (u64, u64),
        size: usize,
    ) -> Option<(&'b [u8; N], &'b [u8])> {
        self.link(s);
        let (header, entries) = b
            .get(s.0 as usize..(s.0 + s.1) as usize)?
            .split_first_chunk::<N>()?;
        let count = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        (entries.len() as u64 == u64::from(count) * size as u64).then_some((header, entries))
    }

    /// A pair table and its keys and values (each key then its value, entry after entry): the
    /// run of their text.
    #[inline(always)]
    fn pairs(&mut self, b: &[u8], s: (u64, u64)) -> Option<(u64, u64)> {
        let (_, entries) = self.table::<4>(b, s, PAIR_ENTRY)?;
        let run = self.at;
        for e in entries.as_chunks::<PAIR_ENTRY>().0 {
            let (kv, _) = e.as_chunks::<SPAN>();
            self.link(parts(&kv[0]));
            self.link(parts(&kv[1]));
        }
        Some((run, self.at))
    }

    /// The owner table (entries of this version's size) and each entry's four texts, entry after
    /// entry: the run of their text.
    #[inline(always)]
    fn owners(&mut self, b: &[u8], s: (u64, u64)) -> Option<(u64, u64)> {
        let (header, entries) = self.table::<8>(b, s, OWNER_ENTRY)?;
        if u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize != OWNER_ENTRY
        {
            return None;
        }
        let run = self.at;
        for e in entries.as_chunks::<OWNER_ENTRY>().0 {
            let (spans, _) = e.as_chunks::<SPAN>();
            for x in &spans[..4] {
                self.link(parts(x));
            }
        }
        Some((run, self.at))
    }
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
