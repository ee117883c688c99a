// __NAME__: a Wisp plugin. A Namespace without the label `settings.label` (default `owner`)
// violates the rule `missing-label`: a verdict for the host (its /verdicts, metrics and policy
// reports), a log line and the counter `violations_total{rule}`. Labelling it clears the verdict.
//
// Settings: {"label": "owner", "exempt": ["kube-system"]} (unknown fields and wrong types are
// refused at load, as is an empty label).

import * as wisp from '@wisp/plugin';

const RULE = 'missing-label';

const SETTINGS = { label: ['string', 'owner'], exempt: [['string'], []] };

class RequireLabel extends wisp.Plugin {
  constructor(settings) {
    super();
    this.settings = settings;
  }

  static describe() {
    return wisp.info('__NAME__', '0.1.0', ['namespaces']);
  }

  static init(settings) {
    const s = wisp.parseSettings(settings, SETTINGS);
    if (!s.label) throw new wisp.PluginError('settings.label: must not be empty');
    return new RequireLabel(s);
  }

  check(cx, obj) {
    if (this.settings.exempt.includes(obj.name)) return;
    const { key } = obj;
    const { label } = this.settings;
    try {
      if (obj.label(label) !== null) {
        wisp.policy.pass(cx.informer, obj, RULE);
      } else {
        const message = `${obj.kind} ${key} has no label "${label}"`;
        wisp.log.warn(`violation ${RULE} ${key}: ${message}`);
        wisp.metrics.counterAdd('violations_total', [['rule', RULE]], 1n);
        wisp.policy.violation(cx.informer, obj, RULE, 'medium', message);
      }
    } catch (e) {
      // Deleted since: its delete clears its verdicts.
      if (!(e instanceof wisp.HostError) || e.kind !== 'not-found') throw e;
    }
  }

  onAdd(cx, obj) {
    this.check(cx, obj);
  }

  onUpdate(cx, _old, nu) {
    this.check(cx, nu);
  }
}

export const listener = wisp.exportPlugin(RequireLabel);
