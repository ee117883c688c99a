//! A manifest file's text as the objects an API server would store: its documents (`kind: List`
//! expanded, `generateName` given a stable name), each placed in its kind's scope, decoded,
//! defaulted and validated, and served to an informer in the version it asks for.

use super::*;

/// Which (group, kind) pairs are cluster-scoped: the built-in ones ([`wisp_kinds::BUILTINS`])
/// and the custom kinds of the directory's CustomResourceDefinitions with `scope: Cluster`.
pub(super) struct Scopes(std::collections::BTreeSet<(String, String)>);

impl Scopes {
    pub(super) fn of<'a>(objects: impl Iterator<Item = &'a Value>) -> Self {
        let mut set: std::collections::BTreeSet<(String, String)> = wisp_kinds::BUILTINS
            .iter()
            .filter(|b| !b.namespaced)
            .map(|b| (b.group.to_owned(), b.kind.to_owned()))
            .collect();
        for v in objects {
            if v.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition")
                && v.pointer("/spec/scope").and_then(Value::as_str) == Some("Cluster")
                && let (Some(g), Some(k)) = (
                    v.pointer("/spec/group").and_then(Value::as_str),
                    v.pointer("/spec/names/kind").and_then(Value::as_str),
                )
            {
                set.insert((g.to_owned(), k.to_owned()));
            }
        }
        Self(set)
    }

    /// `v` with the namespace its scope gives it: none for a cluster-scoped kind (whatever it
    /// says), `default` for a namespaced one that names none (or `""`).
    pub(super) fn place(&self, mut v: Value) -> Value {
        let api_version = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
        let cluster = self
            .0
            .contains(&(group_of(api_version).to_owned(), kind.to_owned()));
        if let Some(md) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            if cluster {
                md.remove("namespace");
            } else if md
                .get("namespace")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                md.insert("namespace".into(), Value::from("default"));
            }
        }
        v
    }
}

/// Identity of an object across files: API group, kind, namespace, name (one object whichever
/// version of its group it is written in, as in a cluster).
pub(super) type ObjKey = (String, String, String, String);

/// Why an object of the directory is not stored, or not served to an informer: what an API
/// server would answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ObjectRefused {
    /// Kubernetes does not serve its kind at its apiVersion.
    #[error(transparent)]
    NotServed(#[from] NotServed),
    /// A value of the wrong type (`shown` names the object).
    #[error("{shown} is refused: {problem}")]
    Decode {
        /// The object, as messages show it.
        shown: String,
        /// The decoder's message.
        problem: String,
    },
    /// Invalid, in the API server's words.
    #[error("{0}")]
    Invalid(String),
    /// Not convertible to the version an informer asks for.
    #[error("{0}")]
    Convert(String),
    /// Not an object an informer can hold.
    #[error("{0}")]
    Object(String),
}

/// A built-in group's kind at an apiVersion Kubernetes does not serve, with what it serves.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotServed {
    /// The kind, at other versions.
    #[error("Kubernetes 1.36 serves {kind} as {}, not as {api_version:?}", served.join(", "))]
    Version {
        /// The kind.
        kind: String,
        /// The apiVersion given.
        api_version: String,
        /// The apiVersions it is served at.
        served: Vec<String>,
    },
    /// An apiVersion not served at all.
    #[error("Kubernetes 1.36 does not serve apiVersion {0:?}")]
    ApiVersion(String),
    /// Another kind than those of the apiVersion.
    #[error("Kubernetes 1.36 serves no kind {kind:?} in {api_version}; it serves: {}", kinds.join(", "))]
    Kind {
        /// The kind.
        kind: String,
        /// The apiVersion given.
        api_version: String,
        /// The kinds it serves.
        kinds: Vec<String>,
    },
}

/// A kind an informer names that this directory cluster does not serve
/// ([`DirCluster::check_kind`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KindNotServed {
    /// A built-in group's kind Kubernetes does not serve there.
    #[error(transparent)]
    Builtin(#[from] NotServed),
    /// A version the directory's CustomResourceDefinition does not serve.
    #[error(
        "the CustomResourceDefinition of {kind} in {group} serves versions {}, not {version:?}",
        versions.join(", ")
    )]
    CrdVersion {
        /// The kind.
        kind: String,
        /// Its group.
        group: String,
        /// The versions the CRD serves.
        versions: Vec<String>,
        /// The version asked for.
        version: String,
    },
}

pub(super) fn key_of(v: &Value) -> Option<ObjKey> {
    let s = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let name = s("/metadata/name");
    if name.is_empty() || s("/kind").is_empty() || s("/apiVersion").is_empty() {
        return None;
    }
    Some((
        group_of(&s("/apiVersion")).to_owned(),
        s("/kind"),
        s("/metadata/namespace"),
        name,
    ))
}

/// Whether an API server would store `v`: its apiVersion and kind served, if of Kubernetes'
/// own groups (custom kinds are read as written: their CRD may live elsewhere), and the object
/// valid ([`wisp_apiserver::validation`]). The error says why not, as the API server would.
pub(super) fn admit(v: &Value) -> Result<(), ObjectRefused> {
    use wisp_kinds as kinds;
    let text = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("");
    let (api_version, kind, name) = (text("/apiVersion"), text("/kind"), text("/metadata/name"));
    let (group, version) = kinds::split_api_version(api_version);
    if kinds::is_builtin_group(group) && kinds::builtin(group, version, kind).is_none() {
        return Err(not_served(api_version, kind).into());
    }
    let errs = wisp_apiserver::validation::field_errors(group, kind, v);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ObjectRefused::Invalid(wisp_apiserver::validation::message(
            group, kind, name, &errs,
        )))
    }
}

/// `v` decoded and defaulted as an API server would on create, if of a built-in kind
/// ([`wisp_apiserver::decode`], [`wisp_apiserver::defaults`]): a value of the wrong type refuses
/// it (the error names the object, the field and the types); each unknown field is dropped
/// and named in `warnings`. Objects of other groups, and kinds Kubernetes does not serve (left
/// to [`admit`] to refuse), are returned as they are.
pub(super) fn decode_and_default(
    v: Value,
    warnings: &mut Vec<String>,
) -> Result<Value, ObjectRefused> {
    use wisp_kinds as kinds;
    let text = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("");
    let (group, version) = kinds::split_api_version(text("/apiVersion"));
    let kind = text("/kind");
    if kinds::builtin(group, version, kind).is_none() {
        return Ok(v);
    }
    let (group, version, kind) = (group.to_owned(), version.to_owned(), kind.to_owned());
    let shown = wisp_apiserver::convert::shown(&v);
    let mut d = wisp_apiserver::decode::decode(&group, &version, &kind, &v).map_err(|problem| {
        ObjectRefused::Decode {
            shown: shown.clone(),
            problem,
        }
    })?;
    warnings.extend(d.warnings.iter().map(|w| {
        format!("{shown}: {w} (dropped, as an API server does with fieldValidation=Warn)")
    }));
    wisp_apiserver::defaults::apply_defaults(&group, &version, &kind, &mut d.value);
    Ok(d.value)
}

/// `v` as an informer of `filter` is served it: converted to the informer's version if `v`
/// is a built-in object written in another version of its group ([`wisp_apiserver::convert`]);
/// `Err` if it cannot be.
pub(super) fn served(v: &Value, filter: &ObjectFilter) -> Result<Value, ObjectRefused> {
    let written = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let group = group_of(written);
    if filter.api_version.is_empty()
        || filter.api_version == written
        || !wisp_kinds::is_builtin_group(group)
        || group_of(&filter.api_version) != group
    {
        return Ok(v.clone());
    }
    wisp_apiserver::convert::convert(v, &filter.api_version).map_err(ObjectRefused::Convert)
}

/// Why informers of `filters` on the kind of `v`, in another version than it is written in,
/// cannot be served it (one line per version).
pub(super) fn unservable<'a>(
    v: &Value,
    filters: impl Iterator<Item = &'a ObjectFilter>,
) -> Vec<String> {
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    let mut versions: Vec<&str> = filters
        .filter(|f| f.kind == kind)
        .map(|f| f.api_version.as_str())
        .collect();
    versions.sort_unstable();
    versions.dedup();
    versions
        .into_iter()
        .filter_map(|api_version| {
            let f = ObjectFilter {
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
                ..Default::default()
            };
            served(v, &f).err().map(|e| e.to_string())
        })
        .collect()
}

/// Why Kubernetes serves no `kind` at `api_version` (of one of its own groups), with what it
/// does serve.
pub(super) fn not_served(api_version: &str, kind: &str) -> NotServed {
    use wisp_kinds as kinds;
    let (group, version) = kinds::split_api_version(api_version);
    let served = kinds::builtin_api_versions(group, kind);
    if !served.is_empty() {
        return NotServed::Version {
            kind: kind.to_owned(),
            api_version: api_version.to_owned(),
            served,
        };
    }
    let kinds = kinds::builtin_kinds(group, version);
    if kinds.is_empty() {
        NotServed::ApiVersion(api_version.to_owned())
    } else {
        NotServed::Kind {
            kind: kind.to_owned(),
            api_version: api_version.to_owned(),
            kinds: kinds.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// A manifest file read: its objects, and what was wrong with the documents left out.
#[derive(Debug, Default, PartialEq)]
pub struct Manifests {
    /// The objects, as written (namespaces are placed by [`DirCluster::rescan`], which knows
    /// the directory's CustomResourceDefinitions).
    pub objects: Vec<Value>,
    /// One line per document left out (the others still count).
    pub skipped: Vec<String>,
}

/// Parses a manifest file into objects: several documents read as kubectl reads them
/// ([`wisp_kinds::yaml`]), `kind: List` expanded, a leading byte-order mark ignored, `generateName` given a name (stable for the
/// file and document, so a rescan changes nothing). A document that is not a valid object is
/// skipped and named in [`Manifests::skipped`]; YAML that does not parse fails the whole file
/// (its previous objects are kept: see [`DirCluster::rescan`]).
pub fn parse_manifests(text: &str) -> Result<Manifests, wisp_kinds::yaml::YamlError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut out = Manifests::default();
    let docs = wisp_kinds::yaml::documents(text)?;
    for (i, v) in docs.into_iter().enumerate() {
        if v.is_null() {
            continue;
        }
        let items = if v
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k.ends_with("List"))
            && v.get("items").is_some()
        {
            v.get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        } else {
            vec![v]
        };
        for (j, mut item) in items.into_iter().enumerate() {
            if !item.is_object() {
                out.skipped
                    .push(format!("document {}: not an object", i + 1));
                continue;
            }
            let generate = item
                .pointer("/metadata/generateName")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if let Some(prefix) = generate
                && item.pointer("/metadata/name").is_none()
            {
                let suffix = stable_suffix(text, i, j);
                item["metadata"]["name"] = Value::from(format!("{prefix}{suffix}"));
            }
            if key_of(&item).is_none() {
                out.skipped.push(format!(
                    "document {}: an object needs apiVersion, kind and metadata.name (or generateName)",
                    i + 1
                ));
                continue;
            }
            out.objects.push(item);
        }
    }
    Ok(out)
}

/// Five characters from `[a-z0-9]` for a `generateName`, the same for the same document of the
/// same file content (the API server picks random ones; a rescan must not rename the object).
pub(super) fn stable_suffix(text: &str, doc: usize, item: usize) -> String {
    use sha2::Digest;
    let h = sha2::Sha256::digest(format!("{doc}/{item}/{text}").as_bytes());
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    h.iter()
        .take(5)
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}
