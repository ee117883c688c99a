"""Decoder of the plugin ABI 0.2 byte layout (``docs/abi.md``).

Pure Python, no host calls: it runs in the component and in plain CPython, where its tests read
the shared vectors (``wit/abi-vectors.json``). Decoding checks every span of an object (field
table, pair and owner tables, and that every metadata string is UTF-8: docs/abi.md, "Text")
when the object is taken, so accessors never fail later; a malformed encoding raises
:class:`DecodeError`. Strings are decoded when first asked for.
"""

import json as _json
import struct

LAYOUT_VERSION = 1
ABSENT = 0xFFFFFFFF

API_VERSION, KIND, NAMESPACE, NAME, UID, RESOURCE_VERSION = 0, 1, 2, 3, 4, 5
GENERATION, DELETION_TIMESTAMP, LABELS, ANNOTATIONS, OWNER_REFERENCES, JSON = 6, 7, 8, 9, 10, 11

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_SPAN = struct.Struct("<II")


class DecodeError(ValueError):
    """Bytes that are not a valid encoding."""

    def __str__(self):
        return "malformed ABI bytes: " + super().__str__()


def _u16(b, at):
    if at + 2 > len(b):
        return None
    return _U16.unpack_from(b, at)[0]


def _u32(b, at):
    if at + 4 > len(b):
        return None
    return _U32.unpack_from(b, at)[0]


def _span(b, at):
    """(offset, length) of the span at ``at``; None when absent; DecodeError when out of bounds."""
    if at + 8 > len(b):
        raise DecodeError(f"span at {at} past the end ({len(b)} bytes)")
    off, n = _SPAN.unpack_from(b, at)
    if off == ABSENT:
        return None
    if off + n > len(b):
        raise DecodeError(f"span {off}+{n} at {at} past the end ({len(b)} bytes)")
    return off, n


def _text(b, sp):
    # Checked when the object was taken (_utf8): never "" for bytes that are not UTF-8.
    if sp is None:
        return None
    off, n = sp
    try:
        return bytes(b[off:off + n]).decode("utf-8")
    except UnicodeDecodeError:
        return ""


# The fields that hold text (generation is a number; the tables are checked entry by entry).
_TEXT_FIELDS = ((API_VERSION, "apiVersion"), (KIND, "kind"), (NAMESPACE, "namespace"),
                (NAME, "name"), (UID, "uid"), (RESOURCE_VERSION, "resourceVersion"),
                (DELETION_TIMESTAMP, "deletionTimestamp"))
_ENTRY_PARTS = {LABELS: ("labels", ("key", "value")),
                ANNOTATIONS: ("annotations", ("key", "value")),
                OWNER_REFERENCES: ("ownerReferences", ("apiVersion", "kind", "name", "uid"))}


def _utf8(b, sp, what):
    """DecodeError naming ``what`` and the first byte that is not UTF-8, if any."""
    if sp is None:
        return
    off, n = sp
    try:
        b[off:off + n].decode("utf-8")
    except UnicodeDecodeError as e:
        raise DecodeError(f"{what()}: text that is not UTF-8 (byte {e.start} of {n})") from None


class OwnerRef:
    """One entry of ``metadata.ownerReferences``."""

    __slots__ = ("api_version", "kind", "name", "uid", "controller", "block_owner_deletion")

    def __init__(self, api_version, kind, name, uid, controller, block_owner_deletion):
        self.api_version = api_version
        self.kind = kind
        self.name = name
        self.uid = uid
        self.controller = controller
        self.block_owner_deletion = block_owner_deletion

    def __eq__(self, other):
        return isinstance(other, OwnerRef) and all(
            getattr(self, s) == getattr(other, s) for s in self.__slots__)

    def __repr__(self):
        return "OwnerRef(%s)" % ", ".join(f"{s}={getattr(self, s)!r}" for s in self.__slots__)


class Object:
    """A Kubernetes object read from its encoding: metadata as properties, the JSON on demand."""

    __slots__ = ("_b", "_fields", "_cache", "_value")

    def __init__(self, data):
        b = bytes(data)
        if not b:
            raise DecodeError("empty object")
        if b[0] != LAYOUT_VERSION:
            raise DecodeError(f"object layout version {b[0]}, expected {LAYOUT_VERSION}")
        fields = _u16(b, 2)
        if fields is None:
            raise DecodeError("object header cut short")
        for f in range(fields):
            _span(b, 4 + f * 8)
        for f, name in _TEXT_FIELDS:
            if f < fields:
                _utf8(b, _span(b, 4 + f * 8), lambda: f"field {name}")
        for table in (LABELS, ANNOTATIONS, OWNER_REFERENCES):
            if table < fields:
                self._check_table(b, table)
        self._b = b
        self._fields = fields
        self._cache = {}
        self._value = None

    @staticmethod
    def _check_table(b, table):
        sp = _span(b, 4 + table * 8)
        if sp is None:
            return
        base, length = sp
        t = b[base:base + length]
        n = _u32(t, 0)
        if n is None:
            raise DecodeError(f"field {table}: table without a count")
        if table == OWNER_REFERENCES:
            size = _u32(t, 4) or 0
            if size < 36:
                raise DecodeError(f"owner entries of {size} bytes (at least 36)")
            first, spans = 8, 4
        else:
            first, size, spans = 4, 16, 2
        if first + n * size > len(t):
            raise DecodeError(f"field {table}: {n} entries do not fit its span")
        t_name, parts = _ENTRY_PARTS[table]
        for i in range(n):
            for s in range(spans):
                sp = _span(b, base + first + i * size + s * 8)
                _utf8(b, sp, lambda: f"{t_name} entry {i}: {parts[s]}")

    def _field(self, f):
        if f >= self._fields:
            return None
        return _span(self._b, 4 + f * 8)

    def _str(self, f, absent=""):
        try:
            return self._cache[f]
        except KeyError:
            v = _text(self._b, self._field(f))
            if v is None:
                v = absent
            self._cache[f] = v
            return v

    @property
    def api_version(self):
        """``apiVersion``, e.g. ``v1`` or ``apps/v1``."""
        return self._str(API_VERSION)

    @property
    def kind(self):
        return self._str(KIND)

    @property
    def namespace(self):
        """``metadata.namespace``; None when cluster-scoped."""
        return self._str(NAMESPACE, None)

    @property
    def name(self):
        return self._str(NAME)

    @property
    def uid(self):
        return self._str(UID)

    @property
    def resource_version(self):
        return self._str(RESOURCE_VERSION)

    @property
    def generation(self):
        """``metadata.generation`` (int), or None."""
        sp = self._field(GENERATION)
        if sp is None or sp[1] < 8:
            return None
        return _I64.unpack_from(self._b, sp[0])[0]

    @property
    def deletion_timestamp(self):
        """RFC 3339 text, or None when not being deleted."""
        return self._str(DELETION_TIMESTAMP, None)

    @property
    def key(self):
        """``namespace/name``, or ``name`` when cluster-scoped."""
        ns = self.namespace
        return self.name if ns is None else f"{ns}/{self.name}"

    def _pairs(self, table):
        sp = self._field(table)
        if sp is None:
            return []
        b = self._b
        n = _u32(b, sp[0])
        out = []
        at = sp[0] + 4
        for _ in range(n):
            out.append((_text(b, _span(b, at)) or "", _text(b, _span(b, at + 8)) or ""))
            at += 16
        return out

    @property
    def labels(self):
        """``metadata.labels`` as a list of (key, value), sorted by key."""
        if "labels" not in self._cache:
            self._cache["labels"] = self._pairs(LABELS)
        return self._cache["labels"]

    def label(self, key):
        """The value of label ``key``, or None."""
        return dict(self.labels).get(key)

    @property
    def annotations(self):
        """``metadata.annotations`` as a list of (key, value), sorted by key."""
        if "annotations" not in self._cache:
            self._cache["annotations"] = self._pairs(ANNOTATIONS)
        return self._cache["annotations"]

    def annotation(self, key):
        return dict(self.annotations).get(key)

    @property
    def owner_refs(self):
        """``metadata.ownerReferences`` as a list of :class:`OwnerRef`."""
        sp = self._field(OWNER_REFERENCES)
        if sp is None:
            return []
        b = self._b
        n = _u32(b, sp[0])
        size = _u32(b, sp[0] + 4)
        out = []
        at = sp[0] + 8
        for _ in range(n):
            s = [_text(b, _span(b, at + i * 8)) or "" for i in range(4)]
            flags = _u32(b, at + 32) or 0
            out.append(OwnerRef(s[0], s[1], s[2], s[3], bool(flags & 1), bool(flags & 2)))
            at += size
        return out

    def controller(self):
        """The owner that is the managing controller, or None."""
        return next((o for o in self.owner_refs if o.controller), None)

    @property
    def json(self):
        """The whole object as JSON bytes; empty when absent (metadata-only delivery)."""
        sp = self._field(JSON)
        if sp is None:
            return b""
        return self._b[sp[0]:sp[0] + sp[1]]

    @property
    def has_json(self):
        return self._field(JSON) is not None

    def value(self):
        """The JSON parsed (dicts and lists), parsed once. Raises ValueError when the object came
        without its JSON (metadata-only) or the JSON does not parse."""
        if self._value is None:
            if not self.has_json:
                raise ValueError(
                    f"{self.key}: delivered without its JSON (the plugin describes itself "
                    "metadata-only); read the object with cache.get to parse it")
            try:
                self._value = _json.loads(self.json)
            except ValueError as e:
                raise ValueError(f"{self.key}: cannot parse: {e}") from None
        return self._value

    @property
    def bytes(self):
        """The whole encoding."""
        return self._b

    def __repr__(self):
        return (f"Object({self.api_version} {self.kind} {self.key} "
                f"rv={self.resource_version})")


ADDED, UPDATED, DELETED = "added", "updated", "deleted"


class Notification:
    """One delivery: ``kind`` is ``added``, ``updated`` or ``deleted``; ``object`` the added
    object, the new state or the deleted object; ``old`` the old state (updates only); the flags
    ``initial_list`` (added), ``resync`` (updated), ``final_state_unknown`` (deleted)."""

    __slots__ = ("seq", "kind", "object", "old", "initial_list", "resync", "final_state_unknown")

    def __init__(self, seq, kind, obj, old, flags):
        self.seq = seq
        self.kind = kind
        self.object = obj
        self.old = old
        self.initial_list = kind == ADDED and bool(flags & 1)
        self.resync = kind == UPDATED and bool(flags & 2)
        self.final_state_unknown = kind == DELETED and bool(flags & 4)


_KINDS = {0: ADDED, 1: UPDATED, 2: DELETED}


class Batch:
    """A batch of notifications of one informer. ``get(i)`` raises DecodeError for a malformed
    notification (the others still read)."""

    def __init__(self, data):
        b = bytes(data)
        if not b:
            raise DecodeError("empty batch")
        if b[0] != LAYOUT_VERSION:
            raise DecodeError(f"batch layout version {b[0]}, expected {LAYOUT_VERSION}")
        header, count, entry = _u16(b, 2), _u32(b, 4), _u32(b, 8)
        if header is None or count is None or entry is None:
            raise DecodeError("batch header cut short")
        if header < 24 or entry < 32:
            raise DecodeError(
                f"batch header of {header} bytes / entries of {entry} (at least 24 / 32)")
        if header + count * entry > len(b):
            raise DecodeError(f"{count} batch entries do not fit {len(b)} bytes")
        self._b = b
        self._count = count
        self._header = header
        self._entry = entry
        self.informer = _text(b, _span(b, 12)) or ""

    def __len__(self):
        return self._count

    def get(self, i):
        if not 0 <= i < self._count:
            raise DecodeError(f"notification {i} of {self._count}")
        b = self._b
        e = self._header + i * self._entry
        seq = _U64.unpack_from(b, e)[0]
        kind, flags = b[e + 8], b[e + 9]
        if kind not in _KINDS:
            raise DecodeError(f"notification {seq}: unknown kind {kind}")
        kind = _KINDS[kind]
        sp = _span(b, e + 12)
        if sp is None:
            raise DecodeError(f"notification {seq} without an object")
        obj = Object(b[sp[0]:sp[0] + sp[1]])
        old = None
        osp = _span(b, e + 20)
        if kind == UPDATED:
            if osp is None:
                raise DecodeError(f"update {seq} without its old object")
            old = obj if osp == sp else Object(b[osp[0]:osp[0] + osp[1]])
        return Notification(seq, kind, obj, old, flags)

    def __iter__(self):
        """Each notification, or the DecodeError that stands for it."""
        for i in range(self._count):
            try:
                yield self.get(i)
            except DecodeError as e:
                yield e


def decode_list(data):
    """An encoded object list as a list of :class:`Object`."""
    b = bytes(data)
    if not b:
        raise DecodeError("empty list")
    if b[0] != LAYOUT_VERSION:
        raise DecodeError(f"list layout version {b[0]}, expected {LAYOUT_VERSION}")
    header, count = _u16(b, 2), _u32(b, 4)
    if header is None or count is None:
        raise DecodeError("list header cut short")
    if header < 8:
        raise DecodeError(f"list header of {header} bytes (at least 8)")
    out = []
    for i in range(count):
        sp = _span(b, header + i * 8)
        if sp is None:
            raise DecodeError(f"list entry {i} absent")
        out.append(Object(b[sp[0]:sp[0] + sp[1]]))
    return out
