// Audit logger (JavaScript): one log line per object lifecycle event, and a counter per informer
// and event. The same plugin as the Rust example `plugins/audit-log` (same settings, log lines
// and counters; the test suite replays both and diffs them).
//
// Settings (all optional): {"includeResyncs": false, "includeInitialList": true}.

import * as wisp from '@wisp/plugin';

const SETTINGS = { includeResyncs: ['boolean', false], includeInitialList: ['boolean', true] };

const what = (o) => `${o.apiVersion} ${o.kind} ${o.key} rv=${o.resourceVersion}`;

function count(cx, event) {
  wisp.metrics.counterAdd('audit_events_total', [['informer', cx.informer], ['event', event]], 1n);
}

class AuditLog extends wisp.Plugin {
  constructor(settings) {
    super();
    this.settings = settings;
  }

  static describe() {
    return wisp.info('audit-log', '0.1.0', []);
  }

  static init(settings) {
    return new AuditLog(wisp.parseSettings(settings, SETTINGS));
  }

  onAdd(cx, obj, initialList) {
    count(cx, 'added');
    if (initialList && !this.settings.includeInitialList) return;
    const tag = initialList ? ' (initial list)' : '';
    wisp.log.info(`ADDED ${what(obj)}${tag}`);
  }

  onUpdate(cx, old, nu, resync) {
    if (resync) {
      count(cx, 'resynced');
      if (this.settings.includeResyncs) wisp.log.info(`RESYNCED ${what(nu)}`);
      return;
    }
    count(cx, 'updated');
    wisp.log.info(`UPDATED ${what(nu)} (was rv=${old.resourceVersion})`);
  }

  onDelete(cx, obj, finalStateUnknown) {
    count(cx, 'deleted');
    const tag = finalStateUnknown ? ' (deletion missed; last known state)' : '';
    wisp.log.info(`DELETED ${what(obj)}${tag}`);
  }
}

export const listener = wisp.exportPlugin(AuditLog);
