"""Settings parsing shaped like the Rust SDK's ``parse_settings``: unknown fields and wrong types
are refused, with messages that name the field (``settings.denyLatest: invalid type: ...``)."""

import copy
import json

_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
          dict: "a map"}


class SettingsError(ValueError):
    """Settings that do not fit: the message names the field."""


def _what(v):
    if isinstance(v, bool):
        return f"boolean `{str(v).lower()}`"
    if isinstance(v, str):
        return "string " + json.dumps(v, ensure_ascii=False)
    if isinstance(v, (int, float)):
        return f"number {v}"
    if v is None:
        return "null"
    if isinstance(v, list):
        return "sequence"
    return "map"


def _check(path, value, typ):
    if isinstance(typ, list):
        if not isinstance(value, list):
            raise SettingsError(f"{path}: invalid type: {_what(value)}, expected a sequence")
        return [_check(f"{path}[{i}]", v, typ[0]) for i, v in enumerate(value)]
    ok = isinstance(value, typ) and not (typ in (int, float) and isinstance(value, bool))
    if typ is float and isinstance(value, int) and not isinstance(value, bool):
        ok, value = True, float(value)
    if not ok:
        raise SettingsError(f"{path}: invalid type: {_what(value)}, expected {_NAMES[typ]}")
    return value


def parse_settings(text, fields):
    """Parses settings JSON (``{}`` when none) against ``fields``: ``{name: (type, default)}``
    where type is bool, int, float, str, dict or ``[type]`` (a list of it). Returns a dict with
    every field (defaults for those missing). Raises SettingsError (a ValueError) naming the field."""
    try:
        v = json.loads(text)
    except ValueError as e:
        raise SettingsError(f"settings: {e}") from None
    if not isinstance(v, dict):
        raise SettingsError(f"settings: invalid type: {_what(v)}, expected a map")
    for k in v:
        if k not in fields:
            known = ", ".join(f"`{f}`" for f in fields)
            raise SettingsError(f"settings: unknown field `{k}`, expected one of {known}")
    out = {}
    for name, (typ, default) in fields.items():
        out[name] = _check(f"settings.{name}", v[name], typ) if name in v else copy.deepcopy(default)
    return out
