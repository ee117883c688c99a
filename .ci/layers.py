#!/usr/bin/env python3
"""Fails when a top-level module of host/src imports upward in the layers lib.rs states, or when
the top-level modules import one another in a cycle.

A top-level module is a file `host/src/<m>.rs` or a directory `host/src/<m>/`; an import is a
`crate::<other>` path anywhere in its files (a `use` line or a path in code), tests included
(`tests.rs` files and `#[cfg(test)]` modules are the module's own). `lib.rs` states the layers in
its doc comment, a numbered list lowest first, each module named in backticks in its item; a
module may import the layers below its own and the modules of its own item named before it.
This checks every import against that order (and that every module is in the list), then that
the graph has no cycle, and prints each import or cycle that breaks them.
`.ci/circles.py` checks the same one level down (inside a module's directory).

Usage: python3 .ci/layers.py [host/src]
"""
import collections
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from circles import sccs_of, strip  # noqa: E402

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "host/src")
modules = {p.stem for p in root.glob("*.rs") if p.stem not in ("lib", "main")}
# bin/ holds the binaries' own crates (`wisp`: a module per subcommand), which use the library
# as `wisp_host::`; .ci/circles.py checks inside them.
modules |= {p.name for p in root.iterdir() if p.is_dir() and p.name != "bin"}

edges = collections.defaultdict(set)
for m in sorted(modules):
    files = list(root.glob(f"{m}.rs")) + list((root / m).rglob("*.rs"))
    for f in files:
        text = f.read_text()
        # Comments and strings are not imports (doc links to another module are fine).
        text = strip(text)
        for other in re.findall(r"\bcrate::([a-z_][a-z0-9_]*)", text):
            if other in modules and other != m:
                edges[m].add(other)
        # `use crate::{a, b::c}` groups.
        for group in re.findall(r"\bcrate::\{([^}]*)\}", text, re.S):
            for other in re.findall(r"(?:^|[,{\s])([a-z_][a-z0-9_]*)(?=::|\s*[,}]|$)", group):
                if other in modules and other != m:
                    edges[m].add(other)

# The order lib.rs states: a module's place is (its item's number, its position in the item).
lib = (root / "lib.rs").read_text()
doc = "\n".join(
    line[4:] if line.startswith("//! ") else line[3:]
    for line in lib.splitlines()
    if line.startswith("//!")
)
place = {}
for item in re.split(r"\n(?=\d+\. )", doc):
    number = re.match(r"(\d+)\. ", item)
    if not number:
        continue
    names = [n for n in re.findall(r"`([a-z_][a-z0-9_]*)`", item) if n in modules]
    for i, name in enumerate(names):
        place.setdefault(name, (int(number.group(1)), i))

wrong = [f"  {m}: not in lib.rs's layers" for m in sorted(modules - place.keys())]
for a in sorted(edges):
    for b in sorted(edges[a]):
        if a in place and b in place and place[b] >= place[a]:
            how = "its own layer, listed after it" if place[b][0] == place[a][0] else "a layer above"
            wrong.append(f"  {a} (layer {place[a][0]}) imports {b} (layer {place[b][0]}): {how}")
if wrong:
    print(f"{len(wrong)} import(s) against the layers lib.rs states ({root}/lib.rs):")
    print("\n".join(wrong))
    sys.exit(1)

# Strongly connected components: the one Tarjan of .ci/circles.py.
sys.setrecursionlimit(10000)

sccs = sccs_of(sorted(modules), edges)

if sccs:
    print(f"{len(sccs)} import cycle(s) between top-level modules of {root}:")
    for scc in sccs:
        print("  " + ", ".join(scc))
        for a in scc:
            inside = sorted(b for b in edges[a] if b in scc)
            print(f"    {a} -> {', '.join(inside)}")
    sys.exit(1)
print(f"the {len(modules)} top-level modules of {root} import only downward, as lib.rs states; no cycle")
