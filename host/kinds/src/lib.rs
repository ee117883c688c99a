//! Facts about Kubernetes' kinds, shared by every part of Wisp that names a kind, reads a
//! selector or checks what will be sent to an API server (as kube-core is to kube): the built-in
//! kinds of Kubernetes 1.36 (group, version, kind, plural, scope) and the name rules of each;
//! where a kind lives on an API server ([`api`]); label and field selectors and their parsers
//! ([`selector`]), the field labels each kind supports ([`fields`]), the hash ranges of
//! sharded list and watch ([`shard`]), and YAML read as kubectl reads it ([`yaml`]).
//!
//! Nothing here does I/O or depends on the rest of Wisp. What an API server *does* with an object
//! (decoding, defaulting, validation, conversion) is the emulator's, `wisp-apiserver`
//! (tests/apiserver), which builds on this crate.

pub mod api;
pub mod fields;
pub mod selector;
pub mod shard;
mod table;
pub mod yaml;

pub use table::BUILTINS;

/// One kind served by a Kubernetes API server out of the box.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Builtin {
    /// API group (`""` for the core group).
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    /// The collection's path segment (`deployments`).
    pub plural: &'static str,
    pub namespaced: bool,
}

impl Builtin {
    const fn new(
        group: &'static str,
        version: &'static str,
        kind: &'static str,
        plural: &'static str,
        namespaced: bool,
    ) -> Self {
        Self {
            group,
            version,
            kind,
            plural,
            namespaced,
        }
    }

    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// The built-in kind `kind` of `group` served at `version`.
pub fn builtin(group: &str, version: &str, kind: &str) -> Option<&'static Builtin> {
    BUILTINS
        .iter()
        .find(|b| b.group == group && b.version == version && b.kind == kind)
}

/// Groups Kubernetes served once and serves no more (`extensions`: its kinds moved to `apps`,
/// `networking.k8s.io` and `policy` by 1.22).
const RETIRED_GROUPS: &[&str] = &["extensions"];

/// Whether `group` is one of Kubernetes' own API groups, served or retired (its kinds are all
/// in [`BUILTINS`], if any).
pub fn is_builtin_group(group: &str) -> bool {
    RETIRED_GROUPS.contains(&group) || BUILTINS.iter().any(|b| b.group == group)
}

/// Whether the built-in kind `kind` of `group` is namespaced (`None`: not a built-in kind).
/// Scope does not change between versions.
pub fn builtin_namespaced(group: &str, kind: &str) -> Option<bool> {
    BUILTINS
        .iter()
        .find(|b| b.group == group && b.kind == kind)
        .map(|b| b.namespaced)
}

/// The apiVersions that serve `kind`: those of `group` if it has any, else of every group
/// (for a kind that moved: `extensions/v1beta1` Ingress is `networking.k8s.io/v1`).
pub fn builtin_api_versions(group: &str, kind: &str) -> Vec<String> {
    let of = |same_group: bool| -> Vec<String> {
        BUILTINS
            .iter()
            .filter(|b| b.kind == kind && (!same_group || b.group == group))
            .map(Builtin::api_version)
            .collect()
    };
    let here = of(true);
    if here.is_empty() { of(false) } else { here }
}

/// The kinds `group`/`version` serves, sorted.
pub fn builtin_kinds(group: &str, version: &str) -> Vec<&'static str> {
    let mut kinds: Vec<&str> = BUILTINS
        .iter()
        .filter(|b| b.group == group && b.version == version)
        .map(|b| b.kind)
        .collect();
    kinds.sort_unstable();
    kinds
}

/// `group` and `version` of an apiVersion (`v1` is the core group).
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

/// How the API server checks the names of a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// An RFC 1123 subdomain (most kinds).
    Subdomain,
    /// An RFC 1123 label (Namespaces).
    Label,
    /// An RFC 1035 label: starts with a letter (Services).
    Dns1035,
    /// Any single URL path segment (RBAC kinds: `system:controller:...`).
    PathSegment,
}

/// The name rule of `kind` in `group`, as the API server's validation picks it.
pub fn name_rule(group: &str, kind: &str) -> NameRule {
    match (group, kind) {
        ("", "Namespace") => NameRule::Label,
        ("", "Service") => NameRule::Dns1035,
        (
            "rbac.authorization.k8s.io",
            "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding",
        ) => NameRule::PathSegment,
        _ => NameRule::Subdomain,
    }
}

impl NameRule {
    /// Whether `name` follows the rule.
    pub fn accepts(self, name: &str) -> bool {
        match self {
            NameRule::Subdomain => is_dns1123_subdomain(name),
            NameRule::Label => is_dns1123_label(name),
            NameRule::Dns1035 => is_dns1035_label(name),
            NameRule::PathSegment => is_path_segment_name(name),
        }
    }

    /// Longest name the rule allows.
    pub fn max_len(self) -> usize {
        match self {
            NameRule::Label | NameRule::Dns1035 => 63,
            NameRule::Subdomain | NameRule::PathSegment => 253,
        }
    }
}

/// An RFC 1123 label: 1 to 63 of `[a-z0-9-]`, alphanumeric at both ends.
pub fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// An RFC 1035 label: an RFC 1123 label that starts with a letter.
pub fn is_dns1035_label(s: &str) -> bool {
    is_dns1123_label(s) && s.as_bytes()[0].is_ascii_lowercase()
}

/// An RFC 1123 subdomain: at most 253 characters, non-empty parts of `[a-z0-9-]` joined by
/// dots, each alphanumeric at both ends (apimachinery puts no 63 limit on a part).
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// A name that is safe as one URL path segment (what the API server requires of every name,
/// and all it requires of some kinds'): not `.` or `..`, no `/` or `%`, and, so no query or
/// fragment can begin in it, no `?`, `#`, space or control character.
pub fn is_path_segment_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s != "."
        && s != ".."
        && !s
            .chars()
            .any(|c| matches!(c, '/' | '%' | '?' | '#' | ' ') || c.is_control())
}

/// The name part of a qualified name, or a label value: 1 to 63 of `[A-Za-z0-9_.-]`,
/// alphanumeric at both ends.
pub fn is_name_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_agrees_with_the_typed_kinds_it_was_read_from() {
        use k8s_openapi::Resource;
        fn check<T: Resource>(namespaced: bool) {
            let b = builtin(T::GROUP, T::VERSION, T::KIND)
                .unwrap_or_else(|| panic!("{} {} missing", T::API_VERSION, T::KIND));
            assert_eq!(b.plural, T::URL_PATH_SEGMENT);
            assert_eq!(b.namespaced, namespaced, "{}", T::KIND);
            assert_eq!(b.api_version(), T::API_VERSION);
        }
        use k8s_openapi::api::{apps, autoscaling, batch, coordination, core, rbac};
        check::<core::v1::Pod>(true);
        check::<core::v1::Namespace>(false);
        check::<core::v1::PersistentVolume>(false);
        check::<apps::v1::Deployment>(true);
        check::<batch::v1::CronJob>(true);
        check::<autoscaling::v1::HorizontalPodAutoscaler>(true);
        check::<autoscaling::v2::HorizontalPodAutoscaler>(true);
        check::<coordination::v1::Lease>(true);
        check::<rbac::v1::ClusterRole>(false);
    }

    #[test]
    fn scope_and_versions_come_from_the_table() {
        assert_eq!(
            builtin_namespaced("certificates.k8s.io", "CertificateSigningRequest"),
            Some(false)
        );
        assert_eq!(builtin_namespaced("", "ConfigMap"), Some(true));
        assert_eq!(builtin_namespaced("example.com", "Widget"), None);
        assert_eq!(
            builtin_api_versions("autoscaling", "HorizontalPodAutoscaler"),
            ["autoscaling/v1", "autoscaling/v2"]
        );
        assert_eq!(
            builtin_api_versions("extensions", "Ingress"),
            ["networking.k8s.io/v1"]
        );
        assert!(is_builtin_group("extensions"));
        assert!(builtin("extensions", "v1beta1", "Deployment").is_none());
        assert!(is_builtin_group("apps") && !is_builtin_group("example.com"));
        assert!(builtin_kinds("", "v1").contains(&"Pod"));
    }

    #[test]
    fn names_follow_their_kinds_rule() {
        assert!(name_rule("", "Service").accepts("web"));
        assert!(!name_rule("", "Service").accepts("1web"));
        assert!(!name_rule("", "Namespace").accepts("a.b"));
        assert!(name_rule("", "ConfigMap").accepts("a.b"));
        assert!(
            name_rule("rbac.authorization.k8s.io", "ClusterRole").accepts("system:controller:x")
        );
        assert!(!name_rule("", "ConfigMap").accepts("system:x"));
        // A subdomain part may be longer than 63 characters.
        assert!(is_dns1123_subdomain(&"a".repeat(100)));
        assert!(!is_path_segment_name(".."));
    }
}
