"""Formatting helpers for messages that must read as the Rust examples' do."""


def rust_debug_str(s):
    """A string as Rust's ``{:?}`` writes it (quoted, with escapes)."""
    out = ['"']
    for c in s:
        o = ord(c)
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\t":
            out.append("\\t")
        elif c == "\0":
            out.append("\\0")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\u{{{o:x}}}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)
