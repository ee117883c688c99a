//! [`Meta`]: an object's metadata read in place from its ABI encoding (`docs/abi.md`) through
//! the ABI codec's view ([`wisp_abi::Object`]), so the informer keeps each object's metadata
//! once, in the bytes a plugin gets, not again as owned strings beside them.

use super::ObjectMeta;

pub use wisp_abi::Pairs;

/// An entry of `metadata.ownerReferences`, borrowed from the encoding.
pub type Owner<'a> = wisp_abi::OwnerRef<'a>;

/// An object's metadata, a view over its encoding: every accessor reads the span table and
/// borrows the bytes; nothing is copied. [`Meta::to_owned`] gives an [`ObjectMeta`].
#[derive(Clone, Copy)]
pub struct Meta<'a> {
    /// The codec's view of an encoding the codec wrote (the informer's `Object`).
    view: wisp_abi::Object<'a>,
}

impl<'a> Meta<'a> {
    /// The view of an object's encoding (the only caller is [`super::Object`], whose encoding
    /// is immutable).
    pub(super) fn new(view: wisp_abi::Object<'a>) -> Self {
        Self { view }
    }

    /// `apiVersion`, e.g. `v1` or `apps/v1`.
    pub fn api_version(&self) -> &'a str {
        self.view.api_version()
    }

    /// `kind`, e.g. `Pod`.
    pub fn kind(&self) -> &'a str {
        self.view.kind()
    }

    /// `metadata.namespace`; `None` for cluster-scoped objects.
    pub fn namespace(&self) -> Option<&'a str> {
        self.view.namespace()
    }

    /// `metadata.name`.
    pub fn name(&self) -> &'a str {
        self.view.name()
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> &'a str {
        self.view.uid()
    }

    /// `metadata.resourceVersion`: opaque, compared only for equality.
    pub fn resource_version(&self) -> &'a str {
        self.view.resource_version()
    }

    /// `metadata.generation`, when the object has one.
    pub fn generation(&self) -> Option<i64> {
        self.view.generation()
    }

    /// `metadata.deletionTimestamp` (RFC 3339), set while the object is being deleted.
    pub fn deletion_timestamp(&self) -> Option<&'a str> {
        self.view.deletion_timestamp()
    }

    /// `metadata.labels`, sorted by key.
    pub fn labels(&self) -> Pairs<'a> {
        self.view.labels()
    }

    /// `metadata.annotations`, sorted by key.
    pub fn annotations(&self) -> Pairs<'a> {
        self.view.annotations()
    }

    /// The value of label `key`, if set.
    pub fn label(&self, key: &str) -> Option<&'a str> {
        self.view.label(key)
    }

    /// The value of annotation `key`, if set.
    pub fn annotation(&self, key: &str) -> Option<&'a str> {
        self.view.annotation(key)
    }

    /// `metadata.ownerReferences`.
    pub fn owner_references(&self) -> impl ExactSizeIterator<Item = Owner<'a>> + 'a {
        self.view.owner_refs()
    }

    /// The metadata as owned values (to change and re-encode, or to keep past the object).
    pub fn to_owned(&self) -> ObjectMeta {
        ObjectMeta::of(&self.view)
    }
}

impl std::fmt::Debug for Meta<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.to_owned().fmt(f)
    }
}

impl PartialEq for Meta<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.to_owned() == other.to_owned()
    }
}

impl Eq for Meta<'_> {}
