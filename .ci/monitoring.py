#!/usr/bin/env python3
"""Checks deploy/monitoring with promtool: the PrometheusRule's `spec` (a plain Prometheus rules
file, written to a temporary file) with `promtool check rules`, then its unit tests
(deploy/monitoring/rules-test.yaml) with `promtool test rules`. The PrometheusRule is the one
source of the rules; nothing else is checked in."""
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MONITORING = os.path.join(ROOT, "deploy", "monitoring")


def main():
    if shutil.which("promtool") is None:
        sys.exit("promtool not found: install Debian's prometheus package (.ci/run does)")
    path = os.path.join(MONITORING, "prometheusrule.yaml")
    with open(path) as f:
        rule = yaml.safe_load(f)
    if rule.get("kind") != "PrometheusRule" or "spec" not in rule:
        sys.exit(f"{path}: expected a PrometheusRule with a spec, got kind {rule.get('kind')!r}")
    with tempfile.TemporaryDirectory() as tmp:
        rules = os.path.join(tmp, "wisp-rules.yaml")
        with open(rules, "w") as f:
            yaml.safe_dump(rule["spec"], f, sort_keys=False)
        shutil.copy(os.path.join(MONITORING, "rules-test.yaml"), tmp)
        for args in (["check", "rules", rules], ["test", "rules", os.path.join(tmp, "rules-test.yaml")]):
            print("== promtool " + " ".join(args[:2]) + f" ({os.path.relpath(path, ROOT)})", flush=True)
            if subprocess.run(["promtool", *args]).returncode != 0:
                sys.exit(f"promtool {' '.join(args[:2])} failed for {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
