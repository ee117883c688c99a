"""__NAME__: a Wisp plugin. A Namespace without the label `settings.label` (default `owner`)
violates the rule `missing-label`: a verdict for the host (its /verdicts, metrics and policy
reports), a log line and the counter `violations_total{rule}`. Labelling it clears the verdict.

Settings: {"label": "owner", "exempt": ["kube-system"]} (unknown fields and wrong types are
refused at load, as is an empty label).
"""

import wisp_plugin as wisp
from wisp_plugin import metrics, policy
from wisp_plugin.errors import VerdictError

RULE = "missing-label"

SETTINGS = {"label": (str, "owner"), "exempt": ([str], [])}


class RequireLabel(wisp.Plugin):
    def __init__(self, settings):
        self.settings = settings

    @staticmethod
    def describe():
        return wisp.info("__NAME__", "0.1.0", ["namespaces"])

    @classmethod
    def init(cls, settings):
        s = wisp.parse_settings(settings, SETTINGS)
        if not s["label"]:
            raise wisp.PluginError("settings.label: must not be empty")
        return cls(s)

    def check(self, cx, obj):
        if obj.name in self.settings["exempt"]:
            return
        key, label = obj.key, self.settings["label"]
        try:
            if obj.label(label) is not None:
                policy.passes(cx.informer, obj, RULE)
            else:
                message = f'{obj.kind} {key} has no label "{label}"'
                wisp.warn(f"violation {RULE} {key}: {message}")
                metrics.counter_add("violations_total", [("rule", RULE)], 1)
                policy.violation(cx.informer, obj, RULE, "medium", message)
        except VerdictError as e:
            # Deleted since: its delete clears its verdicts.
            if e.kind != "not-found":
                raise wisp.PluginError(f"verdict {RULE} {key}: {e}") from None

    def on_add(self, cx, obj, initial_list):
        self.check(cx, obj)

    def on_update(self, cx, old, new, resync):
        self.check(cx, new)


Listener = wisp.export(RequireLabel)
