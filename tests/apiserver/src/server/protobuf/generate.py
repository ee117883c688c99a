#!/usr/bin/env python3
"""Writes types.txt, the field table the protobuf decoder reads, from the Go types of Kubernetes.

Usage: SOURCES=v0.36.3 generate.py API_CHECKOUT APIMACHINERY_CHECKOUT > types.txt
(checkouts of github.com/kubernetes/api and kubernetes/apimachinery at the tag SOURCES names,
e.g. `git archive v0.36.3 | tar -x -C API_CHECKOUT`; SOURCES goes into the header line).

The Go types, not the .proto files, are the source: only their tags say what the JSON of a
decoded object holds (the JSON name, `omitempty`, whether a field is a pointer, an inline
struct), and that is what a real server stores after decoding a protobuf body.

One line per message or field:
    M <apiVersion>.<Name>
    F <number> <json name, or . for an inline struct> <o: omitempty, z: omitzero, -: neither> <type>
where <type> is `*T` (pointer), `[]T` (slice), `{}T` (map with string keys), a scalar (string,
bool, int32, int64, uint32, uint64, float64, bytes), a special (Time, MicroTime, Duration,
Quantity, IntOrString, RawExtension, FieldsV1), `w:T` (a named slice type marked
+protobuf.nullable, encoded as a message of repeated `items` = 1), or a message
`<apiVersion>.<Name>`.
"""

import os
import re
import sys

API, MACHINERY = sys.argv[1], sys.argv[2]

SPECIALS = {
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "Time"): "Time",
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "MicroTime"): "MicroTime",
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "Duration"): "Duration",
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "FieldsV1"): "FieldsV1",
    ("k8s.io/apimachinery/pkg/api/resource", "Quantity"): "Quantity",
    ("k8s.io/apimachinery/pkg/util/intstr", "IntOrString"): "IntOrString",
    ("k8s.io/apimachinery/pkg/runtime", "RawExtension"): "RawExtension",
}
SCALARS = {"string": "string", "bool": "bool", "int32": "int32", "int64": "int64",
           "int": "int64", "uint32": "uint32", "uint64": "uint64", "float64": "float64",
           "byte": "uint32"}


def package_dir(path):
    if path.startswith("k8s.io/api/"):
        return os.path.join(API, path[len("k8s.io/api/"):])
    if path.startswith("k8s.io/apimachinery/"):
        return os.path.join(MACHINERY, path[len("k8s.io/apimachinery/"):])
    return None


class Package:
    def __init__(self, path):
        self.path = path
        self.structs = {}   # name -> [(go name, type expr, tags, file imports)]
        self.named = {}     # name -> (type expr, file imports, nullable)
        self.group = None
        directory = package_dir(path)
        if not directory or not os.path.isdir(directory):
            return
        for name in sorted(os.listdir(directory)):
            if (not name.endswith(".go") or name.endswith("_test.go")
                    or name.startswith("zz_generated") or name.startswith("generated")):
                continue
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                self.parse(f.read())

    def parse(self, src):
        imports = {}
        for m in re.finditer(r'^\s*(\w+\s+)?"(k8s\.io/[^"]+)"', src, re.M):
            alias = (m.group(1) or "").strip() or m.group(2).rsplit("/", 1)[1]
            imports[alias] = m.group(2)
        g = re.search(r'^const GroupName = "([^"]*)"', src, re.M)
        if g:
            self.group = g.group(1)
        lines = src.split("\n")
        i = 0
        while i < len(lines):
            line = lines[i]
            m = re.match(r"^type (\w+) struct\s*\{\s*\}", line)
            if m:
                self.structs[m.group(1)] = []
                i += 1
                continue
            m = re.match(r"^type (\w+) struct \{\s*$", line)
            if m:
                fields = []
                i += 1
                while not lines[i].startswith("}"):
                    f = re.match(r"^\s*(?:(\w+)\s+)?([^\s`/]+)\s+`([^`]*)`", lines[i])
                    if f:
                        fields.append((f.group(1) or f.group(2), f.group(2), f.group(3), imports))
                    i += 1
                self.structs[m.group(1)] = fields
            else:
                m = re.match(r"^type (\w+) (?:= )?([^\s{]+)\s*$", line)
                if m:
                    j, nullable = i - 1, False
                    while j >= 0 and lines[j].startswith("//"):
                        nullable |= "+protobuf.nullable=true" in lines[j]
                        j -= 1
                    self.named[m.group(1)] = (m.group(2), imports, nullable)
            i += 1

    def api_version(self):
        version = self.path.rsplit("/", 1)[1]
        return f"{self.group}/{version}" if self.group else version


PACKAGES = {}


def package(path):
    if path not in PACKAGES:
        PACKAGES[path] = Package(path)
    return PACKAGES[path]


QUEUE = []
EMITTED = set()


def resolve(expr, pkg, imports):
    """The table's type for a Go type expression in `pkg`."""
    if expr.startswith("*"):
        return "*" + resolve(expr[1:], pkg, imports)
    if expr == "[]byte":
        return "bytes"
    if expr.startswith("[]"):
        return "[]" + resolve(expr[2:], pkg, imports)
    if expr.startswith("map["):
        return "{}" + resolve(expr[expr.index("]") + 1:], pkg, imports)
    if expr in SCALARS:
        return SCALARS[expr]
    if "." in expr:
        alias, name = expr.split(".", 1)
        path = imports.get(alias)
        if path is None:
            raise SystemExit(f"{pkg.path}: unknown import {alias} in {expr}")
        target = package(path)
    else:
        name, target = expr, pkg
    if (target.path, name) in SPECIALS:
        return SPECIALS[(target.path, name)]
    if name in target.structs:
        key = (target.path, name)
        if key not in EMITTED:
            EMITTED.add(key)
            QUEUE.append(key)
        return f"{target.api_version()}.{name}"
    if name in target.named:
        under, under_imports, nullable = target.named[name]
        inner = resolve(under, target, under_imports)
        if nullable and inner.startswith("[]"):
            return "w:" + inner[2:]
        return inner
    if target.path == "k8s.io/apimachinery/pkg/types":
        return "string"
    raise SystemExit(f"{pkg.path}: cannot resolve {expr}")


def emit(key, out):
    pkg = package(key[0])
    out.append(f"M {pkg.api_version()}.{key[1]}")
    for _go_name, expr, tags, imports in pkg.structs[key[1]]:
        proto = re.search(r'protobuf:"(\w+),(\d+),', tags)
        if not proto:
            continue
        js = re.search(r'json:"([^"]*)"', tags)
        parts = (js.group(1) if js else "").split(",")
        if parts[0] == "-":
            continue
        json_name = parts[0] or "."
        flag = "o" if "omitempty" in parts[1:] else "z" if "omitzero" in parts[1:] else "-"
        out.append(f"F {proto.group(2)} {json_name} {flag} {resolve(expr, pkg, imports)}")


def main():
    roots = []
    for top in sorted(os.listdir(API)):
        if not os.path.isdir(os.path.join(API, top)) or top.startswith("."):
            continue
        for version in sorted(os.listdir(os.path.join(API, top))):
            if re.fullmatch(r"v\d+((alpha|beta)\d+)?", version):
                roots.append(f"k8s.io/api/{top}/{version}")
    roots.append("k8s.io/apimachinery/pkg/apis/meta/v1")
    for path in roots:
        pkg = package(path)
        if pkg.group is None:
            continue
        for name, fields in pkg.structs.items():
            # Top-level objects: the structs embedding TypeMeta.
            if any(f[1] == "metav1.TypeMeta" or f[1] == "TypeMeta" for f in fields):
                resolve(name, pkg, {})
    out = []
    while QUEUE:
        emit(QUEUE.pop(0), out)
    print("# Generated by generate.py from kubernetes/api and kubernetes/apimachinery "
          f"({os.environ.get('SOURCES', 'see git log')}); do not edit.")
    print("\n".join(out))


main()
