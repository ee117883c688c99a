"""Image policy hook (Python): reports pods whose containers use a `:latest` (or untagged) image
or have no cpu and memory limits, as verdicts, log lines, `policy_violations_total{rule}` and the
gauge `policy_violating_pods{rule}`. The same plugin as the Rust example `plugins/image-policy`
(same settings, verdicts, log lines and metrics; the test suite replays both and diffs them).

Settings: {"denyLatest": true, "requireLimits": true, "exemptNamespaces": ["kube-system"]}
(unknown fields and wrong types are refused at load).

A pod the Rust example cannot parse as a Pod (e.g. `spec.containers` not a list) is an error
outcome here too, with Python's message (the SDK turns the exception into the outcome).
"""

import wisp_plugin as wisp
from wisp_plugin import metrics, policy
from wisp_plugin.errors import VerdictError
from wisp_plugin.fmt import rust_debug_str

SETTINGS = {
    "denyLatest": (bool, True),
    "requireLimits": (bool, True),
    "exemptNamespaces": ([str], []),
}

LATEST = "latest-tag"
LIMITS = "missing-limits"
RULES = (LATEST, LIMITS)


def uses_latest(image):
    """`nginx`, `nginx:latest`, `registry:5000/nginx` are latest; a digest pins the image."""
    if "@" in image:
        return False
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return True
    return last.rsplit(":", 1)[1] == "latest"


def severity(rule):
    return "high" if rule == LATEST else "medium"


def lacks_limits(c):
    limits = (c.get("resources") or {}).get("limits")
    return not (isinstance(limits, dict) and "cpu" in limits and "memory" in limits)


class ImagePolicy(wisp.Plugin):
    def __init__(self, settings):
        self.settings = settings
        # rule -> keys of pods violating it now.
        self.violating = {LATEST: set(), LIMITS: set()}

    @staticmethod
    def describe():
        return wisp.info("image-policy", "0.1.0", ["pods"])

    @classmethod
    def init(cls, settings):
        s = wisp.parse_settings(settings, SETTINGS)
        if not s["denyLatest"] and not s["requireLimits"]:
            raise wisp.PluginError(
                "settings: nothing to check: enable denyLatest or requireLimits")
        return cls(s)

    def evaluate(self, pod):
        found = []
        spec = pod.get("spec")
        if not spec:
            return found
        containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
        for c in containers:
            image = c.get("image") or ""
            name = c.get("name", "")
            if self.settings["denyLatest"] and uses_latest(image):
                found.append((LATEST, f"container {name} uses image {rust_debug_str(image)} "
                                      "without a pinned tag"))
            if self.settings["requireLimits"] and lacks_limits(c):
                found.append((LIMITS, f"container {name} has no cpu and memory limits"))
        return found

    def check(self, cx, obj):
        if obj.kind != "Pod":
            return
        key = obj.key
        if obj.namespace is not None and obj.namespace in self.settings["exemptNamespaces"]:
            return
        found = self.evaluate(obj.value())
        for rule in RULES:
            messages = [m for r, m in found if r == rule]
            try:
                if messages:
                    policy.violation(cx.informer, obj, rule, severity(rule), "; ".join(messages))
                else:
                    policy.passes(cx.informer, obj, rule)
            except VerdictError as e:
                # Deleted since: its delete clears everything.
                if e.kind != "not-found":
                    raise wisp.PluginError(f"verdict {rule} {key}: {e.rust_debug()}") from None
            keys = self.violating[rule]
            if not messages:
                if key in keys:
                    keys.remove(key)
                    wisp.info_log(f"pass {rule} {key}: fixed")
            elif key not in keys:
                keys.add(key)
                metrics.counter_add("policy_violations_total", [("rule", rule)], 1)
                for m in messages:
                    wisp.warn(f"violation {rule} {key}: {m}")

    def on_add(self, cx, obj, initial_list):
        self.check(cx, obj)

    def on_update(self, cx, old, new, resync):
        self.check(cx, new)

    def on_delete(self, cx, obj, final_state_unknown):
        key = obj.key
        for keys in self.violating.values():
            keys.discard(key)

    def after_batch(self):
        for rule in RULES:
            metrics.gauge_set("policy_violating_pods", [("rule", rule)], len(self.violating[rule]))


Listener = wisp.export(ImagePolicy)
