//! The parts of a host built from a config: informers (with their sources), the services
//! plugins share, the plugin engine, and the API server's discovery of informers' kinds.

use std::sync::Arc;

use anyhow::Context;

use super::RunOptions;
use crate::actions::HostServices;
use crate::actions::audit::AuditLog;
use crate::actions::kube::KubeActionSink;
use crate::config::{Config, IndexSpec, InformerConfig, SourceKind};
use crate::informer::indexer::IndexFunc;
use crate::informer::lister_watcher::ListerWatcher;
use crate::informer::reflector::ReflectorConfig;
use crate::informer::shared_informer::InformerConfig as InformerSettings;
use crate::informer::{Executor, SharedInformer};
use crate::plugin::{EngineConfig, PluginEngine};
use crate::source::dir::DirCluster;
use crate::source::filter::ObjectFilter;
use crate::source::kube::KubeSource;
use crate::source::multi::MultiNamespace;
use wisp_kinds::api::group_of;
use wisp_kinds::fields::Selectable;
use wisp_kinds::selector::{FieldSelector, LabelSelector};

/// Index functions for an informer's `indexes`.
pub fn index_funcs(inf: &InformerConfig) -> Vec<(String, IndexFunc)> {
    inf.indexes
        .iter()
        .filter_map(|s| {
            IndexSpec::parse(s)
                .ok()
                .map(|spec| (s.clone(), spec.func()))
        })
        .collect()
}

fn filter_of(inf: &InformerConfig) -> anyhow::Result<ObjectFilter> {
    let mut fields = FieldSelector::parse(inf.field_selector.as_deref().unwrap_or(""))?;
    Selectable::of(group_of(&inf.api_version), &inf.kind).convert_selector(&mut fields)?;
    Ok(ObjectFilter {
        api_version: inf.api_version.clone(),
        kind: inf.kind.clone(),
        namespaces: inf.namespaces.clone(),
        labels: LabelSelector::parse(inf.label_selector.as_deref().unwrap_or(""))?,
        fields,
    })
}

/// The filter of an informer on a `dir:` source: a custom kind whose CRD is in the directory
/// supports the field labels its CRD makes selectable, as an API server serving it would.
fn dir_filter(d: &DirCluster, inf: &InformerConfig) -> anyhow::Result<ObjectFilter> {
    let mut filter = filter_of(inf)?;
    if let Some((namespaced, fields)) = d.selectable_fields(&inf.api_version, &inf.kind) {
        Selectable::Custom {
            namespaced,
            fields: &fields,
        }
        .convert_selector(&mut filter.fields)?;
    }
    Ok(filter)
}

/// A kube client from kubeconfig (with an optional context) or the in-cluster environment.
pub async fn kube_client(context: Option<&str>) -> anyhow::Result<kube::Client> {
    let cfg = match context {
        Some(c) => {
            let opts = kube::config::KubeConfigOptions {
                context: Some(c.to_owned()),
                ..Default::default()
            };
            kube::Config::from_kubeconfig(&opts)
                .await
                .with_context(|| format!("kubeconfig context {c:?}"))?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig and not running in a cluster")?,
    };
    kube::Client::try_from(cfg).context("building the Kubernetes client")
}

/// The informers of a config, not started yet, plus the dir cluster of a `dir:` source or the
/// client of a `kube` one.
///
/// Each informer's apiVersion and kind are checked first, through discovery with an API server,
/// against Kubernetes' built-in kinds and the directory's CRDs with `dir:`: a version or kind
/// that is not served refuses the start, naming the informer and what is served (a typo used to
/// sync nothing, silently).
pub async fn build_informers(
    config: &Config,
    opts: &RunOptions,
    executor: Option<&Executor>,
) -> anyhow::Result<(
    Vec<Arc<SharedInformer>>,
    Option<Arc<DirCluster>>,
    Option<kube::Client>,
)> {
    build_sharded_informers(config, opts, executor, None).await
}

/// [`build_informers`], the informers with `shard` (the default) listing and watching only
/// `view`'s hash ranges.
pub async fn build_sharded_informers(
    config: &Config,
    opts: &RunOptions,
    executor: Option<&Executor>,
    view: Option<&Arc<crate::scale::shards::ShardView>>,
) -> anyhow::Result<(
    Vec<Arc<SharedInformer>>,
    Option<Arc<DirCluster>>,
    Option<kube::Client>,
)> {
    let kind = config.source_kind()?;
    let (client, dir) = match &kind {
        SourceKind::Kube => match &opts.client {
            Some(c) => (Some(c.clone()), None),
            None => (Some(kube_client(opts.context.as_deref()).await?), None),
        },
        // The first scan reads and parses every manifest: off the async workers.
        SourceKind::Dir(p) => (None, {
            let (path, max) = (p.clone(), config.dir.max_file_size());
            Some(
                tokio::task::spawn_blocking(move || DirCluster::open(path, max))
                    .await
                    .context("the dir: source's first scan panicked")?
                    .with_context(|| format!("source dir:{}", p.display()))?,
            )
        }),
    };
    let mut out = Vec::new();
    for (i, inf) in config.informers.iter().enumerate() {
        let lw: Arc<dyn ListerWatcher> = match (&client, &dir) {
            (Some(client), _) => {
                let found = discover(client, config, i).await?;
                kube_lister(client, &found.resource, inf, view)
            }
            (None, Some(d)) => {
                let at = |field: &str| format!("{}: informers[{i}].{field}", config.file);
                match d.check_kind(&inf.api_version, &inf.kind) {
                    Ok(None) => {}
                    Ok(Some(warning)) => {
                        tracing::warn!(informer = %inf.name, "{}: {warning}", at("kind"))
                    }
                    Err(e) => anyhow::bail!("{}: {e} (informer {:?})", at("kind"), inf.name),
                }
                Arc::new(d.source(dir_filter(d, inf).map_err(|e| {
                    anyhow::anyhow!("{}: {e} (informer {:?})", at("fieldSelector"), inf.name)
                })?))
            }
            (None, None) => anyhow::bail!("no source"),
        };
        out.push(informer(inf, lw, executor, client.is_none())?);
    }
    Ok((out, dir, client))
}

/// The lister-watcher of informer `inf` over the API server's `resource`: one list and watch
/// per namespace when it names several (never cluster-wide, so a Role per namespace is all the
/// informer needs); only `view`'s hash ranges when it is sharded.
pub fn kube_lister(
    client: &kube::Client,
    resource: &kube::core::ApiResource,
    inf: &InformerConfig,
    view: Option<&Arc<crate::scale::shards::ShardView>>,
) -> Arc<dyn ListerWatcher> {
    let source = |ns: Option<&str>| {
        let mut src = KubeSource::with_resource(client.clone(), resource.clone(), ns)
            .strip_managed_fields(inf.strip_managed_fields)
            .metadata_only(inf.metadata_only)
            .named(inf.name.clone())
            .size_caps(inf.size_caps());
        if let Some(l) = &inf.label_selector {
            src = src.labels(l.clone());
        }
        if let Some(f) = &inf.field_selector {
            src = src.fields(f.clone());
        }
        if let Some(v) = view.filter(|_| inf.shard) {
            src = src.sharded(v.clone());
        }
        src
    };
    match inf.namespaces.as_deref() {
        Some([one]) => Arc::new(source(Some(one))),
        Some(several) => Arc::new(MultiNamespace::new(
            several
                .iter()
                .map(|n| (n.clone(), source(Some(n))))
                .collect(),
        )),
        None => Arc::new(source(None)),
    }
}

/// Informer `inf` over `lw`, its listeners on `executor`; `cut_metadata`: a source that sends
/// whole objects (a directory), so `metadataOnly` cuts them here.
pub fn informer(
    inf: &InformerConfig,
    lw: Arc<dyn ListerWatcher>,
    executor: Option<&Executor>,
    cut_metadata: bool,
) -> anyhow::Result<Arc<SharedInformer>> {
    let settings = InformerSettings {
        default_resync: inf.resync.0,
        reflector: ReflectorConfig {
            use_watch_list: inf.watch_list,
            list_caps: inf.list_caps(),
            ..ReflectorConfig::default()
        },
        executor: executor.cloned(),
        // Metadata only: an API server sends nothing else; a directory's objects are cut.
        transform: match inf
            .fields
            .as_ref()
            .or((inf.metadata_only && cut_metadata).then_some(&Vec::new()))
        {
            Some(paths) => Some(
                crate::informer::mask::FieldMask::parse(paths)
                    .map_err(|e| anyhow::anyhow!("informer {:?}: fields: {e}", inf.name))?
                    .transform(),
            ),
            None => None,
        },
        queue: inf.queue,
        on_panic: inf.on_panic,
        ..InformerSettings::default()
    };
    let informer = SharedInformer::new(inf.name.clone(), lw, settings);
    informer
        .add_indexers(index_funcs(inf))
        .with_context(|| format!("informer {:?}: indexes", inf.name))?;
    Ok(informer)
}

/// The services plugins share: the verdict store, and for a `kube` source the sink that sends
/// actions; the audit log (and its file when configured).
pub fn services(config: &Config, client: Option<kube::Client>) -> anyhow::Result<HostServices> {
    let audit = match &config.audit.file {
        Some(f) => {
            let path = config.resolve(f);
            AuditLog::to_file(&path)
                .with_context(|| format!("audit.file {}: cannot open", path.display()))?
        }
        None => AuditLog::memory(),
    };
    let audit = Arc::new(audit);
    Ok(match client {
        Some(c) => HostServices::with_sink(Arc::new(KubeActionSink::new(c)), audit),
        None => HostServices {
            audit,
            ..HostServices::default()
        },
    })
}

/// The plugin engine for a config; compiles run in child processes of `compiler` when given
/// ([`crate::plugin::compiler`]), its background threads under `tasks` (a supervisor's) when
/// given.
pub fn engine(
    config: &Config,
    compiler: Option<std::path::PathBuf>,
    tasks: Option<crate::tasks::Tasks>,
) -> anyhow::Result<Arc<PluginEngine>> {
    let mut ec = EngineConfig::default();
    if let Some(t) = tasks {
        ec.tasks = t;
    }
    if let Some(d) = &config.engine.cache_dir {
        ec.cache_dir = Some(config.resolve(d));
    }
    if let Some(t) = config.engine.epoch_tick {
        ec.epoch_tick = t.0;
    }
    ec.fuel = config.engine.fuel;
    if let Some(t) = config.engine.compile_timeout {
        ec.compile_timeout = t.0;
    }
    if let Some(m) = config.engine.compile_memory {
        ec.compile_memory = m.0;
    }
    ec.first_load_tier = config.engine.first_load_tier.unwrap_or(true);
    ec.max_module_size = config.max_module_size();
    ec.compiler = compiler;
    ec.max_compiles = config.executor.workers();
    Ok(PluginEngine::new(ec)?)
}

/// What discovery says of an informer's kind.
pub struct Discovered {
    /// Its resource (the plural as the server lists it).
    pub resource: kube::core::ApiResource,
    /// Whether the server lists it as namespaced; `None` when discovery failed.
    pub namespaced: Option<bool>,
}

/// The API server's resource for informer `i` (its plural and scope, from discovery). A group
/// version the server does not serve, or a kind it does not serve in it, is an error; when
/// discovery itself fails otherwise (no answer, forbidden), the resource is derived from the
/// kind, as kube does, its scope unknown, and the informer's own errors will tell.
pub async fn discover(
    client: &kube::Client,
    config: &Config,
    i: usize,
) -> anyhow::Result<Discovered> {
    let inf = &config.informers[i];
    let guessed = crate::source::kube::api_resource(&inf.api_version, &inf.kind);
    let listed = if guessed.group.is_empty() {
        client.list_core_api_resources(&guessed.version).await
    } else {
        client.list_api_group_resources(&inf.api_version).await
    };
    let at = |field: &str| format!("{}: informers[{i}].{field}", config.file);
    let resources = match listed {
        Ok(list) => list.resources,
        Err(kube::Error::Api(status)) if status.code == 404 => {
            anyhow::bail!(
                "{}: the API server does not serve {:?} (informer {:?})",
                at("apiVersion"),
                inf.api_version,
                inf.name
            );
        }
        Err(e) => {
            tracing::warn!(informer = %inf.name, error = %e, "discovery failed; using the plural derived from the kind");
            return Ok(Discovered {
                resource: guessed,
                namespaced: None,
            });
        }
    };
    // Subresources (`pods/status`) share the kind; the collection is the one without a slash.
    match resources
        .iter()
        .find(|r| r.kind == inf.kind && !r.name.contains('/'))
    {
        Some(r) => Ok(Discovered {
            resource: kube::core::ApiResource {
                plural: r.name.clone(),
                ..guessed
            },
            namespaced: Some(r.namespaced),
        }),
        None => {
            let mut served: Vec<&str> = resources
                .iter()
                .filter(|r| !r.name.contains('/'))
                .map(|r| r.kind.as_str())
                .collect();
            served.sort_unstable();
            served.dedup();
            anyhow::bail!(
                "{}: the API server serves no kind {:?} in {} (informer {:?}); it serves: {}",
                at("kind"),
                inf.kind,
                inf.api_version,
                inf.name,
                served.join(", ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn informer(group: &str, kind: &str, labels: &str, fields: &str) -> InformerConfig {
        let api_version = wisp_kinds::builtin_api_versions(group, kind)
            .into_iter()
            .find(|v| !v.contains("beta") && !v.contains("alpha"))
            .unwrap();
        serde_json::from_value(serde_json::json!({
            "name": "x", "apiVersion": api_version, "kind": kind,
            "labelSelector": labels, "fieldSelector": fields,
        }))
        .unwrap()
    }

    /// The `dir:` source filters with the selectors the API server would accept, and only
    /// those (the table is shared with config validation and the test API server).
    #[test]
    fn the_dir_sources_filter_takes_the_selectors_the_api_server_takes() {
        let table: serde_json::Value =
            serde_json::from_str(include_str!("../../../tests/fixtures/selectors.json")).unwrap();
        for row in table["label"].as_array().unwrap() {
            let (sel, want) = (row[0].as_str().unwrap(), row[1].as_str());
            match (filter_of(&informer("", "Pod", sel, "")), want) {
                (Ok(_), None) => {}
                (Err(e), Some(want)) if e.to_string().contains(want) => {}
                (got, want) => panic!("label selector {sel:?}: got {got:?}, want {want:?}"),
            }
        }
        for row in table["field"].as_array().unwrap() {
            let [group, kind, sel, want] = row.as_array().unwrap().as_slice() else {
                panic!("{row}")
            };
            let inf = informer(
                group.as_str().unwrap(),
                kind.as_str().unwrap(),
                "",
                sel.as_str().unwrap(),
            );
            match (filter_of(&inf), want.as_str()) {
                (Ok(_), None) => {}
                (Err(e), Some(want)) if e.to_string().contains(want) => {}
                (got, want) => panic!("{kind} field selector {sel}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// Field values are read as the API server reads them: Pod's `spec.host` is
    /// `spec.nodeName`, an unset `spec.hostNetwork` is `false`.
    #[test]
    fn the_dir_sources_field_selector_reads_values_as_the_api_server_does() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("pods.yaml"),
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {nodeName: n1, containers: [{name: c, image: nginx}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec: {containers: [{name: c, image: nginx}]}\n",
        )
        .unwrap();
        let cluster =
            DirCluster::open(d.path(), crate::source::dir::DEFAULT_MAX_FILE_SIZE).unwrap();
        let names = |fields: &str| {
            let src = cluster.source(filter_of(&informer("", "Pod", "", fields)).unwrap());
            src.objects().into_keys().collect::<Vec<_>>()
        };
        assert_eq!(names("spec.host=n1"), ["default/a"]);
        assert_eq!(names("spec.hostNetwork=false"), ["default/a", "default/b"]);
        assert_eq!(names("spec.nodeName!=n1"), ["default/b"]);
    }

    /// A custom kind whose CRD is in the directory selects on its `selectableFields`, and
    /// only on them (and metadata.name, metadata.namespace), as an API server serving it.
    #[test]
    fn the_dir_source_selects_custom_kinds_on_their_crds_selectable_fields() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("crd.yaml"),
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {plural: widgets, singular: widget, kind: Widget}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    selectableFields: [{jsonPath: .spec.color}]\n    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join("widgets.yaml"),
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: a}\nspec: {color: blue, size: 1}\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: b}\nspec: {color: red, size: 1}\n",
        )
        .unwrap();
        let cluster =
            DirCluster::open(d.path(), crate::source::dir::DEFAULT_MAX_FILE_SIZE).unwrap();
        let widget = |fields: &str| -> InformerConfig {
            serde_json::from_value(serde_json::json!({
                "name": "w", "apiVersion": "example.com/v1", "kind": "Widget",
                "fieldSelector": fields,
            }))
            .unwrap()
        };
        let src = cluster.source(dir_filter(&cluster, &widget("spec.color=blue")).unwrap());
        assert_eq!(src.objects().into_keys().collect::<Vec<_>>(), ["default/a"]);
        let e = dir_filter(&cluster, &widget("spec.size=1")).unwrap_err();
        assert_eq!(e.to_string(), "field label not supported: spec.size");
    }
}
