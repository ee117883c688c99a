//! The protobuf wire format: fields of a message as (number, value), nothing typed.

/// One field's value as it is on the wire.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Wire<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 2: strings, bytes, messages, packed scalars.
    Bytes(&'a [u8]),
    /// Wire type 5.
    Fixed32(u32),
}

/// Reads a varint at `pos`, advancing it; `None` when truncated or longer than 10 bytes.
pub(super) fn varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *buf.get(*pos)?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

fn fixed<const N: usize>(buf: &[u8], pos: &mut usize) -> Option<[u8; N]> {
    let end = pos.checked_add(N).filter(|e| *e <= buf.len())?;
    let bytes = buf[*pos..end].try_into().ok()?;
    *pos = end;
    Some(bytes)
}

/// The fields of a message in wire order, or the byte offset where it stops making sense.
pub(super) fn fields(buf: &[u8]) -> Result<Vec<(u64, Wire<'_>)>, usize> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let start = pos;
        let key = varint(buf, &mut pos).ok_or(start)?;
        let value = match key & 7 {
            0 => varint(buf, &mut pos).map(Wire::Varint),
            1 => fixed::<8>(buf, &mut pos).map(|b| Wire::Fixed64(u64::from_le_bytes(b))),
            2 => varint(buf, &mut pos)
                .and_then(|len| usize::try_from(len).ok())
                .and_then(|len| pos.checked_add(len))
                .filter(|end| *end <= buf.len())
                .map(|end| {
                    let bytes = &buf[pos..end];
                    pos = end;
                    Wire::Bytes(bytes)
                }),
            5 => fixed::<4>(buf, &mut pos).map(|b| Wire::Fixed32(u32::from_le_bytes(b))),
            _ => None,
        };
        out.push((key >> 3, value.ok_or(start)?));
    }
    Ok(out)
}

/// The varints of a packed repeated scalar field.
pub(super) fn packed(buf: &[u8]) -> Option<Vec<u64>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        out.push(varint(buf, &mut pos)?);
    }
    Some(out)
}
