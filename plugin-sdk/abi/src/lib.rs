//! The byte layout of Wisp's plugin ABI 0.2 (`docs/abi.md`), written once: how an object, a
//! batch of notifications and a list of objects are encoded in the `list<u8>` values that cross
//! into a plugin. Plain std (no wasm, no wasmtime): the host and the Rust SDK, built for the
//! host and for wasm32-wasip2, use this one crate.
//!
//! - [`layout`]: the constants (version, field indices, sizes, kinds, flags).
//! - The encoder: [`encode_object`] (the host, once per object entering its informer; the SDK's
//!   test kit) gives an [`Encoded`]; [`BatchWriter`] writes a batch of them (the host writes it
//!   straight into a plugin's memory); [`encode_list`] an object list.
//! - The decoder: [`Object`] (a view; [`ObjectBuf`] owns its bytes), [`Batch`], [`ObjectList`].
//!   An object is checked when it is read (bounds, and text that is UTF-8: `docs/abi.md`,
//!   "Text"); its accessors are then infallible and copy nothing. The host reads its own
//!   encodings through [`Encoded::view`], unchecked: it wrote them.
//!
//! The test vectors of `wit/abi-vectors.json`, which the Python, JavaScript and C decoders are
//! held to, are written by this crate's tests from this encoder (`WISP_BLESS_VECTORS=1 cargo
//! test -p wisp-abi` after an intended change) and read back by this decoder.
//!
//! Two `unsafe` blocks: text read from a checked or self-written encoding is not validated
//! again (`str::from_utf8_unchecked`), which is what makes the accessors cheap.
#![deny(unsafe_code)]

mod batch;
mod check;
mod encode;
pub mod layout;
mod list;
mod object;

pub use batch::{Batch, BatchWriter, Entry, Kind, Notification};
pub use encode::{Encoded, ObjectMeta, OwnerReference, encode_list, encode_object};
pub use layout::LAYOUT_VERSION;
pub use list::ObjectList;
pub use object::{Object, ObjectBuf, OwnerRef, OwnerRefs, Pairs};

/// Bytes that are not a valid encoding: what is wrong, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed ABI bytes: {}", self.0)
    }
}

impl std::error::Error for DecodeError {}

#[cold]
fn err<T>(what: impl Into<String>) -> Result<T, DecodeError> {
    Err(DecodeError(what.into()))
}

#[cfg(test)]
mod tests;
