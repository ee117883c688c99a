//! The object an action is about.

/// The object an action is about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// e.g. `v1`.
    pub api_version: String,
    /// e.g. `Pod`.
    pub kind: String,
    /// None for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}
