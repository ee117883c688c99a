//! The `dir:` source against real directories: edits, deletions, links, sizes, YAML as kubectl
//! reads it, and what an API server would refuse.

use super::parse::*;
use super::scan::*;
use super::*;

/// Makes `f` look unchanged for longer than SETTLE.
fn quiet(f: &Path) {
    std::fs::File::options()
        .write(true)
        .open(f)
        .unwrap()
        .set_modified(SystemTime::now() - 2 * SETTLE)
        .unwrap();
}

fn pods_filter() -> ObjectFilter {
    ObjectFilter {
        api_version: "v1".into(),
        kind: "Pod".into(),
        ..Default::default()
    }
}

#[test]
fn files_define_objects_and_edits_and_deletions_change_them_with_increasing_versions() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("a.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c, image: nginx}]}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n",
    )
    .unwrap();
    let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
    let pods = c.source(pods_filter());
    let objs = pods.objects();
    assert_eq!(
        objs.keys().collect::<Vec<_>>(),
        ["default/web"],
        "namespaced kinds default to `default`"
    );
    let rv1 = objs["default/web"].resource_version().to_owned();

    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(
        d.path().join("a.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, labels: {v: '2'}}\nspec: {containers: [{name: c, image: nginx}]}\n",
    )
    .unwrap();
    quiet(&d.path().join("a.yaml"));
    c.rescan();
    let web = pods.objects()["default/web"].clone();
    assert_eq!(web.meta().label("v"), Some("2"));
    assert!(web.resource_version().parse::<u64>().unwrap() > rv1.parse::<u64>().unwrap());

    std::fs::write(
        d.path().join("bad.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: [oops\n",
    )
    .unwrap();
    c.rescan();
    assert_eq!(c.errors().len(), 1, "a broken file is reported");
    assert_eq!(pods.objects().len(), 1, "and changes nothing");

    std::fs::remove_file(d.path().join("a.yaml")).unwrap();
    c.rescan();
    assert!(pods.objects().is_empty());
}

/// An object whose labels stop matching an informer's selector leaves that informer, as a
/// watch with a selector gets DELETED from a real server; matching again adds it back.
#[test]
fn an_object_that_stops_matching_a_selector_leaves_the_informer() {
    let d = tempfile::tempdir().unwrap();
    let write = |team: &str| {
        std::fs::write(
            d.path().join("a.yaml"),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c, labels: {{team: {team}}}}}\n"
            ),
        )
        .unwrap();
        quiet(&d.path().join("a.yaml"));
    };
    write("a");
    let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
    let team_a = c.source(ObjectFilter {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        labels: wisp_kinds::selector::LabelSelector::parse("team=a").unwrap(),
        ..Default::default()
    });
    assert_eq!(team_a.objects().keys().collect::<Vec<_>>(), ["default/c"]);
    let rv1: u64 = team_a.objects()["default/c"]
        .resource_version()
        .parse()
        .unwrap();

    write("b");
    c.rescan();
    assert!(
        team_a.objects().is_empty(),
        "relabelled team=b, it left the team=a informer"
    );

    write("a");
    c.rescan();
    let back: u64 = team_a.objects()["default/c"]
        .resource_version()
        .parse()
        .unwrap();
    assert!(
        back > rv1 + 1,
        "back at a newer version: {back} after {rv1}"
    );
}

#[test]
fn one_uid_and_one_resource_version_sequence_for_the_whole_directory() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("a.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, labels: {team: a}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: c}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: c}\nspec: {containers: [{name: c, image: nginx}]}\n",
    )
    .unwrap();
    let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
    let of = |kind: &str, labels: Option<&str>| {
        c.source(ObjectFilter {
            api_version: "v1".into(),
            kind: kind.into(),
            labels: labels
                .map(|l| wisp_kinds::selector::LabelSelector::parse(l).unwrap())
                .unwrap_or_default(),
            ..Default::default()
        })
    };
    let (all, team, secrets, pods) = (
        of("ConfigMap", None),
        of("ConfigMap", Some("team=a")),
        of("Secret", None),
        of("Pod", None),
    );
    let id = |s: &MemorySource| {
        let o = s.objects()["default/c"].clone();
        (o.meta().uid().to_owned(), o.resource_version().to_owned())
    };
    assert_eq!(
        id(&all),
        id(&team),
        "one object, one uid and resourceVersion"
    );
    let uids: std::collections::BTreeSet<String> =
        [&all, &secrets, &pods].iter().map(|s| id(s).0).collect();
    assert_eq!(
        uids.len(),
        3,
        "objects of different kinds have their own uids"
    );
    let rvs: std::collections::BTreeSet<String> =
        [&all, &secrets, &pods].iter().map(|s| id(s).1).collect();
    assert_eq!(rvs.len(), 3, "each object its own place in one sequence");

    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(
        d.path().join("a.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, labels: {team: a, v: '2'}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: c}\n",
    )
    .unwrap();
    quiet(&d.path().join("a.yaml"));
    c.rescan();
    assert_eq!(id(&all), id(&team));
    let (uid, rv) = id(&all);
    assert_eq!(uid, id(&team).0, "an edit keeps the uid");
    let pod_gone_rv = pods.resource_version();
    assert!(
        rv.parse::<u64>().unwrap() < pod_gone_rv,
        "the deletion comes after the edit"
    );
    assert!(pods.objects().is_empty());
}

#[test]
fn a_bad_document_skips_only_itself_and_a_bom_generate_name_and_a_list_kind_are_read() {
    let text = "\u{feff}apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\njust a string\n---\napiVersion: v1\nkind: Pod\nmetadata: {generateName: web-}\n---\napiVersion: v1\nkind: Pod\nmetadata: {labels: {a: b}}\n---\napiVersion: example.com/v1\nkind: WidgetList\nmetadata: {name: w}\n";
    let m = parse_manifests(text).unwrap();
    let names: Vec<&str> = m
        .objects
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 3, "{names:?} {:?}", m.skipped);
    assert_eq!(names[0], "a");
    assert!(
        names[1].starts_with("web-") && names[1].len() == 9,
        "{names:?}"
    );
    assert_eq!(
        names[2], "w",
        "a kind ending in List without items is an object"
    );
    assert_eq!(m.skipped.len(), 2, "{:?}", m.skipped);
    assert!(m.skipped[0].starts_with("document 2: not an object"));
    assert!(m.skipped[1].starts_with("document 4: an object needs"));
    assert_eq!(
        parse_manifests(text).unwrap(),
        m,
        "generated names are stable"
    );
}

/// kubectl reads YAML with go-yaml v2 (YAML 1.1): the manifests written for it mean the
/// same here.
#[test]
fn yaml_is_read_as_kubectl_reads_it() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {quoted: 'yes', octal: '0644'}}\nspec:\n  hostNetwork: yes\n  enableServiceLinks: off\n  defaults: &limits {cpu: 100m, memory: 64Mi}\n  volumes:\n  - name: v\n    secret: {secretName: s, defaultMode: 0644}\n  containers:\n  - name: c\n    image: nginx\n    resources:\n      limits:\n        <<: *limits\n        memory: 128Mi\n    ports: [{containerPort: 0x1F90}]\n";
    let m = parse_manifests(text).unwrap();
    assert!(m.skipped.is_empty(), "{:?}", m.skipped);
    let p = &m.objects[0];
    assert_eq!(
        p["spec"]["volumes"][0]["secret"]["defaultMode"], 420,
        "octal"
    );
    assert_eq!(p["spec"]["hostNetwork"], true);
    assert_eq!(p["spec"]["enableServiceLinks"], false);
    assert_eq!(
        p["spec"]["containers"][0]["resources"]["limits"],
        serde_json::json!({"cpu": "100m", "memory": "128Mi"}),
        "a merge key merges; the mapping's own keys win"
    );
    assert_eq!(
        p["spec"]["containers"][0]["ports"][0]["containerPort"],
        8080
    );
    assert_eq!(
        p["metadata"]["labels"]["quoted"], "yes",
        "quoted stays a string"
    );
    assert_eq!(p["metadata"]["labels"]["octal"], "0644");
}

/// kubectl reads a mapping with a duplicate key, the last one winning whole (checked with
/// kubectl 1.32: `kubectl label --local -o json -f` of this file).
#[test]
fn a_duplicate_key_is_read_with_the_last_one_winning_as_kubectl_does() {
    let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dup\n  labels:\n    a: one\n    a: two\ndata:\n  x: '1'\ndata:\n  z: '2'\n";
    let m = parse_manifests(text).unwrap();
    assert!(m.skipped.is_empty(), "{:?}", m.skipped);
    assert_eq!(
        m.objects,
        [serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "dup", "labels": {"a": "two"}}, "data": {"z": "2"}})]
    );
}

/// A file of 20,000 documents (past the YAML reader's default limits) is read whole.
#[test]
fn a_file_of_many_documents_is_read_whole() {
    let text: String = (0..20_000)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}}}\ndata: {{k: v}}\n---\n"
            )
        })
        .collect();
    let began = std::time::Instant::now();
    let m = parse_manifests(&text).unwrap();
    assert_eq!(m.objects.len(), 20_000);
    println!("20,000 documents read in {:?}", began.elapsed());
}

/// An API server serves one object in every version of its group and kind: an informer on
/// autoscaling/v2 sees an HPA written as autoscaling/v1, converted to autoscaling/v2.
#[test]
fn an_informer_on_autoscaling_v2_sees_an_hpa_written_as_v1_converted() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("hpa.yaml"),
        "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata: {name: web, namespace: shop}\nspec: {maxReplicas: 3, targetCPUUtilizationPercentage: 60, scaleTargetRef: {kind: Deployment, name: web}}\n---\napiVersion: v1\nkind: HorizontalPodAutoscaler\nmetadata: {name: not-autoscaling, namespace: shop}\n",
    )
    .unwrap();
    let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
    let hpas = c.source(ObjectFilter {
        api_version: "autoscaling/v2".into(),
        kind: "HorizontalPodAutoscaler".into(),
        ..Default::default()
    });
    let objs = hpas.objects();
    assert_eq!(
        objs.keys().collect::<Vec<_>>(),
        ["shop/web"],
        "another group is not"
    );
    let web = objs["shop/web"].to_value();
    assert_eq!(web["apiVersion"], "autoscaling/v2");
    assert_eq!(
        web["spec"]["metrics"],
        serde_json::json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}}])
    );
    assert!(web["spec"].get("targetCPUUtilizationPercentage").is_none());
    assert_eq!(web["spec"]["minReplicas"], 1, "defaulted");
    let v1 = c.source(ObjectFilter {
        api_version: "autoscaling/v1".into(),
        kind: "HorizontalPodAutoscaler".into(),
        ..Default::default()
    });
    assert_eq!(
        v1.objects()["shop/web"].to_value()["spec"]["targetCPUUtilizationPercentage"],
        60,
        "and as written to an informer on the version it is written in"
    );
}

/// A kind whose versions the dir source does not convert is refused to an informer on
/// another version, and reported naming the version to write it in.
#[test]
fn an_object_in_a_version_that_does_not_convert_is_refused_and_reported() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("ip.yaml"),
        "apiVersion: networking.k8s.io/v1beta1\nkind: IPAddress\nmetadata: {name: 10.0.0.1}\nspec: {parentRef: {resource: services, namespace: default, name: web}}\n",
    )
    .unwrap();
    let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
    assert!(c.errors().is_empty(), "{:?}", c.errors());
    let ips = c.source(ObjectFilter {
        api_version: "networking.k8s.io/v1".into(),
        kind: "IPAddress".into(),
        ..Default::default()
    });
    assert!(ips.objects().is_empty());
    let e = &c.errors()[&d.path().join("ip.yaml")];
    assert!(
        e.contains("IPAddress 10.0.0.1 is written as networking.k8s.io/v1beta1; the dir source does not convert IPAddress to networking.k8s.io/v1: write it as networking.k8s.io/v1"),
        "{e}"
    );
}

/// The demo's pods (deploy/demo/cluster) get the API server's defaults: a field selector
/// on `status.phase=Pending` matches every one of them, as on a cluster that just created
/// them.
#[test]
fn the_demo_pods_are_defaulted_and_match_status_phase_pending() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/demo/cluster");
    let c = DirCluster::open(&demo, DEFAULT_MAX_FILE_SIZE).unwrap();
    let all = c.source(pods_filter()).objects();
    let pending = c
        .source(ObjectFilter {
            fields: wisp_kinds::selector::FieldSelector::parse("status.phase=Pending").unwrap(),
            ..pods_filter()
        })
        .objects();
    assert_eq!(all.len(), 4);
    assert_eq!(
        pending.keys().collect::<Vec<_>>(),
        all.keys().collect::<Vec<_>>()
    );
    let db = pending["shop/db-0"].to_value();
    assert_eq!(db["spec"]["dnsPolicy"], "ClusterFirst");
    assert_eq!(
        db["spec"]["containers"][0]["imagePullPolicy"], "Always",
        "postgres:latest"
    );
}

/// Decoded as the API server decodes: a value of the wrong type refuses the object and is
/// reported with the file, the object and the field; an unknown field is dropped and
/// reported (fieldValidation=Warn); the rest of the file counts.
#[test]
fn type_errors_refuse_an_object_and_unknown_fields_are_dropped_and_reported() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("a.yaml"),
        concat!(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: numbered, labels: {version: 2}}\nspec: {containers: [{name: c, image: nginx}]}\n---\n",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: iscsi}\nspec:\n  containers: [{name: c, image: nginx}]\n  volumes: [{name: d, iscsi: {targetPortal: '10.0.0.1:3260', iqn: iqn.x, lun: <ADD LUN ID Here>}}]\n---\n",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: typo}\nspec: {containers: [{name: c, image: nginx, protectionDoamin: x}]}\n",
        ),
    )
    .unwrap();
    let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
    let pods = c.source(pods_filter()).objects();
    assert_eq!(pods.keys().collect::<Vec<_>>(), ["default/typo"]);
    assert!(
        pods["default/typo"].to_value()["spec"]["containers"][0]
            .get("protectionDoamin")
            .is_none(),
        "dropped"
    );
    let e = &c.errors()[&d.path().join("a.yaml")];
    for part in [
        "Pod default/numbered is refused: Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal number into field metadata.labels.version of type string",
        "Pod default/iscsi is refused: Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal string into field spec.volumes[0].iscsi.lun of type int32",
        "Pod default/typo: unknown field \"spec.containers[0].protectionDoamin\" (dropped, as an API server does with fieldValidation=Warn)",
    ] {
        assert!(e.contains(part), "{part} not in {e}");
    }
}

/// One object per group, kind, namespace and name, whichever version it is written in:
/// a later definition replaces an earlier one (as `kubectl apply -f` of the directory
/// would) and is reported.
#[test]
fn an_object_written_twice_is_one_object_and_reported() {
    let d = tempfile::tempdir().unwrap();
    let hpa = |v: &str, max: u32| {
        format!(
            "apiVersion: autoscaling/{v}\nkind: HorizontalPodAutoscaler\nmetadata: {{name: web, namespace: shop}}\nspec: {{maxReplicas: {max}, scaleTargetRef: {{kind: Deployment, name: web}}}}\n"
        )
    };
    std::fs::write(d.path().join("a.yaml"), hpa("v1", 3)).unwrap();
    std::fs::write(d.path().join("b.yaml"), hpa("v2", 5)).unwrap();
    let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
    let hpas = c.source(ObjectFilter {
        api_version: "autoscaling/v2".into(),
        kind: "HorizontalPodAutoscaler".into(),
        ..Default::default()
    });
    let objs = hpas.objects();
    assert_eq!(objs.keys().collect::<Vec<_>>(), ["shop/web"]);
    assert_eq!(objs["shop/web"].meta().api_version(), "autoscaling/v2");
    // A note, not an error: every object of b.yaml was read.
    assert_eq!(c.errors(), BTreeMap::new());
    let notes = c.notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    let e = &notes[&d.path().join("b.yaml")];
    assert!(
        e.contains("HorizontalPodAutoscaler shop/web is also defined in") && e.contains("a.yaml"),
        "{e}"
    );
}

/// What an API server would refuse is left out and reported, naming the object and why;
/// the rest of the file counts.
#[test]
fn objects_an_api_server_would_refuse_are_left_out_and_reported() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("a.yaml"),
        concat!(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: no-containers}\nspec: {}\n---\n",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bad, labels: {team: 'a b'}}\n---\n",
            "apiVersion: extensions/v1beta1\nkind: Deployment\nmetadata: {name: old}\n---\n",
            "apiVersion: v1\nkind: Podd\nmetadata: {name: typo}\n---\n",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: Web}\nspec: {containers: [{name: c, image: nginx}]}\n---\n",
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n---\n",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: good}\n",
        ),
    )
    .unwrap();
    let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
    let all = |api_version: &str, kind: &str| {
        let mut keys: Vec<String> = c
            .source(ObjectFilter {
                api_version: api_version.into(),
                kind: kind.into(),
                ..Default::default()
            })
            .objects()
            .into_keys()
            .collect();
        keys.sort();
        keys
    };
    assert!(all("v1", "Pod").is_empty());
    assert_eq!(all("v1", "ConfigMap"), ["default/good"]);
    assert!(all("apps/v1", "Deployment").is_empty());
    assert_eq!(
        all("example.com/v1", "Widget"),
        ["default/w"],
        "a custom kind is read as written"
    );
    let e = &c.errors()[&d.path().join("a.yaml")];
    for part in [
        "Pod \"no-containers\" is invalid: spec.containers: Required value",
        "ConfigMap \"bad\" is invalid: metadata.labels: Invalid value: \"a b\"",
        "Kubernetes 1.36 serves Deployment as apps/v1, not as \"extensions/v1beta1\"",
        "Kubernetes 1.36 serves no kind \"Podd\" in v1; it serves: Binding, ComponentStatus, ConfigMap",
        "Pod \"Web\" is invalid: metadata.name: Invalid value: \"Web\": a lowercase RFC 1123 subdomain",
    ] {
        assert!(e.contains(part), "{part} not in {e}");
    }
}

#[test]
fn the_kinds_an_informer_names_are_checked_against_the_directory_cluster() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("crd.yaml"),
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec: {group: example.com, scope: Namespaced, names: {kind: Widget, plural: widgets}, versions: [{name: v1, served: true, storage: true}]}\n",
    )
    .unwrap();
    let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
    assert_eq!(c.check_kind("apps/v1", "Deployment"), Ok(None));
    assert_eq!(
        c.check_kind("autoscaling/v1", "HorizontalPodAutoscaler"),
        Ok(None)
    );
    assert_eq!(c.check_kind("example.com/v1", "Widget"), Ok(None));
    let e = c.check_kind("v1", "Podd").unwrap_err().to_string();
    assert!(
        e.contains("serves no kind \"Podd\" in v1; it serves: "),
        "{e}"
    );
    let e = c
        .check_kind("apps/v2", "Deployment")
        .unwrap_err()
        .to_string();
    assert!(e.contains("serves Deployment as apps/v1"), "{e}");
    let e = c
        .check_kind("example.com/v2", "Widget")
        .unwrap_err()
        .to_string();
    assert!(e.contains("serves versions v1, not \"v2\""), "{e}");
    let w = c.check_kind("other.io/v1", "Gadget").unwrap().unwrap();
    assert!(w.contains("no CustomResourceDefinition"), "{w}");
}

#[test]
fn scope_comes_from_the_built_in_kinds_and_the_directorys_crds() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("a.yaml"),
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec: {group: example.com, scope: Cluster, names: {kind: Widget, plural: widgets}}\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n---\napiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: r, namespace: edge}\n---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: v}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: ''}\n",
    )
    .unwrap();
    let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
    let keys = |api_version: &str, kind: &str| {
        c.source(ObjectFilter {
            api_version: api_version.into(),
            kind: kind.into(),
            ..Default::default()
        })
        .objects()
        .into_keys()
        .collect::<Vec<_>>()
    };
    assert_eq!(
        keys("example.com/v1", "Widget"),
        ["w"],
        "a CRD with scope: Cluster"
    );
    assert_eq!(
        keys("example.com/v1", "Gadget"),
        ["default/g"],
        "no CRD: namespaced"
    );
    assert_eq!(keys("rbac.authorization.k8s.io/v1", "ClusterRole"), ["r"]);
    assert_eq!(
        keys(
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicy"
        ),
        ["v"]
    );
    assert_eq!(
        keys("v1", "ConfigMap"),
        ["default/c"],
        "namespace: '' is default"
    );
}

#[test]
fn a_file_caught_half_rewritten_loses_nothing_until_it_is_quiet() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("p.yaml");
    let three = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: nginx}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec: {containers: [{name: c, image: nginx}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: c}\nspec: {containers: [{name: c, image: nginx}]}\n";
    std::fs::write(&f, three).unwrap();
    let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
    let pods = c.source(pods_filter());
    let rv = pods.resource_version();
    // Caught at a document boundary: one document written so far.
    std::fs::write(&f, &three[..three.find("---").unwrap()]).unwrap();
    c.rescan();
    assert_eq!(pods.objects().len(), 3, "nothing deleted yet");
    // The writer finishes with the same content: no change at all.
    std::fs::write(&f, three).unwrap();
    c.rescan();
    assert_eq!(pods.objects().len(), 3);
    assert_eq!(pods.resource_version(), rv, "no spurious delete and add");
    // A real loss counts once the file has been quiet.
    std::fs::write(&f, &three[..three.find("---").unwrap()]).unwrap();
    quiet(&f);
    c.rescan();
    assert_eq!(pods.objects().keys().collect::<Vec<_>>(), ["default/a"]);
}

/// A writer that pauses 2 s mid-rewrite, the file cut at a document boundary (it parses
/// whole, with fewer objects): nothing is deleted, and once it finishes nothing changed.
#[test]
fn a_writer_pausing_two_seconds_mid_rewrite_deletes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("p.yaml");
    let pod = |n: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {n}}}\nspec: {{containers: [{{name: c, image: nginx}}]}}\n"
        )
    };
    let whole = format!("{}---\n{}---\n{}", pod("a"), pod("b"), pod("c"));
    std::fs::write(&f, &whole).unwrap();
    let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
    let pods = c.source(pods_filter());
    let rv = pods.resource_version();
    std::fs::write(&f, format!("{}---\n", pod("a"))).unwrap();
    // The writer has paused for 2 s.
    std::fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(2))
        .unwrap();
    c.rescan();
    assert_eq!(pods.objects().len(), 3, "nothing deleted mid-rewrite");
    std::fs::write(&f, &whole).unwrap();
    c.rescan();
    assert_eq!(pods.resource_version(), rv, "no phantom DELETED and ADDED");
}

/// `kubectl apply -R -f DIR` (1.32, checked) follows no link to a directory, inside DIR or
/// out of it, and reads links to files wherever they point. A host is not a one-off
/// command: a link to a file out of the directory is refused and reported (it could name
/// any file the host may read), one inside it is read.
#[cfg(unix)]
#[test]
fn links_to_directories_are_not_followed_and_links_to_files_only_inside_it() {
    let outside = tempfile::tempdir().unwrap();
    let d = tempfile::tempdir().unwrap();
    let pod = |n: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {n}}}\nspec: {{containers: [{{name: c, image: nginx}}]}}\n"
        )
    };
    std::fs::write(outside.path().join("out.yaml"), pod("out")).unwrap();
    std::fs::write(outside.path().join("linked.yaml"), pod("linked")).unwrap();
    std::fs::create_dir(d.path().join("sub")).unwrap();
    std::fs::write(d.path().join("sub/in.yaml"), pod("in")).unwrap();
    std::os::unix::fs::symlink(outside.path(), d.path().join("outside")).unwrap();
    std::os::unix::fs::symlink(d.path().join("sub"), d.path().join("again")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("linked.yaml"),
        d.path().join("file-link.yaml"),
    )
    .unwrap();
    std::fs::write(d.path().join("inner.json"), pod("inner")).unwrap();
    std::os::unix::fs::symlink("../inner.json", d.path().join("sub/inner-link.yaml")).unwrap();
    let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
    let objs = c.source(pods_filter()).objects();
    assert_eq!(
        objs.keys().collect::<Vec<_>>(),
        ["default/in", "default/inner"]
    );
    let errors = c.errors();
    assert_eq!(
        errors.keys().collect::<Vec<_>>(),
        [&d.path().join("file-link.yaml")]
    );
    let e = &errors[&d.path().join("file-link.yaml")];
    assert!(
        e.contains("not read (its previous objects are kept): it resolves to ")
            && e.contains(", outside ")
            && e.contains("(only files inside it are read)"),
        "{e}"
    );
    assert_eq!(
        c.notes().keys().collect::<Vec<_>>(),
        [&d.path().join("sub/inner-link.yaml")],
        "sub/ is read once; the link inside redefines inner.json's pod"
    );
}

/// A FIFO, a link to a device (out of the directory; a device itself is refused by
/// [`files::read_regular`]) and a file over the cap are each refused and reported, at the
/// first scan and when they appear later; the other files are read; no scan blocks.
#[cfg(unix)]
#[test]
fn only_regular_files_under_the_size_cap_are_read() {
    let d = tempfile::tempdir().unwrap();
    let pod = |n: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {n}}}\nspec: {{containers: [{{name: c, image: nginx}}]}}\n"
        )
    };
    let hostile = |dir: &Path, tag: &str| {
        let fifo = dir.join(format!("pipe{tag}.yaml"));
        crate::files::mkfifo(&fifo);
        std::os::unix::fs::symlink("/dev/zero", dir.join(format!("zero{tag}.yaml"))).unwrap();
        let big = format!("{}# {}\n", pod(&format!("big{tag}")), "x".repeat(600));
        std::fs::write(dir.join(format!("big{tag}.yaml")), big).unwrap();
    };
    let refused = |c: &DirCluster, tag: &str| {
        let errors = c.errors();
        let e = |n: &str| errors[&d.path().join(format!("{n}{tag}.yaml"))].clone();
        assert!(
            e("pipe").contains("it is a FIFO, not a regular file"),
            "{}",
            e("pipe")
        );
        assert!(
            e("zero").contains("resolves to /dev/zero, outside"),
            "{}",
            e("zero")
        );
        assert!(
            e("big").contains("over the cap of 512 bytes (dir.maxFileSize)"),
            "{}",
            e("big")
        );
    };
    std::fs::write(d.path().join("ok.yaml"), pod("ok")).unwrap();
    hostile(d.path(), "");
    let c = DirCluster::open(d.path(), 512).unwrap();
    let pods = c.source(pods_filter());
    assert_eq!(pods.objects().keys().collect::<Vec<_>>(), ["default/ok"]);
    refused(&c, "");
    assert_eq!(c.errors().len(), 3);

    // Added to a running source: refused too, and what else was added is read.
    hostile(d.path(), "-late");
    std::fs::write(d.path().join("late.yaml"), pod("late")).unwrap();
    c.rescan();
    assert_eq!(
        pods.objects().keys().collect::<Vec<_>>(),
        ["default/late", "default/ok"]
    );
    refused(&c, "-late");
    assert_eq!(c.errors().len(), 6);
}

#[cfg(unix)]
#[test]
fn a_symlink_loop_is_not_followed_round() {
    let d = tempfile::tempdir().unwrap();
    let sub = d.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(
        sub.join("p.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: nginx}]}\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(d.path(), sub.join("loop")).unwrap();
    let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
    assert_eq!(c.source(pods_filter()).objects().len(), 1);
}

#[test]
fn a_file_that_breaks_keeps_its_previous_objects() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("p.yaml");
    std::fs::write(&f, "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c, image: nginx}]}\n").unwrap();
    let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
    let pods = c.source(pods_filter());
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&f, "apiVersion: v1\nkind: Pod\nmetadata: {name: web\n").unwrap();
    c.rescan();
    assert_eq!(pods.objects().len(), 1);
    let e = c.errors().values().next().unwrap().clone();
    assert!(e.contains("line 3"), "{e}");
}

#[test]
fn custom_resources_are_defaulted_pruned_and_checked_by_their_crds_schema() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("a.yaml"),
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec: {group: example.com, scope: Namespaced, names: {kind: Widget, plural: widgets}, versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, properties: {replicas: {type: integer, default: 1}, size: {type: string, enum: [low, high]}}}}}}}]}\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: good}\nspec: {size: low, colour: red}\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: bad}\nspec: {size: urgent}\n",
    )
    .unwrap();
    let c = DirCluster::open(d.path(), DEFAULT_MAX_FILE_SIZE).unwrap();
    let widgets = c
        .source(ObjectFilter {
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
            ..Default::default()
        })
        .objects();
    assert_eq!(widgets.keys().collect::<Vec<_>>(), ["default/good"]);
    assert_eq!(
        widgets["default/good"].to_value()["spec"],
        serde_json::json!({"size": "low", "replicas": 1}),
        "defaulted, the unknown field pruned"
    );
    let e = &c.errors()[&d.path().join("a.yaml")];
    assert!(
        e.contains("Widget.example.com \"bad\" is invalid: spec.size: Unsupported value: \"urgent\": supported values: \"low\", \"high\""),
        "{e}"
    );
}
