//! Lists of objects (`docs/abi.md`, "Object list"): the answer to a cache read.

use crate::check::span_checked;
use crate::layout::{LAYOUT_VERSION, LIST_HEADER, SPAN};
use crate::object::{Object, span_at, u32_at};
use crate::{DecodeError, check, err};

/// Objects read from the cache, in one buffer, every one checked when the list was read.
#[derive(Clone)]
pub struct ObjectList {
    b: Box<[u8]>,
    count: usize,
    header: usize,
}

impl std::fmt::Debug for ObjectList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl ObjectList {
    /// Reads an object list, checking every object in it.
    pub fn decode(b: Vec<u8>) -> Result<Self, DecodeError> {
        match b.first() {
            Some(&LAYOUT_VERSION) => {}
            Some(v) => {
                return err(format!(
                    "list layout version {v}, expected {LAYOUT_VERSION}"
                ));
            }
            None => return err("empty list"),
        }
        let (Some(header), Some(count)) = (
            b.get(2..4).map(|h| u16::from_le_bytes([h[0], h[1]])),
            u32_at(&b, 4),
        ) else {
            return err("list header cut short");
        };
        let (header, count) = (header as usize, count as usize);
        if header < LIST_HEADER {
            return err(format!("list header of {header} bytes (at least 8)"));
        }
        for i in 0..count {
            match span_checked(&b, header + i * SPAN)? {
                Some(o) => {
                    check::object(o)?;
                }
                None => return err(format!("list entry {i} absent")),
            }
        }
        Ok(Self {
            b: b.into_boxed_slice(),
            count,
            header,
        })
    }

    /// How many objects.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Object `i`.
    pub fn get(&self, i: usize) -> Option<Object<'_>> {
        if i >= self.count {
            return None;
        }
        // Checked by `decode`, and the box is never changed.
        span_at(&self.b, self.header + i * SPAN).map(Object::trusted)
    }

    /// The objects, in the host's order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Object<'_>> + '_ {
        // Every entry was checked present by `decode`: none is skipped.
        (0..self.count).map(|i| self.get(i).unwrap_or_else(|| Object::trusted(&[])))
    }
}
