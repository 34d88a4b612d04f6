import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { CONFIG_FIELDS, ConfigError, formatNote, hostFiles, parseConfig, type ConfigFiles, type ConfigNote } from '../../src/config/index.js';
import { loadCredentials } from '../../src/discovery/credentials.js';
import { kubeconfigText } from '../support/tls.js';

const withDiscovery = (discovery: unknown): string =>
  stringify({ vrrp: { vrid: 51 }, vips: ['10.0.0.100'], apiserver: { backends: ['10.0.0.11:6443'], health: { caFile: '/etc/ca.crt' } }, discovery });

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
    expect(parseConfig(withDiscovery({ inCluster: true, lastKnownFile: '/run/b.json' })).discovery).toStrictEqual({
      inCluster: true,
      lastKnownFile: '/run/b.json',
    });
    expect(CONFIG_FIELDS.filter((f) => f.startsWith('discovery.'))).toStrictEqual(['discovery.kubeconfig', 'discovery.inCluster', 'discovery.lastKnownFile']);
  });
  it('refuses, by field: neither source, both sources, a relative path, an unknown key', () => {
    expect(issues(withDiscovery({ lastKnownFile: '/run/b.json' }))).toStrictEqual([
      [
        'discovery.kubeconfig',
        'is required: the kubeconfig to watch the EndpointSlices with, e.g. /etc/kubernetes/admin.conf (or inCluster: true in a pod; or remove the discovery section)',
      ],
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
      [
        'apiserver.backends',
        'needs at least one apiserver with discovery: the seed that discovery first reads the EndpointSlices from (any one; the discovered set replaces it once the API answers)',
      ],
    ]);
  });
});

describe('config: the files discovery names (ballast validate, loadConfig)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ballast-cfgdisc-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const KC = kubeconfigText('https://10.0.0.100:6443', Buffer.from('-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n'), 'tok');
  /** parses with the host's files: the discovery issues, and the discovery notes */
  const check = (discovery: Record<string, unknown>): { issues: [string, string][]; notes: [string, string][] } => {
    const notes: ConfigNote[] = [];
    const text = stringify({
      vrrp: { vrid: 51 },
      vips: ['10.0.0.100'],
      apiserver: { backends: ['10.0.0.11:6443'], health: { insecureSkipVerify: true } },
      discovery: { lastKnownFile: join(dir, 'lk', 'backends.json'), ...discovery },
    });
    let issues: [string, string][] = [];
    try {
      parseConfig(text, 'test.yaml', { files: hostFiles, notes });
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      issues = err.issues.map((i) => [i.path, i.message]);
    }
    return { issues, notes: notes.map((n) => [n.path, formatNote(n)]) };
  };

  it('a missing kubeconfig is a note, like a missing caFile; a usable one is neither note nor issue', () => {
    const missing = join(dir, 'none', 'admin.conf');
    expect(check({ kubeconfig: missing })).toStrictEqual({
      issues: [],
      notes: [
        [
          'discovery.kubeconfig',
          `line 12: discovery.kubeconfig: note: ${missing} does not exist yet: discovery waits for it (it appears after kubeadm init / join)`,
        ],
      ],
    });
    writeFileSync(join(dir, 'admin.conf'), KC);
    expect(check({ kubeconfig: join(dir, 'admin.conf') })).toStrictEqual({ issues: [], notes: [] });
  });

  it('a kubeconfig that is not YAML, not a kubeconfig, or a directory is an error on discovery.kubeconfig', () => {
    const bad = (name: string, text: string): [string, string][] => {
      writeFileSync(join(dir, name), text);
      return check({ kubeconfig: join(dir, name) }).issues;
    };
    expect(bad('notyaml.conf', 'clusters: [\n')).toStrictEqual([
      ['discovery.kubeconfig', expect.stringMatching(new RegExp(`^${join(dir, 'notyaml.conf')}: not YAML: `))],
    ]);
    expect(bad('scalar.conf', 'hello\n')).toStrictEqual([
      ['discovery.kubeconfig', `${join(dir, 'scalar.conf')}: not a kubeconfig: expected a mapping with clusters, contexts, users and current-context`],
    ]);
    expect(bad('nocontext.conf', KC.replace('current-context: admin@lab', ''))).toStrictEqual([
      [
        'discovery.kubeconfig',
        `${join(dir, 'nocontext.conf')}: not a kubeconfig for discovery: no current-context (the context naming the cluster and user to use)`,
      ],
    ]);
    expect(bad('nouser.conf', KC.replace('- name: admin\n', '- name: other\n'))).toStrictEqual([
      ['discovery.kubeconfig', `${join(dir, 'nouser.conf')}: not a kubeconfig for discovery: the current context names no listed user`],
    ]);
    mkdirSync(join(dir, 'kc.d'));
    expect(check({ kubeconfig: join(dir, 'kc.d') }).issues).toStrictEqual([
      ['discovery.kubeconfig', `cannot read ${join(dir, 'kc.d')}: it is a directory, not a file (EISDIR)`],
    ]);
  });

  it('the same check is what discovery runs on the file (loadCredentials, without the network)', async () => {
    writeFileSync(join(dir, 'scalar2.conf'), 'hello\n');
    expect(await loadCredentials({ kind: 'kubeconfig', path: join(dir, 'scalar2.conf') })).toStrictEqual({
      kind: 'invalid',
      reason: `${join(dir, 'scalar2.conf')}: not a kubeconfig: expected a mapping with clusters, contexts, users and current-context`,
    });
    mkdirSync(join(dir, 'kc2.d'));
    expect(await loadCredentials({ kind: 'kubeconfig', path: join(dir, 'kc2.d') })).toStrictEqual({
      kind: 'invalid',
      reason: `${join(dir, 'kc2.d')}: cannot read it: it is a directory, not a file (EISDIR)`,
    });
    writeFileSync(join(dir, 'good.conf'), KC);
    expect((await loadCredentials({ kind: 'kubeconfig', path: join(dir, 'good.conf') })).kind).toBe('ok');
  });

  it('a lastKnownFile that is a directory, or whose directory is a file, is an error on discovery.lastKnownFile', () => {
    writeFileSync(join(dir, 'admin.conf'), KC);
    const kubeconfig = join(dir, 'admin.conf');
    mkdirSync(join(dir, 'lk.d'));
    expect(check({ kubeconfig, lastKnownFile: join(dir, 'lk.d') }).issues).toStrictEqual([
      ['discovery.lastKnownFile', `${join(dir, 'lk.d')} cannot be used: it is a directory; discovery writes the last-known backend set to this file`],
    ]);
    writeFileSync(join(dir, 'plain'), 'x');
    expect(check({ kubeconfig, lastKnownFile: join(dir, 'plain', 'sub', 'backends.json') }).issues).toStrictEqual([
      [
        'discovery.lastKnownFile',
        `${join(dir, 'plain', 'sub', 'backends.json')} cannot be used: its directory ${join(dir, 'plain')} is not a directory; discovery writes the last-known backend set to this file`,
      ],
    ]);
    // missing (its directory too: it is created) or corrupt (ignored at run time) is fine
    writeFileSync(join(dir, 'corrupt.json'), '{');
    expect(check({ kubeconfig, lastKnownFile: join(dir, 'corrupt.json') })).toStrictEqual({ issues: [], notes: [] });
    expect(check({ kubeconfig })).toStrictEqual({ issues: [], notes: [] });
  });

  it('inCluster without the service-account token is a note (validate may run outside the pod), with it nothing', () => {
    const notes: ConfigNote[] = [];
    const text = stringify({
      vrrp: { vrid: 51 },
      vips: ['10.0.0.100'],
      apiserver: { backends: ['10.0.0.11:6443'], health: { insecureSkipVerify: true } },
      discovery: { inCluster: true },
    });
    const files = (present: string[]): ConfigFiles => ({
      readFile: (p) => {
        if (present.includes(p)) return Buffer.from('token\n');
        throw Object.assign(new Error(p), { code: 'ENOENT' });
      },
    });
    parseConfig(text, 'test.yaml', { files: files([]), notes });
    expect(notes.map(formatNote)).toStrictEqual([
      'line 11: discovery.inCluster: note: /var/run/secrets/kubernetes.io/serviceaccount/token does not exist yet: discovery waits for it (it is mounted in a pod with a service account; validate may run outside one)',
    ]);
    const none: ConfigNote[] = [];
    parseConfig(text, 'test.yaml', { files: files(['/var/run/secrets/kubernetes.io/serviceaccount/token']), notes: none });
    expect(none).toStrictEqual([]);
  });
});
