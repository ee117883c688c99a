//! Hash ranges, as Kubernetes' sharded list and watch (KEP-5866, alpha in 1.36) defines them:
//! the 64-bit FNV-1a hash of an object's `metadata.uid` (or `metadata.namespace`), half-open
//! ranges `[start, end)` of that hash, written in a `shardSelector` as
//! `shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')`, several joined
//! by `||`; the end may be `0x10000000000000000` (2^64). A server that applies a selector echoes it
//! in the list's `metadata.shardInfo.selector`.
//!
//! Also how replicas split the hash space: 64 equal slots, each to the member that ranks it
//! highest ([`assignment`]), so a member leaving or joining moves only its own slots.

use std::collections::BTreeMap;

/// 2^64, the end of the hash space.
pub const SPACE: u128 = 1 << 64;

/// The 64-bit FNV-1a hash of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// What is hashed (`sharding.shardBy`: `uid` or `namespace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ShardField {
    /// `object.metadata.uid`: an even spread of objects.
    #[default]
    Uid,
    /// `object.metadata.namespace`: a namespace's objects together.
    Namespace,
}

impl ShardField {
    /// The field path of a selector.
    pub fn path(self) -> &'static str {
        match self {
            ShardField::Uid => "object.metadata.uid",
            ShardField::Namespace => "object.metadata.namespace",
        }
    }

    /// The hash of `obj`'s field (an absent field hashes as the empty string).
    pub fn hash_of(self, uid: &str, namespace: &str) -> u64 {
        fnv1a64(match self {
            ShardField::Uid => uid.as_bytes(),
            ShardField::Namespace => namespace.as_bytes(),
        })
    }
}

/// A set of hash values: sorted, disjoint, non-adjacent half-open ranges `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ranges(Vec<(u128, u128)>);

impl Ranges {
    /// Every hash.
    pub fn all() -> Self {
        Self(vec![(0, SPACE)])
    }

    /// No hash.
    pub fn none() -> Self {
        Self(Vec::new())
    }

    /// The union of `ranges` (empty ones dropped).
    pub fn of(ranges: impl IntoIterator<Item = (u128, u128)>) -> Self {
        let mut v: Vec<(u128, u128)> = ranges
            .into_iter()
            .filter(|(a, b)| a < b)
            .map(|(a, b)| (a.min(SPACE), b.min(SPACE)))
            .collect();
        v.sort_unstable();
        let mut out: Vec<(u128, u128)> = Vec::with_capacity(v.len());
        for (a, b) in v {
            match out.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => out.push((a, b)),
            }
        }
        Self(out)
    }

    /// The ranges.
    pub fn ranges(&self) -> &[(u128, u128)] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn is_all(&self) -> bool {
        self.0 == [(0, SPACE)]
    }

    pub fn contains(&self, hash: u64) -> bool {
        let h = u128::from(hash);
        self.0.iter().any(|(a, b)| *a <= h && h < *b)
    }

    /// The hashes in both.
    pub fn intersect(&self, other: &Ranges) -> Ranges {
        let mut out = Vec::new();
        for (a, b) in &self.0 {
            for (c, d) in &other.0 {
                let (lo, hi) = ((*a).max(*c), (*b).min(*d));
                if lo < hi {
                    out.push((lo, hi));
                }
            }
        }
        Ranges::of(out)
    }

    /// The hashes in `self` and not in `other`.
    pub fn minus(&self, other: &Ranges) -> Ranges {
        let mut out = Vec::new();
        for (a, b) in &self.0 {
            let mut lo = *a;
            for (c, d) in &other.0 {
                if *d <= lo || *c >= *b {
                    continue;
                }
                if *c > lo {
                    out.push((lo, *c));
                }
                lo = lo.max(*d);
            }
            if lo < *b {
                out.push((lo, *b));
            }
        }
        Ranges::of(out)
    }

    /// The hashes in either.
    pub fn union(&self, other: &Ranges) -> Ranges {
        Ranges::of(self.0.iter().chain(&other.0).copied())
    }

    /// Fraction of the hash space covered.
    pub fn share(&self) -> f64 {
        self.0.iter().map(|(a, b)| (b - a) as f64).sum::<f64>() / SPACE as f64
    }

    /// The `shardSelector` for these ranges of `field`: `None` for every hash (no selector
    /// needed) and for none (a selector cannot say "nothing").
    pub fn selector(&self, field: ShardField) -> Option<String> {
        if self.is_all() || self.is_empty() {
            return None;
        }
        Some(
            self.0
                .iter()
                .map(|(a, b)| format!("shardRange({}, '{}', '{}')", field.path(), hex(*a), hex(*b)))
                .collect::<Vec<_>>()
                .join(" || "),
        )
    }
}

fn hex(v: u128) -> String {
    if v >= SPACE {
        "0x10000000000000000".into()
    } else {
        format!("0x{v:016x}")
    }
}

/// A `shardSelector` that does not parse; displayed as the message of a 400 BadRequest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShardSelectorError {
    /// A term that is not `shardRange(...)`.
    #[error("invalid shard selector {0:?}: expected shardRange(fieldPath, 'hexStart', 'hexEnd')")]
    NotShardRange(String),
    /// A `shardRange` without exactly three arguments.
    #[error("invalid shard selector {0:?}: shardRange takes 3 arguments")]
    Arguments(String),
    /// A field path other than the uid or the namespace.
    #[error(
        "invalid shard selector: unsupported field path {0:?}: supported are object.metadata.uid, object.metadata.namespace"
    )]
    FieldPath(String),
    /// Terms on different field paths.
    #[error("invalid shard selector: every shardRange must use the same field path")]
    MixedFieldPaths,
    /// A bound that is not a `0x` hex number.
    #[error("invalid shard selector: {0:?} is not a 0x hex number")]
    NotHex(String),
    /// A bound above 2^64.
    #[error("invalid shard selector: {0:?} is above 2^64")]
    AboveSpace(String),
    /// A range whose start is not below its end (both as written).
    #[error("invalid shard selector: start {start} must be below end {end}")]
    Empty { start: String, end: String },
}

/// Parses a `shardSelector`: `shardRange(PATH, 'START', 'END')` terms joined by `||`, one field
/// path for all; the error is the message of a 400 BadRequest.
pub fn parse_selector(s: &str) -> Result<(ShardField, Ranges), ShardSelectorError> {
    let mut field = None;
    let mut ranges = Vec::new();
    for term in s.split("||") {
        let term = term.trim();
        let args = term
            .strip_prefix("shardRange(")
            .and_then(|t| t.strip_suffix(')'))
            .ok_or_else(|| ShardSelectorError::NotShardRange(term.to_owned()))?;
        let parts: Vec<&str> = args.split(',').map(str::trim).collect();
        let [path, start, end] = parts[..] else {
            return Err(ShardSelectorError::Arguments(term.to_owned()));
        };
        let f = match path {
            "object.metadata.uid" => ShardField::Uid,
            "object.metadata.namespace" => ShardField::Namespace,
            other => return Err(ShardSelectorError::FieldPath(other.to_owned())),
        };
        if field.is_some_and(|g| g != f) {
            return Err(ShardSelectorError::MixedFieldPaths);
        }
        field = Some(f);
        let num = |v: &str| -> Result<u128, ShardSelectorError> {
            let v = v.trim_matches('\'');
            let not_hex = || ShardSelectorError::NotHex(v.to_owned());
            let digits = v.strip_prefix("0x").ok_or_else(not_hex)?;
            let n = u128::from_str_radix(digits, 16).map_err(|_| not_hex())?;
            if n > SPACE {
                return Err(ShardSelectorError::AboveSpace(v.to_owned()));
            }
            Ok(n)
        };
        let (a, b) = (num(start)?, num(end)?);
        if a >= b {
            return Err(ShardSelectorError::Empty {
                start: start.to_owned(),
                end: end.to_owned(),
            });
        }
        ranges.push((a, b));
    }
    Ok((field.unwrap_or_default(), Ranges::of(ranges)))
}

/// splitmix64's finalizer: FNV-1a alone barely moves its high bits for names that differ in
/// one character, which would give every slot to the same member.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Slots the hash space is cut into for [`assignment`]: equal ranges, each owned whole by one
/// member. 64 keeps a replica's `shardSelector` short (at most 32 `shardRange` terms once
/// adjacent slots merge, about 3 KB) and its share within ~20% of even at 3 replicas.
pub const SLOTS: u128 = 64;

/// How `members` split the hash space: each of the [`SLOTS`] goes to the member that ranks it
/// highest (rendezvous hashing: FNV-1a of `member/slot`, mixed). A member that leaves moves only its
/// own slots, each to the member that ranks it next; one that joins takes only slots it ranks
/// highest. Members with no slot are absent.
pub fn assignment(members: &[String]) -> BTreeMap<String, Ranges> {
    let mut owned: BTreeMap<String, Vec<(u128, u128)>> = BTreeMap::new();
    for slot in 0..SLOTS {
        let Some(owner) = members
            .iter()
            .max_by_key(|m| (mix(fnv1a64(format!("{m}/{slot}").as_bytes())), (*m).clone()))
        else {
            break;
        };
        owned
            .entry(owner.clone())
            .or_default()
            .push((slot * SPACE / SLOTS, (slot + 1) * SPACE / SLOTS));
    }
    owned.into_iter().map(|(m, r)| (m, Ranges::of(r))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_reference_values() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn selectors_round_trip_and_bad_ones_are_named() {
        let r = Ranges::of([(0, 1 << 63), (3 << 62, SPACE)]);
        let s = r.selector(ShardField::Uid).unwrap();
        assert_eq!(
            s,
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(object.metadata.uid, '0xc000000000000000', '0x10000000000000000')"
        );
        assert_eq!(parse_selector(&s), Ok((ShardField::Uid, r)));
        assert_eq!(Ranges::all().selector(ShardField::Uid), None);
        assert!(
            parse_selector("shardRange(object.metadata.name, '0x0', '0x1')")
                .unwrap_err()
                .to_string()
                .contains("unsupported field path")
        );
        assert!(
            parse_selector("shardRange(object.metadata.uid, '0x2', '0x1')")
                .unwrap_err()
                .to_string()
                .contains("below")
        );
        assert!(
            parse_selector("shardRange(object.metadata.uid, '0x0', '0x20000000000000000')")
                .is_err()
        );
    }

    #[test]
    fn range_arithmetic() {
        let half = Ranges::of([(0, SPACE / 2)]);
        let quarter = Ranges::of([(SPACE / 4, SPACE / 2)]);
        assert_eq!(half.minus(&quarter), Ranges::of([(0, SPACE / 4)]));
        assert_eq!(half.intersect(&quarter), quarter);
        assert_eq!(half.union(&Ranges::of([(SPACE / 2, SPACE)])), Ranges::all());
        assert!(half.contains(0) && !half.contains(u64::MAX));
        assert!(Ranges::all().contains(u64::MAX));
    }

    #[test]
    fn members_split_the_space_and_a_leaving_member_moves_only_its_own_part() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let a = assignment(&names(&["wisp-0", "wisp-1", "wisp-2"]));
        assert_eq!(a.len(), 3);
        let parts: Vec<&Ranges> = a.values().collect();
        let all = parts.iter().fold(Ranges::none(), |acc, r| acc.union(r));
        assert_eq!(all, Ranges::all());
        for (i, p) in parts.iter().enumerate() {
            for q in &parts[i + 1..] {
                assert!(p.intersect(q).is_empty());
            }
            assert!((p.share() - 1.0 / 3.0).abs() < 0.15, "{}", p.share());
            assert!(p.ranges().len() <= 32);
        }
        // wisp-1 leaves: the others keep all they had.
        let b = assignment(&names(&["wisp-0", "wisp-2"]));
        for m in ["wisp-0", "wisp-2"] {
            assert!(a[m].minus(&b[m]).is_empty(), "{m} lost a part");
        }
        assert_eq!(b["wisp-0"].union(&b["wisp-2"]), Ranges::all());
        // wisp-3 joins: it only takes.
        let c = assignment(&names(&["wisp-0", "wisp-1", "wisp-2", "wisp-3"]));
        for m in ["wisp-0", "wisp-1", "wisp-2"] {
            assert!(c[m].minus(&a[m]).is_empty(), "{m} gained a part");
        }
        assert!(assignment(&[]).is_empty());
    }
}
