"""Automation through the host, within the grants of its config. Each call returns ``"queued"``
or ``"dry-run"``; a refusal raises :class:`wisp_plugin.errors.ActionError`."""

import json

from . import _Err, _actions, _types
from .errors import ActionError


def _call(f, *args):
    try:
        r = f(*args)
    except _Err as e:
        raise ActionError.of(e.value) from None
    return "queued" if r == _actions.Accepted.QUEUED else "dry-run"


def object_ref(obj):
    """A reference to ``obj``."""
    return _types.ObjectRef(api_version=obj.api_version, kind=obj.kind,
                            namespace=obj.namespace, name=obj.name)


def patch_metadata(target, labels=(), annotations=()):
    """Merge-patches labels/annotations of ``target`` (an object ref): a value sets a key, None
    removes it. ``labels``/``annotations`` are dicts or lists of pairs."""
    def pairs(p):
        return list(p.items()) if isinstance(p, dict) else list(p)
    return _call(_actions.patch_metadata, target, pairs(labels), pairs(annotations))


def apply(manifest):
    """Server-side apply of ``manifest`` (a dict, or JSON text)."""
    text = manifest if isinstance(manifest, str) else json.dumps(manifest)
    return _call(_actions.apply, text)


def create_event(regarding, event_type, reason, message):
    """Records an Event (``event_type``: ``normal`` or ``warning``) about ``regarding``."""
    et = _actions.EventType[event_type.upper()]
    return _call(_actions.create_event, regarding, et, reason, message)
