//! What the imports of the older ABIs (0.1, 0.2) share: their `policy` and `actions` interfaces,
//! their log levels and cache errors have 0.3's shapes under other types. [`forward_to_v03!`]
//! writes, in the module of an older ABI, the conversions and the `policy` and `actions`
//! implementations that convert and call 0.3's, so every ABI keeps one behaviour.

/// In the module of an older ABI, given the path of its `wisp::plugin` bindings: `level` and
/// `cache_error` (to and from 0.3's), and its `types`, `policy` and `actions` hosts calling 0.3's.
macro_rules! forward_to_v03 {
    ($old:path) => {
        use $old as old;

        /// An older ABI's log level as 0.3's.
        fn level(l: old::types::Level) -> crate::plugin::bindings::wisp::plugin::types::Level {
            use crate::plugin::bindings::wisp::plugin::types::Level as L;
            match l {
                old::types::Level::Trace => L::Trace,
                old::types::Level::Debug => L::Debug,
                old::types::Level::Info => L::Info,
                old::types::Level::Warn => L::Warn,
                old::types::Level::Error => L::Error,
            }
        }

        /// 0.3's cache error as the older ABI's.
        fn cache_error(
            e: crate::plugin::bindings::wisp::plugin::types::CacheError,
        ) -> old::types::CacheError {
            use crate::plugin::bindings::wisp::plugin::types::CacheError as E;
            match e {
                E::NotGranted(m) => old::types::CacheError::NotGranted(m),
                E::UnknownIndex(m) => old::types::CacheError::UnknownIndex(m),
                E::BadSelector(m) => old::types::CacheError::BadSelector(m),
            }
        }

        impl old::types::Host for crate::plugin::sandbox::state::StoreData {}

        impl old::policy::Host for crate::plugin::sandbox::state::StoreData {
            fn report(
                &mut self,
                informer: String,
                namespace: Option<String>,
                name: String,
                rule: String,
                violation: Option<old::policy::Violation>,
            ) -> Result<(), old::policy::VerdictError> {
                use crate::plugin::bindings::wisp::plugin::{policy as p, types as t};
                let violation = violation.map(|v| p::Violation {
                    severity: match v.severity {
                        old::types::Severity::Info => t::Severity::Info,
                        old::types::Severity::Low => t::Severity::Low,
                        old::types::Severity::Medium => t::Severity::Medium,
                        old::types::Severity::High => t::Severity::High,
                        old::types::Severity::Critical => t::Severity::Critical,
                    },
                    message: v.message,
                });
                p::Host::report(self, informer, namespace, name, rule, violation).map_err(|e| {
                    match e {
                        p::VerdictError::NotGranted(m) => old::policy::VerdictError::NotGranted(m),
                        p::VerdictError::NotFound(m) => old::policy::VerdictError::NotFound(m),
                        p::VerdictError::Invalid(m) => old::policy::VerdictError::Invalid(m),
                    }
                })
            }
        }

        /// An older ABI's object reference as 0.3's.
        fn object_ref(
            r: old::types::ObjectRef,
        ) -> crate::plugin::bindings::wisp::plugin::types::ObjectRef {
            crate::plugin::bindings::wisp::plugin::types::ObjectRef {
                api_version: r.api_version,
                kind: r.kind,
                namespace: r.namespace,
                name: r.name,
            }
        }

        /// 0.3's answer to an action as the older ABI's.
        fn accepted(
            r: Result<
                crate::plugin::bindings::wisp::plugin::actions::Accepted,
                crate::plugin::bindings::wisp::plugin::actions::ActionError,
            >,
        ) -> Result<old::actions::Accepted, old::actions::ActionError> {
            use crate::plugin::bindings::wisp::plugin::actions::{Accepted as A, ActionError as E};
            match r {
                Ok(A::Queued) => Ok(old::actions::Accepted::Queued),
                Ok(A::DryRun) => Ok(old::actions::Accepted::DryRun),
                Err(E::NotGranted(m)) => Err(old::actions::ActionError::NotGranted(m)),
                Err(E::RateLimited(m)) => Err(old::actions::ActionError::RateLimited(m)),
                Err(E::Invalid(m)) => Err(old::actions::ActionError::Invalid(m)),
                Err(E::QueueFull(m)) => Err(old::actions::ActionError::QueueFull(m)),
                Err(E::Unavailable(m)) => Err(old::actions::ActionError::Unavailable(m)),
            }
        }

        impl old::actions::Host for crate::plugin::sandbox::state::StoreData {
            fn patch_metadata(
                &mut self,
                target: old::types::ObjectRef,
                labels: Vec<(String, Option<String>)>,
                annotations: Vec<(String, Option<String>)>,
            ) -> Result<old::actions::Accepted, old::actions::ActionError> {
                accepted(
                    crate::plugin::bindings::wisp::plugin::actions::Host::patch_metadata(
                        self,
                        object_ref(target),
                        labels,
                        annotations,
                    ),
                )
            }

            fn apply(
                &mut self,
                manifest: String,
            ) -> Result<old::actions::Accepted, old::actions::ActionError> {
                accepted(crate::plugin::bindings::wisp::plugin::actions::Host::apply(
                    self, manifest,
                ))
            }

            fn create_event(
                &mut self,
                regarding: old::types::ObjectRef,
                event_type: old::actions::EventType,
                reason: String,
                message: String,
            ) -> Result<old::actions::Accepted, old::actions::ActionError> {
                use crate::plugin::bindings::wisp::plugin::actions as a;
                let event_type = match event_type {
                    old::actions::EventType::Normal => a::EventType::Normal,
                    old::actions::EventType::Warning => a::EventType::Warning,
                };
                accepted(a::Host::create_event(
                    self,
                    object_ref(regarding),
                    event_type,
                    reason,
                    message,
                ))
            }
        }
    };
}

pub(crate) use forward_to_v03;
