//! The config's units: durations (`50ms`, `1m30s`) and byte quantities (`64Mi`).

use std::time::Duration;

use serde::Deserialize;

/// A duration written `50ms`, `30s`, `5m`, `1h`, `1m30s` (or `0` for none).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = serde_json::Value::deserialize(d)?;
        let text = match &s {
            serde_json::Value::String(t) => t.clone(),
            serde_json::Value::Number(n) if n.as_u64() == Some(0) => "0".into(),
            other => {
                return Err(serde::de::Error::custom(format!(
                    "invalid duration {other:?}: expected e.g. 50ms, 30s, 5m, 1h"
                )));
            }
        };
        parse_duration(&text)
            .map(Dur)
            .map_err(serde::de::Error::custom)
    }
}

/// Longest duration: Go's (and so Kubernetes'), 2^63-1 ns, about 292 years. Longer ones would
/// overflow where the host adds them to an instant or doubles a backoff.
pub const MAX_DURATION: Duration = Duration::new(9_223_372_036, 854_775_807);

/// A duration as a person reads it: `850 µs`, `235 ms`, `12.4 s`, `3 min 5 s`.
pub fn human_duration(d: Duration) -> String {
    let us = d.as_micros();
    match us {
        0..1_000 => format!("{us} µs"),
        1_000..1_000_000 => format!("{} ms", us / 1_000),
        1_000_000..120_000_000 => format!("{:.1} s", d.as_secs_f64()),
        _ => format!("{} min {} s", d.as_secs() / 60, d.as_secs() % 60),
    }
}

/// A duration or a size that does not parse; each variant holds the text as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Not a duration.
    #[error("invalid duration {0:?}: expected e.g. 50ms, 30s, 5m, 1h")]
    Duration(String),
    /// A duration over [`MAX_DURATION`].
    #[error("duration {0:?} is too long: at most 292 years (2^63-1 ns)")]
    DurationTooLong(String),
    /// Not a number of bytes.
    #[error("invalid size {0:?}: expected e.g. 64Mi")]
    Size(String),
    /// A number with a unit that is not one.
    #[error("invalid size {0:?}: expected e.g. 64Mi (units Ki, Mi, Gi, k, M, G)")]
    SizeUnit(String),
    /// A size over 2^64-1 bytes.
    #[error("size {0:?} is too large")]
    SizeTooLarge(String),
}

/// Parses `50ms`, `30s`, `5m`, `1h`, `1m30s`, `0` (at most [`MAX_DURATION`]).
pub fn parse_duration(s: &str) -> Result<Duration, ParseError> {
    let bad = || ParseError::Duration(s.to_owned());
    let too_long = || ParseError::DurationTooLong(s.to_owned());
    let t = s.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    let mut rest = t;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let d = match &rest[..unit_len] {
            "ms" => Some(Duration::from_millis(n)),
            "s" => Some(Duration::from_secs(n)),
            "m" => n.checked_mul(60).map(Duration::from_secs),
            "h" => n.checked_mul(3600).map(Duration::from_secs),
            _ => return Err(bad()),
        };
        total = d
            .and_then(|d| total.checked_add(d))
            .filter(|t| *t <= MAX_DURATION)
            .ok_or_else(too_long)?;
        rest = &rest[unit_len..];
    }
    Ok(total)
}

/// A byte quantity written `64Mi`, `1Gi`, `512Ki`, `100M` or a plain number of bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Bytes(pub u64);

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        match &v {
            serde_json::Value::Number(n) => n
                .as_u64()
                .map(Bytes)
                .ok_or_else(|| serde::de::Error::custom("expected a positive number of bytes")),
            serde_json::Value::String(s) => {
                parse_bytes(s).map(Bytes).map_err(serde::de::Error::custom)
            }
            other => Err(serde::de::Error::custom(format!(
                "invalid size {other:?}: expected e.g. 64Mi"
            ))),
        }
    }
}

/// Parses `64Mi`, `1Gi`, `512Ki`, `100M`, `1G`, `4096`.
pub fn parse_bytes(s: &str) -> Result<u64, ParseError> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let n: u64 = t[..split]
        .parse()
        .map_err(|_| ParseError::Size(s.to_owned()))?;
    let mult: u64 = match &t[split..] {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "k" | "K" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        _ => return Err(ParseError::SizeUnit(s.to_owned())),
    };
    n.checked_mul(mult)
        .ok_or_else(|| ParseError::SizeTooLarge(s.to_owned()))
}

#[cfg(test)]
mod human_tests {
    use super::*;

    #[test]
    fn durations_read_in_whole_units_a_person_uses() {
        let h = |us: u64| human_duration(Duration::from_micros(us));
        assert_eq!(h(850), "850 µs");
        assert_eq!(h(235_660), "235 ms");
        assert_eq!(h(1_500_000), "1.5 s");
        assert_eq!(h(12_440_000), "12.4 s");
        assert_eq!(h(185_000_000), "3 min 5 s");
    }
}
