import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { CONFIG_FIELDS, ConfigError, parseConfig } from '../../src/config/index.js';

const withDiscovery = (discovery: unknown): string => stringify({ vrrp: { vrid: 51 }, vips: ['10.0.0.100'], apiserver: { backends: ['10.0.0.11:6443'], health: { caFile: '/etc/ca.crt' } }, discovery });

const issues = (text: string): [string, string][] => {
  try {
    parseConfig(text, 'test.yaml');
  } catch (err) {
    if (err instanceof ConfigError) return err.issues.map((i) => [i.path, i.message]);
    throw err;
  }
  throw new Error('expected a ConfigError');
};

describe('config: the discovery section', () => {
  it('is null when absent; a kubeconfig enables it with the default last-known file', () => {
    expect(parseConfig(stringify({ vrrp: { vrid: 51 }, vips: ['10.0.0.100'] })).discovery).toBeNull();
    expect(parseConfig(withDiscovery({ kubeconfig: '/etc/kubernetes/admin.conf' })).discovery).toStrictEqual({
      kubeconfig: '/etc/kubernetes/admin.conf',
      inCluster: false,
      lastKnownFile: '/var/lib/ballast/backends.json',
    });
    expect(parseConfig(withDiscovery({ inCluster: true, lastKnownFile: '/run/b.json' })).discovery).toStrictEqual({ inCluster: true, lastKnownFile: '/run/b.json' });
    expect(CONFIG_FIELDS.filter((f) => f.startsWith('discovery.'))).toStrictEqual(['discovery.kubeconfig', 'discovery.inCluster', 'discovery.lastKnownFile']);
  });
  it('refuses, by field: neither source, both sources, a relative path, an unknown key', () => {
    expect(issues(withDiscovery({ lastKnownFile: '/run/b.json' }))).toStrictEqual([
      ['discovery.kubeconfig', 'is required: the kubeconfig to watch the EndpointSlices with, e.g. /etc/kubernetes/admin.conf (or inCluster: true in a pod; or remove the discovery section)'],
    ]);
    expect(issues(withDiscovery({ kubeconfig: '/etc/kubernetes/admin.conf', inCluster: true }))).toStrictEqual([
      ['discovery.inCluster', "is true while discovery.kubeconfig is set: use one of them (the kubeconfig, or the pod's service account)"],
    ]);
    expect(issues(withDiscovery({ kubeconfig: 'admin.conf' }))).toStrictEqual([
      ['discovery.kubeconfig', 'must be an absolute path, got "admin.conf" (a relative path would depend on the agent\'s working directory)'],
    ]);
    expect(issues(withDiscovery({ kubeconfig: '/a', lastKnown: '/b' }))[0]?.[0]).toBe('discovery.lastKnown');
    // no seed: discovery would have no ready apiserver to read the slices from
    expect(issues(stringify({ vrrp: { vrid: 51 }, vips: ['10.0.0.100'], discovery: { kubeconfig: '/etc/kubernetes/admin.conf' } }))).toStrictEqual([
      ['apiserver.backends', 'needs at least one apiserver with discovery: the seed that discovery first reads the EndpointSlices from (any one; the discovered set replaces it once the API answers)'],
    ]);
  });
});
