/**
 * Credentials for the EndpointSlice watch: a kubeconfig file (kubeadm's /etc/kubernetes/admin.conf,
 * or the kubelet's) or in-cluster (KUBERNETES_SERVICE_HOST and the service account's token and
 * CA under /var/run/secrets/kubernetes.io/serviceaccount). Whatever server they name (normally
 * the VIP), discovery talks to one ready apiserver directly: {@link forServer} replaces the
 * server and keeps the CA (the apiserver's certificate carries its node address in its SANs).
 */
import { existsSync } from 'node:fs';
import { dirname } from 'node:path';
import type { KubeConfig } from '@kubernetes/client-node';
import { describeReadError, readRegularFile } from '../config/files.js';
import { kubeconfigProblem, SERVICE_ACCOUNT_TOKEN } from '../config/kubeconfig.js';

/**
 * The parts of @kubernetes/client-node discovery uses (k8s-client.ts), loaded on first use:
 * importing them holds the importing thread 0.1 s (idle) to seconds (busy), which is why
 * discovery runs on a thread of its own (thread.ts), and an agent without discovery never needs them.
 */
export type ClientModule = typeof import('./k8s-client.js');
let client: Promise<ClientModule> | null = null;
/** The client library (imported once, on the first call). */
export function loadClient(): Promise<ClientModule> {
  client ??= import('./k8s-client.js');
  return client;
}

/** Where credentials come from. */
export type CredentialSource = { kind: 'kubeconfig'; path: string } | { kind: 'inCluster' };

/** What loading found: credentials, or a file not there yet (a wait), or a file that is malformed. */
export type LoadedCredentials = { kind: 'ok'; kc: KubeConfig } | { kind: 'missing'; what: string } | { kind: 'invalid'; reason: string };

/**
 * Loads the credentials now. A kubeconfig is read as a regular file (a directory or a device is
 * `invalid`), checked by {@link kubeconfigProblem} (what `ballast validate` checks), then loaded
 * by the client (relative certificate paths resolved against the file's directory). Never rejects.
 */
export async function loadCredentials(src: CredentialSource): Promise<LoadedCredentials> {
  const { KubeConfig } = await loadClient();
  const kc = new KubeConfig();
  if (src.kind === 'inCluster') {
    if (!process.env.KUBERNETES_SERVICE_HOST) return { kind: 'missing', what: 'KUBERNETES_SERVICE_HOST (not running in a pod)' };
    if (!existsSync(SERVICE_ACCOUNT_TOKEN)) return { kind: 'missing', what: SERVICE_ACCOUNT_TOKEN };
    try {
      kc.loadFromCluster();
    } catch (err) {
      return { kind: 'invalid', reason: (err as Error).message };
    }
    return { kind: 'ok', kc };
  }
  let text: string;
  try {
    text = readRegularFile(src.path).toString('utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { kind: 'missing', what: src.path };
    return { kind: 'invalid', reason: `${src.path}: cannot read it: ${describeReadError(err)}` };
  }
  const problem = kubeconfigProblem(text);
  if (problem !== null) return { kind: 'invalid', reason: `${src.path}: ${problem}` };
  try {
    kc.loadFromString(text);
    kc.makePathsAbsolute(dirname(src.path));
  } catch (err) {
    return { kind: 'invalid', reason: `${src.path}: ${(err as Error).message}` };
  }
  const cluster = kc.getCurrentCluster();
  if (cluster === null)
    return { kind: 'invalid', reason: `${src.path}: no current context naming a cluster (current-context: ${JSON.stringify(kc.getCurrentContext() ?? '')})` };
  if (kc.getCurrentUser() === null) return { kind: 'invalid', reason: `${src.path}: the current context names no user` };
  return { kind: 'ok', kc };
}

/**
 * A copy of `kc` whose current cluster's server is `server` (e.g. `https://10.0.0.12:6443`);
 * the CA, the TLS server name, the user and the context are kept.
 */
export function forServer(k8s: ClientModule, kc: KubeConfig, server: string): KubeConfig {
  const current = kc.getCurrentCluster();
  const out = new k8s.KubeConfig();
  out.loadFromOptions({
    clusters: kc.clusters.map((c) => (current !== null && c.name === current.name ? { ...c, server } : c)),
    users: kc.users,
    contexts: kc.contexts,
    currentContext: kc.currentContext,
  });
  return out;
}
