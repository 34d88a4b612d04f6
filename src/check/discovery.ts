/**
 * The `discovery-server` check: what the kubeconfig's `server` is used for.
 */
import { readFileSync } from 'node:fs';
import type { Config } from '../config/index.js';
import { kubeconfigServer } from '../config/kubeconfig.js';
import { canonicalAddress } from '../net/address.js';
import { formatHostPort } from '../net/hostport.js';
import { ok, type CheckResult } from './report.js';

/**
 * `discovery-server` (with `discovery.kubeconfig`): says what the kubeconfig's `server` is used
 * for. Discovery never connects through it: it dials each apiserver at its own address (the seed,
 * then the EndpointSlices' endpoints) with the kubeconfig's CA and credentials
 * (src/discovery/credentials.ts forServer), so a server that is the VIP or the node-local
 * endpoint (what kubeadm's admin.conf and a kubelet's kubeconfig name) is harmless: discovery does
 * not depend on the endpoint ballast programs. Always ok (an informational line); null without a
 * kubeconfig.
 * @param readText the file's text, or null when it cannot be read (default fs.readFileSync)
 */
export function discoveryServerResult(config: Config, readText: (path: string) => string | null = readText0): CheckResult | null {
  const path = config.discovery?.kubeconfig;
  if (path === undefined) return null;
  const title = `discovery connects to each apiserver directly, not through ${path}'s server`;
  const text = readText(path);
  if (text === null)
    return ok(
      'discovery-server',
      title,
      `${path} cannot be read yet: discovery waits for it, and then dials each apiserver at its own address whatever server it names`,
    );
  const server = kubeconfigServer(text);
  if (server === null)
    return ok(
      'discovery-server',
      title,
      `${path} names no usable server (ballast validate says why); discovery dials each apiserver at its own address in any case`,
    );
  // a name (not resolved here) matches neither
  const canon = (h: string): string => {
    try {
      return canonicalAddress(h);
    } catch {
      return h.toLowerCase();
    }
  };
  const host = canon(server.host);
  const isVip = config.vips.some((v) => canon(v) === host);
  const local = config.localEndpoint?.addresses.find((a) => canon(a.host) === host && a.port === server.port);
  const backends = config.apiserver.backends.map(formatHostPort).join(', ') || 'none listed';
  const how = `discovery does not connect to it: it dials each apiserver at its own address (the seed ${backends}, then the EndpointSlices' endpoints) with that file's CA and credentials, so it never depends on the endpoint ballast programs`;
  if (isVip) return ok('discovery-server', title, `the server ${server.url} is the VIP: harmless, ${how}`);
  if (local) return ok('discovery-server', title, `the server ${server.url} is this node's local endpoint (${formatHostPort(local)}): harmless, ${how}`);
  return ok('discovery-server', title, `the server ${server.url}: ${how}`);
}

function readText0(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
}
