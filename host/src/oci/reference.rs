//! `oci://REGISTRY/REPOSITORY:TAG` and `oci://REGISTRY/REPOSITORY@sha256:HEX`: parsed and
//! checked, with errors that say which part is wrong.

use std::fmt;

/// The scheme of a module given as an OCI reference.
pub const SCHEME: &str = "oci://";

/// A module's place in a registry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reference {
    /// `host[:port]`, e.g. `ghcr.io`, `localhost:5000`.
    pub registry: String,
    /// The repository path, e.g. `acme/policies/image-policy`.
    pub repository: String,
    /// The tag, if one was given (`None` with a digest alone).
    pub tag: Option<String>,
    /// `sha256:HEX`, if one was given; it wins over the tag.
    pub digest: Option<String>,
}

/// Whether a module string is an OCI reference (`oci://...`).
pub fn is_oci(module: &str) -> bool {
    module.starts_with(SCHEME)
}

/// Whether `s` is `sha256:` and 64 lowercase hex digits.
pub fn is_sha256_digest(s: &str) -> bool {
    s.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

fn repo_component_ok(c: &str) -> bool {
    // distribution's grammar: [a-z0-9]+ separated by `.`, `_`, `__` or dashes.
    let b = c.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|x| matches!(x, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

fn tag_ok(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|x| x.is_ascii_alphanumeric() || matches!(x, b'_' | b'.' | b'-'))
}

fn registry_ok(r: &str) -> bool {
    let (host, port) = match r.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (r, None),
    };
    !host.is_empty()
        && host
            .bytes()
            .all(|x| x.is_ascii_alphanumeric() || matches!(x, b'.' | b'-'))
        && port.is_none_or(|p| p.parse::<u16>().is_ok_and(|n| n > 0))
}

/// A module reference that does not parse: the text given, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?}: {problem}")]
pub struct ReferenceError {
    /// The reference as given.
    pub input: String,
    /// What is wrong.
    pub problem: ReferenceProblem,
}

/// What is wrong with a module reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReferenceProblem {
    /// No `oci://`.
    #[error("an OCI reference starts with {SCHEME}")]
    Scheme,
    /// No `/` after the registry.
    #[error("expected oci://REGISTRY/REPOSITORY:TAG or oci://REGISTRY/REPOSITORY@sha256:DIGEST")]
    Shape,
    /// A registry that is not `host[:port]`.
    #[error("registry {0:?} is not a host name with an optional :port")]
    Registry(String),
    /// A digest that is not `sha256:` and 64 hex digits.
    #[error("digest {0:?} is not sha256: followed by 64 lowercase hex digits")]
    Digest(String),
    /// A tag outside the distribution spec's grammar.
    #[error(
        "tag {0:?} is not valid (letters, digits, `_`, `.`, `-`; at most 128; not starting with `.` or `-`)"
    )]
    Tag(String),
    /// A repository outside the distribution spec's grammar.
    #[error(
        "repository {0:?} is not valid (lowercase letters, digits and `._-` separators, components joined by `/`)"
    )]
    Repository(String),
    /// Neither a tag nor a digest.
    #[error("no tag and no digest; add :TAG or @sha256:DIGEST (there is no default tag)")]
    Unpinned,
}

impl Reference {
    /// Parses `oci://REGISTRY/REPO:TAG`, `oci://REGISTRY/REPO@sha256:HEX` or both
    /// (`REPO:TAG@sha256:HEX`: the digest is what is pulled). There is no default registry and
    /// no default tag: the reference names exactly what runs.
    pub fn parse(s: &str) -> Result<Self, ReferenceError> {
        let err = |problem| ReferenceError {
            input: s.to_owned(),
            problem,
        };
        let rest = s
            .strip_prefix(SCHEME)
            .ok_or_else(|| err(ReferenceProblem::Scheme))?;
        let (registry, path) = rest
            .split_once('/')
            .ok_or_else(|| err(ReferenceProblem::Shape))?;
        if !registry_ok(registry) {
            return Err(err(ReferenceProblem::Registry(registry.to_owned())));
        }
        let (path, digest) = match path.split_once('@') {
            Some((p, d)) => {
                if !is_sha256_digest(d) {
                    return Err(err(ReferenceProblem::Digest(d.to_owned())));
                }
                (p, Some(d.to_owned()))
            }
            None => (path, None),
        };
        // A tag follows the last `:` after the last `/`.
        let last = path.rsplit('/').next().unwrap_or(path);
        let (repository, tag) = match last.split_once(':') {
            Some((_, t)) => {
                let repo = &path[..path.len() - t.len() - 1];
                if !tag_ok(t) {
                    return Err(err(ReferenceProblem::Tag(t.to_owned())));
                }
                (repo, Some(t.to_owned()))
            }
            None => (path, None),
        };
        if repository.is_empty() || !repository.split('/').all(repo_component_ok) {
            return Err(err(ReferenceProblem::Repository(repository.to_owned())));
        }
        if tag.is_none() && digest.is_none() {
            return Err(err(ReferenceProblem::Unpinned));
        }
        Ok(Self {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            tag,
            digest,
        })
    }

    /// The manifest reference to ask the registry for: the digest if given, else the tag.
    pub fn manifest_ref(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or("latest")
    }

    /// `REGISTRY/REPOSITORY` (what cosign signs as the docker-reference).
    pub fn repo_path(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// Whether it names a tag only: what it resolves to can move.
    pub fn is_tag(&self) -> bool {
        self.digest.is_none()
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn tag_and_digest_references_parse() {
        let r = Reference::parse("oci://localhost:5000/acme/policy:v1").unwrap();
        assert_eq!(r.registry, "localhost:5000");
        assert_eq!(r.repository, "acme/policy");
        assert_eq!(r.tag.as_deref(), Some("v1"));
        assert_eq!(r.manifest_ref(), "v1");
        let r = Reference::parse(&format!("oci://ghcr.io/a/b:v2@{D}")).unwrap();
        assert_eq!(r.manifest_ref(), D);
        assert_eq!(r.to_string(), format!("oci://ghcr.io/a/b:v2@{D}"));
        assert!(!r.is_tag());
    }

    #[test]
    fn bad_references_name_the_part_that_is_wrong() {
        for (s, part) in [
            ("oci://localhost:5000/acme/policy", "no tag and no digest"),
            ("oci://localhost:5000", "expected oci://"),
            ("oci://localhost:5000/Acme:v1", "repository"),
            ("oci://localhost:5000/a:-v1", "tag"),
            ("oci://localhost:5000/a@sha256:abc", "digest"),
            ("oci://local host/a:v1", "registry"),
            ("oci://localhost:0/a:v1", "registry"),
        ] {
            let e = Reference::parse(s).unwrap_err().to_string();
            assert!(e.contains(part), "{s}: {e}");
        }
    }
}
