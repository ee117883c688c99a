// Settings parsing shaped like the Rust SDK's `parse_settings`: unknown fields and wrong types
// are refused, with messages that name the field (`settings.denyLatest: invalid type: ...`).

const NAMES = { boolean: 'a boolean', number: 'a number', string: 'a string', object: 'a map' };

function what(v) {
  if (typeof v === 'boolean') return `boolean \`${v}\``;
  if (typeof v === 'string') return `string ${JSON.stringify(v)}`;
  if (typeof v === 'number') return `number ${v}`;
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'sequence';
  return 'map';
}

function check(path, value, type) {
  if (Array.isArray(type)) {
    if (!Array.isArray(value)) {
      throw new Error(`${path}: invalid type: ${what(value)}, expected a sequence`);
    }
    return value.map((v, i) => check(`${path}[${i}]`, v, type[0]));
  }
  const ok = type === 'object'
    ? typeof value === 'object' && value !== null && !Array.isArray(value)
    : typeof value === type;
  if (!ok) throw new Error(`${path}: invalid type: ${what(value)}, expected ${NAMES[type]}`);
  return value;
}

/**
 * Parses settings JSON (`{}` when none) against `fields`: `{name: [type, default]}` where type
 * is 'boolean', 'number', 'string', 'object' or `[type]` (an array of it). Returns an object
 * with every field (defaults for those missing). Throws an Error naming the field.
 */
export function parseSettings(text, fields) {
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new Error(`settings: ${e.message}`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) {
    throw new Error(`settings: invalid type: ${what(v)}, expected a map`);
  }
  for (const k of Object.keys(v)) {
    if (!Object.hasOwn(fields, k)) {
      const known = Object.keys(fields).map((f) => `\`${f}\``).join(', ');
      throw new Error(`settings: unknown field \`${k}\`, expected one of ${known}`);
    }
  }
  const out = {};
  for (const [name, [type, def]] of Object.entries(fields)) {
    out[name] = Object.hasOwn(v, name)
      ? check(`settings.${name}`, v[name], type) : structuredClone(def);
  }
  return out;
}

/** A string as Rust's `{:?}` writes it (quoted, with escapes), for messages that must read as
 * the Rust examples' do. */
export function rustDebugStr(s) {
  let out = '"';
  for (const c of s) {
    const o = c.codePointAt(0);
    if (c === '"') out += '\\"';
    else if (c === '\\') out += '\\\\';
    else if (c === '\n') out += '\\n';
    else if (c === '\r') out += '\\r';
    else if (c === '\t') out += '\\t';
    else if (c === '\0') out += '\\0';
    else if (o < 0x20 || o === 0x7f) out += `\\u{${o.toString(16)}}`;
    else out += c;
  }
  return out + '"';
}
