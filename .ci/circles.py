#!/usr/bin/env python3
"""Fails when the sub-modules of a module directory import one another in a cycle, or the files
inside one of its sub-module directories do.

`.ci/layers.py` checks the top-level modules of host/src; this checks one level further down, for
the directories named (by default host/src/plugin). A node is a file `<dir>/<m>.rs` or a
directory `<dir>/<m>/` (its `mod.rs` is the directory's map: what it re-exports is looked through,
not counted as an import of its own). An import is a `crate::`, `super::` or `self::` path
anywhere in a node's files (a `use` tree or a path in code), tests included; a path through a
`pub use` re-export counts as an import of the module it names. For each directory it checks the
graph between its sub-modules, then, inside each sub-module directory, the graph between its files
(and their own sub-directories, recursively). It prints each cycle found. A binary's directory
(`host/src/bin/NAME/`) is a crate of its own: there `crate::` is its `main.rs`.

Usage: python3 .ci/circles.py [host/src/plugin ...]
"""
import collections
import pathlib
import re
import sys

SRC = pathlib.Path("host/src")
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def crate_root(mod):
    """The module path of the crate root `mod` is in: a binary's (`host/src/bin/NAME/main.rs`,
    whose `crate::` is its own) or the library's."""
    return mod[:2] if mod[:1] == ["bin"] else []


def module_of(f):
    """The module path of file `f` (a list of names, without `crate`)."""
    parts = list(f.relative_to(SRC).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def file_of(mod):
    """The file of module path `mod`, if it is a file module."""
    base = SRC.joinpath(*mod) if mod else SRC
    for f in (base.with_suffix(".rs"), base / "mod.rs", base / "main.rs"):
        if mod and f.exists():
            return f
    return SRC / "lib.rs" if not mod else None


def is_module(mod):
    return file_of(mod) is not None


# In one pass, so that a `//` inside a string is not a comment and a quote inside a comment or a
# char literal opens no string: raw strings, strings, char literals, line and block comments.
TOKEN = re.compile(
    r'r(#*)"(?:.|\n)*?"\1'
    r'|"(?:\\.|[^"\\])*"'
    r"|'(?:\\[^']{1,10}|[^'\\\n])'"
    r"|//[^\n]*"
    r"|/\*(?:.|\n)*?\*/"
)


def strip(text):
    """`text` without comments, its string and char literals emptied."""

    def blank(m):
        t = m.group(0)
        if t.startswith("//") or t.startswith("/*"):
            return ""
        return "''" if t.startswith("'") else '""'

    return TOKEN.sub(blank, text)


def expand(tree):
    """The full paths of a `use` tree (`a::{b, c::{d as e}}`), with the name each binds."""
    tree = tree.strip()
    depth, cut = 0, None
    for i, ch in enumerate(tree):
        if ch == "{":
            if depth == 0 and cut is None:
                cut = i
            depth += 1
        elif ch == "}":
            depth -= 1
    if cut is None:
        m = re.match(r"^(.*?)(?:\s+as\s+(" + IDENT + r"))?$", tree, re.S)
        path = [p for p in re.split(r"\s*::\s*", m.group(1).strip()) if p]
        return [(path, m.group(2) or (path[-1] if path else None))]
    prefix = [p for p in re.split(r"\s*::\s*", tree[:cut].strip().rstrip(":")) if p]
    inner = tree[cut + 1 : tree.rindex("}")]
    out, depth, start = [], 0, 0
    for i, ch in enumerate(inner + ","):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            part = inner[start:i].strip()
            start = i + 1
            if part:
                for path, name in expand(part):
                    if path == ["self"]:
                        out.append((prefix, prefix[-1] if prefix else None))
                    else:
                        out.append((prefix + path, name))
    return out


def absolute(path, base):
    """`path` made absolute from module `base` (`None` if it is not a crate path)."""
    if not path:
        return None
    if path[0] == "crate":
        return crate_root(base) + path[1:]
    if path[0] in ("super", "self"):
        out = list(base)
        for p in path:
            if p == "super":
                if not out:
                    return None
                out.pop()
            elif p == "self":
                continue
            else:
                break
        rest = path[len(list(p for p in path if p in ("super", "self"))) :]
        return out + rest
    return None


parsed = {}


def parse(f):
    """(imports, re-exports) of file `f`: absolute paths imported, and name -> path of its
    `pub use` items."""
    if f in parsed:
        return parsed[f]
    text = strip(f.read_text())
    mod = module_of(f)
    # The text of an inline `mod tests` is that module's own (its `super` is the file's module).
    split = re.search(r"#\[cfg\(test\)\]\s*mod\s+tests\s*\{", text)
    pieces = [(text[: split.start()], mod), (text[split.start() :], mod + ["tests"])] if split else [(text, mod)]
    imports, reexports = [], {}
    for piece, base in pieces:
        for m in re.finditer(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]*);", piece, re.S):
            for path, name in expand(m.group(2)):
                if path and path[-1] == "*":
                    if path[:-1] in (["super"],):
                        continue
                    path = path[:-1]
                a = absolute(path, base)
                if a is None:
                    continue
                imports.append(a)
                if m.group(1) and name and name != "*":
                    reexports[name] = a
        code = re.sub(r"\buse\s+[^;]*;", "", piece, flags=re.S)
        for m in re.finditer(r"\b(?:crate|super|self)(?:::(?:super|" + IDENT + r"))+", code):
            a = absolute(m.group(0).split("::"), base)
            if a is not None:
                imports.append(a)
    parsed[f] = (imports, reexports)
    return parsed[f]


def resolve(path, seen=None):
    """The module path a crate path lands in, through re-exports."""
    seen = seen or set()
    cur = crate_root(path)
    for i, seg in enumerate(path[len(cur) :], len(cur)):
        if is_module(cur + [seg]):
            cur = cur + [seg]
            continue
        f = file_of(cur)
        if f is not None:
            _, reexports = parse(f)
            target = reexports.get(seg)
            key = (tuple(cur), seg)
            if target is not None and key not in seen:
                seen.add(key)
                return resolve(target + path[i + 1 :], seen)
        return cur
    return cur


def children(d):
    mod = module_of(d / "mod.rs") if (d / "mod.rs").exists() else module_of(d.with_suffix(".rs"))
    names = {p.stem for p in d.glob("*.rs") if p.stem != "mod"}
    names |= {p.name for p in d.iterdir() if p.is_dir()}
    return mod, sorted(names)


def files_of(d, name):
    f = d / f"{name}.rs"
    files = [f] if f.exists() else []
    if (d / name).is_dir():
        files += sorted((d / name).rglob("*.rs"))
    return files


def sccs_of(nodes, edges):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(sorted(scc))

    for v in nodes:
        if v not in index:
            visit(v)
    return out


def check(d, found):
    """Checks the graph between the children of directory `d`, then inside each child dir."""
    mod, names = children(d)
    edges = collections.defaultdict(set)
    for name in names:
        for f in files_of(d, name):
            for imp in parse(f)[0]:
                target = resolve(imp)
                if target[: len(mod)] == mod and len(target) > len(mod):
                    other = target[len(mod)]
                    if other != name and other in names:
                        edges[name].add(other)
    for scc in sccs_of(names, edges):
        found.append((d, scc, {a: sorted(b for b in edges[a] if b in scc) for a in scc}))
    count = 1
    for name in names:
        if (d / name).is_dir():
            count += check(d / name, found)
    return count


if __name__ == "__main__":
    sys.setrecursionlimit(10000)
    dirs = [pathlib.Path(a) for a in sys.argv[1:]] or [SRC / "plugin"]
    found, checked = [], 0
    for d in dirs:
        checked += check(d, found)
    if found:
        print(f"{len(found)} import cycle(s) inside {', '.join(map(str, dirs))}:")
        for d, scc, inside in found:
            print(f"  {d}: " + ", ".join(scc))
            for a in scc:
                print(f"    {a} -> {', '.join(inside[a])}")
        sys.exit(1)
    print(f"no import cycle in the {checked} module directories under {', '.join(map(str, dirs))}")
