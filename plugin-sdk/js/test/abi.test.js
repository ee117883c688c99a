// The decoder against the shared test vectors (wit/abi-vectors.json): every one must read as its
// `expect` says. Run: node --test plugin-sdk/js/test/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import vm from 'node:vm';
import { Batch, DecodeError, LAYOUT_VERSION, WispObject, decodeList } from '../abi.js';
import { parseSettings } from '../settings.js';

const vectors = () =>
  JSON.parse(readFileSync(new URL('../../../wit/abi-vectors.json', import.meta.url), 'utf8'));
const unhex = (h) => Uint8Array.from(h.match(/../g) ?? [], (x) => parseInt(x, 16));
const num = (g) => (g === null ? null : Number(g));

/** What a decoder reads from an object, in the vectors' form. */
function read(o) {
  return {
    apiVersion: o.apiVersion, kind: o.kind, namespace: o.namespace, name: o.name, uid: o.uid,
    resourceVersion: o.resourceVersion, generation: num(o.generation),
    deletionTimestamp: o.deletionTimestamp, labels: o.labels, annotations: o.annotations,
    ownerReferences: o.ownerRefs,
    json: o.json.length ? new TextDecoder().decode(o.json) : null,
  };
}

test('objects read as the vectors say', () => {
  const v = vectors();
  assert.equal(v.layoutVersion, LAYOUT_VERSION);
  assert.ok(v.objects.length >= 4);
  for (const c of v.objects) {
    const o = new WispObject(unhex(c.hex));
    assert.deepEqual(read(o), c.expect, c.name);
    for (const [k, val] of o.labels) assert.equal(o.label(k), val);
    assert.equal(o.label('no-such-label'), null);
    if (o.generation !== null) assert.equal(typeof o.generation, 'bigint');
  }
});

test('batches read as the vectors say', () => {
  const cases = vectors().batches;
  assert.ok(cases.length >= 3);
  for (const c of cases) {
    const b = new Batch(unhex(c.hex));
    assert.equal(b.informer, c.expect.informer, c.name);
    const got = [...b].map((n) => {
      assert.ok(!(n instanceof DecodeError), `${c.name}: ${n}`);
      assert.equal(typeof n.seq, 'bigint');
      return {
        seq: Number(n.seq), kind: n.kind, initialList: n.initialList, resync: n.resync,
        finalStateUnknown: n.finalStateUnknown, object: read(n.object),
        old: n.old ? read(n.old) : null,
      };
    });
    assert.deepEqual(got, c.expect.notifications, c.name);
  }
});

test('lists read as the vectors say', () => {
  for (const c of vectors().lists) {
    assert.deepEqual(decodeList(unhex(c.hex)).map(read), c.expect, c.name);
  }
});

// The component's glue lifts `handle`'s bytes into a Uint8Array of its own global (componentize-js's
// initializer), which is not `instanceof` ours: they must be viewed as they are, not copied.
test('bytes from another global are viewed, not copied', () => {
  const v = vectors();
  const other = vm.runInNewContext('(h) => Uint8Array.from(h.match(/../g), (x) => parseInt(x, 16))');
  for (const c of v.batches) {
    const bytes = other(c.hex);
    assert.ok(!(bytes instanceof Uint8Array), 'a Uint8Array of another global');
    const b = new Batch(bytes);
    assert.equal(b._b.buffer, bytes.buffer, c.name);
    const want = [...new Batch(unhex(c.hex))].map((n) => read(n.object));
    assert.deepEqual([...b].map((n) => read(n.object)), want, c.name);
  }
  const one = other(v.objects[0].hex);
  const o = new WispObject(one);
  assert.equal(o.bytes.buffer, one.buffer);
  assert.deepEqual(read(o), v.objects[0].expect);
  const buffer = vm.runInNewContext('(n) => new ArrayBuffer(n)')(4);
  assert.throws(() => new WispObject(buffer), /layout version 0/);
});

test('bytes cut anywhere are a DecodeError, never another exception', () => {
  const v = vectors();
  const obj = unhex(v.objects[0].hex);
  for (let cut = 0; cut < obj.length; cut++) {
    assert.throws(() => new WispObject(obj.subarray(0, cut)), DecodeError, `cut at ${cut}`);
  }
  const batch = unhex(v.batches[0].hex);
  for (let cut = 0; cut < batch.length; cut++) {
    let b;
    try {
      b = new Batch(batch.subarray(0, cut));
    } catch (e) {
      assert.ok(e instanceof DecodeError, `cut at ${cut}: ${e}`);
      continue;
    }
    for (const n of b) if (!(n instanceof DecodeError)) read(n.object);
  }
  const flipped = Uint8Array.from(obj);
  for (let i = 0; i < Math.min(flipped.length, 400); i++) {
    flipped[i] ^= 0xff;
    try {
      read(new WispObject(flipped));
    } catch (e) {
      assert.ok(e instanceof DecodeError, `flipped ${i}: ${e}`);
    }
    flipped[i] ^= 0xff;
  }
  assert.throws(() => new WispObject(Uint8Array.of(2, 0, 0, 0)), DecodeError);
});

test('a metadata-only object says why it cannot be parsed', () => {
  const c = vectors().batches.find((x) => x.name.startsWith('metadata only'));
  const n = new Batch(unhex(c.hex)).get(0);
  assert.equal(n.object.hasJson, false);
  assert.equal(n.object.label('app'), 'web');
  assert.throws(() => n.object.value(), /metadata-only/);
});

test('owner flags are read bit by bit', () => {
  // The vectors set controller and blockOwnerDeletion together: flip them apart.
  const b = unhex(vectors().objects[0].hex);
  const v = new DataView(b.buffer);
  const flags = v.getUint32(4 + 10 * 8, true) + 8 + 32; // the first owner's flags
  for (const [value, want] of [[1, [true, false]], [2, [false, true]], [0, [false, false]]]) {
    v.setUint32(flags, value, true);
    const o = new WispObject(b).ownerRefs[0];
    assert.deepEqual([o.controller, o.blockOwnerDeletion], want, String(value));
  }
});

test('the JSON parses on demand', () => {
  const o = new WispObject(unhex(vectors().objects[0].hex));
  assert.equal(o.value().spec.containers[0].image, 'nginx:1.27');
  assert.equal(o.key, 'shop/web-0');
});

test('settings: defaults, and errors that name the field', () => {
  const fields = { denyLatest: ['boolean', true], exemptNamespaces: [['string'], []] };
  assert.deepEqual(parseSettings('{}', fields), { denyLatest: true, exemptNamespaces: [] });
  for (const [t, start] of [
    ['{"denyLatest": "yes"}', 'settings.denyLatest: invalid type: string "yes", expected a boolean'],
    ['{"denyLatest": true, "x": 1}', 'settings: unknown field `x`'],
    ['{"exemptNamespaces": ["a", 1]}', 'settings.exemptNamespaces[1]: invalid type'],
    ['[]', 'settings: invalid type: sequence'],
    ['{', 'settings: '],
  ]) {
    assert.throws(() => parseSettings(t, fields), (e) => e.message.startsWith(start), t);
  }
});

test('text that is not UTF-8 is refused naming its field', () => {
  const cases = vectors().refused;
  assert.ok(cases.length >= 2);
  for (const c of cases) {
    assert.throws(() => new WispObject(Buffer.from(c.hex, 'hex')), (e) => {
      assert.ok(e instanceof DecodeError, `${c.name}: ${e}`);
      assert.match(e.message, new RegExp(`${c.field}.*not UTF-8`), c.name);
      return true;
    }, c.name);
  }
});
