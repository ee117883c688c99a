// Image policy hook (JavaScript): reports pods whose containers use a `:latest` (or untagged)
// image or have no cpu and memory limits, as verdicts, log lines, `policy_violations_total{rule}`
// and the gauge `policy_violating_pods{rule}`. The same plugin as the Rust example
// `plugins/image-policy` (same settings, verdicts, log lines and metrics; the test suite replays
// both and diffs them). A pod the Rust example cannot parse as a Pod (e.g. `spec.containers` not
// a list) is an error outcome here too, with JavaScript's message.
//
// Settings: {"denyLatest": true, "requireLimits": true, "exemptNamespaces": ["kube-system"]}
// (unknown fields and wrong types are refused at load).

import * as wisp from '@wisp/plugin';

const SETTINGS = {
  denyLatest: ['boolean', true],
  requireLimits: ['boolean', true],
  exemptNamespaces: [['string'], []],
};

const LATEST = 'latest-tag';
const LIMITS = 'missing-limits';
const RULES = [LATEST, LIMITS];

/** `nginx`, `nginx:latest`, `registry:5000/nginx` are latest; a digest pins the image. */
function usesLatest(image) {
  if (image.includes('@')) return false;
  const last = image.slice(image.lastIndexOf('/') + 1);
  const colon = last.lastIndexOf(':');
  return colon < 0 ? true : last.slice(colon + 1) === 'latest';
}

const severity = (rule) => (rule === LATEST ? 'high' : 'medium');

function lacksLimits(c) {
  const limits = c.resources?.limits;
  return !(limits && typeof limits === 'object' && 'cpu' in limits && 'memory' in limits);
}

class ImagePolicy extends wisp.Plugin {
  constructor(settings) {
    super();
    this.settings = settings;
    // rule -> keys of pods violating it now.
    this.violating = new Map(RULES.map((r) => [r, new Set()]));
  }

  static describe() {
    return wisp.info('image-policy', '0.1.0', ['pods']);
  }

  static init(settings) {
    const s = wisp.parseSettings(settings, SETTINGS);
    if (!s.denyLatest && !s.requireLimits) {
      throw new wisp.PluginError('settings: nothing to check: enable denyLatest or requireLimits');
    }
    return new ImagePolicy(s);
  }

  evaluate(pod) {
    const found = [];
    const spec = pod.spec;
    if (!spec) return found;
    const containers = [...(spec.containers ?? []), ...(spec.initContainers ?? [])];
    for (const c of containers) {
      const image = c.image ?? '';
      if (this.settings.denyLatest && usesLatest(image)) {
        found.push([LATEST,
          `container ${c.name} uses image ${wisp.rustDebugStr(image)} without a pinned tag`]);
      }
      if (this.settings.requireLimits && lacksLimits(c)) {
        found.push([LIMITS, `container ${c.name} has no cpu and memory limits`]);
      }
    }
    return found;
  }

  check(cx, obj) {
    if (obj.kind !== 'Pod') return;
    const key = obj.key;
    if (obj.namespace !== null && this.settings.exemptNamespaces.includes(obj.namespace)) return;
    const found = this.evaluate(obj.value());
    for (const rule of RULES) {
      const messages = found.filter(([r]) => r === rule).map(([, m]) => m);
      try {
        if (messages.length) {
          wisp.policy.violation(cx.informer, obj, rule, severity(rule), messages.join('; '));
        } else {
          wisp.policy.pass(cx.informer, obj, rule);
        }
      } catch (e) {
        // Deleted since: its delete clears everything.
        if (!(e instanceof wisp.HostError)) throw e;
        if (e.kind !== 'not-found') {
          throw new wisp.PluginError(`verdict ${rule} ${key}: ${e.rustDebug()}`);
        }
      }
      const keys = this.violating.get(rule);
      if (!messages.length) {
        if (keys.delete(key)) wisp.log.info(`pass ${rule} ${key}: fixed`);
      } else if (!keys.has(key)) {
        keys.add(key);
        wisp.metrics.counterAdd('policy_violations_total', [['rule', rule]], 1n);
        for (const m of messages) wisp.log.warn(`violation ${rule} ${key}: ${m}`);
      }
    }
  }

  onAdd(cx, obj) {
    this.check(cx, obj);
  }

  onUpdate(cx, _old, nu) {
    this.check(cx, nu);
  }

  onDelete(_cx, obj) {
    for (const keys of this.violating.values()) keys.delete(obj.key);
  }

  afterBatch() {
    for (const rule of RULES) {
      wisp.metrics.gaugeSet('policy_violating_pods', [['rule', rule]], this.violating.get(rule).size);
    }
  }
}

export const listener = wisp.exportPlugin(ImagePolicy);
