//! Least-privilege RBAC for a config: `list` and `watch` on the resources the informers read,
//! and the verbs of the plugins' action grants (`patch` for patch; `patch` and `create` for
//! apply, which creates a missing object; `create` for Events, verdict Events included, which
//! need that grant) — through a Role (and RoleBinding) in each namespace when the informer or grant
//! is limited to namespaces, however many, and through a ClusterRole only when it is not (all
//! namespaces, or cluster-scoped kinds); with `policyReports`, a ClusterRole on the reports of
//! the chosen group (get, list, create, patch, delete: a report goes wherever violations are).
//! An informer on several namespaces lists and watches in each of them (`source::multi`), so a
//! Role per namespace is all it needs.

use std::collections::{BTreeMap, BTreeSet};

use kube::core::{ApiResource, GroupVersionKind};

use crate::actions::ActionVerb;
use crate::config::Config;

/// (apiGroup, plural resource).
type Resource = (String, String);

/// Verbs per resource.
type Perms = BTreeMap<Resource, BTreeSet<&'static str>>;

/// Order of verbs in a rule.
const VERB_ORDER: [&str; 7] = [
    "get", "list", "watch", "create", "update", "patch", "delete",
];

fn resource(api_version: &str, kind: &str) -> Resource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    (ar.group, ar.plural)
}

fn rules(perms: &Perms) -> String {
    // One rule per (group, verbs), listing its resources.
    let mut by_rule: BTreeMap<(&str, Vec<&str>), Vec<&str>> = BTreeMap::new();
    for ((g, r), verbs) in perms {
        let verbs: Vec<&str> = VERB_ORDER
            .iter()
            .copied()
            .filter(|v| verbs.contains(v))
            .collect();
        by_rule.entry((g, verbs)).or_default().push(r);
    }
    let mut out = String::from("rules:\n");
    for ((g, verbs), rs) in by_rule {
        out.push_str(&format!(
            "  - apiGroups: [\"{g}\"]\n    resources: [{}]\n    verbs: [{}]\n",
            rs.iter()
                .map(|r| format!("\"{r}\""))
                .collect::<Vec<_>>()
                .join(", "),
            verbs.join(", ")
        ));
    }
    out
}

/// Where permissions are granted: cluster-wide, or per namespace.
#[derive(Default)]
struct Scopes {
    cluster: Perms,
    per_ns: BTreeMap<String, Perms>,
}

impl Scopes {
    fn grant(&mut self, namespaces: Option<&[String]>, r: &Resource, verbs: &[&'static str]) {
        let add = |perms: &mut Perms| {
            perms
                .entry(r.clone())
                .or_default()
                .extend(verbs.iter().copied())
        };
        match namespaces {
            None => add(&mut self.cluster),
            Some(list) => {
                for ns in list {
                    add(self.per_ns.entry(ns.clone()).or_default());
                }
            }
        }
    }
}

/// With `customResources.enabled`: list and watch on the `WispPlugin`s of its namespaces (a
/// Role in each) and the `ClusterWispPlugin`s, `patch` on their status (server-side apply), and
/// the verbs of `allowedGrants` (what a custom resource may be granted, no more). Returns a
/// comment for the header: the kinds custom resources' informers watch are theirs to name.
fn custom_resources(config: &Config, scopes: &mut Scopes) -> String {
    let Some(c) = config.custom_resources.as_ref().filter(|c| c.enabled) else {
        return String::new();
    };
    let group = crate::config::custom::GROUP.to_owned();
    for (_, plural, namespaced) in crate::config::custom::KINDS {
        if !namespaced && !c.cluster {
            continue;
        }
        let ns = c.namespaces.as_deref().filter(|_| namespaced);
        scopes.grant(ns, &(group.clone(), plural.to_owned()), &["list", "watch"]);
        scopes.grant(ns, &(group.clone(), format!("{plural}/status")), &["patch"]);
    }
    for g in &c.allowed_grants {
        let r = resource(&g.api_version, &g.kind);
        for v in &g.verbs {
            scopes.grant(g.namespaces.as_deref(), &r, action_verbs(*v));
        }
    }
    "# customResources: the kinds the custom resources' own informers watch are not known here: \
     add list and watch on them.\n"
        .into()
}

/// The RBAC verbs an action verb needs.
fn action_verbs(v: ActionVerb) -> &'static [&'static str] {
    match v {
        ActionVerb::Patch => &["patch"],
        ActionVerb::Apply => &["patch", "create"],
        ActionVerb::Create => &["create"],
    }
}

/// The ServiceAccount, roles and bindings for `config`, as multi-document YAML.
pub fn generate(config: &Config, name: &str, namespace: &str) -> String {
    let mut scopes = Scopes::default();
    for inf in &config.informers {
        let r = resource(&inf.api_version, &inf.kind);
        // Each namespace is listed and watched on its own: a Role in each.
        scopes.grant(inf.namespaces.as_deref(), &r, &["list", "watch"]);
    }
    for p in &config.plugins {
        for g in &p.actions.grants {
            let r = resource(&g.api_version, &g.kind);
            for v in &g.verbs {
                scopes.grant(g.namespaces.as_deref(), &r, action_verbs(*v));
            }
        }
    }
    // Replicas read, create and renew their Lease where they run (unless the config names
    // another namespace); shard members also list the group's Leases and delete their own when
    // they stop.
    if let Some(sh) = &config.sharding {
        let ns = sh
            .lease_namespace
            .clone()
            .unwrap_or_else(|| namespace.to_owned());
        let verbs: &[&str] = match sh.mode {
            // `watch`: a standby sees the Lease released at once (scale::lease).
            crate::config::ShardingMode::Leader => &["get", "watch", "create", "update"],
            crate::config::ShardingMode::Shards => &["get", "list", "create", "update", "delete"],
        };
        scopes.grant(
            Some(&[ns]),
            &("coordination.k8s.io".to_owned(), "leases".to_owned()),
            verbs,
        );
    }
    // Policy reports: in any namespace with violations, and the cluster report.
    if let Some(pr) = &config.policy_reports {
        let g = pr.api_group;
        for namespaced in [true, false] {
            scopes.grant(
                None,
                &(g.group().to_owned(), g.plural(namespaced).to_owned()),
                &["get", "list", "create", "patch", "delete"],
            );
        }
    }
    let custom = custom_resources(config, &mut scopes);
    let mut docs = vec![format!(
        "# Generated by `wisp rbac` from {}: list and watch for the informers, and the plugins' granted actions{}.\n{custom}apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {name}\n  namespace: {namespace}\n",
        config.file,
        match (config.sharding.is_some(), config.policy_reports.is_some()) {
            (true, true) => ", the replicas' Lease and the policy reports",
            (true, false) => ", and the replicas' Lease",
            (false, true) => ", and the policy reports",
            (false, false) => "",
        }
    )];
    let subject = format!(
        "subjects:\n  - kind: ServiceAccount\n    name: {name}\n    namespace: {namespace}\n"
    );
    if !scopes.cluster.is_empty() {
        docs.push(format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {name}\n{}", rules(&scopes.cluster)));
        docs.push(format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {name}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: {name}\n{subject}"
        ));
    }
    for (ns, rs) in &scopes.per_ns {
        docs.push(format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: {name}\n  namespace: {ns}\n{}", rules(rs)));
        docs.push(format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: {name}\n  namespace: {ns}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: {name}\n{subject}"
        ));
    }
    docs.join("---\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_wide_informers_get_a_cluster_role_and_namespaced_ones_get_roles() {
        let d = tempfile::tempdir().unwrap();
        let cfg = Config::parse(
            "source: kube\ninformers:\n  - {name: pods, apiVersion: v1, kind: Pod}\n  - {name: deploys, apiVersion: apps/v1, kind: Deployment, namespaces: [shop]}\n  - {name: jobs, apiVersion: batch/v1, kind: Job, namespaces: [shop, ops]}\n  - {name: ingresses, apiVersion: networking.k8s.io/v1, kind: Ingress}\n",
            "wisp.yaml",
            d.path(),
        )
        .unwrap();
        let y = generate(&cfg, "wisp", "wisp-system");
        assert!(y.contains("kind: ClusterRole\n"));
        assert!(
            y.contains(
                "  - apiGroups: [\"\"]\n    resources: [\"pods\"]\n    verbs: [list, watch]\n"
            ),
            "{y}"
        );
        assert!(
            y.contains("  - apiGroups: [\"networking.k8s.io\"]\n    resources: [\"ingresses\"]\n"),
            "{y}"
        );
        assert!(y.contains("kind: Role\nmetadata:\n  name: wisp\n  namespace: shop\nrules:\n  - apiGroups: [\"apps\"]\n    resources: [\"deployments\"]"), "{y}");
        assert!(
            !y.contains("get") && !y.contains("create") && !y.contains("\"*\""),
            "only list and watch"
        );
        for doc in y.split("---\n") {
            let v: serde_json::Value = wisp_kinds::yaml::from_str(doc).unwrap();
            assert!(v.get("kind").is_some());
        }
    }

    #[test]
    fn an_informer_on_two_namespaces_gets_a_role_in_each_and_no_cluster_role() {
        let d = tempfile::tempdir().unwrap();
        let cfg = Config::parse(
            "source: kube\ninformers:\n  - {name: secrets, apiVersion: v1, kind: Secret, namespaces: [team-a, team-b]}\n",
            "wisp.yaml",
            d.path(),
        )
        .unwrap();
        let y = generate(&cfg, "wisp", "wisp-system");
        assert!(!y.contains("kind: ClusterRole"), "{y}");
        for ns in ["team-a", "team-b"] {
            let role = y
                .split("---\n")
                .find(|doc| {
                    doc.contains("\nkind: Role\n") && doc.contains(&format!("namespace: {ns}\n"))
                })
                .unwrap_or_else(|| panic!("no Role in {ns}: {y}"));
            assert!(
                role.contains("resources: [\"secrets\"]\n    verbs: [list, watch]\n"),
                "{role}"
            );
            assert!(
                y.split("---\n")
                    .any(|doc| doc.contains("kind: RoleBinding\n")
                        && doc.contains(&format!("namespace: {ns}\n"))),
                "no RoleBinding in {ns}: {y}"
            );
        }
        assert_eq!(y.matches("\nkind: Role\n").count(), 2, "{y}");
    }

    #[test]
    fn policy_reports_get_a_cluster_role_on_the_reports_of_their_group() {
        let generated = |reports: &str| {
            let c = Config::parse(
                &format!("source: kube\ninformers:\n  - {{name: pods, apiVersion: v1, kind: Pod, namespaces: [shop]}}\n{reports}"),
                "wisp.yaml",
                std::path::Path::new("."),
            )
            .unwrap();
            generate(&c, "wisp", "ops")
        };
        let y = generated("");
        assert!(
            !y.contains("reports") && !y.contains("kind: ClusterRole"),
            "{y}"
        );
        let cluster_rule = |group: &str, resources: &str| {
            format!(
                "kind: ClusterRole\nmetadata:\n  name: wisp\nrules:\n  - apiGroups: [\"{group}\"]\n    resources: [{resources}]\n    verbs: [get, list, create, patch, delete]\n"
            )
        };
        let y = generated("policyReports: {}\n");
        assert!(
            y.contains(&cluster_rule(
                "openreports.io",
                "\"clusterreports\", \"reports\""
            )),
            "{y}"
        );
        assert!(y.contains("kind: ClusterRoleBinding\n"), "{y}");
        let y = generated("policyReports: {apiGroup: wgpolicyk8s.io}\n");
        assert!(
            y.contains(&cluster_rule(
                "wgpolicyk8s.io",
                "\"clusterpolicyreports\", \"policyreports\""
            )),
            "{y}"
        );
        assert!(!y.contains("openreports.io"), "{y}");
    }

    #[test]
    fn replicas_may_read_create_and_renew_leases_in_their_namespace() {
        let role = |mode: &str| {
            let c = Config::parse(
                &format!("source: kube\ninformers:\n  - {{name: pods, apiVersion: v1, kind: Pod}}\nsharding: {{mode: {mode}, identity: r1}}\n"),
                "wisp.yaml",
                std::path::Path::new("."),
            )
            .unwrap();
            generate(&c, "wisp", "ops")
        };
        let lease_rule = |verbs: &str| {
            format!(
                "kind: Role\nmetadata:\n  name: wisp\n  namespace: ops\nrules:\n  - apiGroups: [\"coordination.k8s.io\"]\n    resources: [\"leases\"]\n    verbs: [{verbs}]\n"
            )
        };
        let out = role("leader");
        assert!(
            out.contains(&lease_rule("get, watch, create, update")),
            "{out}"
        );
        // Members also list the group's Leases and delete their own when they stop.
        let out = role("shards");
        assert!(
            out.contains(&lease_rule("get, list, create, update, delete")),
            "{out}"
        );
    }

    #[test]
    fn action_grants_and_verdict_events_add_their_verbs_in_their_scope() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("p.wasm"), b"").unwrap();
        let cfg = Config::parse(
            "source: kube\ninformers:\n  - {name: pods, apiVersion: v1, kind: Pod, namespaces: [shop]}\n  - {name: nss, apiVersion: v1, kind: Namespace}\nplugins:\n  - name: labeler\n    module: p.wasm\n    informers: [pods]\n    verdicts: { events: true }\n    actions:\n      grants:\n        - {verbs: [patch], apiVersion: v1, kind: Pod, namespaces: [shop]}\n        - {verbs: [create], apiVersion: v1, kind: Event, namespaces: [shop]}\n        - {verbs: [apply], apiVersion: v1, kind: ConfigMap}\n",
            "wisp.yaml",
            d.path(),
        )
        .unwrap();
        let y = generate(&cfg, "wisp", "wisp-system");
        let role = y
            .split("---\n")
            .find(|doc| doc.contains("kind: Role\n"))
            .unwrap();
        assert!(role.contains("namespace: shop"), "{role}");
        assert!(
            role.contains("resources: [\"events\"]\n    verbs: [create]\n"),
            "verdict Events as the plugin's Event grant gives them: {role}"
        );
        assert!(
            role.contains("resources: [\"pods\"]\n    verbs: [list, watch, patch]\n"),
            "{role}"
        );
        let cluster = y
            .split("---\n")
            .find(|doc| doc.contains("kind: ClusterRole\n"))
            .unwrap();
        assert!(
            cluster.contains("resources: [\"configmaps\"]\n    verbs: [create, patch]\n"),
            "apply may create: {cluster}"
        );
        assert!(
            cluster.contains("resources: [\"namespaces\"]\n    verbs: [list, watch]\n"),
            "{cluster}"
        );
        assert!(
            !cluster.contains("pods"),
            "pods are granted in shop only: {cluster}"
        );
    }

    #[test]
    fn custom_resources_may_be_read_their_status_written_and_the_allowed_grants_used() {
        let d = tempfile::tempdir().unwrap();
        let cfg = Config::parse(
            "source: kube\ninformers:\n  - {name: ns, apiVersion: v1, kind: Namespace}\n\
             customResources:\n  enabled: true\n  namespaces: [team-a]\n  \
             allowedGrants: [{verbs: [apply], apiVersion: v1, kind: ConfigMap, namespaces: [team-a]}]\n",
            "wisp.yaml",
            d.path(),
        )
        .unwrap();
        let y = generate(&cfg, "wisp", "wisp-system");
        let role = y
            .split("---\n")
            .find(|doc| doc.contains("\nkind: Role\n") && doc.contains("namespace: team-a\n"))
            .unwrap_or_else(|| panic!("no Role in team-a: {y}"));
        assert!(
            role.contains("resources: [\"configmaps\"]\n    verbs: [create, patch]\n"),
            "{role}"
        );
        assert!(
            role.contains("  - apiGroups: [\"wisp.io\"]\n    resources: [\"wispplugins\"]\n    verbs: [list, watch]\n"),
            "{role}"
        );
        assert!(
            role.contains("resources: [\"wispplugins/status\"]\n    verbs: [patch]\n"),
            "{role}"
        );
        assert!(
            y.contains("resources: [\"clusterwispplugins/status\"]\n    verbs: [patch]\n"),
            "{y}"
        );
        assert!(y.contains("# customResources: the kinds"), "{y}");
    }
}
