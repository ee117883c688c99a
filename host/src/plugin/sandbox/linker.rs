//! Linking a component against the host: which world it is a plugin of (0.3.0, 0.2.0 or 0.1.0), and
//! what it imports that the host does not provide ([`LinkError`]).

use wasmtime::component::{Component, Linker};

use super::state::StoreData;
use crate::plugin::bindings::{Abi, PluginPre, v01, v02, v03, v03_admission};

/// Links `component` against the host (`linker`) in the world its exported `listener` interface
/// names (0.3.0, 0.2.0 or 0.1.0): fails when it exports none, or imports what the host does not
/// provide. A 0.3.0 component's `admission` export is found here too, when it has one.
pub fn instance_pre(
    linker: &Linker<StoreData>,
    component: &Component,
) -> Result<PluginPre<StoreData>, LinkError> {
    let ty = component.component_type();
    let exports: Vec<&str> = ty
        .exports(component.engine())
        .map(|(name, _)| name)
        .collect();
    let Some(abi) = Abi::ALL
        .into_iter()
        .find(|a| exports.contains(&a.listener_export().as_str()))
    else {
        let loaded: Vec<String> = Abi::ALL.iter().map(|a| a.listener_export()).collect();
        return Err(LinkError::WrongWorld(format!(
            "it exports none of {} (its exports: {})",
            loaded.join(", "),
            if exports.is_empty() {
                "none".to_owned()
            } else {
                exports.join(", ")
            }
        )));
    };
    let pre = linker
        .instantiate_pre(component)
        .map_err(|e| link_error(&e))?;
    match abi {
        Abi::V0_3 => {
            let admission = match abi.admission_export() {
                Some(name) if exports.contains(&name.as_str()) => Some(
                    v03_admission::AdmissionIndices::new(&pre)
                        .map_err(|e| LinkError::WrongWorld(format!("its {name} export: {e:#}")))?,
                ),
                _ => None,
            };
            v03::PluginPre::new(pre).map(|p| PluginPre::V0_3(p, admission))
        }
        Abi::V0_2 => v02::PluginPre::new(pre).map(PluginPre::V0_2),
        Abi::V0_1 => v01::PluginPre::new(pre).map(PluginPre::V0_1),
    }
    .map_err(|e| LinkError::WrongWorld(format!("{e:#}")))
}

/// Why a component could not be linked against the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkError {
    /// It is not a plugin of a world the host loads (what it exports, or a listener of another
    /// shape).
    WrongWorld(String),
    /// It imports something the host does not provide: `import` is the import's name
    /// (`wasi:keyvalue/store@0.2.0`); `missing` when nothing of that name (or a part of it)
    /// is provided, otherwise it is provided with another type (`detail` says what differs).
    Import {
        /// The import's name.
        import: String,
        /// Nothing of that name is provided.
        missing: bool,
        /// wasmtime's words.
        detail: String,
    },
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkError::WrongWorld(d) => write!(f, "not a wisp:plugin/plugin component: {d}"),
            LinkError::Import {
                import,
                missing: true,
                detail,
            } => write!(
                f,
                "imports {import}, which Wisp does not provide{}: {detail}",
                Self::hint(import)
            ),
            LinkError::Import { import, detail, .. } => write!(
                f,
                "imports {import}, which does not match what Wisp provides: {detail}"
            ),
        }
    }
}

impl std::error::Error for LinkError {}

impl LinkError {
    /// A hint after "which Wisp does not provide": what plugins get instead.
    pub fn hint(import: &str) -> &'static str {
        let family = import.split('/').next().unwrap_or(import);
        match family.split('@').next().unwrap_or(family) {
            "wasi:sockets" => " (plugins get no sockets)",
            "wasi:http" => " (Wisp links wasi:http 0.2 and refuses every request)",
            "wasi:filesystem" => " (plugins get no files)",
            f if f.starts_with("wasi:") => {
                " (Wisp provides WASI 0.2 (cli, clocks, io, random, with nothing granted) and wasi:http 0.2 (every request refused))"
            }
            _ => " (plugins import only wisp:plugin and WASI 0.2)",
        }
    }
}

/// Names the import wasmtime could not satisfy: its top context reads "component imports
/// instance `NAME`, but a matching implementation was not found in the linker", its root cause
/// "... implementation is missing" when the name (or an item in it) is not provided at all.
fn link_error(e: &wasmtime::Error) -> LinkError {
    let top = e.to_string();
    let detail = format!("{e:#}");
    let name = top
        .strip_prefix("component imports ")
        .and_then(|rest| rest.split('`').nth(1))
        .filter(|_| top.contains("a matching implementation was not found"));
    let Some(import) = name else {
        return LinkError::WrongWorld(detail);
    };
    let root = e.root_cause().to_string();
    let missing = root.ends_with("implementation is missing");
    // The item of the interface that failed ("instance export `fields` has the wrong type").
    let item = e
        .chain()
        .filter_map(|c| {
            c.to_string()
                .strip_prefix("instance export `")
                .and_then(|r| r.split('`').next())
                .map(str::to_owned)
        })
        .last();
    let detail = match (missing, item) {
        (true, Some(item)) => format!("`{item}` is missing"),
        (true, None) => root,
        (false, Some(item)) => format!("`{item}`: {root}"),
        (false, None) => root,
    };
    LinkError::Import {
        import: import.to_owned(),
        missing,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_import_is_named_with_what_plugins_get_instead() {
        assert_eq!(
            LinkError::hint("wasi:sockets/tcp@0.2.3"),
            " (plugins get no sockets)"
        );
        assert!(LinkError::hint("wasi:keyvalue/store@0.2.0-draft").contains("WASI 0.2"));
        assert!(LinkError::hint("acme:thing/api").contains("only wisp:plugin and WASI"));
    }
}
