//! The plugin ABI 0.2 byte layout (`docs/abi.md`) as a plugin reads it: the views of
//! [`wisp_abi`], the one codec the host encodes with, and what a plugin adds to them (parsing
//! the JSON; owning an object read from the cache). Nothing here calls the host; it runs (and is
//! tested against the shared test vectors, `wit/abi-vectors.json`) natively as well as in wasm.
//!
//! Decoding never panics: a malformed header, a span out of bounds or a metadata string that is
//! not UTF-8 (docs/abi.md, "Text") is a [`DecodeError`], when the object is taken.

use serde::Deserialize;
use serde::de::DeserializeOwned;

pub use wisp_abi::{DecodeError, Kind, LAYOUT_VERSION, OwnerRef, OwnerRefs, Pairs};

/// A Kubernetes object: views of its metadata and JSON, read from its encoding as asked (nothing
/// is copied or parsed up front). Borrowed from a batch while the host's call lasts, or owned
/// (`Object<'static>`) when read from the cache.
#[derive(Clone)]
pub struct Object<'a>(Repr<'a>);

#[derive(Clone)]
enum Repr<'a> {
    Borrowed(wisp_abi::Object<'a>),
    Owned(wisp_abi::ObjectBuf),
}

impl std::fmt::Debug for Object<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Object")
            .field("apiVersion", &self.api_version())
            .field("kind", &self.kind())
            .field("key", &self.key())
            .field("resourceVersion", &self.resource_version())
            .finish()
    }
}

impl<'a> From<wisp_abi::Object<'a>> for Object<'a> {
    #[inline]
    fn from(v: wisp_abi::Object<'a>) -> Self {
        Self(Repr::Borrowed(v))
    }
}

impl<'a> Object<'a> {
    /// Reads an encoded object, checking its header, that every field lies within it and that
    /// its text is UTF-8.
    pub fn decode(bytes: &'a [u8]) -> Result<Self, DecodeError> {
        wisp_abi::Object::decode(bytes).map(Self::from)
    }

    /// Like [`Object::decode`], keeping the bytes.
    pub fn decode_owned(bytes: Vec<u8>) -> Result<Object<'static>, DecodeError> {
        wisp_abi::ObjectBuf::decode(bytes).map(|o| Object(Repr::Owned(o)))
    }

    /// The view the accessors read.
    #[inline]
    fn view(&self) -> wisp_abi::Object<'_> {
        match &self.0 {
            Repr::Borrowed(v) => *v,
            Repr::Owned(o) => o.view(),
        }
    }

    /// The whole encoding (what the host sent).
    pub fn as_bytes(&self) -> &[u8] {
        self.view().as_bytes()
    }

    /// An owned copy (to keep beyond the call that delivered it).
    pub fn into_owned(self) -> Object<'static> {
        Object(Repr::Owned(match self.0 {
            Repr::Borrowed(v) => v.into(),
            Repr::Owned(o) => o,
        }))
    }

    /// `apiVersion`, e.g. `v1` or `apps/v1`.
    pub fn api_version(&self) -> &str {
        self.view().api_version()
    }

    /// `kind`, e.g. `Pod`.
    pub fn kind(&self) -> &str {
        self.view().kind()
    }

    /// `metadata.namespace` (None when cluster-scoped).
    pub fn namespace(&self) -> Option<&str> {
        self.view().namespace()
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.view().name()
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> &str {
        self.view().uid()
    }

    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> &str {
        self.view().resource_version()
    }

    /// `metadata.generation`, when the object has one.
    pub fn generation(&self) -> Option<i64> {
        self.view().generation()
    }

    /// `metadata.deletionTimestamp` (RFC 3339), set while the object is being deleted.
    pub fn deletion_timestamp(&self) -> Option<&str> {
        self.view().deletion_timestamp()
    }

    /// `namespace/name`, or `name` when cluster-scoped.
    pub fn key(&self) -> String {
        let v = self.view();
        match v.namespace() {
            Some(ns) => format!("{ns}/{}", v.name()),
            None => v.name().to_owned(),
        }
    }

    /// `metadata.labels`, sorted by key.
    pub fn labels(&self) -> Pairs<'_> {
        self.view().labels()
    }

    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.view().label(key)
    }

    /// `metadata.annotations`, sorted by key.
    pub fn annotations(&self) -> Pairs<'_> {
        self.view().annotations()
    }

    /// The value of annotation `key`.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.view().annotation(key)
    }

    /// `metadata.ownerReferences`.
    pub fn owner_refs(&self) -> OwnerRefs<'_> {
        self.view().owner_refs()
    }

    /// The owner that is the managing controller, if any.
    pub fn controller(&self) -> Option<OwnerRef<'_>> {
        self.view().controller()
    }

    /// The whole object as JSON bytes (UTF-8); empty when absent.
    pub fn json(&self) -> &[u8] {
        self.view().json()
    }

    /// Whether the object came with its JSON (not when the plugin is metadata-only).
    pub fn has_json(&self) -> bool {
        self.view().has_json()
    }

    fn json_for_parse(&self) -> Result<&[u8], crate::Error> {
        let v = self.view();
        if v.has_json() {
            return Ok(v.json());
        }
        Err(crate::Error::new(format!(
            "{}: delivered without its JSON (the plugin describes itself metadata-only); \
             read the object with cache::get to parse it",
            self.key()
        )))
    }

    /// Parses the JSON into `T` (e.g. `k8s_openapi::api::core::v1::Pod`).
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, crate::Error> {
        serde_json::from_slice(self.json_for_parse()?).map_err(|e| {
            crate::Error::new(format!(
                "{}: cannot parse as the requested type: {e}",
                self.key()
            ))
        })
    }

    /// Parses only what `T` names, borrowing its strings from the object: a struct with the few
    /// fields a plugin needs (`&str` fields borrow; unknown fields are skipped) costs a fraction
    /// of a full parse into a k8s-openapi type.
    ///
    /// ```
    /// # use wisp_sdk::abi::Object;
    /// #[derive(serde::Deserialize)]
    /// struct Images<'a> {
    ///     #[serde(borrow)]
    ///     spec: Spec<'a>,
    /// }
    /// #[derive(serde::Deserialize)]
    /// struct Spec<'a> {
    ///     #[serde(borrow)]
    ///     containers: Vec<Container<'a>>,
    /// }
    /// #[derive(serde::Deserialize)]
    /// struct Container<'a> {
    ///     image: &'a str,
    /// }
    /// # fn f(obj: &Object) -> wisp_sdk::Result<()> {
    /// let images: Images = obj.parse_partial()?;
    /// # Ok(()) }
    /// ```
    pub fn parse_partial<'de, T: Deserialize<'de>>(&'de self) -> Result<T, crate::Error> {
        serde_json::from_slice(self.json_for_parse()?).map_err(|e| {
            crate::Error::new(format!(
                "{}: cannot parse as the requested type: {e}",
                self.key()
            ))
        })
    }

    /// Parses the JSON into a generic value.
    pub fn value(&self) -> Result<serde_json::Value, crate::Error> {
        self.parse()
    }
}

/// One notification of a batch.
#[derive(Clone, Debug)]
pub struct Notification<'a> {
    /// Sequence number in this (plugin, informer) stream.
    pub seq: u64,
    /// What happened.
    pub kind: Kind,
    /// The object (the new state of an update).
    pub object: Object<'a>,
    /// The previous state (updates only).
    pub old: Option<Object<'a>>,
}

impl<'a> From<wisp_abi::Notification<'a>> for Notification<'a> {
    #[inline]
    fn from(n: wisp_abi::Notification<'a>) -> Self {
        Self {
            seq: n.seq,
            kind: n.kind,
            object: n.object.into(),
            old: n.old.map(Object::from),
        }
    }
}

/// A batch of notifications from one informer.
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a>(wisp_abi::Batch<'a>);

impl<'a> Batch<'a> {
    /// Reads a batch's header (its notifications are read as iterated).
    pub fn decode(b: &'a [u8]) -> Result<Self, DecodeError> {
        wisp_abi::Batch::decode(b).map(Self)
    }

    /// The informer (its name in the host's config) the notifications come from.
    pub fn informer(&self) -> &'a str {
        self.0.informer()
    }

    /// How many notifications.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Notification `i`.
    pub fn get(&self, i: usize) -> Result<Notification<'a>, DecodeError> {
        self.0.get(i).map(Notification::from)
    }

    /// The notifications, in order.
    pub fn iter(
        &self,
    ) -> impl ExactSizeIterator<Item = Result<Notification<'a>, DecodeError>> + 'a {
        self.0.iter().map(|n| n.map(Notification::from))
    }
}

/// Objects read from the cache, in one buffer.
#[derive(Clone)]
pub struct ObjectList(wisp_abi::ObjectList);

impl std::fmt::Debug for ObjectList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl ObjectList {
    /// Reads an object list, checking every object in it.
    pub fn decode(b: Vec<u8>) -> Result<Self, DecodeError> {
        wisp_abi::ObjectList::decode(b).map(Self)
    }

    /// How many objects.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Object `i`.
    pub fn get(&self, i: usize) -> Option<Object<'_>> {
        self.0.get(i).map(Object::from)
    }

    /// The objects, in the host's order.
    pub fn iter(&self) -> Iter<'_> {
        Iter { list: self, i: 0 }
    }
}

/// The objects of an [`ObjectList`].
pub struct Iter<'a> {
    list: &'a ObjectList,
    i: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = Object<'a>;

    fn next(&mut self) -> Option<Object<'a>> {
        // Every entry was checked by `decode`: none is skipped.
        while self.i < self.list.len() {
            self.i += 1;
            if let Some(o) = self.list.get(self.i - 1) {
                return Some(o);
            }
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.list.len() - self.i;
        (left, Some(left))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a ObjectList {
    type Item = Object<'a>;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

#[cfg(test)]
pub(crate) mod tests;
