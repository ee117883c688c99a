"""Audit logger (Python): one log line per object lifecycle event, and a counter per informer and
event. The same plugin as the Rust example `plugins/audit-log` (same settings, log lines and
counters; the test suite replays both and diffs them).

Settings (all optional): {"includeResyncs": false, "includeInitialList": true}.
"""

import wisp_plugin as wisp
from wisp_plugin import metrics

SETTINGS = {"includeResyncs": (bool, False), "includeInitialList": (bool, True)}


def what(o):
    return f"{o.api_version} {o.kind} {o.key} rv={o.resource_version}"


def count(cx, event):
    metrics.counter_add("audit_events_total", [("informer", cx.informer), ("event", event)], 1)


class AuditLog(wisp.Plugin):
    def __init__(self, settings):
        self.settings = settings

    @staticmethod
    def describe():
        return wisp.info("audit-log", "0.1.0", [])

    @classmethod
    def init(cls, settings):
        return cls(wisp.parse_settings(settings, SETTINGS))

    def on_add(self, cx, obj, initial_list):
        count(cx, "added")
        if initial_list and not self.settings["includeInitialList"]:
            return
        tag = " (initial list)" if initial_list else ""
        wisp.info_log(f"ADDED {what(obj)}{tag}")

    def on_update(self, cx, old, new, resync):
        if resync:
            count(cx, "resynced")
            if self.settings["includeResyncs"]:
                wisp.info_log(f"RESYNCED {what(new)}")
            return
        count(cx, "updated")
        wisp.info_log(f"UPDATED {what(new)} (was rv={old.resource_version})")

    def on_delete(self, cx, obj, final_state_unknown):
        count(cx, "deleted")
        tag = " (deletion missed; last known state)" if final_state_unknown else ""
        wisp.info_log(f"DELETED {what(obj)}{tag}")


Listener = wisp.export(AuditLog)
