//! `/metrics`: a Prometheus collector that reads the informers' stats and the plugins' status at
//! scrape time (nothing is copied into metric objects in between), encoded as OpenMetrics text.
//!
//! Every family is prefixed `wisp_`: `wisp_informer_*{informer}`, `wisp_plugin_*{plugin}`, the
//! handle-latency histogram, and each plugin's own series as `wisp_plugin_<name>{..., plugin}`.

use std::collections::HashSet;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::{AdminState, PLUGIN_COUNTERS, guest};
use crate::informer::listener::ListenerStats;
use crate::plugin::status::PluginCounters;
use crate::plugin::{PluginHandle, PluginState};

/// `Content-Type` of what [`encode`] produces.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `Content-Type` of the Prometheus text format ([`to_prometheus_text`]).
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The two expositions `/metrics` serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text, for a scraper whose `Accept` asks for it (Prometheus does).
    OpenMetrics,
    /// The Prometheus text format 0.0.4: for anything else (`promtool`, `curl`, older
    /// scrapers), as client_golang's handler answers without negotiation.
    Prometheus,
}

impl Format {
    /// What an `Accept` header asks for: OpenMetrics when it names
    /// `application/openmetrics-text` with a weight above 0, the Prometheus text otherwise.
    pub fn negotiate(accept: Option<&str>) -> Self {
        let wants_openmetrics = accept.into_iter().flat_map(|a| a.split(',')).any(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("");
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .is_some_and(|q| q.parse::<f64>().is_ok_and(|q| q <= 0.0))
            });
            media.eq_ignore_ascii_case("application/openmetrics-text") && !refused
        });
        if wants_openmetrics {
            Self::OpenMetrics
        } else {
            Self::Prometheus
        }
    }

    /// Its `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Self::Prometheus => PROMETHEUS_CONTENT_TYPE,
        }
    }
}

/// The OpenMetrics text that [`encode`] made, as the Prometheus text format 0.0.4 has it: a
/// counter's family is named with its `_total` (the name its samples have, so a text parser
/// such as `promtool check metrics` finds its HELP and TYPE), `_created` samples, `# UNIT`
/// lines and `# EOF` are left out, an info family becomes a gauge named `_info`, `unknown`
/// becomes `untyped`.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // Families by name with how the text format names them, and whether their `_created`
    // samples go.
    let mut renamed: std::collections::HashMap<&str, (String, &str)> = Default::default();
    for line in openmetrics.lines() {
        if let Some(t) = line.strip_prefix("# TYPE ") {
            let (family, kind) = t.split_once(' ').unwrap_or((t, ""));
            let (name, kind) = match kind {
                "counter" => (format!("{family}_total"), "counter"),
                "info" => (format!("{family}_info"), "gauge"),
                "unknown" => (family.to_owned(), "untyped"),
                other => (family.to_owned(), other),
            };
            renamed.insert(family, (name, kind));
        }
    }
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (family, help) = rest.split_once(' ').unwrap_or((rest, ""));
            let name = renamed.get(family).map_or(family, |(n, _)| n.as_str());
            out.push_str(&format!("# HELP {name} {help}\n"));
            continue;
        }
        if let Some(t) = line.strip_prefix("# TYPE ") {
            let family = t.split_once(' ').map_or(t, |(f, _)| f);
            let (name, kind) = &renamed[family];
            out.push_str(&format!("# TYPE {name} {kind}\n"));
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        if let Some(family) = line[..name_end].strip_suffix("_created")
            && renamed
                .get(family)
                .is_some_and(|(_, kind)| *kind == "counter")
        {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// A registry whose one collector reads `state` on every scrape.
pub fn registry(state: AdminState) -> Registry {
    let mut r = Registry::with_prefix("wisp");
    r.register_collector(Box::new(Live { state }));
    r
}

/// The OpenMetrics text of `registry`, `# EOF` included.
pub fn encode(registry: &Registry) -> Result<String, std::fmt::Error> {
    let mut s = String::new();
    prometheus_client::encoding::text::encode(&mut s, registry)?;
    Ok(s)
}

/// The collector: the admin state, read at scrape time.
struct Live {
    state: AdminState,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live").finish_non_exhaustive()
    }
}

impl Collector for Live {
    fn encode(&self, enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut out = Out {
            enc,
            taken: HashSet::new(),
        };
        self.informers(&mut out)?;
        self.host(&mut out)?;
        self.policy(&mut out)?;
        out.informer_latency(&self.state.informers)?;
        self.plugins(&mut out)
    }
}

impl Live {
    /// The informers' counters and gauges.
    fn informers(&self, out: &mut Out<'_>) -> Result<(), std::fmt::Error> {
        let informers: Vec<_> = self
            .state
            .informers
            .iter()
            .map(|i| (i.name(), i.stats(), i.has_synced()))
            .collect();
        let by_informer = |f: fn(&crate::informer::shared_informer::InformerStats) -> u64| {
            informers
                .iter()
                .map(move |(n, s, _)| ([("informer", *n)], f(s)))
        };
        out.counter(
            "informer_events",
            "Watch events received.",
            by_informer(|s| s.events),
        )?;
        let oversized = crate::source::kube::oversized_responses();
        out.counter(
            "informer_oversized_responses",
            "List responses and watch events refused for exceeding maxListSize / maxEventSize \
             (each followed by a relist after backoff).",
            informers
                .iter()
                .map(|(n, _, _)| ([("informer", *n)], oversized.get(*n).copied().unwrap_or(0))),
        )?;
        let over_cap = crate::informer::reflector::lists_over_cap();
        out.counter(
            "informer_lists_over_cap",
            "Whole lists (all pages, or a streaming list's initial events) stopped over \
             maxListObjects / maxListTotalSize: the partial list dropped, a relist after backoff.",
            informers
                .iter()
                .map(|(n, _, _)| ([("informer", *n)], over_cap.get(*n).copied().unwrap_or(0))),
        )?;
        out.counter(
            "informer_lists",
            "Lists done (first list and relists).",
            by_informer(|s| s.lists),
        )?;
        out.counter(
            "informer_relists",
            "Lists done after the first.",
            by_informer(|s| s.lists.saturating_sub(1)),
        )?;
        out.counter(
            "informer_watches",
            "Watch requests made.",
            by_informer(|s| s.watches),
        )?;
        out.counter(
            "informer_panics",
            "Panics caught in the informer's pipeline (an index function, the field mask); each \
             fails the informer until it restarts (onPanic: restart) or the host exits.",
            by_informer(|s| s.panics),
        )?;
        out.counter(
            "informer_restarts",
            "Restarts after a panic.",
            by_informer(|s| s.restarts),
        )?;
        out.gauge(
            "informer_cache_size",
            "Objects in the cache.",
            by_informer(|s| s.cache_size as u64),
        )?;
        out.gauge(
            "informer_queued_items",
            "Items waiting in the informer's queue (client-go's queued items: keys with pending \
             deltas of a DeltaFIFO, changes of a RealFIFO).",
            by_informer(|s| s.fifo_depth as u64),
        )?;
        out.gauge(
            "informer_store_resource_version",
            "The last resourceVersion the informer's cache has processed (of an object, a list or \
             a bookmark), as a number (client-go's store resource version; absent while it is not \
             a number).",
            informers.iter().filter_map(|(n, s, _)| {
                let rv = s.store_resource_version.parse::<u64>().ok()?;
                Some(([("informer", *n)], rv))
            }),
        )?;
        out.gauge(
            "informer_synced",
            "1 once the first list has been fully processed.",
            informers
                .iter()
                .map(|(n, _, synced)| ([("informer", *n)], u64::from(*synced))),
        )?;

        Ok(())
    }

    /// The host's own families: OCI polls, the dir: source, the Lease, the executor, its tasks.
    fn host(&self, out: &mut Out<'_>) -> Result<(), std::fmt::Error> {
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        let unlabelled: [(&str, &str); 0] = [];
        out.counter(
            "oci_poll_failures",
            "OCI tag look-ups, and pulls of moved tags, that failed (registry unreachable or \
             refusing, content or signature refused); the running modules stayed.",
            [(
                unlabelled,
                crate::reloader::oci_poll::POLL_FAILURES.load(relaxed),
            )],
        )?;
        out.counter(
            "oci_tags_moved",
            "OCI tags found pointing at a new manifest, whose module was then pulled and checked.",
            [(
                unlabelled,
                crate::reloader::oci_poll::TAGS_MOVED.load(relaxed),
            )],
        )?;
        if let Some(errors) = &self.state.source_errors {
            let none: [(&str, &str); 0] = [];
            out.gauge(
                "dir_files_unread",
                "Manifest files of the dir: source that do not parse, or of which some documents \
                 were skipped (see /readyz for which and why).",
                [(none, errors().len() as u64)],
            )?;
        }
        if let Some(l) = &self.state.leadership {
            let none: [(&str, &str); 0] = [];
            out.gauge(
                "lease_leading",
                "1 while this replica holds the sharding Lease and runs the plugins (see \
                 docs/scale-out.md); 0 on a standby.",
                [(none, u64::from(l.is_leader()))],
            )?;
            out.counter(
                "shard_foreign_members",
                "Leases labelled with this replica's shard group that no Wisp replica wrote (no \
                 managedFields entry of field manager `wisp`): ignored, not members; each counted \
                 once (always 0 with mode leader).",
                [(none, l.foreign_members())],
            )?;
        }
        if let Some(e) = &self.state.executor {
            let s = e.stats();
            let none: [(&str, &str); 0] = [];
            for (name, help, v) in [
                (
                    "executor_workers",
                    "Worker threads that run the plugins.",
                    s.workers,
                ),
                (
                    "executor_running",
                    "Plugin listeners running a batch now.",
                    s.running,
                ),
                (
                    "executor_ready",
                    "Plugin listeners with work waiting for a worker.",
                    s.ready,
                ),
                (
                    "executor_parked",
                    "Plugin listeners with work waiting for another listener of their plugin.",
                    s.parked,
                ),
                (
                    "executor_waiting",
                    "Plugin listeners waiting out a retry backoff (holding no worker).",
                    s.waiting,
                ),
            ] {
                out.gauge(name, help, [(none, v as u64)])?;
            }
        }

        self.admin(out)?;
        if let Some(failures) = &self.state.task_failures {
            out.counter(
                "host_task_failures",
                "Errors (and panics) of the host's own tasks that the host goes on without (see \
                 the supervisor's rule in docs/lifecycle.md), by task.",
                failures()
                    .iter()
                    .map(|(t, n)| ([("task", t.as_str())], *n))
                    .collect::<Vec<_>>(),
            )?;
        }
        Ok(())
    }

    /// The admin and metrics servers: failed token checks, connections shed, refused and
    /// timed out.
    fn admin(&self, out: &mut Out<'_>) -> Result<(), std::fmt::Error> {
        use super::{auth, server};
        let unlabelled: [(&str, &str); 0] = [];
        for (name, help, v) in [
            (
                "admin_auth_failures",
                "Requests to protected endpoints answered 401: a missing or wrong token.",
                &auth::AUTH_FAILURES,
            ),
            (
                "admin_auth_rate_limited",
                "Requests to protected endpoints answered 429, their token not checked: failed \
                 token checks over their rate (20 at once, then 5 a second per server).",
                &auth::AUTH_RATE_LIMITED,
            ),
            (
                "admin_connections_shed",
                "Connections to the admin or metrics server closed to make room for a new one \
                 (admin.maxConnections reached): the oldest without a request in flight.",
                &server::CONNECTIONS_SHED,
            ),
            (
                "admin_connections_refused",
                "Connections to the admin or metrics server closed at accept: every slot \
                 (admin.maxConnections) had a request in flight and the reserve was taken.",
                &server::CONNECTIONS_REFUSED,
            ),
            (
                "admin_connections_timed_out",
                "Connections to the admin or metrics server closed for being idle past \
                 admin.idleTimeout or sending headers for longer than admin.headerReadTimeout.",
                &server::CONNECTIONS_TIMED_OUT,
            ),
        ] {
            let n = v.load(std::sync::atomic::Ordering::Relaxed);
            out.counter(name, help, [(unlabelled, n)])?;
        }
        Ok(())
    }

    /// Policy verdicts and reports.
    fn policy(&self, out: &mut Out<'_>) -> Result<(), std::fmt::Error> {
        let violations = self.state.services.verdicts.counts();
        out.gauge(
            "policy_violations",
            "Current policy violations, by plugin, rule and severity.",
            violations.iter().map(|((p, r, s), n)| {
                (
                    [
                        ("plugin", p.as_str()),
                        ("rule", r.as_str()),
                        ("severity", s.as_str()),
                    ],
                    *n,
                )
            }),
        )?;
        let reports = &self.state.services.reports;
        if reports.enabled.load(std::sync::atomic::Ordering::Relaxed) {
            let none: [(&str, &str); 0] = [];
            out.gauge(
                "policy_reports",
                "Policy reports this host has written and not deleted (policyReports).",
                [(
                    none,
                    reports.written.load(std::sync::atomic::Ordering::Relaxed),
                )],
            )?;
            out.counter(
                "policy_reports_write_errors",
                "Policy report writes (apply, delete, list) that failed; retried at the next interval.",
                [(none, reports.write_errors.load(std::sync::atomic::Ordering::Relaxed))],
            )?;
        }
        Ok(())
    }

    /// The plugins' counters, gauges, latencies and own series.
    fn plugins(&self, out: &mut Out<'_>) -> Result<(), std::fmt::Error> {
        let plugins = self.state.plugins();
        for c in PLUGIN_COUNTERS {
            out.counter(
                &format!("plugin_{}", c.metric),
                c.help,
                plugins.iter().map(|p| {
                    let v = PluginCounters::get((c.get)(&p.status().counters));
                    ([("plugin", p.name())], v)
                }),
            )?;
        }
        out.gauge(
            "plugin_quarantined",
            "1 when the plugin is quarantined (receives nothing more).",
            plugins.iter().map(|p| {
                let q = matches!(p.state(), PluginState::Quarantined { .. });
                ([("plugin", p.name())], u64::from(q))
            }),
        )?;
        let queues: Vec<_> = plugins.iter().map(|p| (p.name(), p.queues())).collect();
        // A field of every queue of each plugin, added up.
        let summed = |field: fn(&ListenerStats) -> usize| {
            queues.iter().map(move |(p, q)| {
                let sum: usize = q.iter().map(|(_, s)| field(s)).sum();
                ([("plugin", *p)], sum as u64)
            })
        };
        out.gauge(
            "plugin_queue_depth",
            "Notifications queued for the plugin, over all its informers.",
            summed(|s| s.depth),
        )?;
        out.gauge(
            "plugin_informer_queue_depth",
            "Notifications queued for the plugin from one informer.",
            queues.iter().flat_map(|(p, q)| {
                q.iter()
                    .map(move |(i, s)| ([("plugin", *p), ("informer", i.as_str())], s.depth as u64))
            }),
        )?;
        out.gauge(
            "plugin_queue_bytes",
            "Bytes of the notifications queued for the plugin, over all its informers.",
            summed(|s| s.bytes),
        )?;
        out.gauge(
            "plugin_queue_oldest_age_seconds",
            "How long the plugin's oldest queued notification has waited (0: none waits).",
            queues.iter().map(|(p, q)| {
                let oldest = q.iter().filter_map(|(_, s)| s.oldest_age).max();
                ([("plugin", *p)], oldest.map_or(0.0, |d| d.as_secs_f64()))
            }),
        )?;
        out.latency(&plugins)?;
        out.waited(&plugins)?;
        out.guest(&plugins)
    }
}

/// The encoder plus every sample name written so far: a plugin's own series that would reuse
/// one is skipped, so the exposition never has a name twice.
struct Out<'a> {
    enc: DescriptorEncoder<'a>,
    taken: HashSet<String>,
}

impl Out<'_> {
    /// Reserves the names of family `name` of type `t` (without the `wisp_` prefix); false when
    /// one is already taken.
    fn claim(&mut self, name: &str, t: MetricType) -> bool {
        let suffixes: &[&str] = match t {
            MetricType::Counter => &["", "_total", "_created"],
            MetricType::Histogram => &["", "_bucket", "_sum", "_count", "_created"],
            _ => &[""],
        };
        let names: Vec<String> = suffixes.iter().map(|s| format!("{name}{s}")).collect();
        if names.iter().any(|n| self.taken.contains(n)) {
            return false;
        }
        self.taken.extend(names);
        true
    }

    fn counter<S: EncodeLabelSet>(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (S, u64)>,
    ) -> Result<(), std::fmt::Error> {
        let samples: Vec<_> = samples.into_iter().collect();
        if samples.is_empty() || !self.claim(name, MetricType::Counter) {
            return Ok(());
        }
        let mut m = self
            .enc
            .encode_descriptor(name, help, None, MetricType::Counter)?;
        for (labels, v) in &samples {
            m.encode_family(labels)?
                .encode_counter::<NoLabelSet, _, u64>(v, None)?;
        }
        Ok(())
    }

    fn gauge<S: EncodeLabelSet, V: EncodeGaugeValue>(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (S, V)>,
    ) -> Result<(), std::fmt::Error> {
        let samples: Vec<_> = samples.into_iter().collect();
        if samples.is_empty() || !self.claim(name, MetricType::Gauge) {
            return Ok(());
        }
        let mut m = self
            .enc
            .encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (labels, v) in &samples {
            m.encode_family(labels)?.encode_gauge(v)?;
        }
        Ok(())
    }

    /// `wisp_informer_processing_latency_seconds`, a classic histogram per informer (client-go's
    /// processing latency: one popped item through the cache and to the listeners).
    fn informer_latency(
        &mut self,
        informers: &[Arc<crate::informer::SharedInformer>],
    ) -> Result<(), std::fmt::Error> {
        if informers.is_empty()
            || !self.claim("informer_processing_latency_seconds", MetricType::Histogram)
        {
            return Ok(());
        }
        let mut m = self.enc.encode_descriptor(
            "informer_processing_latency",
            "Time to process one item popped from the informer's queue (cache update and \
             notifications).",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for i in informers {
            let (cumulative, sum, _) = i.processing_latency();
            let (buckets, count) = per_bucket(&cumulative);
            m.encode_family(&[("informer", i.name())])?
                .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        }
        Ok(())
    }

    /// `wisp_plugin_handle_latency_seconds`, a classic histogram per plugin.
    fn latency(&mut self, plugins: &[Arc<PluginHandle>]) -> Result<(), std::fmt::Error> {
        if plugins.is_empty() || !self.claim("plugin_handle_latency_seconds", MetricType::Histogram)
        {
            return Ok(());
        }
        let mut m = self.enc.encode_descriptor(
            "plugin_handle_latency",
            "Time spent in one call of the plugin's handle.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for p in plugins {
            let (cumulative, sum, _) = p.status().counters.handle_latency.snapshot();
            let (buckets, count) = per_bucket(&cumulative);
            m.encode_family(&[("plugin", p.name())])?
                .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        }
        Ok(())
    }

    /// `wisp_plugin_end_to_end_latency_seconds`: each notification's time from the plugin's
    /// queue to its outcome, a classic histogram per plugin (over all its informers).
    fn waited(&mut self, plugins: &[Arc<PluginHandle>]) -> Result<(), std::fmt::Error> {
        if plugins.is_empty()
            || !self.claim("plugin_end_to_end_latency_seconds", MetricType::Histogram)
        {
            return Ok(());
        }
        let mut m = self.enc.encode_descriptor(
            "plugin_end_to_end_latency",
            "Time from a notification's queue to its outcome (the end of the plugin's batch, retries included).",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for p in plugins {
            let (cumulative, sum, _) = p.waited();
            let (buckets, count) = per_bucket(&cumulative);
            m.encode_family(&[("plugin", p.name())])?
                .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        }
        Ok(())
    }

    /// Each plugin's own series (see [`guest`](super::guest)); a family whose names clash with
    /// a host metric, or with a family of the other type, is skipped.
    fn guest(&mut self, plugins: &[Arc<PluginHandle>]) -> Result<(), std::fmt::Error> {
        let families = guest::families(plugins);
        for (name, samples) in families.counters {
            self.counter(&name, guest::HELP, samples)?;
        }
        for (name, samples) in families.gauges {
            self.gauge(&name, guest::HELP, samples)?;
        }
        Ok(())
    }
}

/// Cumulative `(bound, count)` pairs as per-bucket counts (what the encoder adds up), and the
/// total: the +Inf count, so that the exposition's `_count` always equals its `+Inf` bucket.
fn per_bucket(cumulative: &[(f64, u64)]) -> (Vec<(f64, u64)>, u64) {
    let mut prev = 0;
    let buckets = cumulative
        .iter()
        .map(|&(bound, acc)| {
            let n = acc.saturating_sub(prev);
            prev = prev.max(acc);
            (bound, n)
        })
        .collect();
    (buckets, prev)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scraper_gets_openmetrics_only_when_its_accept_asks_for_it() {
        let prometheus_3 = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,\
            application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
        assert_eq!(Format::negotiate(Some(prometheus_3)), Format::OpenMetrics);
        for accept in [
            None,
            Some("text/plain"),
            Some("*/*"),
            Some("text/plain;version=0.0.4"),
            Some("application/openmetrics-text;q=0, text/plain"),
        ] {
            assert_eq!(Format::negotiate(accept), Format::Prometheus, "{accept:?}");
        }
    }

    #[test]
    fn the_prometheus_text_names_counters_with_total_and_drops_created_unit_and_eof() {
        let om = "# HELP wisp_x Things done.\n# TYPE wisp_x counter\n\
            wisp_x_total{plugin=\"a\"} 3\nwisp_x_created{plugin=\"a\"} 1.7e9\n\
            # HELP wisp_lat_seconds Latency.\n# TYPE wisp_lat_seconds histogram\n# UNIT wisp_lat_seconds seconds\n\
            wisp_lat_seconds_sum 0.5\nwisp_lat_seconds_count 2\nwisp_lat_seconds_bucket{le=\"+Inf\"} 2\n\
            # HELP wisp_build Build.\n# TYPE wisp_build info\nwisp_build_info{version=\"1\"} 1\n\
            # HELP wisp_up Up.\n# TYPE wisp_up gauge\nwisp_up 1\n# EOF\n";
        assert_eq!(
            to_prometheus_text(om),
            "# HELP wisp_x_total Things done.\n# TYPE wisp_x_total counter\n\
             wisp_x_total{plugin=\"a\"} 3\n\
             # HELP wisp_lat_seconds Latency.\n# TYPE wisp_lat_seconds histogram\n\
             wisp_lat_seconds_sum 0.5\nwisp_lat_seconds_count 2\nwisp_lat_seconds_bucket{le=\"+Inf\"} 2\n\
             # HELP wisp_build_info Build.\n# TYPE wisp_build_info gauge\nwisp_build_info{version=\"1\"} 1\n\
             # HELP wisp_up Up.\n# TYPE wisp_up gauge\nwisp_up 1\n"
        );
    }

    #[test]
    fn per_bucket_counts_undo_the_cumulation_and_total_the_inf_bucket() {
        let (b, n) = per_bucket(&[(0.1, 2), (1.0, 5), (f64::INFINITY, 6)]);
        assert_eq!(b, vec![(0.1, 2), (1.0, 3), (f64::INFINITY, 1)]);
        assert_eq!(n, 6);
    }

    #[test]
    fn a_family_whose_sample_names_are_taken_is_refused() {
        let mut s = String::new();
        let mut r = Registry::default();
        r.register_collector(Box::new(Claims));
        prometheus_client::encoding::text::encode(&mut s, &r).unwrap();
        assert_eq!(s.matches("# TYPE").count(), 1, "{s}");
    }

    /// Claims a counter `x`, then a gauge `x_total` (refused: `x_total` is a sample of `x`).
    #[derive(Debug)]
    struct Claims;

    impl Collector for Claims {
        fn encode(&self, enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            let mut out = Out {
                enc,
                taken: HashSet::new(),
            };
            out.counter("x", "x", [([("a", "b")], 1)])?;
            out.gauge("x_total", "x", [([("a", "b")], 1u64)])
        }
    }
}
