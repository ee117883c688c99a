// Wisp plugin SDK for JavaScript: write a Wisp plugin as a class, built into a component of world
// `wisp:plugin/plugin@0.3.0` with componentize-js (see docs/plugins/javascript.md).
//
//   import * as wisp from '@wisp/plugin';   // `wisp build` resolves it (docs/plugins/javascript.md)
//   class Hello extends wisp.Plugin {
//     static describe() { return wisp.info('hello', '0.1.0', ['pods']); }
//     static init(settings) { return new Hello(); }
//     onAdd(cx, obj, initialList) { wisp.log.info(`hello ${obj.key}`); }
//   }
//   export const listener = wisp.exportPlugin(Hello);
//
// Shaped like the Rust SDK (plugin-sdk/src/lib.rs): each batch (docs/abi.md) is decoded into
// typed notifications and objects (abi.js) and dispatched to onAdd / onUpdate / onDelete; an
// exception thrown by a handler becomes that notification's error outcome instead of trapping
// the whole call (which would replace the instance and lose its state); settings parsing,
// logging, metrics, cache reads, verdicts and actions wrap the generated bindings.

import * as host from 'wisp:plugin/host@0.3.0';
import * as wpolicy from 'wisp:plugin/policy@0.3.0';
import * as wactions from 'wisp:plugin/actions@0.3.0';
import { Batch, DecodeError, WispObject, decodeList } from './abi.js';
import { rustDebugStr as rustDebugStrLocal } from './settings.js';

export { Batch, DecodeError, WispObject, decodeList } from './abi.js';
export { parseSettings, rustDebugStr } from './settings.js';

/** An error a handler means to report: its message alone becomes the error outcome (any other
 * exception's outcome is `<Name>: <message>`). */
export class PluginError extends Error {
  constructor(message) {
    super(message);
    this.name = 'PluginError';
  }
}

/** A refusal of the host (cache, verdict, action): `kind` is the WIT case (`not-granted`, ...),
 * `detail` its text, `type` the WIT type (`VerdictError`, ...). */
export class HostError extends Error {
  constructor(type, kind, detail) {
    super(`${kind}: ${detail}`);
    this.name = type;
    this.type = type;
    this.kind = kind;
    this.detail = detail;
  }

  /** The Rust SDK's `{e:?}` of this error (`VerdictError::NotFound("x")`). */
  rustDebug() {
    const kase = this.kind.split('-').map((p) => p[0].toUpperCase() + p.slice(1)).join('');
    return `${this.type}::${kase}(${rustDebugStrLocal(this.detail)})`;
  }
}

function hostCall(type, f, ...args) {
  try {
    return f(...args);
  } catch (e) {
    // componentize-js throws a result's error as an Error whose `payload` is the variant.
    const p = e && typeof e === 'object' && 'payload' in e ? e.payload : e;
    if (p && typeof p === 'object' && 'tag' in p) throw new HostError(type, p.tag, p.val ?? '');
    throw e;
  }
}

/** Where a notification comes from: `seq` (BigInt) and `informer` (its name in the config). */
export class Context {
  constructor(seq, informer) {
    this.seq = seq;
    this.informer = informer;
  }
}

/** A Wisp plugin: override the static `describe` and `init`; event methods default to nothing. */
export class Plugin {
  static describe() {
    throw new Error('describe is not implemented');
  }
  static init(_settings) {
    return new this();
  }
  onAdd(_cx, _obj, _initialList) {}
  onUpdate(_cx, _old, _new, _resync) {}
  onDelete(_cx, _obj, _finalStateUnknown) {}
  afterBatch() {}
  /** State (Uint8Array) to hand to the next version at a hot reload, or null. */
  snapshot() {
    return null;
  }
  restore(_state) {}
}

/** `describe`'s answer. */
export function info(name, version, informers = [], opts = {}) {
  return {
    name, version, informers: [...informers],
    replayOnReload: !!opts.replayOnReload, metadataOnly: !!opts.metadataOnly,
  };
}

/** What a thrown value says to the host: a plain `Error`'s message as it is (as the Rust and
 * Python SDKs' errors read); other errors (`TypeError`, ...: a bug, not a refusal) keep their
 * name. */
function message(e) {
  if (e instanceof PluginError) return e.message;
  if (e instanceof Error && e.name === 'Error' && e.message) return e.message;
  if (e instanceof Error) return e.message ? `${e.name}: ${e.message}` : e.name;
  return String(e);
}

/** The component's `listener` export for `PluginClass`: `export const listener =
 * exportPlugin(MyPlugin)`. */
export function exportPlugin(PluginClass) {
  let plugin = null;
  return {
    describe() {
      return PluginClass.describe();
    },
    init(settings) {
      try {
        plugin = PluginClass.init(settings);
      } catch (e) {
        throw message(e);
      }
    },
    handle(bytes) {
      let b;
      try {
        b = new Batch(bytes);
      } catch (e) {
        // No outcomes: the host counts every notification of the batch as failed.
        log.error(`cannot read the batch: ${e.message}`);
        return [];
      }
      if (plugin === null) {
        return Array.from({ length: b.length }, () => ({ tag: 'error', val: 'plugin used before init' }));
      }
      const out = [];
      const informer = b.informer;
      for (const n of b) {
        if (n instanceof DecodeError) {
          out.push({ tag: 'error', val: n.message });
          continue;
        }
        try {
          const cx = new Context(n.seq, informer);
          if (n.kind === 'added') plugin.onAdd(cx, n.object, n.initialList);
          else if (n.kind === 'updated') plugin.onUpdate(cx, n.old, n.object, n.resync);
          else plugin.onDelete(cx, n.object, n.finalStateUnknown);
          out.push({ tag: 'ok' });
        } catch (e) {
          if (e instanceof Error && e.stack) log.debug(`${message(e)}\n${e.stack}`);
          out.push({ tag: 'error', val: message(e) });
        }
      }
      try {
        plugin.afterBatch();
      } catch (e) {
        log.error(`afterBatch: ${message(e)}`);
      }
      return out;
    },
    snapshot() {
      const s = plugin === null ? null : plugin.snapshot();
      return s ?? undefined;
    },
    restore(state) {
      if (plugin === null) throw 'restore before init';
      try {
        plugin.restore(state);
      } catch (e) {
        throw message(e);
      }
    },
  };
}

// Logging: `log.info(message)` etc. skip the host call when the level is off.
function at(level) {
  return (msg) => {
    if (host.logEnabled(level)) host.log(level, typeof msg === 'function' ? msg() : msg);
  };
}
export const log = {
  trace: at('trace'), debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error'),
  /** Whether the host keeps messages at `level`. */
  enabled: (level) => host.logEnabled(level),
};

function pairs(p) {
  return Array.isArray(p) ? p : Object.entries(p);
}

/** Counters and gauges the host exports under the plugin's name. */
export const metrics = {
  /** Adds `value` (Number or BigInt, >= 0) to a counter; labels: [[k, v]...] or an object. */
  counterAdd(name, labels = [], value = 1n) {
    host.counterAdd(name, pairs(labels), BigInt(value));
  },
  gaugeSet(name, labels = [], value = 0) {
    host.gaugeSet(name, pairs(labels), Number(value));
  },
};

/** Reads of the host's cache (only informers granted in the config); a refusal throws a
 * HostError of type `CacheError`. */
export const cache = {
  get(informer, namespace, name) {
    const b = hostCall('CacheError', host.cacheGet, informer, namespace ?? undefined, name);
    return b === undefined || b === null ? null : new WispObject(b);
  },
  list(informer, namespace = null, labelSelector = null) {
    return decodeList(hostCall('CacheError', host.cacheList, informer,
      namespace ?? undefined, labelSelector ?? undefined));
  },
  byIndex(informer, index, value) {
    return decodeList(hostCall('CacheError', host.cacheByIndex, informer, index, value));
  },
};

/** Policy verdicts; a refusal throws a HostError of type `VerdictError`. Severity: 'info',
 * 'low', 'medium', 'high', 'critical'. */
export const policy = {
  violation(informer, obj, rule, severity, msg) {
    hostCall('VerdictError', wpolicy.report, informer, obj.namespace ?? undefined, obj.name, rule,
      { severity, message: msg });
  },
  pass(informer, obj, rule) {
    hostCall('VerdictError', wpolicy.report, informer, obj.namespace ?? undefined, obj.name, rule,
      undefined);
  },
};

/** Automation through the host; each returns 'queued' or 'dry-run'; a refusal throws a HostError
 * of type `ActionError`. */
export const actions = {
  objectRef(obj) {
    return { apiVersion: obj.apiVersion, kind: obj.kind, namespace: obj.namespace ?? undefined,
      name: obj.name };
  },
  patchMetadata(target, labels = [], annotations = []) {
    const opt = (p) => pairs(p).map(([k, v]) => [k, v ?? undefined]);
    return hostCall('ActionError', wactions.patchMetadata, target, opt(labels), opt(annotations));
  },
  apply(manifest) {
    const text = typeof manifest === 'string' ? manifest : JSON.stringify(manifest);
    return hostCall('ActionError', wactions.apply, text);
  },
  createEvent(regarding, eventType, reason, msg) {
    return hostCall('ActionError', wactions.createEvent, regarding, eventType, reason, msg);
  },
};
