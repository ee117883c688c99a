// Decoder of the plugin ABI 0.2 byte layout (docs/abi.md), over a DataView. Pure JavaScript, no
// host calls: it runs in the component and in Node, where its tests read the shared vectors
// (wit/abi-vectors.json). Every span of an object (field table, pair and owner tables) and that
// every metadata string is UTF-8 (docs/abi.md, "Text") are checked when the object is taken, so
// accessors never fail later; a malformed encoding throws DecodeError. Strings are decoded when first asked for. `seq` and `generation` are BigInt (the
// WIT and the layout say u64 / i64).

export const LAYOUT_VERSION = 1;
const ABSENT = 0xffffffff;
const [API_VERSION, KIND, NAMESPACE, NAME, UID, RESOURCE_VERSION] = [0, 1, 2, 3, 4, 5];
const [GENERATION, DELETION_TIMESTAMP, LABELS, ANNOTATIONS, OWNER_REFERENCES, JSON_FIELD] = [
  6, 7, 8, 9, 10, 11,
];

export class DecodeError extends Error {
  constructor(what) {
    super(`malformed ABI bytes: ${what}`);
    this.name = 'DecodeError';
  }
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

// The bytes as a Uint8Array of this global, without a copy when they are a typed array or an
// ArrayBuffer of any global. The component's glue (componentize-js's initializer script) runs in a
// global of its own, so the Uint8Array it lifts a `list<u8>` into is not `instanceof` this
// global's Uint8Array: `Uint8Array.from` would copy it through the iterator protocol, several
// interpreted calls per byte (~12 per byte: ~100 million instructions for a notification of two
// 2 KB pods).
function bytesOf(data) {
  if (data instanceof Uint8Array) return data;
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (Object.prototype.toString.call(data) === '[object ArrayBuffer]') return new Uint8Array(data);
  return Uint8Array.from(data);
}

function u16(v, at) {
  return at + 2 <= v.byteLength ? v.getUint16(at, true) : null;
}

function u32(v, at) {
  return at + 4 <= v.byteLength ? v.getUint32(at, true) : null;
}

/** [offset, length] of the span at `at`; null when absent; throws when out of bounds. */
function span(v, at) {
  if (at + 8 > v.byteLength) {
    throw new DecodeError(`span at ${at} past the end (${v.byteLength} bytes)`);
  }
  const off = v.getUint32(at, true);
  const len = v.getUint32(at + 4, true);
  if (off === ABSENT) return null;
  if (off + len > v.byteLength) {
    throw new DecodeError(`span ${off}+${len} at ${at} past the end (${v.byteLength} bytes)`);
  }
  return [off, len];
}

function text(b, sp) {
  // Checked when the object was taken (checkUtf8): never '' for bytes that are not UTF-8.
  if (sp === null) return null;
  try {
    return utf8.decode(b.subarray(sp[0], sp[0] + sp[1]));
  } catch {
    return '';
  }
}

// The fields that hold text (generation is a number; the tables are checked entry by entry).
const TEXT_FIELDS = [
  [API_VERSION, 'apiVersion'], [KIND, 'kind'], [NAMESPACE, 'namespace'], [NAME, 'name'],
  [UID, 'uid'], [RESOURCE_VERSION, 'resourceVersion'], [DELETION_TIMESTAMP, 'deletionTimestamp'],
];
const ENTRY_PARTS = {
  [LABELS]: ['labels', ['key', 'value']],
  [ANNOTATIONS]: ['annotations', ['key', 'value']],
  [OWNER_REFERENCES]: ['ownerReferences', ['apiVersion', 'kind', 'name', 'uid']],
};

/** Throws DecodeError naming `what()` and the first byte that is not UTF-8, if any. */
function checkUtf8(v, sp, what) {
  if (sp === null) return;
  const b = new Uint8Array(v.buffer, v.byteOffset + sp[0], sp[1]);
  try {
    utf8.decode(b);
  } catch {
    throw new DecodeError(`${what()}: text that is not UTF-8 (byte ${validUpTo(b)} of ${b.length})`);
  }
}

/** Bytes of `b` before its first sequence that is not UTF-8 (Rust's `valid_up_to`). */
function validUpTo(b) {
  let i = 0;
  while (i < b.length) {
    const c = b[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    const n = c >= 0xc2 && c <= 0xdf ? 1 : c >= 0xe0 && c <= 0xef ? 2 : c >= 0xf0 && c <= 0xf4 ? 3 : 0;
    if (n === 0) return i;
    const lo = c === 0xe0 ? 0xa0 : c === 0xf0 ? 0x90 : 0x80;
    const hi = c === 0xed ? 0x9f : c === 0xf4 ? 0x8f : 0xbf;
    for (let k = 1; k <= n; k++) {
      const x = b[i + k];
      if (x === undefined || x < (k === 1 ? lo : 0x80) || x > (k === 1 ? hi : 0xbf)) return i;
    }
    i += n + 1;
  }
  return i;
}

/** A Kubernetes object read from its encoding: metadata as getters, the JSON on demand. */
export class WispObject {
  constructor(data) {
    const b = bytesOf(data);
    if (b.length === 0) throw new DecodeError('empty object');
    if (b[0] !== LAYOUT_VERSION) {
      throw new DecodeError(`object layout version ${b[0]}, expected ${LAYOUT_VERSION}`);
    }
    const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
    const fields = u16(v, 2);
    if (fields === null) throw new DecodeError('object header cut short');
    for (let f = 0; f < fields; f++) span(v, 4 + f * 8);
    for (const [f, name] of TEXT_FIELDS) {
      if (f < fields) checkUtf8(v, span(v, 4 + f * 8), () => `field ${name}`);
    }
    for (const table of [LABELS, ANNOTATIONS, OWNER_REFERENCES]) {
      if (table < fields) checkTable(v, table);
    }
    this._b = b;
    this._v = v;
    this._fields = fields;
    this._cache = new Map();
    this._value = undefined;
  }

  _field(f) {
    return f < this._fields ? span(this._v, 4 + f * 8) : null;
  }

  _str(f, absent = '') {
    if (!this._cache.has(f)) {
      const s = text(this._b, this._field(f));
      this._cache.set(f, s === null ? absent : s);
    }
    return this._cache.get(f);
  }

  /** `apiVersion`, e.g. `v1` or `apps/v1`. */
  get apiVersion() { return this._str(API_VERSION); }
  get kind() { return this._str(KIND); }
  /** `metadata.namespace`; null when cluster-scoped. */
  get namespace() { return this._str(NAMESPACE, null); }
  get name() { return this._str(NAME); }
  get uid() { return this._str(UID); }
  get resourceVersion() { return this._str(RESOURCE_VERSION); }
  /** `metadata.generation` as a BigInt, or null. */
  get generation() {
    const sp = this._field(GENERATION);
    return sp === null || sp[1] < 8 ? null : this._v.getBigInt64(sp[0], true);
  }
  /** RFC 3339 text, or null when not being deleted. */
  get deletionTimestamp() { return this._str(DELETION_TIMESTAMP, null); }
  /** `namespace/name`, or `name` when cluster-scoped. */
  get key() {
    const ns = this.namespace;
    return ns === null ? this.name : `${ns}/${this.name}`;
  }

  _pairs(table) {
    const sp = this._field(table);
    if (sp === null) return [];
    const n = this._v.getUint32(sp[0], true);
    const out = [];
    for (let i = 0, at = sp[0] + 4; i < n; i++, at += 16) {
      out.push([text(this._b, span(this._v, at)) ?? '', text(this._b, span(this._v, at + 8)) ?? '']);
    }
    return out;
  }

  /** `metadata.labels` as [key, value] pairs, sorted by key. */
  get labels() {
    if (!this._cache.has('labels')) this._cache.set('labels', this._pairs(LABELS));
    return this._cache.get('labels');
  }
  /** The value of label `key`, or null. */
  label(key) {
    const p = this.labels.find(([k]) => k === key);
    return p ? p[1] : null;
  }
  /** `metadata.annotations` as [key, value] pairs, sorted by key. */
  get annotations() {
    if (!this._cache.has('annotations')) this._cache.set('annotations', this._pairs(ANNOTATIONS));
    return this._cache.get('annotations');
  }
  annotation(key) {
    const p = this.annotations.find(([k]) => k === key);
    return p ? p[1] : null;
  }
  /** `metadata.ownerReferences`: {apiVersion, kind, name, uid, controller, blockOwnerDeletion}. */
  get ownerRefs() {
    const sp = this._field(OWNER_REFERENCES);
    if (sp === null) return [];
    const v = this._v;
    const n = v.getUint32(sp[0], true);
    const size = v.getUint32(sp[0] + 4, true);
    const out = [];
    for (let i = 0, at = sp[0] + 8; i < n; i++, at += size) {
      const s = (k) => text(this._b, span(v, at + k * 8)) ?? '';
      const flags = v.getUint32(at + 32, true);
      out.push({
        apiVersion: s(0), kind: s(1), name: s(2), uid: s(3),
        controller: (flags & 1) !== 0, blockOwnerDeletion: (flags & 2) !== 0,
      });
    }
    return out;
  }
  /** The owner that is the managing controller, or null. */
  controller() {
    return this.ownerRefs.find((o) => o.controller) ?? null;
  }
  /** The whole object as JSON bytes (Uint8Array); empty when absent (metadata-only). */
  get json() {
    const sp = this._field(JSON_FIELD);
    return sp === null ? new Uint8Array(0) : this._b.subarray(sp[0], sp[0] + sp[1]);
  }
  get hasJson() {
    return this._field(JSON_FIELD) !== null;
  }
  /** The JSON parsed, once. Throws when delivered without its JSON or when it does not parse. */
  value() {
    if (this._value === undefined) {
      if (!this.hasJson) {
        throw new Error(`${this.key}: delivered without its JSON (the plugin describes itself ` +
          'metadata-only); read the object with cache.get to parse it');
      }
      try {
        this._value = JSON.parse(new TextDecoder().decode(this.json));
      } catch (e) {
        throw new Error(`${this.key}: cannot parse: ${e.message}`);
      }
    }
    return this._value;
  }
  /** The whole encoding. */
  get bytes() { return this._b; }
}

function checkTable(v, table) {
  const sp = span(v, 4 + table * 8);
  if (sp === null) return;
  const [base, length] = sp;
  const n = length >= 4 ? v.getUint32(base, true) : null;
  if (n === null) throw new DecodeError(`field ${table}: table without a count`);
  let first, size, spans;
  if (table === OWNER_REFERENCES) {
    size = length >= 8 ? v.getUint32(base + 4, true) : 0;
    if (size < 36) throw new DecodeError(`owner entries of ${size} bytes (at least 36)`);
    first = 8;
    spans = 4;
  } else {
    [first, size, spans] = [4, 16, 2];
  }
  if (first + n * size > length) {
    throw new DecodeError(`field ${table}: ${n} entries do not fit its span`);
  }
  const [tableName, parts] = ENTRY_PARTS[table];
  for (let i = 0; i < n; i++) {
    for (let s = 0; s < spans; s++) {
      const sp = span(v, base + first + i * size + s * 8);
      checkUtf8(v, sp, () => `${tableName} entry ${i}: ${parts[s]}`);
    }
  }
}

const KINDS = ['added', 'updated', 'deleted'];

/**
 * A batch of notifications of one informer. `get(i)` throws DecodeError for a malformed
 * notification (the others still read). A notification: {seq (BigInt), kind ('added' |
 * 'updated' | 'deleted'), object, old (updates only, else null), initialList, resync,
 * finalStateUnknown}.
 */
export class Batch {
  constructor(data) {
    const b = bytesOf(data);
    if (b.length === 0) throw new DecodeError('empty batch');
    if (b[0] !== LAYOUT_VERSION) {
      throw new DecodeError(`batch layout version ${b[0]}, expected ${LAYOUT_VERSION}`);
    }
    const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
    const [header, count, entry] = [u16(v, 2), u32(v, 4), u32(v, 8)];
    if (header === null || count === null || entry === null) {
      throw new DecodeError('batch header cut short');
    }
    if (header < 24 || entry < 32) {
      throw new DecodeError(
        `batch header of ${header} bytes / entries of ${entry} (at least 24 / 32)`);
    }
    if (header + count * entry > b.length) {
      throw new DecodeError(`${count} batch entries do not fit ${b.length} bytes`);
    }
    this._b = b;
    this._v = v;
    this.length = count;
    this._header = header;
    this._entry = entry;
    this.informer = text(b, span(v, 12)) ?? '';
  }

  get(i) {
    if (!(i >= 0 && i < this.length)) throw new DecodeError(`notification ${i} of ${this.length}`);
    const [b, v] = [this._b, this._v];
    const e = this._header + i * this._entry;
    const seq = v.getBigUint64(e, true);
    const [k, flags] = [b[e + 8], b[e + 9]];
    const kind = KINDS[k];
    if (kind === undefined) throw new DecodeError(`notification ${seq}: unknown kind ${k}`);
    const sp = span(v, e + 12);
    if (sp === null) throw new DecodeError(`notification ${seq} without an object`);
    const object = new WispObject(b.subarray(sp[0], sp[0] + sp[1]));
    const osp = span(v, e + 20);
    let old = null;
    if (kind === 'updated') {
      if (osp === null) throw new DecodeError(`update ${seq} without its old object`);
      old = osp[0] === sp[0] && osp[1] === sp[1]
        ? object : new WispObject(b.subarray(osp[0], osp[0] + osp[1]));
    }
    return {
      seq, kind, object, old,
      initialList: kind === 'added' && (flags & 1) !== 0,
      resync: kind === 'updated' && (flags & 2) !== 0,
      finalStateUnknown: kind === 'deleted' && (flags & 4) !== 0,
    };
  }

  /** Each notification, or the DecodeError that stands for it. */
  *[Symbol.iterator]() {
    for (let i = 0; i < this.length; i++) {
      try {
        yield this.get(i);
      } catch (e) {
        if (!(e instanceof DecodeError)) throw e;
        yield e;
      }
    }
  }
}

/** An encoded object list as an array of WispObject. */
export function decodeList(data) {
  const b = bytesOf(data);
  if (b.length === 0) throw new DecodeError('empty list');
  if (b[0] !== LAYOUT_VERSION) {
    throw new DecodeError(`list layout version ${b[0]}, expected ${LAYOUT_VERSION}`);
  }
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const [header, count] = [u16(v, 2), u32(v, 4)];
  if (header === null || count === null) throw new DecodeError('list header cut short');
  if (header < 8) throw new DecodeError(`list header of ${header} bytes (at least 8)`);
  const out = [];
  for (let i = 0; i < count; i++) {
    const sp = span(v, header + i * 8);
    if (sp === null) throw new DecodeError(`list entry ${i} absent`);
    out.push(new WispObject(b.subarray(sp[0], sp[0] + sp[1])));
  }
  return out;
}
