"""Policy verdicts on cached objects; a refusal raises
:class:`wisp_plugin.errors.VerdictError`."""

from . import _Err, _policy, _types
from .errors import VerdictError

SEVERITIES = ("info", "low", "medium", "high", "critical")


def _report(informer, obj, rule, violation):
    try:
        _policy.report(informer, obj.namespace, obj.name, rule, violation)
    except _Err as e:
        raise VerdictError.of(e.value) from None


def violation(informer, obj, rule, severity, message):
    """Reports ``obj`` (from ``informer``) as violating ``rule``; severity is one of
    ``info``, ``low``, ``medium``, ``high``, ``critical``."""
    sev = _types.Severity[severity.upper()]
    _report(informer, obj, rule, _policy.Violation(severity=sev, message=message))


def passes(informer, obj, rule):
    """Reports that ``obj`` passes ``rule`` (clearing an earlier violation)."""
    _report(informer, obj, rule, None)
