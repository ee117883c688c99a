//! What a plugin may do to the cluster: its grants, rate limit, retries and queue.

use std::time::Duration;

use serde::Deserialize;

use super::target::Target;

/// A verb a plugin may be granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionVerb {
    /// Merge patch of labels and annotations.
    Patch,
    /// Server-side apply.
    Apply,
    /// Create (Events).
    Create,
}

impl ActionVerb {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionVerb::Patch => "patch",
            ActionVerb::Apply => "apply",
            ActionVerb::Create => "create",
        }
    }
}

/// One grant: these verbs on this kind, in these namespaces (`None`: any, and cluster-scoped).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ActionGrant {
    /// `patch`, `apply`, `create`.
    pub verbs: Vec<ActionVerb>,
    /// e.g. `v1`, `apps/v1`.
    pub api_version: String,
    /// e.g. `Pod`.
    pub kind: String,
    /// Namespaces; omitted = all namespaces and cluster-scoped objects.
    #[serde(default)]
    pub namespaces: Option<Vec<String>>,
}

impl ActionGrant {
    pub(super) fn allows(&self, verb: ActionVerb, t: &Target) -> bool {
        self.verbs.contains(&verb)
            && self.api_version == t.api_version
            && self.kind == t.kind
            && match (&self.namespaces, &t.namespace) {
                (None, _) => true,
                (Some(list), Some(ns)) => list.iter().any(|n| n == ns),
                (Some(_), None) => false,
            }
    }
}

/// What a plugin may do to the cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct ActionSpec {
    /// Grants; none by default.
    pub grants: Vec<ActionGrant>,
    /// Token bucket refill rate (actions per second).
    pub per_second: f64,
    /// Token bucket size.
    pub burst: u32,
    /// Log and audit, never send.
    pub dry_run: bool,
    /// Further attempts after a retryable failure (conflict, 429, 5xx, unreachable).
    pub retries: u32,
    /// Wait before the first retry, doubled each time (to 30 s at most).
    pub backoff: Duration,
    /// Most actions waiting to be sent.
    pub queue: usize,
}

impl Default for ActionSpec {
    fn default() -> Self {
        Self {
            grants: Vec::new(),
            per_second: 5.0,
            burst: 10,
            dry_run: false,
            retries: 5,
            backoff: Duration::from_millis(200),
            queue: 1000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::test_pod;

    #[test]
    fn grants_match_verb_kind_and_namespace() {
        let g = ActionGrant {
            verbs: vec![ActionVerb::Patch],
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespaces: Some(vec!["a".into()]),
        };
        assert!(g.allows(ActionVerb::Patch, &test_pod(Some("a"))));
        assert!(!g.allows(ActionVerb::Patch, &test_pod(Some("b"))));
        assert!(!g.allows(ActionVerb::Patch, &test_pod(None)));
        assert!(!g.allows(ActionVerb::Apply, &test_pod(Some("a"))));
        let mut cm = test_pod(Some("a"));
        cm.kind = "ConfigMap".into();
        assert!(!g.allows(ActionVerb::Patch, &cm));
        let any = ActionGrant {
            namespaces: None,
            ..g
        };
        assert!(any.allows(ActionVerb::Patch, &test_pod(None)));
    }
}
