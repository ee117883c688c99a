//! The checks a config passes after it is read, each failure one [`ConfigError`] naming the
//! field.

use super::*;

/// A plugin's module file that cannot be loaded (the message of its `module` field).
#[derive(Debug, thiserror::Error)]
enum ModuleFileError {
    /// No file there.
    #[error("{} does not exist (build the plugins with `cargo xtask plugins`)", .0.display())]
    Missing(PathBuf),
    /// Over `engine.maxModuleSize`.
    #[error("{} is {size} bytes, over engine.maxModuleSize ({limit} bytes)", path.display())]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
    /// Not a file the loader reads.
    #[error("{} {source}", path.display())]
    Refused {
        path: PathBuf,
        #[source]
        source: crate::files::FileRefused,
    },
}

impl Config {
    /// Checks the config section by section; the first failure is returned.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        self.validate_source()?;
        if self.informers.is_empty() {
            return Err(self.error("informers", "at least one informer is needed"));
        }
        self.validate_sharding()?;
        self.validate_policy_reports()?;
        let mut names = BTreeSet::new();
        for (i, inf) in self.informers.iter().enumerate() {
            self.validate_informer(&|f: &str| format!("informers[{i}].{f}"), inf, &mut names)?;
        }
        if self.oci != OciConfig::default() {
            self.oci_settings()
                .map_err(|(field, e)| self.error(field, e))?;
        }
        // The engine first: a plugin's module is checked against `engine.maxModuleSize`.
        self.validate_engine()?;
        let mut plugin_names = BTreeSet::new();
        for (i, p) in self.plugins.iter().enumerate() {
            let at = |f: &str| format!("plugins[{i}].{f}");
            self.validate_plugin(&at, p, &names, &mut plugin_names)?;
        }
        self.validate_executor()?;
        self.validate_custom_resources()?;
        self.validate_admin()
    }

    /// `customResources`: a `kube` source, namespaces named, fuel only with an engine that
    /// meters it, a status interval over 0, module paths that are directories.
    fn validate_custom_resources(&self) -> Result<(), ConfigError> {
        let Some(c) = self.custom_resources.as_ref().filter(|c| c.enabled) else {
            return Ok(());
        };
        if self.source != "kube" {
            return Err(self.error(
                "customResources.enabled",
                "custom resources are read from an API server: needs `source: kube`",
            ));
        }
        if c.namespaces.as_ref().is_some_and(Vec::is_empty) {
            return Err(self.error(
                "customResources.namespaces",
                "an empty list reads no WispPlugin; omit it to read every namespace",
            ));
        }
        self.validate_max_limits(&c.max_limits)?;
        if c.status_interval.is_some_and(|d| d.0.is_zero()) {
            return Err(self.error("customResources.statusInterval", "must be more than 0"));
        }
        for (f, n, why) in [
            (
                "maxPerNamespace",
                c.max_per_namespace,
                "namespaces and cluster say whose are read",
            ),
            (
                "maxTotal",
                c.max_total,
                "namespaces and cluster say whose are read",
            ),
            (
                "concurrentApplies",
                c.concurrent_applies,
                "0 would apply none",
            ),
            (
                "concurrentAppliesPerNamespace",
                c.concurrent_applies_per_namespace,
                "0 would apply none",
            ),
        ] {
            if n == Some(0) {
                return Err(self.error(
                    format!("customResources.{f}"),
                    format!("must be at least 1 ({why})"),
                ));
            }
        }
        for (i, d) in c.module_paths.iter().enumerate() {
            let dir = self.resolve(d);
            if !dir.is_dir() {
                return Err(self.error(
                    format!("customResources.modulePaths[{i}]"),
                    format!("{} is not a directory", dir.display()),
                ));
            }
        }
        let at = |f: &str| format!("customResources.{f}");
        self.validate_actions(
            &ActionsConfig {
                grants: c.allowed_grants.clone(),
                ..ActionsConfig::default()
            },
            &|f: &str| at(&f.replacen("actions.grants", "allowedGrants", 1)),
        )
    }

    /// Each cap of `customResources.maxLimits` is a value its setting may take: an omitted
    /// setting of a custom resource gets it unchecked.
    fn validate_max_limits(&self, m: &custom::MaxLimits) -> Result<(), ConfigError> {
        let at = |f: &str| format!("customResources.maxLimits.{f}");
        if m.fuel.is_some() && !self.engine.fuel {
            return Err(self.error(at("fuel"), "needs `engine: { fuel: true }`"));
        }
        for (f, d) in [
            ("deadline", m.deadline),
            ("startupDeadline", m.startup_deadline),
        ] {
            if d.is_some_and(|d| d.0.is_zero()) {
                return Err(self.error(at(f), "must be more than 0"));
            }
        }
        for (f, n) in [
            ("batch", m.batch),
            ("queue", m.queue),
            ("actionsBurst", m.actions_burst.map(|n| n as usize)),
            ("quarantineAfter", m.quarantine_after.map(|n| n as usize)),
            ("actionsQueue", m.actions_queue),
        ] {
            if n == Some(0) {
                return Err(self.error(at(f), "must be at least 1 (omit it for no cap)"));
            }
        }
        if m.queue_bytes.is_some_and(|b| b.0 < MIN_QUEUE_BYTES) {
            return Err(self.error(at("queueBytes"), "must be at least 64Ki"));
        }
        if m.actions_per_second
            .is_some_and(|r| !(r > 0.0 && r.is_finite()))
        {
            return Err(self.error(at("actionsPerSecond"), "must be more than 0"));
        }
        Ok(())
    }

    /// A compile's bounds: a timeout over 0, and room for the compiler itself; a module size
    /// cap that lets a module be read, and every module `oci.maxModuleSize` lets be pulled.
    fn validate_engine(&self) -> Result<(), ConfigError> {
        if self.engine.compile_timeout.is_some_and(|d| d.0.is_zero()) {
            return Err(self.error("engine.compileTimeout", "must be more than 0"));
        }
        if let Some(m) = self.engine.max_module_size {
            if m.0 < 8 {
                return Err(self.error(
                    "engine.maxModuleSize",
                    "must be at least 8 bytes (a WebAssembly header)",
                ));
            }
            if let Some(pulled) = self.oci.max_module_size.filter(|o| o.0 > m.0) {
                return Err(self.error(
                    "engine.maxModuleSize",
                    format!(
                        "{} bytes is less than oci.maxModuleSize ({} bytes): a module pulled \
                         under that would be refused when read; raise this or lower that",
                        m.0, pulled.0
                    ),
                ));
            }
        }
        let min = crate::plugin::compile::MIN_COMPILE_MEMORY;
        if let Some(m) = self.engine.compile_memory
            && m.0 < min
        {
            return Err(self.error(
                "engine.compileMemory",
                format!(
                    "{} bytes is too little: at least {}Mi (the compiler's own code, threads and \
                     engine take about 100 MiB of address space before it reads a module)",
                    m.0,
                    min >> 20
                ),
            ));
        }
        Ok(())
    }

    /// A `dir` source names a directory that exists; `dir` settings go with a `dir` source,
    /// and its file size cap is at least a byte.
    fn validate_source(&self) -> Result<(), ConfigError> {
        let kind = self.source_kind()?;
        if let SourceKind::Dir(d) = &kind
            && !d.is_dir()
        {
            return Err(self.error(
                "source",
                format!("directory {} does not exist", d.display()),
            ));
        }
        if self.dir != Default::default() && kind == SourceKind::Kube {
            return Err(self.error("dir", "needs `source: dir:PATH`"));
        }
        if self.dir.max_file_size.is_some_and(|b| b.0 == 0) {
            return Err(self.error(
                "dir.maxFileSize",
                "must be at least 1 byte (omit it for 16Mi)",
            ));
        }
        Ok(())
    }

    /// `sharding` needs a kube source and a valid Lease; with mode shards, the Lease name of
    /// each replica must be a DNS subdomain.
    fn validate_sharding(&self) -> Result<(), ConfigError> {
        let Some(sh) = &self.sharding else {
            return Ok(());
        };
        if self.source_kind()? != SourceKind::Kube {
            return Err(self.error(
                "sharding",
                "needs `source: kube` (replicas share Leases on an API server)",
            ));
        }
        let lease = sh.lease();
        lease
            .check()
            .map_err(|e| self.error("sharding", e.to_string()))?;
        if sh.mode == ShardingMode::Shards
            && !wisp_kinds::is_dns1123_subdomain(&format!("{}-{}", lease.name, lease.identity))
        {
            return Err(self.error(
                "sharding.identity",
                format!(
                    "{:?}: with mode shards, `<leaseName>-<identity>` names a Lease and must be a DNS subdomain (lower case letters, digits, '-', '.')",
                    lease.identity
                ),
            ));
        }
        Ok(())
    }

    /// `policyReports` needs a kube source, an interval over 0 and a bounded report size.
    fn validate_policy_reports(&self) -> Result<(), ConfigError> {
        let Some(pr) = &self.policy_reports else {
            return Ok(());
        };
        if self.source_kind()? != SourceKind::Kube {
            return Err(self.error(
                "policyReports",
                "needs `source: kube` (reports are written to an API server)",
            ));
        }
        if pr.interval.is_some_and(|d| d.0.is_zero()) {
            return Err(self.error("policyReports.interval", "must be more than 0"));
        }
        if let Some(n) = pr.max_results
            && !(1..=PolicyReportsConfig::MAX_RESULTS).contains(&n)
        {
            return Err(self.error(
                "policyReports.maxResults",
                format!(
                    "{n} is out of range: 1 to {} results per report (the summary counts them all)",
                    PolicyReportsConfig::MAX_RESULTS
                ),
            ));
        }
        Ok(())
    }

    /// One informer (fields named by `at`): a name not in `names` (then added), a kind, sizes,
    /// namespaces, then its selector, indexes and fields ([`Config::validate_informer_shape`]).
    fn validate_informer<'a>(
        &self,
        at: &dyn Fn(&str) -> String,
        inf: &'a InformerConfig,
        names: &mut BTreeSet<&'a str>,
    ) -> Result<(), ConfigError> {
        if inf.name.is_empty() {
            return Err(self.error(at("name"), "must not be empty"));
        }
        if !names.insert(inf.name.as_str()) {
            return Err(self.error(
                at("name"),
                format!("duplicate informer name {:?}", inf.name),
            ));
        }
        self.check_kind(at, &inf.api_version, &inf.kind)?;
        for (field, v) in [
            ("maxEventSize", &inf.max_event_size),
            ("maxListSize", &inf.max_list_size),
            ("maxListTotalSize", &inf.max_list_total_size),
        ] {
            if v.as_ref().is_some_and(|b| b.0 < 4096) {
                return Err(self.error(
                    at(field),
                    "must be at least 4Ki (one object and its envelope)",
                ));
            }
        }
        if inf.max_list_objects == Some(0) {
            return Err(self.error(
                at("maxListObjects"),
                "must be at least 1 (objects in one whole list)",
            ));
        }
        if let Some(ns) = &inf.namespaces
            && ns.is_empty()
        {
            return Err(self.error(
                at("namespaces"),
                "an empty list watches nothing; omit it to watch all namespaces",
            ));
        }
        self.validate_informer_shape(at, inf)
    }

    /// What an informer selects and keeps: its label selector, indexes and fields parse, and
    /// agree with `metadataOnly`.
    fn validate_informer_shape(
        &self,
        at: &dyn Fn(&str) -> String,
        inf: &InformerConfig,
    ) -> Result<(), ConfigError> {
        if let Some(sel) = &inf.label_selector {
            LabelSelector::parse(sel)
                .map_err(|e| self.error(at("labelSelector"), e.to_string()))?;
        }
        if let Some(sel) = &inf.field_selector {
            self.validate_field_selector(at, inf, sel)?;
        }
        for (j, ix) in inf.indexes.iter().enumerate() {
            let spec = IndexSpec::parse(ix)
                .map_err(|e| self.error(at(&format!("indexes[{j}]")), e.to_string()))?;
            if let IndexSpec::Field(path) = spec
                && inf.metadata_only
                && !path.starts_with("metadata.")
            {
                return Err(self.error(
                    at(&format!("indexes[{j}]")),
                    format!("{path} is not kept by metadataOnly: index a metadata.* field, or drop metadataOnly"),
                ));
            }
        }
        if inf.metadata_only && inf.fields.is_some() {
            return Err(self.error(
                at("fields"),
                "metadataOnly keeps metadata alone: drop fields, or metadataOnly",
            ));
        }
        if let Some(fields) = &inf.fields {
            for (j, f) in fields.iter().enumerate() {
                crate::informer::mask::FieldMask::parse(std::slice::from_ref(f))
                    .map_err(|e| self.error(at(&format!("fields[{j}]")), e.to_string()))?;
            }
        }
        Ok(())
    }

    /// An informer's field selector: it parses, and its kind supports every label, as the
    /// API server checks it (a real server answers 400 BadRequest).
    fn validate_field_selector(
        &self,
        at: &dyn Fn(&str) -> String,
        inf: &InformerConfig,
        sel: &str,
    ) -> Result<(), ConfigError> {
        let mut fields = wisp_kinds::selector::FieldSelector::parse(sel)
            .map_err(|e| self.error(at("fieldSelector"), e.to_string()))?;
        let group = wisp_kinds::api::group_of(&inf.api_version);
        wisp_kinds::fields::Selectable::of(group, &inf.kind)
            .convert_selector(&mut fields)
            .map_err(|e| {
                self.error(
                    at("fieldSelector"),
                    format!(
                        "informer {:?} ({} {}): {e}",
                        inf.name, inf.api_version, inf.kind
                    ),
                )
            })
    }

    /// One plugin (fields named by `at`): a name not in `plugin_names` (then added), a module
    /// that exists or an OCI reference that parses, informers among `informers`, then its
    /// limits, actions, verdicts and queue ([`Config::validate_plugin_settings`]).
    fn validate_plugin<'a>(
        &self,
        at: &dyn Fn(&str) -> String,
        p: &'a PluginConfig,
        informers: &BTreeSet<&str>,
        plugin_names: &mut BTreeSet<&'a str>,
    ) -> Result<(), ConfigError> {
        if p.name.is_empty() {
            return Err(self.error(at("name"), "must not be empty"));
        }
        if !plugin_names.insert(p.name.as_str()) {
            return Err(self.error(at("name"), format!("duplicate plugin name {:?}", p.name)));
        }
        if let Some(m) = p.module.to_str().filter(|m| crate::oci::is_oci(m)) {
            crate::oci::Reference::parse(m).map_err(|e| self.error(at("module"), e.to_string()))?;
        } else {
            self.validate_module_file(&self.resolve(&p.module))
                .map_err(|e| self.error(at("module"), e.to_string()))?;
        }
        if p.informers.is_empty() {
            return Err(self.error(at("informers"), "a plugin needs at least one informer"));
        }
        for (j, name) in p.informers.iter().enumerate() {
            if !informers.contains(name.as_str()) {
                let known: Vec<&str> = informers.iter().copied().collect();
                return Err(self.error(
                    at(&format!("informers[{j}]")),
                    format!("unknown informer {name:?} (defined: {})", known.join(", ")),
                ));
            }
        }
        self.validate_plugin_settings(at, p)
    }

    /// A module file that exists and is a regular file (links followed) within
    /// `engine.maxModuleSize` by its size; looked at, not opened (the loader checks it again
    /// as it reads it, [`crate::plugin::module_file`]).
    fn validate_module_file(&self, module: &Path) -> Result<(), ModuleFileError> {
        use crate::files::{FileRefused, Links, check_path};
        if !module.exists() {
            return Err(ModuleFileError::Missing(module.to_owned()));
        }
        let limit = self.max_module_size();
        check_path(module, limit, Links::Follow).map_err(|e| match e {
            FileRefused::TooLarge { size, .. } => ModuleFileError::TooLarge {
                path: module.to_owned(),
                size,
                limit,
            },
            source => ModuleFileError::Refused {
                path: module.to_owned(),
                source,
            },
        })
    }

    /// A plugin's limits, batch, actions, verdicts and queue.
    fn validate_plugin_settings(
        &self,
        at: &dyn Fn(&str) -> String,
        p: &PluginConfig,
    ) -> Result<(), ConfigError> {
        if p.limits.fuel.is_some() && !self.engine.fuel {
            return Err(self.error(at("limits.fuel"), "needs `engine: { fuel: true }`"));
        }
        if p.limits.deadline.is_some_and(|d| d.0.is_zero()) {
            return Err(self.error(at("limits.deadline"), "must be more than 0"));
        }
        if p.limits.startup_deadline.is_some_and(|d| d.0.is_zero()) {
            return Err(self.error(at("limits.startupDeadline"), "must be more than 0"));
        }
        if p.reload
            .rollback_threshold
            .is_some_and(|t| !(0.0..=1.0).contains(&t))
        {
            return Err(self.error(at("reload.rollbackThreshold"), "must be between 0 and 1"));
        }
        if p.batch == Some(0) {
            return Err(self.error(at("batch"), "must be at least 1"));
        }
        self.validate_actions(&p.actions, at)?;
        self.refuse_coordination_grants(&p.name, &p.actions, at)?;
        let events_granted = p.actions.grants.iter().any(|g| {
            g.verbs.contains(&ActionVerb::Create) && g.kind == "Event" && g.api_version == "v1"
        });
        if p.verdicts.events && !events_granted {
            return Err(self.error(
                at("verdicts.events"),
                "verdict Events are the plugin's own actions: add the grant {verbs: [create], apiVersion: v1, kind: Event} to actions.grants",
            ));
        }
        if p.queue.max == Some(0) {
            return Err(self.error(
                at("queue.max"),
                "must be at least 1 (a count of notifications per informer)",
            ));
        }
        if p.queue
            .max_bytes
            .as_ref()
            .is_some_and(|b| b.0 < MIN_QUEUE_BYTES)
        {
            return Err(self.error(
                at("queue.maxBytes"),
                "must be at least 64Ki (bytes of notifications per informer)",
            ));
        }
        Ok(())
    }

    /// `executor.workers`, when set, is between 1 and the most the executor runs.
    fn validate_executor(&self) -> Result<(), ConfigError> {
        let Some(w) = self.executor.workers else {
            return Ok(());
        };
        let max = crate::informer::executor::MAX_WORKERS;
        if w == 0 {
            return Err(self.error(
                "executor.workers",
                "must be at least 1 (omit it for one worker per core)",
            ));
        }
        if w > max {
            return Err(self.error(
                "executor.workers",
                format!(
                    "{w} is too many: at most {max} (each worker is a thread; the default is \
                     one per core, and more than the cores only helps plugins that wait)"
                ),
            ));
        }
        Ok(())
    }

    /// The admin addresses parse, a token file, when given, is named, and the connection
    /// bounds are not zero.
    fn validate_admin(&self) -> Result<(), ConfigError> {
        for (field, addr) in [
            ("admin.listen", Some(&self.admin.listen)),
            ("admin.metricsAddress", self.admin.metrics_address.as_ref()),
        ] {
            if let Some(a) = addr.filter(|a| !a.is_empty())
                && a.parse::<std::net::SocketAddr>().is_err()
            {
                return Err(self.error(
                    field,
                    format!("invalid address {a:?}: expected host:port, e.g. 127.0.0.1:9090"),
                ));
            }
        }
        if self.admin.token_file.as_deref() == Some("") {
            return Err(self.error(
                "admin.tokenFile",
                "must not be empty (omit it for no token: loopback-only admin)",
            ));
        }
        if self.admin.max_connections == Some(0) {
            return Err(self.error(
                "admin.maxConnections",
                "must be at least 1 (omit it for 128)",
            ));
        }
        for (field, t) in [
            ("admin.headerReadTimeout", self.admin.header_read_timeout),
            ("admin.idleTimeout", self.admin.idle_timeout),
        ] {
            if t.is_some_and(|t| t.0.is_zero()) {
                return Err(self.error(field, "must be longer than 0 (e.g. 10s)"));
            }
        }
        Ok(())
    }

    /// `apiVersion` is `v1` or `group/v1`; `kind` is not empty.
    fn check_kind(
        &self,
        at: &dyn Fn(&str) -> String,
        api_version: &str,
        kind: &str,
    ) -> Result<(), ConfigError> {
        if api_version.is_empty() || api_version.split('/').count() > 2 {
            return Err(self.error(
                at("apiVersion"),
                format!("invalid apiVersion {api_version:?}: expected e.g. v1 or apps/v1"),
            ));
        }
        if kind.is_empty() {
            return Err(self.error(at("kind"), "must not be empty"));
        }
        Ok(())
    }

    /// With `sharding`, no grant reaches the host's own coordination: the Lease kind
    /// (`coordination.k8s.io`, any version, kind matched as the request path is built, without
    /// case) in the lease namespace, or in every namespace (a grant without `namespaces`). A
    /// grant names a kind and namespaces only (no object names, no labels), so a grant that
    /// could touch the host's Lease or a shard-group membership Lease is one of these.
    fn refuse_coordination_grants(
        &self,
        plugin: &str,
        a: &ActionsConfig,
        at: &dyn Fn(&str) -> String,
    ) -> Result<(), ConfigError> {
        let Some(sh) = &self.sharding else {
            return Ok(());
        };
        let lease = sh.lease();
        for (j, g) in a.grants.iter().enumerate() {
            let group = wisp_kinds::api::group_of(&g.api_version);
            if !(group.eq_ignore_ascii_case("coordination.k8s.io")
                && g.kind.eq_ignore_ascii_case("Lease"))
            {
                continue;
            }
            let reaches = match &g.namespaces {
                None => true,
                Some(list) => list.contains(&lease.namespace),
            };
            if reaches {
                return Err(self.error(
                    at(&format!("actions.grants[{j}]")),
                    format!(
                        "plugin {plugin:?}: the grant of {} {} in namespace {:?} reaches the host's own \
                         coordination (the sharding Lease {:?} and the shard group's membership \
                         Leases, labelled {}={}); grant Leases only in other namespaces, or move \
                         sharding.leaseNamespace",
                        g.api_version,
                        g.kind,
                        lease.namespace,
                        lease.name,
                        crate::scale::members::GROUP_LABEL,
                        lease.name,
                    ),
                ));
            }
        }
        Ok(())
    }

    fn validate_actions(
        &self,
        a: &ActionsConfig,
        at: &dyn Fn(&str) -> String,
    ) -> Result<(), ConfigError> {
        for (j, g) in a.grants.iter().enumerate() {
            let gat = |f: &str| at(&format!("actions.grants[{j}].{f}"));
            if g.verbs.is_empty() {
                return Err(self.error(gat("verbs"), "at least one of patch, apply, create"));
            }
            self.check_kind(&gat, &g.api_version, &g.kind)?;
            if g.verbs.contains(&ActionVerb::Create) && (g.kind != "Event" || g.api_version != "v1")
            {
                return Err(self.error(
                    gat("verbs"),
                    "`create` is only for Events (apiVersion: v1, kind: Event)",
                ));
            }
            if g.namespaces.as_ref().is_some_and(Vec::is_empty) {
                return Err(self.error(
                    gat("namespaces"),
                    "an empty list grants nothing; omit it to grant all namespaces",
                ));
            }
        }
        if let Some(r) = &a.rate_limit {
            if !(r.per_second > 0.0 && r.per_second.is_finite()) {
                return Err(self.error(at("actions.rateLimit.perSecond"), "must be more than 0"));
            }
            if r.burst == 0 {
                return Err(self.error(at("actions.rateLimit.burst"), "must be at least 1"));
            }
        }
        if a.queue == Some(0) {
            return Err(self.error(at("actions.queue"), "must be at least 1"));
        }
        Ok(())
    }
}
