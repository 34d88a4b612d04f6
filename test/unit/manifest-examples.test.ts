/**
 * The files of examples/kubeadm and examples/cluster-api (docs/kubeadm.md, docs/cluster-api.md)
 * are rendered and validated here, so the guides cannot drift from what ballast accepts and
 * generates:
 * - every ballast configuration passes loadConfig (the only notes: files kubeadm writes later);
 * - the static pod files (examples/kubeadm/ballast-static-pod.yaml, and the one inside the
 *   KubeadmControlPlane's files) equal what `ballast manifest static-pod` renders for their
 *   configuration, and are valid Pods (kubernetes-models, the Kubernetes OpenAPI schema);
 * - the KubeadmControlPlane is valid against Cluster API's v1beta2 CRD schema;
 * - the kubeadm v1beta4 files (no npm package has kubeadm's own types) are validated through the
 *   same CRD's KubeadmConfigSpec parts, which follow kubeadm v1beta4: ClusterConfiguration →
 *   clusterConfiguration, InitConfiguration → initConfiguration, JoinConfiguration →
 *   joinConfiguration, after removing what Cluster API sets elsewhere (KUBEADM_ONLY below);
 * - the endpoints agree: controlPlaneEndpoint and the joins' apiServerEndpoint are the VIP of
 *   the ballast configuration at its apiserver.port, certSANs hold the VIP, 127.0.0.1 and
 *   localhost, and the seed backends include node 1's advertise address.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { loadConfig, type Config, type ConfigNote } from '../../src/config/index.js';
import { daemonSet, staticPod } from '../../src/manifest/kubernetes.js';
import { validateBuiltin, validateKubeadmConfigPart, validateKubeadmControlPlane } from '../support/kubernetes-schema.js';

const ROOT = join(import.meta.dirname, '..', '..');
const KUBEADM = join(ROOT, 'examples', 'kubeadm');
const CAPI = join(ROOT, 'examples', 'cluster-api');
const NODE_CONFIG = '/etc/ballast/ballast.yaml';

/** Loads an example configuration; the only notes allowed are the files kubeadm (or the pod) provides later. */
function load(path: string): Config {
  const notes: ConfigNote[] = [];
  const config = loadConfig(path, { notes });
  for (const n of notes) expect(['apiserver.health.caFile', 'discovery.kubeconfig', 'discovery.inCluster']).toContain(n.path);
  return config;
}

/** What the YAML serializes to, without undefined members. */
const plain = (v: unknown): unknown => JSON.parse(JSON.stringify(v)) as unknown;

/**
 * Fields of the kubeadm v1beta4 kinds that the KubeadmConfigSpec schema does not have because
 * Cluster API sets them from other objects: apiVersion and kind (the part's place says it),
 * kubernetesVersion (KubeadmControlPlane.spec.version), networking (Cluster.spec.clusterNetwork),
 * certificateKey (Cluster API distributes the certificates itself).
 */
const KUBEADM_ONLY: Record<string, (doc: Record<string, unknown>) => Record<string, unknown>> = {
  ClusterConfiguration: ({ apiVersion: _a, kind: _k, kubernetesVersion: _v, networking: _n, ...rest }) => rest,
  InitConfiguration: ({ apiVersion: _a, kind: _k, ...rest }) => rest,
  JoinConfiguration: ({ apiVersion: _a, kind: _k, controlPlane, ...rest }) => {
    if (controlPlane === undefined) return rest;
    const { certificateKey: _c, ...cp } = controlPlane as Record<string, unknown>;
    return { ...rest, controlPlane: cp };
  },
};
const PART = { ClusterConfiguration: 'clusterConfiguration', InitConfiguration: 'initConfiguration', JoinConfiguration: 'joinConfiguration' } as const;

function kubeadmDocs(file: string): Record<string, unknown>[] {
  const docs = parseAllDocuments(readFileSync(join(KUBEADM, file), 'utf8'), { strict: true, uniqueKeys: true }) as unknown as { errors: unknown[]; toJS(): Record<string, unknown> }[];
  for (const d of docs) expect(d.errors).toStrictEqual([]);
  return docs.map((d) => d.toJS());
}

describe('examples/kubeadm', () => {
  const node1 = load(join(KUBEADM, 'ballast-control-plane-1.yaml'));
  const joiner = load(join(KUBEADM, 'ballast-control-plane.yaml'));
  const vipEndpoint = `${node1.vips[0]}:${node1.apiserver.port}`;

  it('the ballast configurations load; node 1 and the joiners differ only in priority', () => {
    expect([node1.vrrp!.priority, joiner.vrrp!.priority]).toStrictEqual([110, 100]);
    expect({ ...node1, vrrp: { ...node1.vrrp, priority: 0 } }).toStrictEqual({ ...joiner, vrrp: { ...joiner.vrrp, priority: 0 } });
    expect(node1.localEndpoint!.addresses.map((a) => `${a.host}:${a.port}`)).toStrictEqual(['127.0.0.1:7443']);
    expect(node1.discovery!.kubeconfig).toBe('/etc/kubernetes/admin.conf');
  });

  it('ballast-static-pod.yaml is what `ballast manifest static-pod` renders for both, and a valid Pod', () => {
    const file = parse(readFileSync(join(KUBEADM, 'ballast-static-pod.yaml'), 'utf8')) as { spec: { containers: { image: string }[] } };
    validateBuiltin(file);
    const image = file.spec.containers[0]!.image;
    expect(file).toStrictEqual(plain(staticPod(node1, { configPath: NODE_CONFIG, image })));
    expect(file).toStrictEqual(plain(staticPod(joiner, { configPath: NODE_CONFIG, image })));
  });

  it('the worker configuration renders a valid ConfigMap and DaemonSet', () => {
    const path = join(KUBEADM, 'ballast-worker.yaml');
    const objects = daemonSet(load(path), readFileSync(path, 'utf8'), { configPath: NODE_CONFIG, image: 'ballast:0.1.0' });
    for (const o of objects) validateBuiltin(o);
  });

  it('the kubeadm files are valid by the KubeadmConfigSpec schema, and point at the VIP', () => {
    const init = kubeadmDocs('kubeadm-init.yaml');
    const joinCp = kubeadmDocs('kubeadm-join-control-plane.yaml');
    const joinWorker = kubeadmDocs('kubeadm-join-worker.yaml');
    expect(init.map((d) => d.kind)).toStrictEqual(['InitConfiguration', 'ClusterConfiguration']);
    expect([...joinCp, ...joinWorker].map((d) => d.kind)).toStrictEqual(['JoinConfiguration', 'JoinConfiguration']);
    for (const d of [...init, ...joinCp, ...joinWorker]) {
      expect(d.apiVersion).toBe('kubeadm.k8s.io/v1beta4');
      const kind = d.kind as keyof typeof PART;
      validateKubeadmConfigPart(PART[kind], KUBEADM_ONLY[kind]!(d));
    }
    const cluster = init[1] as { controlPlaneEndpoint: string; apiServer: { certSANs: string[] } };
    expect(cluster.controlPlaneEndpoint).toBe(vipEndpoint);
    expect(cluster.apiServer.certSANs).toStrictEqual([node1.vips[0], '127.0.0.1', 'localhost']);
    for (const j of [...joinCp, ...joinWorker] as { discovery: { bootstrapToken: { apiServerEndpoint: string } } }[]) {
      expect(j.discovery.bootstrapToken.apiServerEndpoint).toBe(vipEndpoint);
    }
    const local = (init[0] as { localAPIEndpoint: { advertiseAddress: string; bindPort: number } }).localAPIEndpoint;
    const joinLocal = (joinCp[0] as { controlPlane: { localAPIEndpoint: { advertiseAddress: string; bindPort: number } } }).controlPlane.localAPIEndpoint;
    const seeds = node1.apiserver.backends.map((b) => `${b.host}:${b.port}`);
    expect(seeds).toContain(`${local.advertiseAddress}:${local.bindPort}`);
    expect(seeds).toContain(`${joinLocal.advertiseAddress}:${joinLocal.bindPort}`);
  });

  it('a kubeadm file with a field the schema does not have is refused (the validation is not vacuous)', () => {
    const cluster = kubeadmDocs('kubeadm-init.yaml')[1]!;
    expect(() => validateKubeadmConfigPart('clusterConfiguration', KUBEADM_ONLY.ClusterConfiguration!({ ...cluster, apiServer: { certSANS: ['x'] } }))).toThrow(/additional properties \(certSANS\)/);
    expect(() => validateKubeadmConfigPart('clusterConfiguration', cluster)).toThrow(/additional properties \((apiVersion|kind|kubernetesVersion|networking)\)/);
  });
});

describe('examples/cluster-api', () => {
  const kcpText = readFileSync(join(CAPI, 'kubeadmcontrolplane.yaml'), 'utf8');
  const kcp = parse(kcpText) as {
    spec: { kubeadmConfigSpec: { files: { path: string; content: string }[]; clusterConfiguration: { apiServer: { certSANs: string[] } } } };
  };
  const file = (path: string): string => {
    const f = kcp.spec.kubeadmConfigSpec.files.find((x) => x.path === path);
    expect(f, path).toBeDefined();
    return f!.content;
  };

  it('the KubeadmControlPlane is valid by Cluster API v1.14\'s v1beta2 schema', () => {
    validateKubeadmControlPlane(kcp);
    expect(() => validateKubeadmControlPlane({ ...kcp, spec: { ...kcp.spec, kubeadmConfigSpec: { ...kcp.spec.kubeadmConfigSpec, files: [{ path: '/x', content: '' }] } } })).toThrow(/content must NOT have fewer than 1 characters/);
  });

  it('its files carry examples/cluster-api/ballast.yaml and the static pod `ballast manifest static-pod` renders for it', () => {
    const configPath = join(CAPI, 'ballast.yaml');
    expect(file(NODE_CONFIG)).toBe(readFileSync(configPath, 'utf8'));
    const config = load(configPath);
    const pod = parse(file('/etc/kubernetes/manifests/ballast.yaml')) as { spec: { containers: { image: string }[] } };
    validateBuiltin(pod);
    expect(pod).toStrictEqual(plain(staticPod(config, { configPath: NODE_CONFIG, image: pod.spec.containers[0]!.image })));
    expect(kcp.spec.kubeadmConfigSpec.clusterConfiguration.apiServer.certSANs).toStrictEqual([config.vips[0], '127.0.0.1', 'localhost']);
  });

  it('every example file is named in its guide', () => {
    for (const [dir, doc] of [
      [KUBEADM, 'kubeadm.md'],
      [CAPI, 'cluster-api.md'],
    ] as const) {
      const text = readFileSync(join(ROOT, 'docs', doc), 'utf8');
      for (const f of readdirSync(dir)) expect(text, `${f} in docs/${doc}`).toContain(f);
    }
  });
});
