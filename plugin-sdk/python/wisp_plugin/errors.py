"""Errors of the host's calls, as exceptions: ``kind`` is the WIT case (``not-granted``, ...),
``message`` its text."""


def _kebab(name):
    out = []
    for i, c in enumerate(name):
        if c.isupper() and i:
            out.append("-")
        out.append(c.lower())
    return "".join(out)


class HostError(Exception):
    """Base of the host's refusals."""

    def __init__(self, kind, message):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message

    @classmethod
    def of(cls, err_value):
        """From a generated variant case (e.g. ``VerdictError_NotFound("x")``)."""
        case = type(err_value).__name__.split("_", 1)[-1]
        return cls(_kebab(case), getattr(err_value, "value", ""))

    def rust_debug(self):
        """The Rust SDK's `{e:?}` of this error (e.g. ``VerdictError::NotFound("x")``), for
        messages that must match a Rust plugin's."""
        case = "".join(p.capitalize() for p in self.kind.split("-"))
        from .fmt import rust_debug_str
        return f"{type(self).__name__}::{case}({rust_debug_str(self.message)})"


class CacheError(HostError):
    """A cache read was refused (``not-granted``, ``unknown-index``, ``bad-selector``)."""


class VerdictError(HostError):
    """A verdict was refused (``not-granted``, ``not-found``, ``invalid``)."""


class ActionError(HostError):
    """An action was refused (``not-granted``, ``rate-limited``, ``invalid``, ``queue-full``,
    ``unavailable``)."""
