/**
 * The Kubernetes objects `ballast manifest` generates from a validated configuration
 * (docs/kubeadm.md, docs/cluster-api.md):
 *
 *   staticPod()  the kubeadm static pod for /etc/kubernetes/manifests/ballast.yaml (control plane)
 *   daemonSet()  a ConfigMap with the configuration and a DaemonSet that runs the node-local
 *                endpoint on the workers (no election)
 *   rbac()       the ServiceAccount, Role and RoleBinding discovery needs: get/list/watch on the
 *                EndpointSlices of namespace default, nothing more
 *   toYaml()     the objects as YAML documents
 *
 * The objects are typed with kubernetes-models' interfaces (built from the Kubernetes OpenAPI
 * schema), so a misspelt field fails the type check; the unit tests validate them at run time
 * against the same schema (test/unit/manifest.test.ts).
 *
 * Decisions, with their reasons:
 * - No dependency on the API server the pod fronts: a static pod has no service account
 *   (automountServiceAccountToken: false) and reads the configuration and every file it names
 *   from hostPath mounts; discovery uses a kubeconfig file. A missing file (the CA, admin.conf
 *   before `kubeadm init`) is waited for by the agent, so those directories are
 *   DirectoryOrCreate: the pod starts before kubeadm writes them.
 * - No `privileged`: the capabilities of AGENT_CAPABILITIES are added (CAP_BPF only with the
 *   eBPF local endpoint: AGENT_CAPABILITIES_EBPF_FREE), all others dropped; root (runAsUser 0),
 *   as the agent's files (pins, /run/ballast, /etc/kubernetes) are root's.
 * - /sys/fs/bpf and /sys/fs/cgroup are mounted only when the configuration runs the eBPF local
 *   endpoint (`localEndpoint` with `dataplane.local: ebpf`). /sys/fs/bpf with HostToContainer
 *   propagation: the pins live on the host's bpffs (systemd mounts it at boot), so the next pod
 *   adopts them; Bidirectional (which needs privileged) would only matter if the agent had to
 *   mount bpffs itself, which inside the pod would be the pod's own, lost at restart.
 * - The liveness probe asks GET /healthz on `admin.listen` with its host set (hostNetwork, and
 *   the admin port is on loopback by default); 0.0.0.0 / :: are probed on 127.0.0.1 / ::1. A
 *   startup probe gives the start 60 s before liveness counts. No readiness probe: nothing
 *   routes to the pod.
 * - No CPU limit: throttling would delay adverts and cause false failovers.
 * - The DaemonSet runs on every node that is not a control-plane node (those run the static
 *   pod, whose local endpoint would collide with it on 127.0.0.1:7443) and tolerates every
 *   taint (`operator: Exists`): the local endpoint is wanted on NotReady and tainted nodes too.
 *   Its configuration comes from a ConfigMap (one file for all workers, which have no per-node
 *   settings), mounted at the configuration's directory.
 */
import { basename, dirname, resolve } from 'node:path';
import type { IConfigMap } from 'kubernetes-models/v1/ConfigMap';
import type { IContainer } from 'kubernetes-models/v1/Container';
import type { IPod } from 'kubernetes-models/v1/Pod';
import type { IPodSpec } from 'kubernetes-models/v1/PodSpec';
import type { IProbe } from 'kubernetes-models/v1/Probe';
import type { IServiceAccount } from 'kubernetes-models/v1/ServiceAccount';
import type { IVolume } from 'kubernetes-models/v1/Volume';
import type { IVolumeMount } from 'kubernetes-models/v1/VolumeMount';
import type { IDaemonSet } from 'kubernetes-models/apps/v1/DaemonSet';
import type { IRole } from 'kubernetes-models/rbac.authorization.k8s.io/v1/Role';
import type { IRoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1/RoleBinding';
import { parse, stringify } from 'yaml';
import type { Config } from '../config/index.js';
import { ConfigError, type ConfigIssue } from '../errors.js';
import { AGENT_CAPABILITIES, AGENT_CAPABILITIES_EBPF_FREE } from './capabilities.js';

/** The configuration file the agent reads by default (also the image's default command): the unit's. */
export { DEFAULT_CONFIG_PATH } from './systemd.js';
/** Namespace of the static pod, the DaemonSet, its ConfigMap and the ServiceAccount. */
export const NAMESPACE = 'kube-system';
/** Name of the ServiceAccount in-cluster discovery runs as (and of the RBAC objects). */
export const SERVICE_ACCOUNT = 'ballast';
/** The namespace whose `kubernetes` Service's EndpointSlices discovery reads (src/discovery/watch.ts). */
export const DISCOVERY_NAMESPACE = 'default';
/**
 * terminationGracePeriodSeconds: the agent's own deadline for a clean stop (priority-0
 * hand-over, VIPs removed) is 10 s (STOP_DEADLINE_MS in src/commands/run.ts), plus a margin.
 */
export const TERMINATION_GRACE_SECONDS = 15;
/** Where the agent keeps its pin locks (src/dataplane/ebpf.ts LOCK_DIR). */
const RUN_DIR = '/run/ballast';
/** The last-known backend set's directory (the default of discovery.lastKnownFile). */
const STATE_DIR = '/var/lib/ballast';
const PKI_DIR = '/etc/kubernetes/pki';

/** What the manifests are generated with besides the configuration. */
export interface ManifestOptions {
  /** The configuration file as the agent will find it on the node (default /etc/ballast/ballast.yaml). */
  configPath: string;
  /** Image reference, e.g. `localhost/ballast:0.1.0`. */
  image: string;
  /**
   * Absolute paths of the files discovery.kubeconfig refers to (kubeconfigReferences()): their
   * directories are mounted read-only too. Absent: only the kubeconfig's own directory.
   */
  kubeconfigFiles?: readonly string[];
}

/** One hostPath (or ConfigMap) mount: the host directory appears at the same path in the container. */
interface Mount {
  path: string;
  readOnly: boolean;
  type: 'Directory' | 'DirectoryOrCreate';
  propagation?: 'HostToContainer';
  /** Why it is there, for the volume's name. */
  name: string;
}

/** True when the configuration runs the eBPF local endpoint (the only user of /sys/fs/bpf and the cgroup attach). */
export function usesEbpf(config: Config): boolean {
  return config.localEndpoint !== null && config.dataplane.local === 'ebpf';
}

/** `a` is `b` or a directory above it. */
function covers(a: string, b: string): boolean {
  return a === b || b.startsWith(a.endsWith('/') ? a : `${a}/`);
}

/**
 * The directories the agent needs from the host: fixed ones, and the directory of every file the
 * configuration names (caFile, client certificate and key, token, VRRP key, kubeconfig and the
 * files it refers to, lastKnownFile). One below another mount is left out when that mount already gives what it
 * needs (read-only below read-write, or both read-only).
 */
function hostMounts(config: Config, configPath: string, configDirFromHost: boolean, kubeconfigFiles: readonly string[]): Mount[] {
  const h = config.apiserver.health;
  const want: Mount[] = [];
  if (configDirFromHost) want.push({ path: dirname(configPath), readOnly: true, type: 'Directory', name: 'config' });
  want.push({ path: PKI_DIR, readOnly: true, type: 'DirectoryOrCreate', name: 'pki' });
  for (const f of [h.caFile, h.clientCertFile, h.clientKeyFile, h.tokenFile, config.vrrp?.auth?.keyFile, config.discovery?.kubeconfig]) {
    if (f !== undefined) want.push({ path: dirname(f), readOnly: true, type: 'DirectoryOrCreate', name: 'files' });
  }
  if (config.discovery?.kubeconfig !== undefined) {
    for (const f of kubeconfigFiles) want.push({ path: dirname(f), readOnly: true, type: 'DirectoryOrCreate', name: 'files' });
  }
  want.push({ path: RUN_DIR, readOnly: false, type: 'DirectoryOrCreate', name: 'run' });
  want.push({ path: STATE_DIR, readOnly: false, type: 'DirectoryOrCreate', name: 'state' });
  if (config.discovery) want.push({ path: dirname(config.discovery.lastKnownFile), readOnly: false, type: 'DirectoryOrCreate', name: 'state' });
  if (usesEbpf(config)) {
    want.push({ path: '/sys/fs/bpf', readOnly: false, type: 'Directory', propagation: 'HostToContainer', name: 'bpffs' });
    want.push({ path: config.localEndpoint?.cgroup ?? '/sys/fs/cgroup', readOnly: true, type: 'Directory', name: 'cgroup' });
  }
  // outermost first, so a directory below one already mounted is seen to be covered
  const sorted = [...want].sort((a, b) => a.path.split('/').length - b.path.split('/').length || a.path.localeCompare(b.path));
  const out: Mount[] = [];
  for (const m of sorted) {
    const same = out.find((o) => o.path === m.path);
    if (same) {
      if (!m.readOnly) same.readOnly = false;
      continue;
    }
    if (out.some((o) => covers(o.path, m.path) && (!o.readOnly || m.readOnly))) continue;
    out.push({ ...m });
  }
  return out.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

/** A DNS-1123 label for a volume from its path ("/etc/kubernetes/pki" → "etc-kubernetes-pki"), unique among `taken`. */
function volumeName(path: string, taken: Set<string>): string {
  const base =
    path
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '-')
      .replace(/^-+|-+$/g, '')
      .slice(0, 50) || 'root';
  let name = base;
  for (let i = 2; taken.has(name); i++) name = `${base}-${i}`;
  taken.add(name);
  return name;
}

/** The probe target: `admin.listen`, an unspecified address probed on loopback. */
function probeHost(config: Config): string {
  const h = config.admin.listen.host;
  if (h === '0.0.0.0') return '127.0.0.1';
  if (h === '::') return '::1';
  return h;
}

/**
 * The capabilities to add, in Kubernetes' spelling (without the CAP_ prefix: NET_ADMIN):
 * AGENT_CAPABILITIES, or AGENT_CAPABILITIES_EBPF_FREE without the eBPF local endpoint.
 */
export function kubernetesCapabilities(config: Config): string[] {
  return (usesEbpf(config) ? AGENT_CAPABILITIES : AGENT_CAPABILITIES_EBPF_FREE).map((c) => c.replace(/^CAP_/, ''));
}

/** The pod spec shared by the static pod and the DaemonSet's template. */
function podSpec(config: Config, opts: ManifestOptions, extra: { configMap?: string; serviceAccount?: string }): IPodSpec {
  const mounts = hostMounts(config, opts.configPath, extra.configMap === undefined, opts.kubeconfigFiles ?? []);
  const taken = new Set<string>();
  const volumes: IVolume[] = [];
  const volumeMounts: IVolumeMount[] = [];
  if (extra.configMap !== undefined) {
    const dir = dirname(opts.configPath);
    const inside = mounts.find((m) => covers(dir, m.path) || covers(m.path, dir));
    if (inside) {
      throw new ConfigError([
        {
          path: '(document)',
          message: `in the DaemonSet the configuration's directory ${dir} is its ConfigMap, so ${inside.path} cannot come from the host: keep the files it names outside ${dir}, or give --node-config another path for the configuration on the node`,
        },
      ]);
    }
    const name = volumeName('config', taken);
    volumes.push({ name, configMap: { name: extra.configMap, items: [{ key: basename(opts.configPath), path: basename(opts.configPath) }] } });
    volumeMounts.push({ name, mountPath: dir, readOnly: true });
  }
  for (const m of mounts) {
    const name = volumeName(m.path, taken);
    volumes.push({ name, hostPath: { path: m.path, type: m.type } });
    volumeMounts.push({ name, mountPath: m.path, ...(m.readOnly ? { readOnly: true } : {}), ...(m.propagation ? { mountPropagation: m.propagation } : {}) });
  }
  const healthz: IProbe['httpGet'] = { host: probeHost(config), port: config.admin.listen.port, path: '/healthz', scheme: 'HTTP' };
  const container: IContainer = {
    name: 'ballast',
    image: opts.image,
    imagePullPolicy: 'IfNotPresent',
    // the image's entrypoint is the agent (node cli.js); its default command runs the default file
    args: ['run', '--config', opts.configPath],
    securityContext: {
      runAsUser: 0,
      runAsGroup: 0,
      privileged: false,
      allowPrivilegeEscalation: false,
      capabilities: { add: kubernetesCapabilities(config), drop: ['ALL'] },
    },
    resources: { requests: { cpu: '50m', memory: '64Mi' } },
    startupProbe: { httpGet: healthz, periodSeconds: 2, timeoutSeconds: 2, failureThreshold: 30 },
    livenessProbe: { httpGet: healthz, periodSeconds: 10, timeoutSeconds: 5, failureThreshold: 3 },
    volumeMounts,
  };
  return {
    hostNetwork: true,
    // the node's resolv.conf: the agent resolves no names, and the cluster DNS may not exist yet
    dnsPolicy: 'Default',
    priorityClassName: 'system-node-critical',
    ...(extra.serviceAccount !== undefined
      ? { serviceAccountName: extra.serviceAccount, automountServiceAccountToken: true }
      : { automountServiceAccountToken: false }),
    enableServiceLinks: false,
    terminationGracePeriodSeconds: TERMINATION_GRACE_SECONDS,
    containers: [container],
    volumes,
  };
}

/**
 * The files a kubeconfig refers to by path, which the agent opens when it uses it:
 * `clusters[].cluster.certificate-authority`, `users[].user.client-certificate`, `client-key`
 * and `tokenFile`; a relative one resolved against the kubeconfig's directory (as kubectl
 * does). Inline data (`*-data`, `token`) needs nothing. Sorted, without duplicates.
 * @param text the kubeconfig file's text (YAML; JSON is YAML too).
 * @param kubeconfigPath its absolute path (the base of relative paths).
 * @throws Error when the text is not YAML (the parser's error).
 */
export function kubeconfigReferences(text: string, kubeconfigPath: string): string[] {
  const doc: unknown = parse(text);
  const list = (v: unknown, key: string): Record<string, unknown>[] => {
    if (typeof v !== 'object' || v === null) return [];
    const items = (v as Record<string, unknown>)[key];
    return Array.isArray(items) ? items.filter((i): i is Record<string, unknown> => typeof i === 'object' && i !== null) : [];
  };
  const field = (o: unknown, key: string): string | undefined => {
    const v = typeof o === 'object' && o !== null ? (o as Record<string, unknown>)[key] : undefined;
    return typeof v === 'string' && v !== '' ? v : undefined;
  };
  const paths = [
    ...list(doc, 'clusters').map((c) => field(c.cluster, 'certificate-authority')),
    ...list(doc, 'users').flatMap((u) => ['client-certificate', 'client-key', 'tokenFile'].map((k) => field(u.user, k))),
  ].filter((p): p is string => p !== undefined);
  return [...new Set(paths.map((p) => resolve(dirname(kubeconfigPath), p)))].sort();
}

/** Labels of every object generated. */
function labels(component: string): Record<string, string> {
  return { 'app.kubernetes.io/name': 'ballast', 'app.kubernetes.io/component': component };
}

/**
 * The kubeadm static pod (/etc/kubernetes/manifests/ballast.yaml) that runs the agent with
 * `config`, read from `opts.configPath` on the node.
 * @throws ConfigError (exit 2) when the configuration uses `discovery.inCluster`: the kubelet
 *   gives a static pod no service account.
 */
export function staticPod(config: Config, opts: ManifestOptions): IPod {
  if (config.discovery?.inCluster) {
    throw new ConfigError([
      {
        path: 'discovery.inCluster',
        message:
          'a static pod has no service account (the kubelet gives static pods no API credentials): use discovery.kubeconfig (e.g. /etc/kubernetes/admin.conf) for the static pod',
      },
    ]);
  }
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'ballast', namespace: NAMESPACE, labels: { ...labels('control-plane-endpoint'), component: 'ballast', tier: 'control-plane' } },
    spec: podSpec(config, opts, {}),
  };
}

/**
 * A ConfigMap holding `configText` (the file as written) and a DaemonSet running the node-local
 * endpoint with it on every node that is not a control-plane node.
 * @param configText the configuration file's text (the ConfigMap carries it verbatim).
 * @throws ConfigError (exit 2) when the configuration has an election (`vrrp`: a VRRP group on
 *   every worker would hold the VIP anywhere), has no `localEndpoint` (nothing to do on a
 *   worker), or names a file inside the configuration's directory (which is the ConfigMap there).
 */
export function daemonSet(config: Config, configText: string, opts: ManifestOptions): [IConfigMap, IDaemonSet] {
  const issues: ConfigIssue[] = [];
  if (config.vrrp !== null)
    issues.push({
      path: 'vrrp',
      message:
        'the DaemonSet runs the node-local endpoint on every worker and must not join the VRRP group: give it a configuration without vrrp and vips (docs/config.md, "a node that only serves the node-local endpoint")',
    });
  if (config.localEndpoint === null)
    issues.push({ path: 'localEndpoint', message: 'the DaemonSet runs the node-local endpoint: the configuration needs a localEndpoint section' });
  if (issues.length > 0) throw new ConfigError(issues);
  const name = 'ballast-local-endpoint';
  const selector = { 'app.kubernetes.io/name': 'ballast', 'app.kubernetes.io/component': 'local-endpoint' };
  const cm: IConfigMap = {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name, namespace: NAMESPACE, labels: labels('local-endpoint') },
    data: { [basename(opts.configPath)]: configText },
  };
  const ds: IDaemonSet = {
    apiVersion: 'apps/v1',
    kind: 'DaemonSet',
    metadata: { name, namespace: NAMESPACE, labels: labels('local-endpoint') },
    spec: {
      selector: { matchLabels: selector },
      // maxSurge stays 0: with hostNetwork a second pod could not bind the same ports
      updateStrategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 1 } },
      template: {
        metadata: { labels: selector },
        spec: {
          ...podSpec(config, opts, { configMap: name, ...(config.discovery?.inCluster ? { serviceAccount: SERVICE_ACCOUNT } : {}) }),
          tolerations: [{ operator: 'Exists' }],
          affinity: {
            nodeAffinity: {
              requiredDuringSchedulingIgnoredDuringExecution: {
                nodeSelectorTerms: [{ matchExpressions: [{ key: 'node-role.kubernetes.io/control-plane', operator: 'DoesNotExist' }] }],
              },
            },
          },
        },
      },
    },
  };
  return [cm, ds];
}

/** Extra subjects of the discovery RoleBinding, for a kubeconfig on disk (docs/kubeadm.md). */
export interface RbacOptions {
  /** Users (a client certificate's CN) to bind besides the ServiceAccount. */
  users?: readonly string[];
  /** Groups (a client certificate's O) to bind besides the ServiceAccount. */
  groups?: readonly string[];
}

/**
 * What discovery needs and nothing more: the ServiceAccount kube-system/ballast (in-cluster
 * discovery), a Role in namespace default (where the `kubernetes` Service's EndpointSlices are)
 * allowing get, list and watch on discovery.k8s.io endpointslices, and its RoleBinding to the
 * ServiceAccount (and to `opts.users` / `opts.groups`).
 */
export function rbac(opts: RbacOptions = {}): [IServiceAccount, IRole, IRoleBinding] {
  const sa: IServiceAccount = {
    apiVersion: 'v1',
    kind: 'ServiceAccount',
    metadata: { name: SERVICE_ACCOUNT, namespace: NAMESPACE, labels: labels('discovery') },
  };
  const name = 'ballast-discovery';
  const role: IRole = {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'Role',
    metadata: { name, namespace: DISCOVERY_NAMESPACE, labels: labels('discovery') },
    rules: [{ apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['get', 'list', 'watch'] }],
  };
  const binding: IRoleBinding = {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'RoleBinding',
    metadata: { name, namespace: DISCOVERY_NAMESPACE, labels: labels('discovery') },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name },
    subjects: [
      { kind: 'ServiceAccount', name: SERVICE_ACCOUNT, namespace: NAMESPACE },
      ...(opts.users ?? []).map((u) => ({ kind: 'User', apiGroup: 'rbac.authorization.k8s.io', name: u })),
      ...(opts.groups ?? []).map((g) => ({ kind: 'Group', apiGroup: 'rbac.authorization.k8s.io', name: g })),
    ],
  };
  return [sa, role, binding];
}

/**
 * Objects as YAML 1.2 documents, each starting with `---`, keys in the order they were built,
 * no aliases, long strings not folded (so the text parses back to equal objects).
 */
export function toYaml(objects: readonly object[], header?: string): string {
  const docs = objects.map((o) => `---\n${stringify(o, { aliasDuplicateObjects: false, lineWidth: 0, version: '1.2' })}`);
  return `${
    header !== undefined
      ? header
          .split('\n')
          .map((l) => `# ${l}`.trimEnd())
          .join('\n') + '\n'
      : ''
  }${docs.join('')}`;
}
