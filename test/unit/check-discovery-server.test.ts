/**
 * `ballast check`'s `discovery-server` (src/check/discovery.ts): a discovery
 * kubeconfig whose server is the VIP or the node-local endpoint is harmless (discovery dials each
 * apiserver at its own address), and the check says so instead of saying nothing.
 */
import { describe, expect, it } from 'vitest';
import { discoveryServerResult } from '../../src/check/discovery.js';
import { validateConfig } from '../../src/config/index.js';
import { kubeconfigServer } from '../../src/config/kubeconfig.js';

const kubeconfig = (server: string): string =>
  [
    'apiVersion: v1',
    'kind: Config',
    'clusters: [{ name: k, cluster: { server: "' + server + '", certificate-authority-data: AAAA } }]',
    'users: [{ name: u, user: { token: t } }]',
    'contexts: [{ name: c, context: { cluster: k, user: u } }]',
    'current-context: c',
    '',
  ].join('\n');

const config = (over: Record<string, unknown> = {}) =>
  validateConfig({
    interface: 'eth0',
    vips: ['10.0.0.100'],
    vrrp: { vrid: 7, priority: 100 },
    apiserver: { backends: ['10.0.0.11:6443', '10.0.0.12:6443'], health: { insecureSkipVerify: true } },
    localEndpoint: { address: '127.0.0.1:7443' },
    discovery: { kubeconfig: '/etc/kubernetes/admin.conf' },
    ...over,
  });

describe('check: discovery-server', () => {
  it('the VIP as the server: ok, says it is harmless and why', () => {
    const r = discoveryServerResult(config(), () => kubeconfig('https://10.0.0.100:6443'))!;
    expect([r.id, r.status, r.title]).toStrictEqual([
      'discovery-server',
      'ok',
      "discovery connects to each apiserver directly, not through /etc/kubernetes/admin.conf's server",
    ]);
    expect(r.detail).toBe(
      "the server https://10.0.0.100:6443 is the VIP: harmless, discovery does not connect to it: it dials each apiserver at its own address (the seed 10.0.0.11:6443, 10.0.0.12:6443, then the EndpointSlices' endpoints) with that file's CA and credentials, so it never depends on the endpoint ballast programs",
    );
  });

  it('the node-local endpoint as the server: ok, names it', () => {
    const r = discoveryServerResult(config(), () => kubeconfig('https://127.0.0.1:7443'))!;
    expect(r.status).toBe('ok');
    expect(r.detail).toMatch(
      /^the server https:\/\/127\.0\.0\.1:7443 is this node's local endpoint \(127\.0\.0\.1:7443\): harmless, discovery does not connect to it/,
    );
  });

  it('another server, an IPv6 VIP in brackets, a missing file, no discovery', () => {
    expect(discoveryServerResult(config(), () => kubeconfig('https://10.0.0.11:6443'))!.detail).toMatch(
      /^the server https:\/\/10\.0\.0\.11:6443: discovery does not connect to it/,
    );
    const v6 = validateConfig({
      interface: 'eth0',
      vips: ['fd00::100'],
      vrrp: { vrid: 7, priority: 100 },
      apiserver: { backends: ['[fd00::11]:6443'], health: { insecureSkipVerify: true } },
      discovery: { kubeconfig: '/k.conf' },
    });
    expect(discoveryServerResult(v6, () => kubeconfig('https://[fd00:0::100]:6443'))!.detail).toContain('is the VIP: harmless');
    expect(discoveryServerResult(config(), () => null)!.detail).toContain('cannot be read yet: discovery waits for it');
    expect(discoveryServerResult(config({ discovery: undefined }), () => kubeconfig('https://10.0.0.100:6443'))).toBeNull();
  });

  it('kubeconfigServer: host without brackets, the default https port', () => {
    expect(kubeconfigServer(kubeconfig('https://[fd00::1]'))).toStrictEqual({ url: 'https://[fd00::1]', host: 'fd00::1', port: 443 });
    expect(kubeconfigServer(kubeconfig('https://api.example:6443'))).toStrictEqual({ url: 'https://api.example:6443', host: 'api.example', port: 6443 });
    expect(kubeconfigServer('current-context: x')).toBeNull();
  });
});
