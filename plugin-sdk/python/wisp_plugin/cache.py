"""Reads of the host's cache: only informers granted to the plugin in the host's config. A refusal
raises :class:`wisp_plugin.errors.CacheError`."""

from . import _host, _Err
from .abi import Object, decode_list
from .errors import CacheError


def _call(f, *args):
    try:
        return f(*args)
    except _Err as e:
        raise CacheError.of(e.value) from None


def get(informer, namespace, name):
    """The cached object ``namespace/name`` (namespace None when cluster-scoped), or None."""
    b = _call(_host.cache_get, informer, namespace, name)
    return None if b is None else Object(b)


def list_objects(informer, namespace=None, label_selector=None):
    """Cached objects of ``informer``, optionally in one namespace and matching a selector."""
    return decode_list(_call(_host.cache_list, informer, namespace, label_selector))


def by_index(informer, index, value):
    """Cached objects of ``informer`` whose index ``index`` holds ``value``."""
    return decode_list(_call(_host.cache_by_index, informer, index, value))
