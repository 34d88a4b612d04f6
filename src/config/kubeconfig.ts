/**
 * What the credentials files must hold, checked without @kubernetes/client-node (importing it
 * takes seconds): `ballast validate` and loadConfig use {@link kubeconfigProblem} on the
 * kubeconfig's text, and discovery/credentials.ts runs the same check before handing the text to the client.
 */
import { parseDocument } from 'yaml';

/** The pod's service-account directory (token, ca.crt, namespace) that inCluster credentials read. */
export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';
/** The service-account token file inCluster credentials need. */
export const SERVICE_ACCOUNT_TOKEN = `${SERVICE_ACCOUNT_DIR}/token`;

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The entry of a kubeconfig list (`clusters`, `contexts`, `users`) named `name`, its inner mapping (`cluster`, …). */
function entry(doc: Record<string, unknown>, list: 'clusters' | 'contexts' | 'users', name: string): Record<string, unknown> | undefined {
  const items = doc[list];
  if (!Array.isArray(items)) return undefined;
  const inner = list.slice(0, -1);
  const found = items.find((i) => isRecord(i) && i.name === name) as Record<string, unknown> | undefined;
  return found !== undefined && isRecord(found[inner]) ? (found[inner] as Record<string, unknown>) : undefined;
}

/**
 * Why kubeconfig text cannot serve as discovery's credentials, or null when it can: it must be
 * YAML, a mapping whose `current-context` names a context whose cluster (with a `server`) and
 * user are listed. No stricter than @kubernetes/client-node's loader plus credentials.ts.
 * @returns the problem, for people (`not YAML: …`, `no current-context: …`), or null.
 */
export function kubeconfigProblem(text: string): string | null {
  const doc = parseDocument(text, { prettyErrors: false });
  if (doc.errors.length > 0) return `not YAML: ${doc.errors[0]!.message.split('\n')[0]}`;
  const value: unknown = doc.toJS();
  if (!isRecord(value)) return 'not a kubeconfig: expected a mapping with clusters, contexts, users and current-context';
  const current = value['current-context'];
  if (typeof current !== 'string' || current === '')
    return 'not a kubeconfig for discovery: no current-context (the context naming the cluster and user to use)';
  const ctx = entry(value, 'contexts', current);
  if (ctx === undefined) return `not a kubeconfig for discovery: current-context ${JSON.stringify(current)} is not among its contexts`;
  if (typeof ctx.cluster !== 'string' || entry(value, 'clusters', ctx.cluster) === undefined) {
    return `not a kubeconfig for discovery: the current context names no listed cluster (cluster: ${JSON.stringify(ctx.cluster ?? '')})`;
  }
  if (typeof entry(value, 'clusters', ctx.cluster)!.server !== 'string')
    return `not a kubeconfig for discovery: cluster ${JSON.stringify(ctx.cluster)} has no server`;
  if (typeof ctx.user !== 'string' || entry(value, 'users', ctx.user) === undefined)
    return 'not a kubeconfig for discovery: the current context names no listed user';
  return null;
}

/**
 * The `server` of the current context's cluster in kubeconfig text, as host (canonical, no
 * brackets) and port (443 when the URL gives none, as clients assume for https), or null when the
 * text has none ({@link kubeconfigProblem} says why) or it is no http(s) URL.
 */
export function kubeconfigServer(text: string): { url: string; host: string; port: number } | null {
  if (kubeconfigProblem(text) !== null) return null;
  const value = parseDocument(text).toJS() as Record<string, unknown>;
  const ctx = entry(value, 'contexts', value['current-context'] as string)!;
  const url = entry(value, 'clusters', ctx.cluster as string)!.server as string;
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return null;
  }
  if (u.protocol !== 'https:' && u.protocol !== 'http:') return null;
  const host = u.hostname.replace(/^\[(.*)\]$/, '$1');
  return { url, host, port: u.port === '' ? (u.protocol === 'https:' ? 443 : 80) : Number(u.port) };
}
