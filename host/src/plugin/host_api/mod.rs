//! The imports as plugins see them, one file per WIT interface: [`host`] (logging, cache reads
//! limited to granted informers, counters and gauges), [`policy`] (verdicts) and [`actions`]
//! (changes through the host, within grants), in ABI 0.3; the same in 0.2 in `v02` and in 0.1
//! in `v01` (which convert and call these, with what they share written once by `legacy`);
//! [`poll`]: `wasi:io/poll`, bounded by the call's deadline.
//! [`grants`]: what they share (the granted caches).

pub mod actions;
pub mod grants;
pub mod host;
#[macro_use]
mod legacy;
pub mod policy;
pub mod poll;
mod v01;
mod v02;

use legacy::forward_to_v03;

pub use actions::MAX_MANIFEST;
pub use host::{MAX_LABEL_VALUE, MAX_LABELS, MAX_METRIC_NAME, MAX_QUERY_RESULTS};
pub use v01::to_wit;

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use crate::actions::PluginActions;
    use crate::informer::Indexer;
    use crate::informer::key::key_for;
    use crate::informer::object::test_util::obj;
    use crate::plugin::bindings::wisp::plugin::{host, policy};
    use crate::plugin::sandbox::state::StoreData;
    use crate::plugin::sandbox::state::{Grants, HostApi};
    use crate::plugin::spec::LogLevel;
    use crate::plugin::status::PluginStatus;

    /// Store data of a plugin granted `pods`, which caches `a/p` and the cluster-scoped `n`.
    fn store() -> StoreData {
        let pods = Indexer::new();
        pods.add(obj(Some("a"), "p", "1"));
        pods.add(obj(None, "n", "1"));
        let grants = Grants::caches(BTreeMap::from([("pods".to_owned(), pods.cache())]));
        let status = Arc::new(PluginStatus::default());
        let actions = PluginActions::new(
            "t".into(),
            Default::default(),
            status.clone(),
            grants.services.clone(),
        );
        let api = HostApi {
            plugin: "t".into(),
            grants,
            log_level: LogLevel::Info,
            status,
            actions: Arc::new(actions),
            verdict_events: false,
        };
        StoreData::new(api, 1 << 20, std::time::Duration::from_millis(50))
    }

    #[test]
    fn a_name_with_a_slash_names_no_object_rather_than_another_ones_key() {
        let mut s = store();
        let get = |s: &mut StoreData, ns: Option<&str>, name: &str| {
            let wire =
                host::Host::cache_get(s, "pods".into(), ns.map(Into::into), name.into()).unwrap();
            // 0.1 reads the same object as a record.
            let record = crate::plugin::bindings::v01::wisp::plugin::host::Host::cache_get(
                s,
                "pods".into(),
                ns.map(Into::into),
                name.into(),
            )
            .unwrap();
            assert_eq!(wire.is_some(), record.is_some());
            if let Some(w) = wire {
                let cached = s.api.grants.caches["pods"].get_by_key(&key_for(ns, name));
                assert_eq!(Some(w.as_slice()), cached.as_ref().map(|o| o.wire()));
            }
            record.map(|o| o.meta.name)
        };
        assert_eq!(get(&mut s, Some("a"), "p").as_deref(), Some("p"));
        assert_eq!(get(&mut s, None, "n").as_deref(), Some("n"));
        assert_eq!(
            get(&mut s, None, "a/p"),
            None,
            "the key of a/p, not its name"
        );
        assert_eq!(get(&mut s, Some("a/b"), "p"), None);
        let r = policy::Host::report(&mut s, "pods".into(), None, "a/p".into(), "r".into(), None);
        assert!(matches!(r, Err(policy::VerdictError::NotFound(_))), "{r:?}");
    }
}
