use super::*;

fn dir_with_module() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("p.wasm"), b"\0asm").unwrap();
    std::fs::create_dir(d.path().join("cluster")).unwrap();
    d
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    let d = dir_with_module();
    let r = Config::parse(text, "wisp.yaml", d.path());
    drop(d);
    r
}

const GOOD: &str = "
source: dir:cluster
informers:
  - name: pods
    apiVersion: v1
    kind: Pod
    namespaces: [default]
    resync: 5m
    indexes: [label:app, ownerUid, field:spec.nodeName]
plugins:
  - name: audit
    module: p.wasm
    informers: [pods]
    settings: { includeResyncs: true }
    limits: { memory: 32Mi, deadline: 20ms }
    onFailure: { policy: retry, retries: 2, backoff: 10ms, quarantineAfter: 5 }
    batch: 16
admin: { listen: 127.0.0.1:0 }
";

fn err_of(text: &str) -> String {
    parse(text).expect_err("config must be refused").to_string()
}

#[test]
fn a_good_config_maps_to_plugin_specs() {
    let d = dir_with_module();
    let c = Config::parse(GOOD, "wisp.yaml", d.path()).unwrap();
    assert_eq!(
        c.source_kind().unwrap(),
        SourceKind::Dir(d.path().join("cluster"))
    );
    assert_eq!(c.informers[0].resync.0, Duration::from_secs(300));
    let s = &c.plugin_specs(&Default::default())[0];
    assert_eq!(s.module, d.path().join("p.wasm"));
    assert_eq!(s.limits.memory, 32 << 20);
    assert_eq!(s.limits.deadline, Duration::from_millis(20));
    assert_eq!(
        s.on_failure,
        OnFailure {
            policy: FailurePolicy::Retry {
                retries: 2,
                backoff: Duration::from_millis(10)
            },
            quarantine_after: 5
        }
    );
    assert_eq!(s.settings, serde_json::json!({"includeResyncs": true}));
    assert_eq!(s.batch_max, 16);
}

#[test]
fn startup_and_per_notification_deadlines_are_configured_and_checked() {
    let d = dir_with_module();
    let plain = &Config::parse(GOOD, "wisp.yaml", d.path())
        .unwrap()
        .plugin_specs(&Default::default())[0];
    assert_eq!(plain.limits.startup_deadline, Duration::from_secs(2));
    assert_eq!(
        plain.limits.deadline_per_notification,
        Duration::from_millis(5)
    );
    let text = GOOD.replace(
        "deadline: 20ms",
        "deadline: 20ms, deadlinePerNotification: 1ms, startupDeadline: 500ms",
    );
    let s = &Config::parse(&text, "wisp.yaml", d.path())
        .unwrap()
        .plugin_specs(&Default::default())[0];
    assert_eq!(s.limits.startup_deadline, Duration::from_millis(500));
    assert_eq!(s.limits.deadline_per_notification, Duration::from_millis(1));
    // A batch of 64: 20 ms + 63 x 1 ms.
    assert_eq!(s.limits.call_deadline(64), Duration::from_millis(83));
    assert_eq!(s.limits.call_deadline(1), Duration::from_millis(20));
    let e = err_of(&GOOD.replace("deadline: 20ms", "deadline: 20ms, startupDeadline: 0"));
    assert!(
        e.starts_with("wisp.yaml: plugins[0].limits.startupDeadline: must be more than 0"),
        "{e}"
    );
}

#[test]
fn an_unknown_field_is_named_with_its_path() {
    let e = err_of(&GOOD.replace("batch: 16", "batchSize: 16"));
    assert!(
        e.starts_with(
            "wisp.yaml: plugins[0].batchSize: unknown field `batchSize`, expected one of"
        ),
        "{e}"
    );
    assert!(e.ends_with("(line 17, column 5)"), "{e}");
}

#[test]
fn a_bad_duration_is_named_with_its_path_and_the_expected_form() {
    let e = err_of(&GOOD.replace("deadline: 20ms", "deadline: fast"));
    assert!(e.starts_with("wisp.yaml: plugins[0].limits.deadline: invalid duration \"fast\": expected e.g. 50ms, 30s, 5m, 1h"), "{e}");
    let e = err_of(&GOOD.replace("resync: 5m", "resync: 5 minutes"));
    assert!(
        e.starts_with("wisp.yaml: informers[0].resync: invalid duration"),
        "{e}"
    );
}

#[test]
fn a_plugin_naming_an_unknown_informer_is_refused() {
    let e = err_of(&GOOD.replace("informers: [pods]", "informers: [pods, nodes]"));
    assert_eq!(
        e,
        "wisp.yaml: plugins[0].informers[1]: unknown informer \"nodes\" (defined: pods)"
    );
}

#[test]
fn a_missing_module_is_refused_with_how_to_build_it() {
    let e = err_of(&GOOD.replace("module: p.wasm", "module: missing.wasm"));
    assert!(
        e.starts_with("wisp.yaml: plugins[0].module: ")
            && e.contains("missing.wasm does not exist"),
        "{e}"
    );
    assert!(e.contains("cargo xtask plugins"), "{e}");
}

#[test]
fn bad_sources_selectors_indexes_and_sizes_are_refused() {
    let e = err_of(&GOOD.replace("source: dir:cluster", "source: etcd"));
    assert_eq!(
        e,
        "wisp.yaml: source: invalid source \"etcd\": expected `kube` or `dir:PATH`"
    );
    let e = err_of(&GOOD.replace("source: dir:cluster", "source: dir:nowhere"));
    assert!(
        e.starts_with("wisp.yaml: source: directory ") && e.ends_with("nowhere does not exist"),
        "{e}"
    );
    let e = err_of(&GOOD.replace("resync: 5m", "resync: 5m\n    labelSelector: 'app in web'"));
    assert!(
        e.starts_with("wisp.yaml: informers[0].labelSelector: invalid label selector"),
        "{e}"
    );
    let e = err_of(&GOOD.replace("ownerUid", "owner"));
    assert_eq!(
        e,
        "wisp.yaml: informers[0].indexes[1]: invalid index \"owner\": expected label:KEY, ownerUid or field:a.b.c"
    );
    let e = err_of(&GOOD.replace("memory: 32Mi", "memory: 32 megs"));
    assert!(
        e.starts_with("wisp.yaml: plugins[0].limits.memory: invalid size"),
        "{e}"
    );
}

#[test]
fn duplicate_names_and_wrong_types_are_refused() {
    let dup = GOOD.replace(
        "plugins:",
        "  - name: pods\n    apiVersion: v1\n    kind: Node\nplugins:",
    );
    assert_eq!(
        err_of(&dup),
        "wisp.yaml: informers[1].name: duplicate informer name \"pods\""
    );
    let e = err_of(&GOOD.replace("batch: 16", "batch: lots"));
    assert!(
        e.starts_with("wisp.yaml: plugins[0].batch: invalid type: string \"lots\""),
        "{e}"
    );
}

#[test]
fn a_plugin_queue_defaults_to_100000_coalescing_and_takes_a_bound_and_policy() {
    let c = parse(GOOD).unwrap();
    assert_eq!(
        c.plugin_specs(&Default::default())[0].queue,
        QueueBound::bounded(100_000, Overflow::Coalesce).with_max_bytes(64 << 20)
    );
    let mib = 1 << 20;
    for (yaml, bound) in [
        (
            "{ max: 500 }",
            QueueBound::bounded(500, Overflow::Coalesce).with_max_bytes(64 * mib),
        ),
        (
            "{ max: 10, overflow: dropOldest, maxBytes: 1Mi }",
            QueueBound::bounded(10, Overflow::DropOldest).with_max_bytes(mib),
        ),
        (
            "{ overflow: dropNewest }",
            QueueBound::bounded(100_000, Overflow::DropNewest).with_max_bytes(64 * mib),
        ),
    ] {
        let c =
            parse(&GOOD.replace("batch: 16", &format!("batch: 16\n    queue: {yaml}"))).unwrap();
        assert_eq!(
            c.plugin_specs(&Default::default())[0].queue,
            bound,
            "{yaml}"
        );
    }
}

#[test]
fn a_bad_queue_policy_or_bound_is_refused_naming_the_field() {
    let with =
        |yaml: &str| err_of(&GOOD.replace("batch: 16", &format!("batch: 16\n    queue: {yaml}")));
    let e = with("{ overflow: dropAll }");
    assert!(
        e.starts_with(
            "wisp.yaml: plugins[0].queue.overflow: unknown variant `dropAll`, expected one of `coalesce`, `dropOldest`, `dropNewest`"
        ),
        "{e}"
    );
    assert_eq!(
        with("{ max: 0 }"),
        "wisp.yaml: plugins[0].queue.max: must be at least 1 (a count of notifications per informer)"
    );
    let e = with("{ max: -1 }");
    assert!(
        e.starts_with(
            "wisp.yaml: plugins[0].queue.max: invalid value: integer `-1`, expected usize"
        ),
        "{e}"
    );
    let e = with("{ size: 10 }");
    assert!(
        e.starts_with(
            "wisp.yaml: plugins[0].queue.size: unknown field `size`, expected one of `max`, `maxBytes`, `overflow`"
        ),
        "{e}"
    );
    assert_eq!(
        with("{ maxBytes: 1Ki }"),
        "wisp.yaml: plugins[0].queue.maxBytes: must be at least 64Ki (bytes of notifications per informer)"
    );
}

#[test]
fn broken_yaml_is_reported_with_its_location() {
    let e = err_of("source: kube\ninformers: [\n");
    assert!(e.starts_with("wisp.yaml: "), "{e}");
    assert!(e.contains("line"), "{e}");
}

#[test]
fn durations_and_sizes_parse_like_kubernetes_quantities() {
    assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
    assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
    assert!(parse_duration("10").is_err());
    assert_eq!(parse_bytes("64Mi").unwrap(), 64 << 20);
    assert_eq!(parse_bytes("1G").unwrap(), 1_000_000_000);
}

#[test]
fn actions_map_to_grants_with_defaults_and_verdict_events() {
    let text = GOOD.replace(
        "    batch: 16\n",
        "    batch: 16\n    verdicts: { events: true }\n    actions:\n      grants:\n        - { verbs: [patch, apply], apiVersion: v1, kind: Pod, namespaces: [default] }\n        - { verbs: [create], apiVersion: v1, kind: Event }\n      rateLimit: { perSecond: 2.5, burst: 3 }\n      dryRun: true\n",
    );
    let s = &parse(&text).unwrap().plugin_specs(&Default::default())[0];
    assert!(s.verdict_events);
    assert_eq!(s.actions.grants.len(), 2);
    assert_eq!(
        s.actions.grants[0].verbs,
        vec![ActionVerb::Patch, ActionVerb::Apply]
    );
    assert_eq!(
        s.actions.grants[0].namespaces,
        Some(vec!["default".to_owned()])
    );
    assert_eq!((s.actions.per_second, s.actions.burst), (2.5, 3));
    assert!(s.actions.dry_run);
    assert_eq!(s.actions.retries, ActionSpec::default().retries);
    let plain = &parse(GOOD).unwrap().plugin_specs(&Default::default())[0];
    assert!(
        plain.actions.grants.is_empty(),
        "nothing granted by default"
    );
    assert!(!plain.actions.dry_run && !plain.verdict_events);
}

#[test]
fn bad_action_grants_and_rate_limits_are_refused_with_their_path() {
    let with = |actions: &str| {
        err_of(&GOOD.replace(
            "    batch: 16\n",
            &format!("    batch: 16\n    actions:\n{actions}"),
        ))
    };
    let e = with("      grants: [{ verbs: [delete], apiVersion: v1, kind: Pod }]\n");
    assert!(
        e.starts_with("wisp.yaml: plugins[0].actions.grants[0].verbs[0]: unknown variant `delete`, expected one of `patch`, `apply`, `create`"),
        "{e}"
    );
    let e = with("      grants: [{ verbs: [create], apiVersion: v1, kind: Pod }]\n");
    assert_eq!(
        e,
        "wisp.yaml: plugins[0].actions.grants[0].verbs: `create` is only for Events (apiVersion: v1, kind: Event)"
    );
    let e = with("      grants: [{ verbs: [], apiVersion: v1, kind: Pod }]\n");
    assert!(
        e.starts_with("wisp.yaml: plugins[0].actions.grants[0].verbs: at least one"),
        "{e}"
    );
    let e = with("      grants: [{ verbs: [patch], apiVersion: v1, kind: Pod, namespaces: [] }]\n");
    assert!(
        e.starts_with(
            "wisp.yaml: plugins[0].actions.grants[0].namespaces: an empty list grants nothing"
        ),
        "{e}"
    );
    let e = with("      grants: [{ verbs: [patch], apiVersion: a/b/c, kind: Pod }]\n");
    assert!(
        e.starts_with("wisp.yaml: plugins[0].actions.grants[0].apiVersion: invalid apiVersion"),
        "{e}"
    );
    let e = with("      rateLimit: { perSecond: 0, burst: 1 }\n");
    assert_eq!(
        e,
        "wisp.yaml: plugins[0].actions.rateLimit.perSecond: must be more than 0"
    );
    let e = with("      rateLimit: { perSecond: 1, burst: 0 }\n");
    assert_eq!(
        e,
        "wisp.yaml: plugins[0].actions.rateLimit.burst: must be at least 1"
    );
    let e = err_of(&GOOD.replace(
        "    batch: 16\n",
        "    batch: 16\n    verdicts: { events: true }\n",
    ));
    assert!(
        e.starts_with("wisp.yaml: plugins[0].verdicts.events: verdict Events are the plugin's own actions: add the grant {verbs: [create], apiVersion: v1, kind: Event}"),
        "{e}"
    );
    let e = with("      dryrun: true\n");
    assert!(
        e.starts_with("wisp.yaml: plugins[0].actions.dryrun: unknown field `dryrun`"),
        "{e}"
    );
}

#[test]
fn an_error_at_the_top_level_names_it_even_for_a_key_without_a_name() {
    for text in ["?", "\"\": 1", "[]"] {
        let e = parse(text).expect_err(text);
        assert_eq!(e.path, "(top level)", "{text:?}: {e}");
        assert_eq!(e.file, "wisp.yaml");
    }
}

#[test]
fn a_duration_too_long_is_refused_instead_of_overflowing() {
    for text in [
        "307445734561825861m",
        "5124095576030432h",
        "18446744073709551615s1s",
        "293y",
    ] {
        assert!(parse_duration(text).is_err(), "{text}");
    }
    assert!(parse_duration("9223372036s854ms").is_ok());
    assert!(
        parse_duration("9223372037s")
            .unwrap_err()
            .to_string()
            .contains("too long")
    );
    let e = err_of(
        "source: kube\ninformers: [{ name: a, apiVersion: v1, kind: Pod, resync: 999999999999999999h }]\n",
    );
    assert!(
        e.contains("informers[0].resync") && e.contains("too long"),
        "{e}"
    );
}

#[test]
fn compile_bounds_are_read_and_a_bound_too_small_is_refused_naming_the_field() {
    let c = parse(GOOD).unwrap();
    assert_eq!(c.engine.compile_memory, None);
    let c = parse(&format!(
        "{GOOD}engine: {{ compileTimeout: 30s, compileMemory: 512Mi }}\n"
    ))
    .unwrap();
    assert_eq!(c.engine.compile_memory, Some(Bytes(512 << 20)));
    assert_eq!(c.engine.first_load_tier, None);
    let off = parse(&format!("{GOOD}engine: {{ firstLoadTier: false }}\n")).unwrap();
    assert_eq!(off.engine.first_load_tier, Some(false));
    let e = err_of(&format!("{GOOD}engine: {{ firstLoadTier: sometimes }}\n"));
    assert!(e.contains("firstLoadTier"), "{e}");
    assert_eq!(
        c.engine.compile_timeout.map(|d| d.0),
        Some(std::time::Duration::from_secs(30))
    );
    let e = err_of(&format!("{GOOD}engine: {{ compileMemory: 64Mi }}\n"));
    assert!(
        e.starts_with(
            "wisp.yaml: engine.compileMemory: 67108864 bytes is too little: at least 128Mi"
        ),
        "{e}"
    );
    assert_eq!(
        err_of(&format!("{GOOD}engine: {{ compileTimeout: 0s }}\n")),
        "wisp.yaml: engine.compileTimeout: must be more than 0"
    );
    let e = err_of(&format!("{GOOD}engine: {{ compileMemory: lots }}\n"));
    assert!(
        e.contains("engine.compileMemory") && e.contains("invalid size"),
        "{e}"
    );
}

#[test]
fn executor_workers_default_to_the_cores_and_a_bad_count_is_refused_naming_the_field() {
    let c = parse(GOOD).unwrap();
    assert_eq!(c.executor.workers, None);
    assert_eq!(
        c.executor.workers(),
        crate::informer::executor::default_workers()
    );
    let c = parse(&format!("{GOOD}executor: {{ workers: 7 }}\n")).unwrap();
    assert_eq!(c.executor.workers(), 7);
    assert_eq!(
        err_of(&format!("{GOOD}executor: {{ workers: 0 }}\n")),
        "wisp.yaml: executor.workers: must be at least 1 (omit it for one worker per core)"
    );
    let e = err_of(&format!("{GOOD}executor: {{ workers: 100000 }}\n"));
    assert!(
        e.starts_with("wisp.yaml: executor.workers: 100000 is too many: at most 1024"),
        "{e}"
    );
    let e = err_of(&format!("{GOOD}executor: {{ workers: -1 }}\n"));
    assert!(e.starts_with("wisp.yaml: executor.workers: "), "{e}");
    let e = err_of(&format!("{GOOD}executor: {{ threads: 4 }}\n"));
    assert!(e.contains("unknown field `threads`"), "{e}");
}

#[test]
fn relist_resyncs_defaults_to_deliver_and_skip_is_named_or_refused() {
    let d = dir_with_module();
    let c = Config::parse(GOOD, "wisp.yaml", d.path()).unwrap();
    assert_eq!(
        c.plugin_specs(&Default::default())[0].relist_resyncs,
        RelistResyncs::Deliver
    );
    let skip = GOOD.replace("    batch: 16", "    batch: 16\n    relistResyncs: skip");
    let c = Config::parse(&skip, "wisp.yaml", d.path()).unwrap();
    assert_eq!(
        c.plugin_specs(&Default::default())[0].relist_resyncs,
        RelistResyncs::Skip
    );
    let e = err_of(&GOOD.replace("    batch: 16", "    batch: 16\n    relistResyncs: never"));
    assert!(
        e.contains("plugins[0].relistResyncs") && e.contains("deliver") && e.contains("skip"),
        "{e}"
    );
}

#[test]
fn on_panic_defaults_to_restart_and_exit_is_named_or_refused() {
    let d = dir_with_module();
    let c = Config::parse(GOOD, "wisp.yaml", d.path()).unwrap();
    assert_eq!(c.informers[0].on_panic, OnPanic::RESTART);
    let exit = GOOD.replace("    resync: 5m", "    resync: 5m\n    onPanic: exit");
    let c = Config::parse(&exit, "wisp.yaml", d.path()).unwrap();
    assert_eq!(c.informers[0].on_panic, OnPanic::Stop);
    let e = err_of(&GOOD.replace("    resync: 5m", "    resync: 5m\n    onPanic: ignore"));
    assert!(e.contains("informers[0].onPanic"), "{e}");
}

#[test]
fn metadata_only_refuses_field_masks_and_indexes_outside_metadata() {
    let d = dir_with_module();
    let meta = GOOD.replace("    resync: 5m", "    resync: 5m\n    metadataOnly: true");
    let e = err_of(&meta);
    assert!(
        e.contains("informers[0].indexes[2]") && e.contains("spec.nodeName"),
        "{e}"
    );
    let ok = meta.replace("field:spec.nodeName", "field:metadata.labels.app");
    let c = Config::parse(&ok, "wisp.yaml", d.path()).unwrap();
    assert!(c.informers[0].metadata_only);
    let e = err_of(&ok.replace(
        "    metadataOnly: true",
        "    metadataOnly: true\n    fields: [spec.nodeName]",
    ));
    assert!(
        e.contains("informers[0].fields") && e.contains("metadataOnly"),
        "{e}"
    );
}

#[test]
fn sharding_takes_client_go_lease_timings_and_refuses_what_cannot_work() {
    let kube = "source: kube\ninformers:\n  - {name: pods, apiVersion: v1, kind: Pod}\n";
    let c = parse(&format!(
        "{kube}sharding: {{mode: leader, identity: r1, leaseNamespace: ops}}\n"
    ))
    .unwrap();
    let l = c.sharding.unwrap().lease();
    assert_eq!(
        (l.name.as_str(), l.namespace.as_str(), l.identity.as_str()),
        ("wisp", "ops", "r1")
    );
    assert_eq!(
        (l.lease_duration, l.renew_deadline, l.retry_period),
        (
            std::time::Duration::from_secs(15),
            std::time::Duration::from_secs(10),
            std::time::Duration::from_secs(2)
        )
    );
    let e = err_of(&format!(
        "{kube}sharding: {{mode: leader, leaseDuration: 5s, renewDeadline: 5s}}\n"
    ));
    assert!(
        e.contains("sharding: leaseDuration (5s) must be longer than renewDeadline (5s)"),
        "{e}"
    );
    let e = err_of(&GOOD.replace("admin:", "sharding: {mode: leader}\nadmin:"));
    assert!(e.contains("sharding: needs `source: kube`"), "{e}");
    let e = err_of(&format!("{kube}sharding: {{mode: sideways}}\n"));
    assert!(
        e.contains("sharding.mode") && e.contains("leader") && e.contains("shards"),
        "{e}"
    );
    let e = err_of(&format!(
        "{kube}sharding: {{mode: shards, identity: Node_1}}\n"
    ));
    assert!(
        e.contains("sharding.identity: \"Node_1\": with mode shards"),
        "{e}"
    );
    let c = parse(&format!(
        "{kube}sharding: {{mode: shards, shardBy: namespace, identity: n1}}\n"
    ))
    .unwrap();
    assert_eq!(
        c.sharding.unwrap().shard_by,
        crate::scale::shards::ShardField::Namespace
    );
}

#[test]
fn policy_reports_default_to_openreports_every_10s_and_are_checked() {
    let kube = "source: kube\ninformers:\n  - {name: pods, apiVersion: v1, kind: Pod}\n";
    assert_eq!(
        parse(kube).unwrap().policy_reports,
        None,
        "off when omitted"
    );
    let c = parse(&format!("{kube}policyReports: {{}}\n")).unwrap();
    let pr = c.policy_reports.unwrap();
    assert_eq!(
        (pr.api_group, pr.interval(), pr.max_results()),
        (
            crate::reports::ReportGroup::OpenReports,
            std::time::Duration::from_secs(10),
            1000
        )
    );
    let c = parse(&format!(
        "{kube}policyReports: {{apiGroup: wgpolicyk8s.io, interval: 1m, maxResults: 10000}}\n"
    ))
    .unwrap();
    let pr = c.policy_reports.unwrap();
    assert_eq!(
        (pr.api_group.api_version(), pr.interval(), pr.max_results()),
        (
            "wgpolicyk8s.io/v1alpha2".to_owned(),
            std::time::Duration::from_secs(60),
            10_000
        )
    );
    let e = err_of(&GOOD.replace("admin:", "policyReports: {}\nadmin:"));
    assert!(
        e.contains("wisp.yaml: policyReports: needs `source: kube`"),
        "{e}"
    );
    let e = err_of(&format!("{kube}policyReports: {{interval: 0}}\n"));
    assert!(
        e.contains("policyReports.interval: must be more than 0"),
        "{e}"
    );
    for n in [0, 10_001] {
        let e = err_of(&format!("{kube}policyReports: {{maxResults: {n}}}\n"));
        assert!(
            e.contains("policyReports.maxResults:") && e.contains("1 to 10000"),
            "{e}"
        );
    }
    let e = err_of(&format!(
        "{kube}policyReports: {{apiGroup: reports.x-k8s.io}}\n"
    ));
    assert!(
        e.contains("openreports.io") && e.contains("wgpolicyk8s.io"),
        "{e}"
    );
}

#[test]
fn oci_modules_and_settings_are_checked_at_load() {
    let oci = GOOD.replace("module: p.wasm", "module: oci://localhost:5000/acme/audit");
    let e = err_of(&oci);
    assert!(
        e.contains("plugins[0].module") && e.contains("no tag and no digest"),
        "{e}"
    );
    let e = err_of(&GOOD.replace("module: p.wasm", "module: oci://localhost:5000/Acme:v1"));
    assert!(
        e.contains("plugins[0].module") && e.contains("repository"),
        "{e}"
    );
    let ok = GOOD.replace(
        "module: p.wasm",
        "module: oci://localhost:5000/acme/audit:v1",
    );
    // It parses, and loading pulls nothing (the config holds settings; pulls are the reloader's).
    parse(&ok).unwrap();
    let e = err_of(&format!("{ok}oci: {{ keys: [missing.pub] }}\n"));
    assert!(
        e.contains("oci.keys[0]") && e.contains("missing.pub"),
        "{e}"
    );
    let e = err_of(&format!("{ok}oci: {{ dockerConfig: nope.json }}\n"));
    assert!(
        e.contains("oci.dockerConfig") && e.contains("nope.json"),
        "{e}"
    );
    let e = err_of(&format!("{ok}oci: {{ caFile: ca.pem }}\n"));
    assert!(e.contains("oci.caFile") && e.contains("ca.pem"), "{e}");
}

#[test]
fn oci_pull_bounds_default_and_zero_is_refused_naming_the_field() {
    let ok = GOOD.replace(
        "module: p.wasm",
        "module: oci://localhost:5000/acme/audit:v1",
    );
    let s = parse(&ok).unwrap().oci_settings().unwrap();
    assert_eq!(
        (
            s.max_signature_layers,
            s.max_signature_bytes,
            s.pull_timeout
        ),
        (16, 256 * 1024, std::time::Duration::from_secs(120))
    );
    let c = parse(&format!(
        "{ok}oci: {{ maxSignatureLayers: 2, maxSignatureBytes: 4Ki, pullTimeout: 30s }}\n"
    ))
    .unwrap();
    let s = c.oci_settings().unwrap();
    assert_eq!(
        (
            s.max_signature_layers,
            s.max_signature_bytes,
            s.pull_timeout
        ),
        (2, 4096, std::time::Duration::from_secs(30))
    );
    for (field, value) in [
        ("maxSignatureLayers", "0"),
        ("maxSignatureBytes", "0"),
        ("pullTimeout", "0s"),
    ] {
        let e = err_of(&format!("{ok}oci: {{ {field}: {value} }}\n"));
        assert!(
            e.contains(&format!("oci.{field}")) && e.contains("must be"),
            "{e}"
        );
    }
}

/// The selector table shared with the `dir:` source's filter and the test API server.
fn selector_table() -> serde_json::Value {
    serde_json::from_str(include_str!("../../../tests/fixtures/selectors.json")).unwrap()
}

/// `GOOD` with its informer on `group`/`kind` and `line` (a selector) added.
fn informer_with(group: &str, kind: &str, line: &str) -> String {
    let api_version = wisp_kinds::builtin_api_versions(group, kind)
        .into_iter()
        .find(|v| !v.contains("beta") && !v.contains("alpha"))
        .unwrap();
    GOOD.replace(
        "apiVersion: v1\n    kind: Pod\n",
        &format!("apiVersion: {api_version}\n    kind: {kind}\n    {line}\n"),
    )
}

#[test]
fn selectors_are_refused_as_the_api_server_refuses_them() {
    let table = selector_table();
    for row in table["label"].as_array().unwrap() {
        let (sel, want) = (row[0].as_str().unwrap(), row[1].as_str());
        let text = informer_with("", "Pod", &format!("labelSelector: {row0}", row0 = row[0]));
        match (parse(&text), want) {
            (Ok(_), None) => {}
            (Err(e), Some(want)) => {
                let e = e.to_string();
                assert!(
                    e.starts_with("wisp.yaml: informers[0].labelSelector: ") && e.contains(want),
                    "{sel}: {e}"
                );
            }
            (got, want) => panic!("label selector {sel:?}: got {got:?}, want {want:?}"),
        }
    }
    for row in table["field"].as_array().unwrap() {
        let [group, kind, sel, want] = row.as_array().unwrap().as_slice() else {
            panic!("{row}")
        };
        let (group, kind) = (group.as_str().unwrap(), kind.as_str().unwrap());
        let text = informer_with(group, kind, &format!("fieldSelector: {sel}"));
        match (parse(&text), want.as_str()) {
            (Ok(_), None) => {}
            (Err(e), Some(want)) => {
                let e = e.to_string();
                assert!(
                    e.starts_with("wisp.yaml: informers[0].fieldSelector: ") && e.contains(want),
                    "{kind} {sel}: {e}"
                );
            }
            (got, want) => panic!("{kind} field selector {sel}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn a_field_label_the_kind_does_not_support_is_refused_naming_the_informer() {
    let e = err_of(&informer_with(
        "",
        "Pod",
        "fieldSelector: metadata.labels.app=web",
    ));
    assert_eq!(
        e,
        "wisp.yaml: informers[0].fieldSelector: informer \"pods\" (v1 Pod): field label not supported: metadata.labels.app"
    );
    // A custom kind's CRD is not at hand: a label outside metadata may be selectable.
    let custom = GOOD.replace(
        "apiVersion: v1\n    kind: Pod\n",
        "apiVersion: example.com/v1\n    kind: Widget\n    fieldSelector: spec.color=blue\n",
    );
    parse(&custom).unwrap();
    let e = err_of(&custom.replace("spec.color", "metadata.labels.color"));
    assert!(
        e.ends_with("field label not supported: metadata.labels.color"),
        "{e}"
    );
}

#[test]
fn dir_max_file_size_defaults_to_16_mib_and_is_refused_at_zero_or_without_a_dir_source() {
    let d = dir_with_module();
    let c = Config::parse(GOOD, "wisp.yaml", d.path()).unwrap();
    assert_eq!(c.dir.max_file_size(), 16 << 20);
    let set = format!("{GOOD}dir: {{maxFileSize: 1Ki}}\n");
    let c = Config::parse(&set, "wisp.yaml", d.path()).unwrap();
    assert_eq!(c.dir.max_file_size(), 1024);
    let e = err_of(&format!("{GOOD}dir: {{maxFileSize: 0}}\n"));
    assert!(
        e.contains("dir.maxFileSize") && e.contains("at least 1 byte"),
        "{e}"
    );
    let e = err_of(&format!("{GOOD}dir: {{maxFileSzie: 1Ki}}\n"));
    assert!(e.contains("maxFileSzie"), "{e}");
    let e = err_of(&set.replace("source: dir:cluster", "source: kube"));
    assert!(
        e.contains("dir") && e.contains("needs `source: dir:PATH`"),
        "{e}"
    );
}

#[test]
fn admin_connection_bounds_are_read_and_zero_is_refused_naming_the_field() {
    let c = parse(&GOOD.replace(
        "admin: { listen: 127.0.0.1:0 }",
        "admin: { listen: 127.0.0.1:0, maxConnections: 7, headerReadTimeout: 2s, idleTimeout: 9s }",
    ))
    .unwrap();
    assert_eq!(c.admin.max_connections, Some(7));
    assert_eq!(
        c.admin.header_read_timeout.unwrap().0,
        Duration::from_secs(2)
    );
    assert_eq!(c.admin.idle_timeout.unwrap().0, Duration::from_secs(9));
    for (field, value, want) in [
        (
            "maxConnections",
            "0",
            "admin.maxConnections: must be at least 1",
        ),
        (
            "headerReadTimeout",
            "0s",
            "admin.headerReadTimeout: must be longer than 0",
        ),
        (
            "idleTimeout",
            "0s",
            "admin.idleTimeout: must be longer than 0",
        ),
    ] {
        let e = err_of(&GOOD.replace(
            "admin: { listen: 127.0.0.1:0 }",
            &format!("admin: {{ listen: 127.0.0.1:0, {field}: {value} }}"),
        ));
        assert!(e.starts_with("wisp.yaml: ") && e.contains(want), "{e}");
    }
}

#[test]
fn grants_reaching_the_hosts_own_leases_are_refused_naming_the_plugin_and_grant() {
    let kube = "source: kube\ninformers:\n  - {name: pods, apiVersion: v1, kind: Pod}\n";
    let with = |sharding: &str, grant: &str| {
        parse(&format!(
            "{kube}sharding: {sharding}\nplugins:\n  - name: evil\n    module: p.wasm\n    informers: [pods]\n    actions:\n      grants:\n        - {{ verbs: [patch], apiVersion: v1, kind: Pod }}\n        - {grant}\n"
        ))
    };
    let shards = "{mode: shards, identity: r1, leaseNamespace: ops}";
    for grant in [
        // In the lease namespace, by version or spelling of the kind, and in every namespace.
        "{ verbs: [apply], apiVersion: coordination.k8s.io/v1, kind: Lease, namespaces: [ops] }",
        "{ verbs: [patch], apiVersion: coordination.k8s.io/v1beta1, kind: lease, namespaces: [x, ops] }",
        "{ verbs: [apply, patch], apiVersion: coordination.k8s.io/v1, kind: Lease }",
    ] {
        for sharding in [shards, "{mode: leader, identity: r1, leaseNamespace: ops}"] {
            let e = with(sharding, grant)
                .expect_err("a grant on the host's Leases must be refused")
                .to_string();
            assert!(
                e.starts_with("wisp.yaml: plugins[0].actions.grants[1]: plugin \"evil\": the grant of coordination.k8s.io/")
                    && e.contains("in namespace \"ops\" reaches the host's own coordination")
                    && e.contains("the sharding Lease \"wisp\"")
                    && e.contains("wisp.io/shard-group=wisp"),
                "{grant} with {sharding}: {e}"
            );
        }
    }
    // Leases elsewhere, and any Lease grant without sharding, are the plugin's business.
    with(
        shards,
        "{ verbs: [apply], apiVersion: coordination.k8s.io/v1, kind: Lease, namespaces: [apps] }",
    )
    .unwrap();
    parse(&format!(
        "{kube}plugins:\n  - name: p\n    module: p.wasm\n    informers: [pods]\n    actions:\n      grants: [{{ verbs: [apply], apiVersion: coordination.k8s.io/v1, kind: Lease }}]\n"
    ))
    .unwrap();
}

#[test]
fn whole_list_caps_default_to_max_list_size_and_are_checked() {
    use crate::informer::lister_watcher::ListCaps;
    let informer = |extra: &str| {
        format!("source: kube\ninformers:\n  - {{name: pods, apiVersion: v1, kind: Pod{extra}}}\n")
    };
    let caps = |extra: &str| parse(&informer(extra)).unwrap().informers[0].list_caps();
    assert_eq!(caps(""), ListCaps::default());
    assert_eq!(
        caps(", maxListSize: 64Mi"),
        ListCaps {
            bytes: 64 << 20,
            objects: 1_000_000
        }
    );
    assert_eq!(
        caps(", maxListSize: 64Mi, maxListTotalSize: 1Gi, maxListObjects: 5000"),
        ListCaps {
            bytes: 1 << 30,
            objects: 5000
        }
    );
    assert_eq!(
        err_of(&informer(", maxListTotalSize: 1Ki")),
        "wisp.yaml: informers[0].maxListTotalSize: must be at least 4Ki (one object and its envelope)"
    );
    assert_eq!(
        err_of(&informer(", maxListObjects: 0")),
        "wisp.yaml: informers[0].maxListObjects: must be at least 1 (objects in one whole list)"
    );
}

#[test]
fn oci_keyless_signers_and_the_trusted_root_are_checked_naming_the_field() {
    let ok = GOOD.replace(
        "module: p.wasm",
        "module: oci://localhost:5000/acme/audit:v1",
    );
    let root = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/sigstore/trusted_root.json"
    );
    let signer = "{ issuer: https://token.actions.githubusercontent.com, identityRegexp: 'https://github\\.com/acme/.*' }";
    let s = parse(&format!(
        "{ok}oci: {{ trustedRoot: {root}, keyless: [{signer}] }}\n"
    ))
    .unwrap()
    .oci_settings()
    .unwrap();
    assert!(s.requires_signature());
    assert_eq!(s.keyless.len(), 1);
    assert_eq!(s.trusted_root.as_ref().unwrap().logs.len(), 1);
    for (keyless, field, says) in [
        (
            "[{ issuer: x }]",
            "oci.keyless[0]",
            "needs identity or identityRegexp",
        ),
        (
            "[{ identity: x }]",
            "oci.keyless[0]",
            "needs issuer or issuerRegexp",
        ),
        (
            "[{ issuer: x, identity: a, identityRegexp: b }]",
            "oci.keyless[0]",
            "not both",
        ),
        (
            "[{ issuer: x, identityRegexp: '(' }]",
            "oci.keyless[0].identityRegexp",
            "not a regular expression",
        ),
    ] {
        let e = err_of(&format!(
            "{ok}oci: {{ trustedRoot: {root}, keyless: {keyless} }}\n"
        ));
        assert!(e.contains(field) && e.contains(says), "{keyless}: {e}");
    }
    let e = err_of(&format!("{ok}oci: {{ keyless: [{signer}] }}\n"));
    assert!(
        e.contains("oci.keyless") && e.contains("oci.trustedRoot"),
        "{e}"
    );
    let e = err_of(&format!("{ok}oci: {{ trustedRoot: nope.json }}\n"));
    assert!(
        e.contains("oci.trustedRoot") && e.contains("nope.json"),
        "{e}"
    );
    let e = err_of(&format!(
        "{ok}oci: {{ keyless: [{{ issuer: x, identity: y, subject: z }}] }}\n"
    ));
    assert!(e.contains("subject"), "{e}");
}
