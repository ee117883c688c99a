//! Naming: which collection an object or a URL path belongs to, and the small metadata helpers
//! (plural names, list kinds, timestamps, uids) the store stamps onto objects.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// One collection of the API: everything after `/api/v1/` or `/apis/{group}/{version}/`.
///
/// Any group, version and plural is accepted; the store creates collections on first use.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ResourceKey {
    /// API group, empty for the core group.
    pub group: String,
    /// API version inside the group, e.g. `v1`.
    pub version: String,
    /// Lower-case plural resource name, as it appears in URL paths.
    pub plural: String,
}

impl ResourceKey {
    /// The collection an object of this `apiVersion` and `kind` lives in: a built-in kind's
    /// own, any other named the way `kube::core::ApiResource::from_gvk` names it.
    pub fn for_kind(api_version: &str, kind: &str) -> Self {
        let (group, version) = split_api_version(api_version);
        Self {
            group: group.to_string(),
            version: version.to_string(),
            plural: wisp_kinds::builtin(group, version, kind).map_or_else(
                || to_plural(&kind.to_ascii_lowercase()),
                |b| b.plural.into(),
            ),
        }
    }

    /// `v1` for the core group, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Best guess at the kind when no object of this collection has been seen yet.
    pub fn guess_kind(&self) -> String {
        if let Some(b) = wisp_kinds::BUILTINS
            .iter()
            .find(|b| b.group == self.group && b.plural == self.plural)
        {
            return b.kind.to_string();
        }
        let singular = if let Some(stem) = self.plural.strip_suffix("ies") {
            format!("{stem}y")
        } else if ["sses", "uses", "xes", "zes", "ches", "shes"]
            .iter()
            .any(|suffix| self.plural.ends_with(suffix))
        {
            self.plural[..self.plural.len() - 2].to_string()
        } else if let Some(stem) = self.plural.strip_suffix('s') {
            stem.to_string()
        } else {
            self.plural.clone()
        };
        let mut chars = singular.chars();
        match chars.next() {
            Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
            None => String::new(),
        }
    }
}

/// Splits `apps/v1` into (`apps`, `v1`) and `v1` into (``, `v1`).
pub(crate) fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    }
}

/// The pluraliser of kube-core's `ApiResource::from_gvk` (`discovery/mod.rs`), copied so that
/// both sides of the wire agree on every collection name.
pub(crate) fn to_plural(word: &str) -> String {
    match word {
        "endpoints" | "endpointslices" => return word.to_owned(),
        "nodemetrics" => return "nodes".to_owned(),
        "podmetrics" => return "pods".to_owned(),
        _ => {}
    }
    if word.ends_with('s')
        || word.ends_with('x')
        || word.ends_with('z')
        || word.ends_with("ch")
        || word.ends_with("sh")
    {
        return format!("{word}es");
    }
    if let Some(stem) = word.strip_suffix('y')
        && let Some(c) = stem.chars().last()
        && !matches!(c, 'a' | 'e' | 'i' | 'o' | 'u')
    {
        return format!("{stem}ies");
    }
    format!("{word}s")
}

/// The current UTC time as an RFC 3339 timestamp with second precision, like Kubernetes writes.
pub(crate) fn now_rfc3339() -> String {
    rfc3339_in(0)
}

/// The time `seconds` from now (before it when negative), as `now_rfc3339` writes it.
pub(crate) fn rfc3339_in(seconds: i64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let secs = now.saturating_add_signed(seconds);
    rfc3339(i64::try_from(secs).unwrap_or(i64::MAX), None)
}

/// Seconds since the epoch as RFC 3339 in UTC, with six digits of microseconds when given
/// (`metav1.MicroTime`'s form; `metav1.Time` has none). Out of jiff's range: the epoch.
pub(crate) fn rfc3339(secs: i64, micros: Option<u32>) -> String {
    use k8s_openapi::jiff::Timestamp;
    let nanos = micros.map_or(0, |m| (m.min(999_999) * 1_000) as i32);
    let t = Timestamp::new(secs, nanos).unwrap_or(Timestamp::UNIX_EPOCH);
    match micros {
        Some(_) => format!("{t:.6}"),
        None => format!("{t:.0}"),
    }
}

/// A process-unique, UUID-shaped uid.
pub(crate) fn new_uid() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{seed:08x}-{:04x}-4{:03x}-8000-{:012x}",
        (n >> 48) & 0xffff,
        (n >> 36) & 0xfff,
        n & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_match_kube_from_gvk() {
        for (kind, plural) in [
            ("Pod", "pods"),
            ("ConfigMap", "configmaps"),
            ("Ingress", "ingresses"),
            ("NetworkPolicy", "networkpolicies"),
            ("Endpoints", "endpoints"),
            ("Gateway", "gateways"),
        ] {
            assert_eq!(to_plural(&kind.to_ascii_lowercase()), plural);
        }
    }

    #[test]
    fn kind_guess_inverts_common_plurals() {
        for (av, kind) in [
            ("v1", "Pod"),
            ("v1", "ConfigMap"),
            ("apps/v1", "Deployment"),
            ("networking.k8s.io/v1", "NetworkPolicy"),
            ("v1", "Namespace"),
            ("example.com/v1", "Widget"),
            ("v1", "Service"),
            ("example.com/v1", "Box"),
        ] {
            assert_eq!(ResourceKey::for_kind(av, kind).guess_kind(), kind);
        }
    }

    #[test]
    fn times_are_written_as_kubernetes_writes_them() {
        assert_eq!(rfc3339(0, None), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_704_067_200, None), "2024-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_709_164_800 + 3_661, None), "2024-02-29T01:01:01Z");
        assert_eq!(
            rfc3339(1_709_164_800, Some(0)),
            "2024-02-29T00:00:00.000000Z"
        );
        assert_eq!(
            rfc3339(1_709_164_800, Some(1_500)),
            "2024-02-29T00:00:00.001500Z"
        );
    }
}
