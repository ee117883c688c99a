#!/usr/bin/env python3
"""Fails when a function in host/src is longer than 150 lines (rustfmt's layout: from the `fn`
line to the closing brace at the same indentation). Prints each one found.

Usage: python3 .ci/fn-length.py [host/src] [limit]
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "host/src")
limit = int(sys.argv[2]) if len(sys.argv) > 2 else 150
start = re.compile(r"^(\s*)(?:pub(?:\([^)]*\))? )?(?:const )?(?:async )?(?:unsafe )?fn (\w+)")
long = []
for f in sorted(root.rglob("*.rs")):
    lines = f.read_text().splitlines()
    for i, line in enumerate(lines):
        m = start.match(line)
        if not m or line.rstrip().endswith(";"):
            continue
        indent = m.group(1)
        for j in range(i, len(lines)):
            if lines[j] == indent + "}" or (j == i and line.rstrip().endswith("}")):
                break
        else:
            continue
        n = j - i + 1
        if n > limit:
            long.append((n, f"{f}:{i + 1}", m.group(2)))
for n, at, name in sorted(long, reverse=True):
    print(f"{at}: fn {name} is {n} lines (limit {limit})")
if long:
    sys.exit(1)
print(f"no function in {root} over {limit} lines")
