"""Counters and gauges the host exports under the plugin's name."""

from . import _host


def counter_add(name, labels=(), value=1):
    """Adds ``value`` (an int >= 0) to a counter; ``labels`` is a list of (key, value) or a dict."""
    pairs = list(labels.items()) if isinstance(labels, dict) else list(labels)
    _host.counter_add(name, pairs, value)


def gauge_set(name, labels=(), value=0.0):
    """Sets a gauge."""
    pairs = list(labels.items()) if isinstance(labels, dict) else list(labels)
    _host.gauge_set(name, pairs, float(value))
