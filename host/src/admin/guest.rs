//! The metrics plugins report themselves, as `/metrics` families: `wisp_plugin_<name>` with the
//! plugin's labels plus `plugin`, series of one name grouped over every plugin.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::plugin::PluginHandle;

/// Help text of a plugin's own metric (plugins do not describe their metrics).
pub const HELP: &str = "Reported by the plugin.";

/// Label names and values of one series.
pub type Labels = Vec<(String, String)>;

/// The plugins' own series by family name (without the `wisp_` prefix).
#[derive(Debug, Default, PartialEq)]
pub struct Families {
    /// Counters: `plugin_<name>` with a trailing `_total` taken off (the exposition adds it).
    pub counters: BTreeMap<String, Vec<(Labels, u64)>>,
    /// Gauges: `plugin_<name>`.
    pub gauges: BTreeMap<String, Vec<(Labels, f64)>>,
}

/// Every series every plugin reports now, grouped by family.
pub fn families(plugins: &[Arc<PluginHandle>]) -> Families {
    let mut f = Families::default();
    for p in plugins {
        let s = p.status();
        for ((name, labels), v) in s.guest_counters() {
            let family = name.strip_suffix("_total").unwrap_or(&name);
            if let Some(l) = labels_with_plugin(labels, p.name()) {
                f.counters
                    .entry(format!("plugin_{family}"))
                    .or_default()
                    .push((l, v));
            }
        }
        for ((name, labels), v) in s.guest_gauges() {
            if let Some(l) = labels_with_plugin(labels, p.name()) {
                f.gauges
                    .entry(format!("plugin_{name}"))
                    .or_default()
                    .push((l, v));
            }
        }
    }
    f.untangle();
    f
}

impl Families {
    /// Renames families so no plugin's series can take another's names (which would leave one
    /// of them out of the exposition): a counter family ending in `_total` or `_created` (whose
    /// names another counter family's would be) gets `_counter` appended, and a gauge family
    /// named like a counter family's samples (`<c>`, `<c>_total`, `<c>_created`) gets `_gauge`
    /// appended until it is not. Families of one type and name merge, their series told apart
    /// by `plugin`.
    fn untangle(&mut self) {
        let counters = std::mem::take(&mut self.counters);
        for (name, mut samples) in counters {
            let name = if name.ends_with("_total") || name.ends_with("_created") {
                format!("{name}_counter")
            } else {
                name
            };
            self.counters.entry(name).or_default().append(&mut samples);
        }
        let clashes = |g: &str, counters: &BTreeMap<String, Vec<(Labels, u64)>>| {
            counters.contains_key(g)
                || ["_total", "_created"]
                    .iter()
                    .any(|s| g.strip_suffix(s).is_some_and(|c| counters.contains_key(c)))
        };
        let gauges = std::mem::take(&mut self.gauges);
        for (mut name, mut samples) in gauges {
            while clashes(&name, &self.counters) {
                name.push_str("_gauge");
            }
            self.gauges.entry(name).or_default().append(&mut samples);
        }
    }
}

/// A plugin's series labels plus `plugin`, sorted by name; a label of the plugin's own named
/// `plugin` becomes `exported_plugin` (as Prometheus does on a clash). `None` when a label name
/// is not a valid Prometheus label name (the host accepts `:` and `__` names, Prometheus refuses
/// them).
pub fn labels_with_plugin(labels: Labels, plugin: &str) -> Option<Labels> {
    let mut out = Vec::with_capacity(labels.len() + 1);
    for (k, v) in labels {
        if k.contains(':') || k.starts_with("__") {
            return None;
        }
        let k = if k == "plugin" {
            "exported_plugin".to_owned()
        } else {
            k
        };
        out.push((k, v));
    }
    out.push(("plugin".to_owned(), plugin.to_owned()));
    out.sort();
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn labels_get_the_plugin_added_and_a_clashing_plugin_label_renamed() {
        assert_eq!(
            labels_with_plugin(l(&[("plugin", "x"), ("a", "1")]), "p"),
            Some(l(&[("a", "1"), ("exported_plugin", "x"), ("plugin", "p")]))
        );
    }

    #[test]
    fn no_family_takes_the_names_of_another() {
        let mut f = Families::default();
        let one = |p: &str| vec![(l(&[("plugin", p)]), 1u64)];
        f.counters.insert("plugin_x".into(), one("a"));
        f.counters.insert("plugin_x_total".into(), one("b"));
        f.gauges
            .insert("plugin_x".into(), vec![(l(&[("plugin", "c")]), 1.0)]);
        f.gauges.insert(
            "plugin_x_created".into(),
            vec![(l(&[("plugin", "d")]), 1.0)],
        );
        f.gauges
            .insert("plugin_y".into(), vec![(l(&[("plugin", "e")]), 1.0)]);
        f.untangle();
        let names = |m: Vec<&String>| m.into_iter().cloned().collect::<Vec<_>>();
        assert_eq!(
            names(f.counters.keys().collect()),
            ["plugin_x", "plugin_x_total_counter"]
        );
        assert_eq!(
            names(f.gauges.keys().collect()),
            ["plugin_x_created_gauge", "plugin_x_gauge", "plugin_y"]
        );
    }

    #[test]
    fn series_with_a_label_name_prometheus_refuses_are_left_out() {
        assert_eq!(labels_with_plugin(l(&[("a:b", "1")]), "p"), None);
        assert_eq!(labels_with_plugin(l(&[("__name__", "1")]), "p"), None);
    }
}
