#!/usr/bin/env python3
"""Checks that `cargo xtask test` reuses the dependencies `cargo xtask demo` built.

The demo builds the workspace (`cargo build --workspace`); the tests add dev-dependencies. When
those turn on features of crates the demo already built (tokio's test-util, say), cargo builds
those crates again, and every crate that depends on them: once 84 packages, cranelift and
wasmtime among them. This compares cargo's feature resolution of both builds and fails naming
each dependency the test build would compile again. Crates only the tests use are fine.

Usage: python3 .ci/shared-build.py [FIRST_ARGS] (run from the repository root).
"""
import collections
import re
import subprocess
import sys


def graph(args):
    out = subprocess.run(
        ["cargo", "tree", "--prefix", "depth", "-f", "{p}|{f}"] + args,
        capture_output=True, text=True, check=True,
    ).stdout
    nodes, deps, stack = {}, collections.defaultdict(set), []
    for line in out.splitlines():
        m = re.match(r"^(\d+)(.*)$", line)
        if not m or "|" not in m.group(2):
            continue
        depth = int(m.group(1))
        package, features = m.group(2).replace(" (*)", "").split("|", 1)
        name, version = package.split(" ")[:2]
        # A proc-macro's dependencies are built for the host apart from the target's.
        key = (f"{name} {version}", "(proc-macro)" in package)
        nodes.setdefault(key, set()).add(features.strip())
        stack = stack[:depth]
        if stack:
            deps[stack[-1]].add(key)
        stack.append(key)
    return nodes, deps


first, _ = graph(sys.argv[1].split() if len(sys.argv) > 1 else ["--workspace", "-e", "normal,build"])
second, deps = graph(["--workspace", "-e", "normal,build,dev"])
changed = {k for k in second if k in first and first[k] != second[k]}
dependents = collections.defaultdict(set)
for parent, children in deps.items():
    for child in children:
        dependents[child].add(parent)
again, todo = set(changed), list(changed)
while todo:
    for parent in dependents[todo.pop()]:
        if parent not in again and parent in first:
            again.add(parent)
            todo.append(parent)
again = sorted(k[0] for k in again if not k[0].startswith(("wisp-", "xtask ")))
if again:
    print(f"the test build would compile {len(again)} dependencies of the demo's build again:")
    for k in sorted(changed):
        print(f"  {k[0]}: features {sorted(first[k])} -> {sorted(second[k])}")
    print("  and what depends on them: " + ", ".join(again))
    sys.exit(1)
print("the test build reuses every dependency of the demo's build")
