/**
 * `ballast manifest` (src/manifest/): each generated object validated against the Kubernetes
 * schema, the YAML output, --output's atomic write, the command line's exit statuses.
 *
 * And the files of examples/kubeadm and examples/cluster-api (docs/kubeadm.md, docs/cluster-api.md)
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
import {
  chmodSync,
  closeSync,
  existsSync,
  fsyncSync,
  lstatSync,
  statSync,
  symlinkSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command } from 'commander';
import { afterAll, describe, expect, it } from 'vitest';
import { parse, parseAllDocuments, stringify } from 'yaml';
import { ConfigError, loadConfig, parseConfig, type Config, type ConfigNote } from '../../src/config/index.js';
import { exitCodeOf, isBallastError } from '../../src/errors.js';
import { AGENT_CAPABILITIES, AGENT_CAPABILITIES_EBPF_FREE } from '../../src/manifest/capabilities.js';
import { IMAGE_NAME, imageRefProblem } from '../../src/manifest/image.js';
import { systemdUnit } from '../../src/manifest/systemd.js';
import { addManifestCommand, writeAtomic, type AtomicWriteOps } from '../../src/commands/manifest.js';
import { daemonSet, kubeconfigReferences, rbac, staticPod, toYaml } from '../../src/manifest/kubernetes.js';
import { validateBuiltin, validateKubeadmConfigPart, validateKubeadmControlPlane } from '../support/kubernetes-schema.js';

const dir = mkdtempSync(join(tmpdir(), 'bman-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const CP = {
  vrrp: { vrid: 51 },
  vips: ['10.0.0.100'],
  apiserver: { backends: ['10.0.0.11:6443', '10.0.0.12:6443'], health: { caFile: '/etc/kubernetes/pki/ca.crt' } },
  localEndpoint: {},
  discovery: { kubeconfig: '/etc/kubernetes/admin.conf' },
};
const WORKER = { localEndpoint: {}, apiserver: CP.apiserver, discovery: { inCluster: true } };
const cfg = (doc: object): Config => parseConfig(stringify(doc), 'test.yaml');
const OPTS = { configPath: '/etc/ballast/ballast.yaml', image: 'localhost/ballast:9.9.9' };

/** The hostPath mounts of a pod spec as `path (ro|rw)`, in order. */
function mounts(spec: {
  containers: { volumeMounts?: { name: string; mountPath: string; readOnly?: boolean; mountPropagation?: string }[] }[];
  volumes?: { name: string; hostPath?: { path: string; type?: string } }[];
}): string[] {
  const c = spec.containers[0]!;
  return (c.volumeMounts ?? []).map((m) => {
    const v = spec.volumes!.find((x) => x.name === m.name)!;
    expect(v.hostPath?.path ?? '(not hostPath)').toBe(v.hostPath ? m.mountPath : '(not hostPath)');
    return `${m.mountPath} ${m.readOnly ? 'ro' : 'rw'}${v.hostPath?.type ? ` ${v.hostPath.type}` : ''}${m.mountPropagation ? ` ${m.mountPropagation}` : ''}`;
  });
}

describe('ballast manifest static-pod', () => {
  it('is a valid Pod (Kubernetes OpenAPI schema) with the control plane settings', () => {
    const pod = staticPod(cfg(CP), OPTS);
    validateBuiltin(pod);
    expect(pod.metadata).toMatchObject({ name: 'ballast', namespace: 'kube-system' });
    const spec = pod.spec!;
    expect(spec.hostNetwork).toBe(true);
    expect(spec.priorityClassName).toBe('system-node-critical');
    expect(spec.automountServiceAccountToken).toBe(false);
    expect(spec.serviceAccountName).toBeUndefined();
    expect(spec.terminationGracePeriodSeconds).toBe(15);
    const c = spec.containers[0]!;
    expect(c.image).toBe('localhost/ballast:9.9.9');
    expect(c.command).toBeUndefined();
    expect(c.args).toStrictEqual(['run', '--config', '/etc/ballast/ballast.yaml']);
    expect(c.securityContext).toStrictEqual({
      runAsUser: 0,
      runAsGroup: 0,
      privileged: false,
      allowPrivilegeEscalation: false,
      capabilities: { add: AGENT_CAPABILITIES.map((x) => x.replace(/^CAP_/, '')), drop: ['ALL'] },
    });
    expect(c.securityContext!.capabilities!.add!.every((x) => /^[A-Z_]+$/.test(x) && !x.startsWith('CAP_'))).toBe(true);
    const probe = { httpGet: { host: '127.0.0.1', port: 9641, path: '/healthz', scheme: 'HTTP' } };
    expect(c.livenessProbe).toMatchObject(probe);
    expect(c.startupProbe).toMatchObject(probe);
    expect(c.readinessProbe).toBeUndefined();
    expect(c.resources).toStrictEqual({ requests: { cpu: '50m', memory: '64Mi' } });
    // admin.conf's directory covers the pki; the eBPF local endpoint brings bpffs and the cgroup
    expect(mounts(spec as never)).toStrictEqual([
      '/etc/ballast ro Directory',
      '/etc/kubernetes ro DirectoryOrCreate',
      '/run/ballast rw DirectoryOrCreate',
      '/sys/fs/bpf rw Directory HostToContainer',
      '/sys/fs/cgroup ro Directory',
      '/var/lib/ballast rw DirectoryOrCreate',
    ]);
  });

  it('mounts /sys/fs/bpf and /sys/fs/cgroup only for the eBPF local endpoint; the files the configuration names; the probe on admin.listen', () => {
    const proxy = staticPod(cfg({ ...CP, discovery: undefined, dataplane: { local: 'proxy' }, admin: { listen: '0.0.0.0:9700' } }), OPTS);
    validateBuiltin(proxy);
    expect(mounts(proxy.spec as never)).toStrictEqual([
      '/etc/ballast ro Directory',
      '/etc/kubernetes/pki ro DirectoryOrCreate',
      '/run/ballast rw DirectoryOrCreate',
      '/var/lib/ballast rw DirectoryOrCreate',
    ]);
    expect(proxy.spec!.containers[0]!.livenessProbe!.httpGet).toMatchObject({ host: '127.0.0.1', port: 9700 });
    // no CAP_BPF without the eBPF programs
    expect(proxy.spec!.containers[0]!.securityContext!.capabilities!.add).toStrictEqual(AGENT_CAPABILITIES_EBPF_FREE.map((x) => x.replace(/^CAP_/, '')));
    expect(AGENT_CAPABILITIES).toContain('CAP_BPF');
    expect(AGENT_CAPABILITIES_EBPF_FREE).not.toContain('CAP_BPF');
    const v6 = staticPod(
      cfg({
        vrrp: { vrid: 51, auth: { keyFile: join(dir, 'vrrp.key') } },
        vips: ['fd00::100'],
        apiserver: { backends: ['[fd00::11]:6443'], health: { caFile: '/etc/ballast/pki/ca.crt', tokenFile: '/srv/tokens/ballast' } },
        discovery: { kubeconfig: '/etc/ballast/discovery.conf', lastKnownFile: '/var/lib/ballast/last/backends.json' },
        admin: { listen: '[::]:9641' },
      }),
      { ...OPTS, configPath: '/etc/ballast/node.yaml' },
    );
    validateBuiltin(v6);
    expect(v6.spec!.containers[0]!.livenessProbe!.httpGet).toMatchObject({ host: '::1', port: 9641 });
    expect(v6.spec!.containers[0]!.args).toStrictEqual(['run', '--config', '/etc/ballast/node.yaml']);
    expect(mounts(v6.spec as never)).toStrictEqual([
      '/etc/ballast ro Directory',
      '/etc/kubernetes/pki ro DirectoryOrCreate',
      '/run/ballast rw DirectoryOrCreate',
      '/srv/tokens ro DirectoryOrCreate',
      `${dir} ro DirectoryOrCreate`,
      '/var/lib/ballast rw DirectoryOrCreate',
    ]);
  });

  it('refuses discovery.inCluster: a static pod has no service account', () => {
    let err: unknown;
    try {
      staticPod(cfg({ ...CP, discovery: { inCluster: true } }), OPTS);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).issues.map((i) => i.path)).toStrictEqual(['discovery.inCluster']);
    expect(exitCodeOf(err)).toBe(2);
  });

  it('the schema check is not vacuous: a wrong type, a missing field and a misspelt field are refused', () => {
    const pod = staticPod(cfg(CP), OPTS);
    expect(() => validateBuiltin({ ...pod, spec: { ...pod.spec, hostNetwork: 'true' } })).toThrow(/hostNetwork/);
    expect(() => validateBuiltin({ ...pod, spec: { ...pod.spec, containers: [{ ...pod.spec!.containers[0], name: undefined }] } })).toThrow(/name/);
    // a misspelt field is the type check's to refuse (npm run typecheck): the schema allows unknown fields
    const typo: NonNullable<typeof pod.spec> = {
      containers: [],
      // @ts-expect-error not a PodSpec field
      hostNetwrok: true,
    };
    expect(() => validateBuiltin({ ...pod, spec: typo })).not.toThrow();
    expect(() =>
      validateBuiltin({ ...pod, spec: { ...pod.spec, containers: [{ ...pod.spec!.containers[0], resources: { requests: { cpu: 'fifty' } } }] } }),
    ).toThrow(/cpu/);
  });
});

describe('ballast manifest daemonset', () => {
  it('is a ConfigMap with the file as written and a valid DaemonSet on every node but the control plane', () => {
    const text = stringify(WORKER);
    const [cm, ds] = daemonSet(cfg(WORKER), text, OPTS);
    validateBuiltin(cm);
    validateBuiltin(ds);
    expect(cm.data).toStrictEqual({ 'ballast.yaml': text });
    expect(ds.metadata!.namespace).toBe('kube-system');
    const spec = ds.spec!;
    expect(spec.updateStrategy).toStrictEqual({ type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 1 } });
    expect(spec.selector.matchLabels).toStrictEqual(spec.template.metadata!.labels);
    const pod = spec.template.spec!;
    expect(pod.tolerations).toStrictEqual([{ operator: 'Exists' }]);
    expect(pod.affinity!.nodeAffinity!.requiredDuringSchedulingIgnoredDuringExecution!.nodeSelectorTerms).toStrictEqual([
      { matchExpressions: [{ key: 'node-role.kubernetes.io/control-plane', operator: 'DoesNotExist' }] },
    ]);
    expect(pod.hostNetwork).toBe(true);
    expect(pod.serviceAccountName).toBe('ballast');
    expect(pod.automountServiceAccountToken).toBe(true);
    const c = pod.containers[0]!;
    expect(c.securityContext!.capabilities!.drop).toStrictEqual(['ALL']);
    expect(c.volumeMounts![0]).toStrictEqual({ name: 'config', mountPath: '/etc/ballast', readOnly: true });
    expect(pod.volumes![0]).toStrictEqual({
      name: 'config',
      configMap: { name: 'ballast-local-endpoint', items: [{ key: 'ballast.yaml', path: 'ballast.yaml' }] },
    });
    expect(mounts({ ...pod, containers: [{ ...c, volumeMounts: c.volumeMounts!.slice(1) }] } as never)).toStrictEqual([
      '/etc/kubernetes/pki ro DirectoryOrCreate',
      '/run/ballast rw DirectoryOrCreate',
      '/sys/fs/bpf rw Directory HostToContainer',
      '/sys/fs/cgroup ro Directory',
      '/var/lib/ballast rw DirectoryOrCreate',
    ]);
    // with a kubeconfig on the node: no service account
    const [, ds2] = daemonSet(cfg({ ...WORKER, discovery: { kubeconfig: '/etc/kubernetes/kubelet.conf' } }), text, OPTS);
    validateBuiltin(ds2);
    expect(ds2.spec!.template.spec!.serviceAccountName).toBeUndefined();
    expect(ds2.spec!.template.spec!.automountServiceAccountToken).toBe(false);
  });

  it('refuses a configuration with an election or without a local endpoint, and a file inside the ConfigMap directory', () => {
    const paths = (doc: object): string[] => {
      try {
        daemonSet(cfg(doc), '', OPTS);
      } catch (e) {
        expect(exitCodeOf(e)).toBe(2);
        return (e as ConfigError).issues.map((i) => i.path);
      }
      return [];
    };
    expect(paths({ ...CP })).toStrictEqual(['vrrp']);
    expect(paths({ vrrp: { vrid: 51 }, vips: ['10.0.0.100'] })).toStrictEqual(['vrrp', 'localEndpoint']);
    const inside = { ...WORKER, apiserver: { ...WORKER.apiserver, health: { caFile: '/etc/ballast/ca.crt' } } };
    expect(paths(inside)).toStrictEqual(['(document)']);
    // the flag that moves the ConfigMap's directory is --node-config (--config is where it is read now)
    expect(() => daemonSet(cfg(inside), '', OPTS)).toThrow(/keep the files it names outside \/etc\/ballast, or give --node-config another path/);
    expect(daemonSet(cfg(inside), '', { ...OPTS, configPath: '/etc/ballast-worker/ballast.yaml' })[0].data).toStrictEqual({ 'ballast.yaml': '' });
  });
});

describe('ballast manifest rbac', () => {
  it('is get/list/watch on EndpointSlices of namespace default for the ServiceAccount, and nothing more', () => {
    const [sa, role, binding] = rbac({ users: ['ballast'], groups: ['ballast:discovery'] });
    for (const o of [sa, role, binding]) validateBuiltin(o);
    expect(sa.metadata).toMatchObject({ name: 'ballast', namespace: 'kube-system' });
    expect(role.metadata!.namespace).toBe('default');
    expect(role.rules).toStrictEqual([{ apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['get', 'list', 'watch'] }]);
    expect(binding.roleRef).toStrictEqual({ apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: role.metadata!.name });
    expect(binding.subjects).toStrictEqual([
      { kind: 'ServiceAccount', name: 'ballast', namespace: 'kube-system' },
      { kind: 'User', apiGroup: 'rbac.authorization.k8s.io', name: 'ballast' },
      { kind: 'Group', apiGroup: 'rbac.authorization.k8s.io', name: 'ballast:discovery' },
    ]);
    expect(rbac()[2].subjects).toHaveLength(1);
  });
});

describe('YAML output', () => {
  it('is strict YAML 1.2 that parses back to equal objects', () => {
    const objects = [staticPod(cfg(CP), OPTS), ...daemonSet(cfg(WORKER), `# a comment: with "quotes"\n${stringify(WORKER)}`, OPTS), ...rbac()];
    const text = toYaml(objects, 'line one\nline two');
    expect(text.startsWith('# line one\n# line two\n---\n')).toBe(true);
    const docs = parseAllDocuments(text, { strict: true, uniqueKeys: true, version: '1.2' });
    expect(Array.isArray(docs)).toBe(true);
    for (const d of docs as ReturnType<typeof parseAllDocuments> & unknown[]) {
      expect(d.errors).toStrictEqual([]);
      expect(d.warnings).toStrictEqual([]);
    }
    expect((docs as { toJS(): unknown }[]).map((d) => d.toJS())).toStrictEqual(JSON.parse(JSON.stringify(objects)));
  });
});

describe('--output: written atomically', () => {
  const ops = (over: Partial<AtomicWriteOps>): AtomicWriteOps => ({
    openSync,
    writeSync: (fd, d, o, l) => writeSync(fd, d, o, l),
    fsyncSync,
    closeSync,
    renameSync,
    unlinkSync,
    ...over,
  });
  it('replaces an existing file only once the new one is complete; a failure leaves it and no temporary file', () => {
    const d = join(dir, 'out');
    mkdirSync(d);
    const f = join(d, 'ballast.yaml');
    writeFileSync(f, 'old\n');
    chmodSync(f, 0o600);
    writeAtomic(f, 'new\n');
    expect(readFileSync(f, 'utf8')).toBe('new\n');
    // the existing file's mode is kept; a new file is 0644 (less the umask)
    expect(statSync(f).mode & 0o7777).toBe(0o600);
    const fresh = join(d, 'fresh.yaml');
    writeAtomic(fresh, 'x\n');
    expect(statSync(fresh).mode & 0o7777).toBe(0o644 & ~process.umask());
    // a symbolic link is replaced by the file; what it pointed to is untouched
    const linked = join(d, 'linked.yaml');
    symlinkSync(fresh, linked);
    writeAtomic(linked, 'via link\n');
    expect([lstatSync(linked).isFile(), readFileSync(linked, 'utf8'), readFileSync(fresh, 'utf8')]).toStrictEqual([true, 'via link\n', 'x\n']);
    rmSync(fresh);
    rmSync(linked);
    // the disk fills up half-way through the write
    let calls = 0;
    const opened: string[] = [];
    const full = ops({
      openSync: (p, flags, mode) => {
        opened.push(String(p));
        return openSync(p, flags, mode);
      },
      writeSync: (fd, data, off, len) => {
        if (calls++ === 0) return writeSync(fd, data, off, Math.min(len, 4));
        throw Object.assign(new Error('no space left on device'), { code: 'ENOSPC' });
      },
    });
    let err: unknown;
    try {
      writeAtomic(f, 'x'.repeat(100), full);
    } catch (e) {
      err = e;
    }
    expect(isBallastError(err) && err.code).toBe('BALLAST_E_OUTPUT');
    expect(exitCodeOf(err)).toBe(1);
    expect((err as Error).message).toBe(`cannot write ${f}: ENOSPC no space left on device`);
    expect(readFileSync(f, 'utf8')).toBe('new\n');
    expect(readdirSync(d)).toStrictEqual(['ballast.yaml']);
    // a hidden name in the same directory: the kubelet skips hidden files in its manifests directory
    expect(opened).toHaveLength(1);
    expect(opened[0]).toMatch(new RegExp(`^${d}/\\.ballast\\.yaml\\.[0-9a-f]{12}\\.tmp$`));
    // a real failure: the target is a directory (rename fails), and a directory that does not exist
    const sub = join(d, 'sub');
    mkdirSync(join(sub, 'inner'), { recursive: true });
    expect(() => writeAtomic(join(sub, 'inner'), 'x')).toThrow(/cannot write .*inner/);
    expect(readdirSync(sub)).toStrictEqual(['inner']);
    // the target named, the code once, not the temporary file
    expect(() => writeAtomic(join(d, 'missing', 'f.yaml'), 'x')).toThrow(
      new RegExp(`^cannot write ${join(d, 'missing', 'f.yaml')}: ENOENT no such file or directory \\(open\\)$`),
    );
    expect(existsSync(join(d, 'missing'))).toBe(false);
    expect(readdirSync(d).sort()).toStrictEqual(['ballast.yaml', 'sub']);
  });
});

describe('the command line', () => {
  /** Runs `ballast manifest ARGS` in-process: the exit status (as commands/index.ts computes it), stdout, stderr. */
  async function manifest(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
    let out = '';
    let errText = '';
    let result: Promise<number> = Promise.resolve(-1);
    const program = new Command().exitOverride().configureOutput({ writeOut: () => undefined, writeErr: () => undefined });
    const keep = (r: Promise<number>): void => {
      result = r;
    };
    addManifestCommand(program, keep, '9.9.9', { stdout: (s) => (out += s), stderr: (s) => (errText += s) });
    await program.parseAsync(['node', 'ballast', 'manifest', ...args]);
    const code = await result.catch((e: unknown) => {
      if (e instanceof ConfigError) errText += e.format();
      return exitCodeOf(e);
    });
    return { code, stdout: out, stderr: errText };
  }
  const write = (name: string, doc: object | string): string => {
    const p = join(dir, name);
    writeFileSync(p, typeof doc === 'string' ? doc : stringify(doc));
    return p;
  };

  it('static-pod: the default image localhost/ballast:<version> (the name scripts/image.sh gives it), --node-config, notes for the files to wait for, --output', async () => {
    const p = write('cp.yaml', CP);
    const r = await manifest('static-pod', '--config', p, '--node-config', '/etc/ballast/ballast.yaml');
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/apiserver\.health\.caFile: note: .* does not exist yet/);
    const [pod] = parseAllDocuments(r.stdout) as unknown as { toJS(): { spec: { containers: { image: string; args: string[] }[] } } }[];
    expect(pod!.toJS().spec.containers[0]!.image).toBe('localhost/ballast:9.9.9');
    expect(pod!.toJS()).toStrictEqual(
      JSON.parse(JSON.stringify(staticPod(cfg(CP), { configPath: '/etc/ballast/ballast.yaml', image: 'localhost/ballast:9.9.9' }))),
    );
    // the name image.sh tags the built image with (its `ref=NAME:$version` line)
    const sh = /^ref=([^:\s]+):\$version$/m.exec(readFileSync(join(import.meta.dirname, '..', '..', 'scripts', 'image.sh'), 'utf8'));
    expect(sh?.[1]).toBe(IMAGE_NAME);
    expect(IMAGE_NAME).toBe('localhost/ballast');
    const out = join(dir, 'pod.yaml');
    const w = await manifest('static-pod', '--config', p, '--image', 'reg.example/ballast:1', '--output', out);
    expect(w.code).toBe(0);
    expect(w.stdout).toBe('');
    expect(readFileSync(out, 'utf8')).toMatch(/image: reg\.example\/ballast:1\n[\s\S]*- --config\n\s+- .*cp\.yaml\n/);
  });

  it('an invalid configuration: the problems as `ballast validate` prints them, exit 2, nothing written', async () => {
    const bad = write('bad.yaml', { vrrp: { vrid: 300 }, vips: ['10.0.0.100'] });
    for (const sub of ['static-pod', 'daemonset', 'systemd']) {
      const out = join(dir, `${sub}.out`);
      writeFileSync(out, 'before\n');
      const r = await manifest(sub, '--config', bad, '--output', out);
      expect(r.code).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr).toContain(`ballast: invalid configuration in ${bad} (1 problem):\n  line 2: vrrp.vrid:`);
      expect(readFileSync(out, 'utf8')).toBe('before\n');
      const fresh = join(dir, `${sub}.fresh`);
      expect((await manifest(sub, '--config', bad, '--output', fresh)).code).toBe(2);
      expect(existsSync(fresh)).toBe(false);
    }
    expect((await manifest('static-pod', '--config', join(dir, 'nope.yaml'))).code).toBe(2);
    // valid, but not for a DaemonSet: the same exit status
    const r = await manifest('daemonset', '--config', write('cp2.yaml', CP));
    expect([r.code, r.stdout]).toStrictEqual([2, '']);
    expect(r.stderr).toContain(`ballast: invalid configuration in ${join(dir, 'cp2.yaml')} (1 problem):\n  vrrp: the DaemonSet runs the node-local endpoint`);
  });

  it('daemonset, rbac and systemd', async () => {
    const w = write('worker.yaml', `# workers\n${stringify(WORKER)}`);
    const ds = await manifest('daemonset', '--config', w);
    expect(ds.code).toBe(0);
    const objs = (parseAllDocuments(ds.stdout) as unknown as { toJS(): { kind: string; data?: Record<string, string> } }[]).map((d) => d.toJS());
    expect(objs.map((o) => o.kind)).toStrictEqual(['ConfigMap', 'DaemonSet']);
    expect(objs[0]!.data).toStrictEqual({ 'worker.yaml': readFileSync(w, 'utf8') });
    const rb = await manifest('rbac', '--user', 'ballast', '--user', 'other');
    expect(rb.code).toBe(0);
    const binding = (parseAllDocuments(rb.stdout) as unknown as { toJS(): { kind: string; subjects?: { name: string }[] } }[])
      .map((d) => d.toJS())
      .find((o) => o.kind === 'RoleBinding')!;
    expect(binding.subjects!.map((s) => s.name)).toStrictEqual(['ballast', 'ballast', 'other']);
    // an empty name (name: "") is refused, naming the flag; nothing written
    const out = join(dir, 'rbac.out');
    for (const [args, flags] of [
      [['--group', ''], '--group'],
      [['--user', 'a', '--user', ''], '--user'],
      [['--user', '', '--group', ''], '--user --group'],
    ] as const) {
      const e = await manifest('rbac', ...args, '--output', out);
      expect([e.code, e.stdout]).toStrictEqual([2, '']);
      expect(e.stderr.match(/--(user|group): is empty/g)?.join(' ')).toBe(
        flags
          .split(' ')
          .map((f) => `${f}: is empty`)
          .join(' '),
      );
      expect(existsSync(out)).toBe(false);
    }
    const sd = await manifest('systemd', '--config', write('sd.yaml', CP), '--node-config', '/etc/ballast/ballast.yaml');
    expect(sd).toStrictEqual({ code: 0, stdout: systemdUnit({ configPath: '/etc/ballast/ballast.yaml' }), stderr: expect.stringContaining('note') });
    expect(sd.stdout).toContain('/etc/ballast/ballast.yaml');
    expect((await manifest('systemd', '--config', write('sd.yaml', CP), '--node-config', 'relative.yaml')).code).toBe(2);
  });

  it('static-pod: the directories of the files a readable kubeconfig refers to are mounted read-only; an unreadable one gets a note', async () => {
    const k = join(dir, 'kube', 'kubelet.conf');
    mkdirSync(join(dir, 'kube', 'rel'), { recursive: true });
    writeFileSync(
      k,
      stringify({
        apiVersion: 'v1',
        kind: 'Config',
        'current-context': 'x',
        contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
        clusters: [
          { name: 'c', cluster: { server: 'https://10.0.0.100:6443', 'certificate-authority': '/etc/kubernetes/pki/ca.crt' } },
          { name: 'd', cluster: { server: 'https://x', 'certificate-authority-data': 'AAAA' } },
        ],
        users: [
          {
            name: 'u',
            user: { 'client-certificate': '/var/lib/kubelet/pki/kubelet-client-current.pem', 'client-key': '/var/lib/kubelet/pki/kubelet-client-current.pem' },
          },
          { name: 't', user: { tokenFile: 'rel/token' } },
        ],
      }),
    );
    expect(kubeconfigReferences(readFileSync(k, 'utf8'), k)).toStrictEqual([
      '/etc/kubernetes/pki/ca.crt',
      join(dir, 'kube', 'rel', 'token'),
      '/var/lib/kubelet/pki/kubelet-client-current.pem',
    ]);
    const p = write('kc.yaml', { ...CP, discovery: { kubeconfig: k } });
    const r = await manifest('static-pod', '--config', p, '--node-config', '/etc/ballast/ballast.yaml');
    expect(r.code).toBe(0);
    const spec = (parseAllDocuments(r.stdout)[0] as unknown as { toJS(): { spec: Parameters<typeof mounts>[0] } }).toJS().spec;
    expect(mounts(spec)).toStrictEqual([
      '/etc/ballast ro Directory',
      '/etc/kubernetes/pki ro DirectoryOrCreate',
      '/run/ballast rw DirectoryOrCreate',
      '/sys/fs/bpf rw Directory HostToContainer',
      '/sys/fs/cgroup ro Directory',
      // the kubeconfig's directory (its rel/token is below it: covered)
      `${join(dir, 'kube')} ro DirectoryOrCreate`,
      '/var/lib/ballast rw DirectoryOrCreate',
      // the kubelet's client certificate and key, named by the kubeconfig
      '/var/lib/kubelet/pki ro DirectoryOrCreate',
    ]);
    expect(r.stderr).not.toContain('cannot read it now');
    // not there yet (before kubeadm init): its directory only, and a note saying so
    const missing = join(dir, 'kube-later', 'admin.conf');
    const q = write('kc2.yaml', { ...CP, discovery: { kubeconfig: missing } });
    const m = await manifest('static-pod', '--config', q, '--node-config', '/etc/ballast/ballast.yaml');
    expect(m.code).toBe(0);
    expect(m.stderr).toContain(`${missing}: note: cannot read it now (ENOENT): only its directory ${join(dir, 'kube-later')} is mounted`);
    const spec2 = (parseAllDocuments(m.stdout)[0] as unknown as { toJS(): { spec: Parameters<typeof mounts>[0] } }).toJS().spec;
    expect(mounts(spec2)).toContain(`${join(dir, 'kube-later')} ro DirectoryOrCreate`);
    expect(mounts(spec2)).not.toContain('/var/lib/kubelet/pki ro DirectoryOrCreate');
  });

  it('--image is checked against the image reference grammar: exit 2 naming --image, nothing written', async () => {
    const p = write('img.yaml', CP);
    const w = write('img-worker.yaml', WORKER);
    const good = [
      'localhost/ballast:0.1.0',
      'ballast',
      'reg.example:5000/team/ballast_x__y.z-w:v1.2_3',
      '[::1]:5000/ballast:1',
      `ballast@sha256:${'a'.repeat(64)}`,
      `reg.example/ballast:1@sha256:${'0'.repeat(64)}`,
    ];
    for (const ref of good) expect([ref, imageRefProblem(ref)]).toStrictEqual([ref, null]);
    const bad = [
      '',
      'Bad Image!!',
      'Ballast:1',
      'ballast:',
      'ballast:-x',
      `ballast:${'t'.repeat(129)}`,
      'ballast@sha256:abc',
      'a//b',
      'ballast_:1',
      '/ballast',
      `${'a'.repeat(256)}:1`,
    ];
    for (const ref of bad) expect([ref, imageRefProblem(ref)]).toStrictEqual([ref, expect.any(String)]);
    for (const [sub, cfgFile] of [
      ['static-pod', p],
      ['daemonset', w],
    ] as const) {
      for (const ref of ['', 'Bad Image!!']) {
        const out = join(dir, `img-${sub}.out`);
        const r = await manifest(sub, '--config', cfgFile, '--image', ref, '--output', out);
        expect([r.code, r.stdout]).toStrictEqual([2, '']);
        expect(r.stderr).toContain(`--image: ${JSON.stringify(ref)} `);
        expect(existsSync(out)).toBe(false);
      }
    }
  });

  it('systemd: a % in the path is written %% (a literal percent to systemd); a newline is refused naming the flag, exit 2', async () => {
    mkdirSync(join(dir, 'pct%n'), { recursive: true });
    const p = write('pct%n/c%n.yaml', CP);
    const r = await manifest('systemd', '--config', p);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`ExecStart=/usr/bin/ballast run --config ${p.replace(/%/g, '%%')}\n`);
    const nl = await manifest('systemd', '--config', p, '--node-config', '/etc/ballast/a\nb.yaml');
    expect([nl.code, nl.stdout]).toStrictEqual([2, '']);
    expect(nl.stderr).toContain('--node-config: "/etc/ballast/a\\nb.yaml" holds a newline');
    mkdirSync(join(dir, 'nl\nd'), { recursive: true });
    const q = write('nl\nd/c.yaml', CP);
    const c = await manifest('systemd', '--config', q);
    expect([c.code, c.stdout]).toStrictEqual([2, '']);
    expect(c.stderr).toContain('--config: ');
    expect(c.stderr).not.toMatch(/TypeError|    at /);
  });
});

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
  const docs = parseAllDocuments(readFileSync(join(KUBEADM, file), 'utf8'), { strict: true, uniqueKeys: true }) as unknown as {
    errors: unknown[];
    toJS(): Record<string, unknown>;
  }[];
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
    expect(() => validateKubeadmConfigPart('clusterConfiguration', KUBEADM_ONLY.ClusterConfiguration!({ ...cluster, apiServer: { certSANS: ['x'] } }))).toThrow(
      /additional properties \(certSANS\)/,
    );
    expect(() => validateKubeadmConfigPart('clusterConfiguration', cluster)).toThrow(
      /additional properties \((apiVersion|kind|kubernetesVersion|networking)\)/,
    );
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

  it("the KubeadmControlPlane is valid by Cluster API v1.14's v1beta2 schema", () => {
    validateKubeadmControlPlane(kcp);
    expect(() =>
      validateKubeadmControlPlane({
        ...kcp,
        spec: { ...kcp.spec, kubeadmConfigSpec: { ...kcp.spec.kubeadmConfigSpec, files: [{ path: '/x', content: '' }] } },
      }),
    ).toThrow(/content must NOT have fewer than 1 characters/);
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
