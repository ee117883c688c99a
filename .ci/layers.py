#!/usr/bin/env python3
"""Fails when the top-level modules of host/src import one another in a cycle.

A top-level module is a file `host/src/<m>.rs` or a directory `host/src/<m>/`; an import is a
`crate::<other>` path anywhere in its files (a `use` line or a path in code), tests included
(`tests.rs` files and `#[cfg(test)]` modules are the module's own). `lib.rs` states the layers;
this checks that the graph they describe has no cycle, and prints each cycle found.
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
print(f"no import cycle between the {len(modules)} top-level modules of {root}")
