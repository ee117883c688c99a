"""Wisp plugin SDK for Python: write a Wisp plugin as a Python class.

A plugin is a WebAssembly component of world ``wisp:plugin/plugin@0.3.0`` (``wit/wisp.wit``),
built with componentize-py (see ``docs/plugins/python.md``)::

    import wisp_plugin as wisp

    class Hello(wisp.Plugin):
        @staticmethod
        def describe():
            return wisp.info("hello", "0.1.0", ["pods"])

        @classmethod
        def init(cls, settings):
            return cls()

        def on_add(self, cx, obj, initial_list):
            wisp.info_log(f"hello {obj.key}")

    Listener = wisp.export(Hello)

Shaped like the Rust SDK (``plugin-sdk/src/lib.rs``):

- each batch (``docs/abi.md``) is decoded by :mod:`wisp_plugin.abi` into typed
  :class:`Notification` / :class:`Object` values and dispatched to ``on_add`` / ``on_update`` /
  ``on_delete``;
- an exception raised by a handler becomes that notification's error outcome (the host applies
  the plugin's failure policy) instead of trapping the whole call, which would replace the
  instance and lose its state;
- :func:`parse_settings`, logging (:func:`log` and the level helpers), :mod:`metrics`,
  :mod:`cache`, :mod:`policy` (verdicts) and :mod:`actions` wrap the generated bindings.
"""

import traceback as _traceback

from .abi import Batch, DecodeError, Notification, Object, OwnerRef, decode_list  # noqa: F401
from .settings import SettingsError, parse_settings  # noqa: F401

try:  # The generated bindings exist in the component only (componentize-py writes them).
    from wit_world import exports as _exports
    from wit_world.imports import actions as _actions
    from wit_world.imports import host as _host
    from wit_world.imports import policy as _policy
    from wit_world.imports import types as _types
    from componentize_py_types import Err as _Err
except ImportError:  # plain CPython: the decoder and settings still work (and are tested)
    _exports = _actions = _host = _policy = _types = _Err = None

__all__ = [
    "Plugin", "Context", "PluginError", "SettingsError", "info", "export", "parse_settings", "Object",
    "Notification", "OwnerRef", "DecodeError", "log", "log_enabled", "trace", "debug",
    "info_log", "warn", "error", "metrics", "cache", "policy", "actions",
]


class PluginError(Exception):
    """An error a handler means to report: its message alone becomes the error outcome (any other
    exception's outcome is ``<ExceptionType>: <message>``)."""


class Context:
    """Where a notification comes from: ``seq`` in the (plugin, informer) stream, ``informer``
    (its name in the host's config)."""

    __slots__ = ("seq", "informer")

    def __init__(self, seq, informer):
        self.seq = seq
        self.informer = informer


class Plugin:
    """A Wisp plugin. Override ``describe`` and ``init``; every event method defaults to doing
    nothing. An exception raised by ``on_add`` / ``on_update`` / ``on_delete`` is that
    notification's error outcome; the plugin keeps running with its state."""

    @staticmethod
    def describe():
        """Name, version and expected informers: return :func:`info`."""
        raise NotImplementedError("describe")

    @classmethod
    def init(cls, settings):
        """Builds the plugin from its settings (JSON text, ``{}`` when none). Raise to refuse
        it."""
        return cls()

    def on_add(self, cx, obj, initial_list):
        """An object appeared (``initial_list``: part of the first list or a late-join replay)."""

    def on_update(self, cx, old, new, resync):
        """An object changed (``resync``: nothing changed)."""

    def on_delete(self, cx, obj, final_state_unknown):
        """An object is gone (``final_state_unknown``: the deletion was missed)."""

    def after_batch(self):
        """Called after each batch (e.g. to publish gauges once per batch)."""

    def snapshot(self):
        """State (bytes) to hand to the next version at a hot reload, or None."""
        return None

    def restore(self, state):
        """Takes the previous version's snapshot (after ``init``)."""


def info(name, version, informers=(), replay_on_reload=False, metadata_only=False):
    """What the plugin says about itself (``describe``'s answer)."""
    return _types.PluginInfo(name=name, version=version, informers=list(informers),
                             replay_on_reload=replay_on_reload, metadata_only=metadata_only)


def _message(e):
    if isinstance(e, (PluginError, SettingsError)):
        return str(e)
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def export(plugin_class):
    """The component's ``listener`` export for ``plugin_class``: bind it as ``Listener`` in the
    app module (``Listener = wisp_plugin.export(MyPlugin)``)."""
    state = {"plugin": None}

    def dispatch(p, cx, n):
        if n.kind == "added":
            p.on_add(cx, n.object, n.initial_list)
        elif n.kind == "updated":
            p.on_update(cx, n.old, n.object, n.resync)
        else:
            p.on_delete(cx, n.object, n.final_state_unknown)

    class Listener(_exports.Listener):
        def describe(self):
            return plugin_class.describe()

        def init(self, settings):
            try:
                state["plugin"] = plugin_class.init(settings)
            except _Err:
                raise
            except Exception as e:  # noqa: BLE001 - every refusal is the init's error
                raise _Err(_message(e))

        def handle(self, batch):
            try:
                b = Batch(batch)
            except DecodeError as e:
                # No outcomes: the host counts every notification of the batch as failed.
                log("error", f"cannot read the batch: {e}")
                return []
            p = state["plugin"]
            if p is None:
                return [_types.Outcome_Error("plugin used before init")] * len(b)
            out = []
            informer = b.informer
            for n in b:
                if isinstance(n, DecodeError):
                    out.append(_types.Outcome_Error(str(n)))
                    continue
                try:
                    dispatch(p, Context(n.seq, informer), n)
                    out.append(_types.Outcome_Ok())
                except Exception as e:  # noqa: BLE001 - an outcome, not a trap
                    if log_enabled("debug"):
                        log("debug", "".join(_traceback.format_exception(e)).rstrip())
                    out.append(_types.Outcome_Error(_message(e)))
            try:
                p.after_batch()
            except Exception as e:  # noqa: BLE001
                log("error", f"after_batch: {_message(e)}")
            return out

        def snapshot(self):
            p = state["plugin"]
            return None if p is None else p.snapshot()

        def restore(self, data):
            p = state["plugin"]
            if p is None:
                raise _Err("restore before init")
            try:
                p.restore(bytes(data))
            except Exception as e:  # noqa: BLE001
                raise _Err(_message(e))

    Listener.__name__ = Listener.__qualname__ = "Listener"
    return Listener


# Logging ---------------------------------------------------------------------------------------

_LEVELS = {}


def _level(level):
    if not _LEVELS:
        L = _types.Level
        _LEVELS.update(trace=L.TRACE, debug=L.DEBUG, info=L.INFO, warn=L.WARN, error=L.ERROR)
    return _LEVELS[level] if isinstance(level, str) else level


def log(level, message):
    """Logs ``message`` at ``level`` (``"trace"``, ``"debug"``, ``"info"``, ``"warn"``,
    ``"error"``) under the plugin's name."""
    _host.log(_level(level), message)


def log_enabled(level):
    """Whether the host keeps messages at ``level`` (skip costly formatting when it does not)."""
    return _host.log_enabled(_level(level))


def _at(level):
    def f(message):
        if _host.log_enabled(_level(level)):
            _host.log(_level(level), message)
    f.__name__ = level
    f.__doc__ = f"Logs at {level} level when the host keeps that level."
    return f


trace = _at("trace")
debug = _at("debug")
info_log = _at("info")
warn = _at("warn")
error = _at("error")

from . import actions, cache, metrics, policy  # noqa: E402,F401
