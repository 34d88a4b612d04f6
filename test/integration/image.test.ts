/**
 * The OCI image (scripts/image.sh), for real: its SBOM against its own root filesystem, then the
 * image run with podman (crun, test-owned storage) inside lab node n1's network namespace, with
 * only the capabilities the agent needs, as one of three nodes beside two agents run from the
 * tree. Adverts every 100 ms; n1 has the highest priority.
 *
 * Mounts (what the static pod mounts, minus what this config does not use):
 *   /etc/ballast      read-only  the config and the lab CA it names
 *   /run/ballast      read-write lock files (test-owned dir, not the machine's)
 *   /var/lib/ballast  read-write the last-known backends file (test-owned dir)
 * Not mounted: /sys/fs/bpf and /sys/fs/cgroup (only `dataplane.local: ebpf` uses them; this
 * config has no local endpoint), /etc/kubernetes/pki (no discovery). No --pid=host: the agent
 * looks at no other process; /proc/net follows the network namespace it joins.
 */
import { execFileSync, type ChildProcess } from 'node:child_process';
import { copyFileSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runProber, type Lab, type LabNode } from '../../lab/lab.js';
import { agentConfig, cliPath, startAgent, waitForHolder, type LabAgent } from '../../lab/cluster.js';
import type { ElectionStatusDocument } from '../../src/observe/status.js';
import { sbomGaps, type SpdxDocument } from '../../scripts/image-sbom.js';
import { AGENT_CAPABILITIES_EBPF_FREE } from '../../src/manifest/capabilities.js';
import { ensureArtefacts, type Artefacts } from '../support/artefacts.js';
import { Podman } from '../support/podman.js';
import { needs, startLab, waitFor } from '../support/index.js';

const PREFIX = 'bimg';
const SUBNET = 102;
const ADVERT_MS = 100;
/** RFC 9568 §6.1: Skew_Time = ((256 - Priority) * Master_Adver_Interval) / 256, Master_Down_Interval = 3 * interval + Skew_Time. */
const skewMs = (priority: number): number => ((256 - priority) * ADVERT_MS) / 256;
const masterDownMs = (priority: number): number => 3 * ADVERT_MS + skewMs(priority);
/**
 * What `podman run` itself takes before the agent's first line runs (a Go program opening the
 * storage, conmon, crun, the overlay mount) plus the agent's own start (Node, the config, the
 * admin endpoint, the election): measured 1.5–1.7 s here when quiet, 6.3 s once on a cold
 * cache with a load average of 13 on the 2 cores; the bound leaves room.
 */
const CONTAINER_START_MARGIN_MS = 10_000;
/** From the agent's first log line to its election running: preflight, the nftables table, the engine's sockets. */
const AGENT_START_MARGIN_MS = 3000;
/** podman stop's own start (it opens the storage before it signals) and the signal's delivery. */
const STOP_MARGIN_MS = 3000;
/** What the manifests grant an agent without the eBPF local endpoint (this config has none): measured by pkg. */
const CAPABILITIES = AGENT_CAPABILITIES_EBPF_FREE;
/** capabilities(7) numbers. */
const CAP_NUMBER: Record<string, number> = { CAP_NET_ADMIN: 12, CAP_NET_RAW: 13, CAP_SYS_ADMIN: 21, CAP_BPF: 39 };

describe.skipIf(needs('root', 'nft'))('the OCI image (root; skipped otherwise)', () => {
  let art: Artefacts;
  let podman: Podman | undefined;
  let lab: Lab | undefined;
  let work: string;
  const agents: LabAgent[] = [];
  let container: ChildProcess | undefined;
  let containerOutput = '';
  const ref = (): string => `localhost/ballast:${art.version}`;
  /** What beforeAll made. */
  const made = (): { lab: Lab; podman: Podman } => {
    if (!lab || !podman) throw new Error('beforeAll did not finish');
    return { lab, podman };
  };

  let loadMs = 0;
  beforeAll(async () => {
    const t0 = Date.now();
    art = ensureArtefacts();
    console.log(`artefacts ${art.built ? 'built' : 'reused'} in ${art.built ? Math.round(art.buildMs) : Date.now() - t0} ms`);
    work = mkdtempSync(join(tmpdir(), 'ballast-image-test-'));
    // the image loads while the lab and its stand-in apiservers start
    const tLoad = Date.now();
    podman = new Podman();
    const loading = podman.run(['load', '--quiet', '--input', art.image], { timeoutMs: 120_000 }).then(() => (loadMs = Date.now() - tLoad));
    const starting = startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 3, ipv6: false, apiservers: true }).then((l) => (lab = l));
    // both settle before either failure is thrown, so afterAll finds what was made
    const [l, s] = await Promise.allSettled([loading, starting]);
    for (const r of [l, s]) if (r.status === 'rejected') throw r.reason;
  }, 180_000);

  afterAll(async () => {
    container?.kill('SIGKILL');
    await Promise.all(agents.map((a) => a.stop('SIGKILL').catch(() => undefined)));
    try {
      await podman?.destroy();
    } finally {
      rmSync(work, { recursive: true, force: true });
      await lab?.teardown();
    }
  }, 60_000);

  it('has the labels, entry point and no shell, and its SBOM lists every Debian package and npm dependency inside', async () => {
    const { podman } = made();
    const [image] = JSON.parse((await podman.run(['image', 'inspect', ref()])).stdout) as {
      Config: { Entrypoint: string[]; Cmd: string[]; User: string; Labels: Record<string, string> };
      Size: number;
      RootFS: { Layers: string[] };
      GraphDriver: { Name: string; Data: { UpperDir: string } };
    }[];
    const c = image!.Config;
    expect(c.Entrypoint).toEqual(['/usr/lib/ballast/bin/node', '/usr/lib/ballast/dist/src/cli.js']);
    expect(c.Cmd).toEqual(['run', '--config', '/etc/ballast/ballast.yaml']);
    expect(c.User).toBe('root');
    for (const k of ['title', 'description', 'version', 'revision', 'created', 'source', 'licenses', 'vendor'])
      expect(c.Labels[`org.opencontainers.image.${k}`], k).toBeTruthy();
    expect(c.Labels['org.opencontainers.image.version']).toBe(art.version);
    // one layer, which podman's overlay storage holds unpacked: the root filesystem as containers see it
    expect(image!.RootFS.Layers).toHaveLength(1);
    expect(image!.GraphDriver.Name).toBe('overlay');
    const rootfs = image!.GraphDriver.Data.UpperDir;
    for (const sh of ['bin/sh', 'usr/bin/sh', 'bin/bash', 'usr/bin/bash', 'bin/dash', 'usr/bin/dash', 'bin/busybox'])
      expect(() => lstatSync(join(rootfs, sh)), sh).toThrow(/ENOENT/);
    const doc = JSON.parse(readFileSync(art.sbom, 'utf8')) as SpdxDocument;
    expect(doc.spdxVersion).toBe('SPDX-2.3');
    const nodeVersion = execFileSync(join(rootfs, 'usr/lib/ballast/bin/node'), ['--version'], { encoding: 'utf8' }).trim().replace(/^v/, '');
    const ownFiles = ['etc/passwd', 'etc/group', 'etc/ld.so.conf', 'etc/ld.so.cache', 'etc/ballast/ballast.yaml', 'usr/share/doc/ballast/copyright'];
    expect(sbomGaps(doc, rootfs, { app: join(rootfs, 'usr/lib/ballast'), ownFiles, nodeVersion })).toEqual([]);
    // the programs ballast execs came with their packages
    const names = doc.packages.map((p) => p.name);
    for (const p of ['nftables', 'conntrack', 'conntrackd', 'libc6', 'libstdc++6', 'libbpf1', 'libelf1', 'zlib1g']) expect(names).toContain(p);
    const libc = doc.packages.find((p) => p.name === 'libc6')!;
    expect(libc.externalRefs?.[0]?.referenceLocator).toBe(`pkg:deb/debian/libc6@${libc.versionInfo}?arch=amd64`);
    const debs = doc.packages.filter((p) => p.SPDXID.startsWith('SPDXRef-Package-deb-')).length;
    console.log(`image: ${image!.Size} bytes, SBOM ${doc.packages.length - 1} packages (${debs} Debian)`);
  });

  it('runs in n1 with only its capabilities: elects, balances to every stand-in apiserver, hands the VIP over on podman stop', async () => {
    const { lab, podman } = made();
    // the two agents from the tree first: n2 holds the VIP
    const [n1, n2, n3] = lab.nodes as [LabNode, LabNode, LabNode];
    agents.push(await startAgent(lab, n2, { priority: 100, balance: true }), await startAgent(lab, n3, { priority: 50, balance: true }));
    await waitForHolder(lab, lab.vip4, 'n2');

    // n1's config, with the lab CA where the container sees it
    const etc = join(work, 'etc-ballast');
    mkdirSync(etc);
    copyFileSync(lab.ca.certFile, join(etc, 'ca.crt'));
    writeFileSync(join(etc, 'ballast.yaml'), agentConfig(lab, n1, { priority: 150, balance: true }).replaceAll(lab.ca.certFile, '/etc/ballast/ca.crt'));
    for (const d of ['run-ballast', 'var-lib-ballast']) mkdirSync(join(work, d));
    const name = `${PREFIX}-n1`;
    const tRun = Date.now();
    container = podman.spawn([
      'run',
      '--rm',
      '--name',
      name,
      '--pull',
      'never',
      '--network',
      `ns:/run/netns/${n1.netns}`,
      '--cgroups',
      'disabled',
      ...podman.ulimits(),
      '--cap-drop',
      'all',
      ...CAPABILITIES.flatMap((c) => ['--cap-add', c]),
      '--volume',
      `${etc}:/etc/ballast:ro`,
      '--volume',
      `${join(work, 'run-ballast')}:/run/ballast`,
      '--volume',
      `${join(work, 'var-lib-ballast')}:/var/lib/ballast`,
      ref(),
    ]);
    container.stdout!.on('data', (b: Buffer) => (containerOutput += b.toString()));
    container.stderr!.on('data', (b: Buffer) => (containerOutput += b.toString()));
    const exited = new Promise<number | null>((resolve) => container!.once('exit', (code) => resolve(code)));
    let gone: number | null | undefined;
    void exited.then((c) => (gone = c));

    // elects: highest priority, so master one Master_Down_Interval after it starts listening
    const electBound = masterDownMs(150) + CONTAINER_START_MARGIN_MS;
    await waitFor(
      async () => {
        if (gone !== undefined) throw new Error(`the container exited (${gone}):\n${containerOutput}`);
        return lab.holders(lab.vip4);
      },
      (hs) => hs.length === 1 && hs[0]!.name === 'n1',
      { timeoutMs: electBound, intervalMs: 20, what: 'n1 (the container) to be the only holder of the VIP' },
    );
    const electMs = Date.now() - tRun;
    // the agent's own start, from its first log line (pino: time in ms since the epoch)
    const firstLine = containerOutput.split('\n').find((l) => l.startsWith('{'));
    const agentStartMs = Date.parse((JSON.parse(firstLine ?? '{}') as { time?: string }).time ?? '') - tRun;
    expect(agentStartMs).toBeGreaterThan(0);
    // once the agent runs, the election is the protocol's: one Master_Down_Interval, plus the
    // agent's own start after its first line (preflight, nft, the engine's sockets)
    expect(electMs - agentStartMs).toBeLessThanOrEqual(masterDownMs(150) + AGENT_START_MARGIN_MS);

    // exactly the granted capabilities, effective and bounding (proc(5) CapEff / CapBnd)
    const pid = Number((await podman.run(['inspect', '--format', '{{.State.Pid}}', name])).stdout.trim());
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const mask = CAPABILITIES.reduce((m, c) => m | (1n << BigInt(CAP_NUMBER[c]!)), 0n);
    expect(BigInt(`0x${/^CapEff:\s*(\w+)/m.exec(status)![1]}`)).toBe(mask);
    expect(BigInt(`0x${/^CapBnd:\s*(\w+)/m.exec(status)![1]}`)).toBe(mask);

    // balances like the others: its nftables table DNATs VIP:6443 to every ready stand-in
    const st = async (): Promise<ElectionStatusDocument> => {
      const r = await lab.exec(n1.netns, [process.execPath, cliPath(), 'status', '--json', '--admin', '127.0.0.1:9641'], { timeoutMs: 5000 });
      return JSON.parse(r.stdout) as ElectionStatusDocument;
    };
    await waitFor(st, (s) => s.backends.length === 3 && s.backends.every((b) => b.healthy), { timeoutMs: 5000, what: 'every backend up on n1' });
    const rules = (await lab.exec(n1.netns, ['nft', 'list', 'table', 'ip', 'ballast'])).stdout;
    for (const n of lab.nodes) expect(rules).toContain(`dnat to ${n.ipv4}:6443`);
    const sum = await runProber(lab, { url: `https://${lab.vip4}:6443/version`, intervalMs: 20, durationMs: 1500, timeoutMs: 500 }).done;
    expect(sum.failed).toBe(0);
    expect(Object.keys(sum.nodes).sort()).toEqual(['n1', 'n2', 'n3']);
    for (const n of ['n1', 'n2', 'n3']) expect(sum.nodes[n]).toBeGreaterThan(5);

    // podman stop: SIGTERM, the agent resigns (priority 0), n2 takes over after its Skew_Time
    const tStop = Date.now();
    const stopping = podman.run(['stop', '--time', '10', name], { timeoutMs: 30_000 });
    await waitForHolder(lab, lab.vip4, 'n2', masterDownMs(100) + STOP_MARGIN_MS);
    const moveMs = Date.now() - tStop;
    await stopping;
    expect(await exited).toBe(0);
    expect(containerOutput).toContain('resigning');

    // no leftovers: the VIP and the table gone from n1, the container gone, the image removable
    expect((await lab.addresses(n1)).map((a) => a.address)).not.toContain(lab.vip4);
    expect((await lab.exec(n1.netns, ['nft', 'list', 'table', 'ip', 'ballast'], { allowFail: true })).code).not.toBe(0);
    expect((await podman.run(['ps', '--all', '--quiet'])).stdout.trim()).toBe('');
    await podman.run(['rmi', ref()]);
    expect((await podman.run(['images', '--quiet'])).stdout.trim()).toBe('');
    console.log(
      `image in the lab: podman load ${loadMs} ms; podman run → VIP held ${electMs} ms (the agent's first log line after ${agentStartMs} ms; Master_Down_Interval ${masterDownMs(150).toFixed(1)} ms); ` +
        `podman stop → n2 master ${moveMs} ms (Skew_Time(100) ${skewMs(100).toFixed(1)} ms); prober ${sum.ok} ok over ${Object.keys(sum.nodes).join(', ')}`,
    );
  }, 90_000);
});
