/**
 * An upgrade of the package on the VIP's holder moves nothing (docs/operations.md, "A restart is
 * not an uninstall, and not a failover"). Two nodes booting a real systemd (lab/systemd-node.ts:
 * systemd-nspawn of a debootstrapped Debian 12 in the lab node's network namespace), the package
 * built from this tree installed with apt and run by its unit: n1 (priority 150) holds the VIP,
 * n2 (100) is its Backup, adverts every 100 ms, vrrp.restartHold the default 8 s. A client in the
 * lab's client namespace makes a new TLS request through the VIP every 20 ms, and 20 watch-like
 * connections through the VIP send a request every ~200 ms (lab/clients/watchers.ts), while on n1:
 *   1. `apt install` of a newer version: its postinst's try-restart is a systemd restart job, the
 *      agent restarts in place (a hand-off, the new process resumes as master);
 *   2. `apt install --reinstall` of the same version: the same;
 *   3. the same reinstall, the new process SIGKILLed as soon as systemd forked it: the unit's
 *      Restart= starts another one after RestartSec, which resumes from the hand-off note;
 *   4. the same with a drop-in Restart=no (the agent does not come back at all): n2 takes over
 *      within the Master_Down_Interval the hand-off announced (RFC 9568 §6.1: 3 × restartHold / 4
 *      + Skew_Time) and no earlier than it less a margin, and n1's copy of the VIP expires.
 * Each: 0 VIP moves (the holders, sampled every ~50 ms, are [n1] in every sample; n2 logged no
 * state change to master), 0 failed requests, 0 watch connections lost or failed. The figures
 * (moves, longest time with no holder, failed requests, connections lost, signal to resumed) are
 * printed. Lab prefix bsysu, subnet 163. Needs root, BPF, systemd-nspawn and the cached (or a
 * debootstrapped) root file system.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import type { Lab } from '../../lab/lab.js';
import { startClients, type LabClients } from '../../lab/cluster.js';
import {
  bootSystemdNodes,
  debDependencies,
  ensureRootfs,
  stopSystemdNodes,
  systemdNodesMissing,
  type JournalEntry,
  type SystemdNode,
} from '../../lab/systemd-node.js';
import { buildPackageVersion, ensureArtefacts, type Artefacts } from '../support/artefacts.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';
import { handOffIntervalCs } from '../../src/vrrp/engine.js';
import { masterDownIntervalMs } from '../../src/vrrp/state.js';

const PREFIX = 'bsysu';
const SUBNET = 163;
const PRIORITIES = [150, 100];
const CONFIG = '/etc/ballast/ballast.yaml';
const CA = '/etc/kubernetes/pki/ca.crt';
const WATCHERS = 20;
const HANDED_OFF = 'handed off for a restart in place: the VIPs stay, the Backups wait for the next process';

const why = needs('root', 'bpf') ?? systemdNodesMissing();

/** What one upgrade step cost the clients. */
interface StepFigures {
  moves: number;
  longestNoHolderMs: number;
  samples: number;
  failedRequests: number;
  requests: number;
  watchReconnects: number;
  watchFailedRequests: number;
  resumedAfterMs: number | null;
  /** systemd's fork of the new process to its READY=1 (ExecMainStart → ActiveEnter), ms */
  readyMs: number;
}

describe.skipIf(why)(
  'upgrades of the package on the VIP holder, under a real systemd (systemd-nspawn, Debian 12): nothing moves (root; skipped otherwise)',
  () => {
    let art: Artefacts;
    let next: string;
    let nextVersion: string;
    let lab: Lab | undefined;
    let nodes: SystemdNode[] = [];
    let clients: LabClients | undefined;
    const figures: string[] = [];

    const configFor = (i: number): string =>
      stringify({
        interface: 'eth0',
        vrrp: { vrid: 51, priority: PRIORITIES[i], advertisementInterval: '100ms' },
        vips: [lab!.vip4],
        apiserver: {
          port: 6443,
          backends: lab!.nodes.map((n) => `${n.ipv4}:6443`),
          health: { caFile: CA, interval: '200ms', timeout: '200ms', rise: 2, fall: 2 },
        },
        admin: { listen: '127.0.0.1:9641' },
      });

    beforeAll(async () => {
      art = ensureArtefacts();
      nextVersion = `${art.version}+upgrade1`;
      next = buildPackageVersion(nextVersion);
      const rootfs = ensureRootfs({ packages: debDependencies(art.deb) });
      lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 2, ipv6: false, apiservers: true });
      nodes = await bootSystemdNodes(lab, { rootfs });
      await Promise.all(
        nodes.map(async (n, i) => {
          await n.install(art.deb);
          await n.exec(['mkdir', '-p', '/etc/kubernetes/pki']);
          n.copyIn(lab!.ca.certFile, CA);
          n.writeFile(CONFIG, configFor(i), 0o600);
        }),
      );
      // n2 first: n1 then preempts it once, before anything is measured
      for (const n of [nodes[1]!, nodes[0]!]) {
        const r = await n.exec(['systemctl', 'enable', '--now', 'ballast'], { allowFail: true, timeoutMs: 60_000 });
        if (r.code !== 0) throw new Error(`systemctl enable --now ballast on ${n.machine}: ${r.stderr}`);
      }
      await waitFor(
        () => lab!.holders(lab!.vip4),
        (hs) => hs.length === 1 && hs[0] === lab!.nodes[0],
        { timeoutMs: 15_000, what: 'n1 the only holder' },
      );
      // both settled: every backend ready on both, so no later policy change moves anything
      for (const n of nodes) {
        await waitFor(
          async () => (await n.exec(['systemctl', 'show', '-p', 'StatusText', '--value', 'ballast'])).stdout.trim(),
          (t) => t.endsWith('2 of 2 backends ready'),
          { timeoutMs: 15_000, intervalMs: 200, what: `${n.machine} with 2 of 2 backends ready` },
        );
      }
      clients = await startClients(lab, { url: `https://${lab.vip4}:6443/version`, watches: WATCHERS, probeEveryMs: 20, durationMs: 240_000 });
    }, 600_000);

    afterAll(async () => {
      if (figures.length > 0) console.log(`package upgrades on the holder:\n  ${figures.join('\n  ')}`);
      await clients?.stop();
      try {
        await stopSystemdNodes(nodes);
      } finally {
        await lab?.teardown();
      }
    }, 120_000);

    /**
     * Runs `step` while sampling the VIP's holders, then waits until n1's agent resumed and the
     * Backup is on the configured interval again, plus a second; returns what the clients saw.
     */
    const measure = async (what: string, step: () => Promise<void>): Promise<StepFigures> => {
      const [n1, n2] = nodes as [SystemdNode, SystemdNode];
      const l = lab!;
      const samples: { t: number; holders: string[] }[] = [];
      let sampling = true;
      const sampler = (async () => {
        // bounded: at most 2 minutes of samples
        const until = Date.now() + 120_000;
        while (sampling && Date.now() < until) {
          samples.push({ t: Date.now(), holders: (await l.holders(l.vip4)).map((n) => n.name) });
          await sleep(30);
        }
      })();
      const c = clients!;
      const fromProbe = c.prober.results().length;
      const before = { ...c.report() };
      const n2Before = (await n2.journal('ballast')).length;
      const since = Date.now();
      try {
        await step();
        // the resumed master advertises our interval again: n2 says so (engine.ts watchMaster)
        await waitFor(
          async () => (await n2.journal('ballast')).slice(n2Before),
          (es) => es.some((e) => e.MESSAGE.includes('the master advertises our advertisement interval again')),
          { timeoutMs: 15_000, intervalMs: 200, what: `${what}: n2 back on the 100 ms interval` },
        );
        await sleep(1000);
      } finally {
        sampling = false;
        await sampler;
      }
      const journal1 = await n1.journal('ballast');
      const handOff = journal1.filter((e) => e.MESSAGE.includes(HANDED_OFF) && realtimeMs(e) >= since).at(-1);
      const resumed = journal1.filter((e) => e.MESSAGE.includes('"reason":"resumed"') && realtimeMs(e) >= since).at(-1);
      const n2Masters = (await n2.journal('ballast')).slice(n2Before).filter((e) => /"msg":"state change"/.test(e.MESSAGE) && /"to":"master"/.test(e.MESSAGE));
      const probes = c.prober.results().slice(fromProbe);
      const show = (await n1.exec(['systemctl', 'show', '-p', 'ExecMainStartTimestampMonotonic', '-p', 'ActiveEnterTimestampMonotonic', 'ballast'])).stdout;
      const mono = (k: string): number => Number(/^(\w+)=(\d+)$/m.exec(show.split('\n').find((l) => l.startsWith(`${k}=`)) ?? '')?.[2] ?? NaN);
      const w = c.report();
      let moves = 0;
      let noHolderFrom: number | null = null;
      let longestNoHolderMs = 0;
      let last: string | null = 'n1';
      for (const s of samples) {
        if (s.holders.length === 0) noHolderFrom ??= s.t;
        else {
          if (noHolderFrom !== null) longestNoHolderMs = Math.max(longestNoHolderMs, s.t - noHolderFrom);
          noHolderFrom = null;
        }
        const h = s.holders.length === 1 ? s.holders[0]! : null;
        if (h !== null && h !== last) moves++;
        if (h !== null) last = h;
      }
      const f: StepFigures = {
        moves: moves + n2Masters.length,
        longestNoHolderMs,
        samples: samples.length,
        failedRequests: probes.filter((p) => !p.ok).length,
        requests: probes.length,
        watchReconnects: w.reconnects - before.reconnects,
        watchFailedRequests: w.failedRequests - before.failedRequests,
        resumedAfterMs: handOff && resumed ? Math.round(realtimeMs(resumed) - realtimeMs(handOff)) : null,
        readyMs: Math.round((mono('ActiveEnterTimestampMonotonic') - mono('ExecMainStartTimestampMonotonic')) / 1000),
      };
      figures.push(
        `${what}: ${f.moves} VIP moves, longest with no holder ${f.longestNoHolderMs} ms (${f.samples} samples), ${f.failedRequests} of ${f.requests} requests failed, ${f.watchReconnects} of ${WATCHERS} watches lost (${f.watchFailedRequests} failed watch requests), hand-off → resumed ${f.resumedAfterMs ?? '?'} ms, new process fork → READY=1 ${f.readyMs} ms`,
      );
      expect(handOff, `${what}: the old process handed off`).toBeDefined();
      expect(resumed, `${what}: the new process resumed as master`).toBeDefined();
      return f;
    };

    /**
     * `apt install --reinstall` of the newer package on `n`, its new agent process SIGKILLed as soon
     * as systemd forked it (a MainPID other than `old`, polled; bounded: 60 s). Resolves, once apt
     * is done, with the killed PID (0: none seen).
     */
    const reinstallKillingNewProcess = async (n: SystemdNode, old: number): Promise<number> => {
      const apt = n.install(next, { reinstall: true, timeoutMs: 120_000 });
      let killed = 0;
      const until = Date.now() + 60_000;
      while (killed === 0 && Date.now() < until) {
        const pid = await n.mainPid('ballast');
        if (pid !== 0 && pid !== old) {
          await n.exec(['kill', '-KILL', String(pid)], { allowFail: true });
          killed = pid;
        }
      }
      await apt;
      return killed;
    };

    const nothingMoved = (f: StepFigures): void => {
      expect({
        moves: f.moves,
        longestNoHolderMs: f.longestNoHolderMs,
        failedRequests: f.failedRequests,
        watchReconnects: f.watchReconnects,
        watchFailedRequests: f.watchFailedRequests,
      }).toStrictEqual({
        moves: 0,
        longestNoHolderMs: 0,
        failedRequests: 0,
        watchReconnects: 0,
        watchFailedRequests: 0,
      });
      expect(f.samples).toBeGreaterThan(20);
      expect(f.requests).toBeGreaterThan(20);
    };

    it('apt install of a newer version on the holder: 0 VIP moves, 0 failed requests, 0 connections lost', async () => {
      const n1 = nodes[0]!;
      const pid = await n1.mainPid('ballast');
      const f = await measure(`upgrade ${art.version} → ${nextVersion}`, async () => {
        await n1.install(next);
      });
      expect((await n1.exec(['dpkg-query', '-W', '-f=${Version}', 'ballast'])).stdout).toBe(nextVersion);
      expect((await n1.exec(['ballast', '--version'])).stdout.trim()).toBe(nextVersion);
      // the agent was restarted (a new process), by a restart job
      expect(await n1.mainPid('ballast')).not.toBe(pid);
      expect((await n1.journal('ballast')).some((e) => e.MESSAGE.includes('systemd is restarting this service'))).toBe(true);
      nothingMoved(f);
    }, 180_000);

    it('apt install --reinstall on the holder: the same', async () => {
      const f = await measure(`reinstall ${nextVersion}`, async () => {
        await nodes[0]!.install(next, { reinstall: true });
      });
      nothingMoved(f);
    }, 180_000);

    it('a reinstall whose new process is SIGKILLed at once: Restart= brings another within the hold, which resumes: the same', async () => {
      const n1 = nodes[0]!;
      const old = await n1.mainPid('ballast');
      let killed = 0;
      const f = await measure(`reinstall ${nextVersion}, the new process SIGKILLed`, async () => {
        killed = await reinstallKillingNewProcess(n1, old);
        // systemd's Restart=on-failure starts another after RestartSec (1 s)
        await waitFor(
          () => n1.mainPid('ballast'),
          (p) => p !== 0 && p !== killed,
          { timeoutMs: 15_000, intervalMs: 100, what: 'systemd to start the agent again' },
        );
      });
      expect(killed).not.toBe(0);
      const journal = await n1.journal('ballast');
      // the killed one did not resume; the next one did, from the note it left
      expect(journal.filter((e) => e._PID === String(killed) && e.MESSAGE.includes('"reason":"resumed"'))).toStrictEqual([]);
      nothingMoved(f);
    }, 180_000);

    it('the same with Restart=no (the agent never comes back): n2 takes over within the bound the hand-off announced', async () => {
      const [n1, n2] = nodes as [SystemdNode, SystemdNode];
      await n1.exec(['mkdir', '-p', '/etc/systemd/system/ballast.service.d']);
      n1.writeFile('/etc/systemd/system/ballast.service.d/no-restart.conf', '[Service]\nRestart=no\n');
      await n1.exec(['systemctl', 'daemon-reload']);
      const old = await n1.mainPid('ballast');
      const n2Before = (await n2.journal('ballast')).length;
      const killed = await reinstallKillingNewProcess(n1, old);
      expect(killed).not.toBe(0);
      const handOff = (await n1.journal('ballast')).filter((e) => e.MESSAGE.includes(HANDED_OFF)).at(-1)!;
      // vrrp.restartHold 8 s (the default): 200 cs announced; n2 (priority 100) waits 3 × 2 s + Skew_Time
      const bound = masterDownIntervalMs(PRIORITIES[1]!, handOffIntervalCs(8000, 10));
      const taken = await waitFor(
        async () => (await n2.journal('ballast')).slice(n2Before).find((e) => /"msg":"state change"/.test(e.MESSAGE) && /"to":"master"/.test(e.MESSAGE)),
        (e) => e !== undefined,
        { timeoutMs: bound + 5000, intervalMs: 100, what: 'n2 master' },
      );
      const after = realtimeMs(taken!) - realtimeMs(handOff);
      figures.push(
        `reinstall with Restart=no, the new process SIGKILLed: n2 master ${Math.round(after)} ms after the hand-off (its announced Master_Down_Interval ${bound.toFixed(1)} ms)`,
      );
      expect(after).toBeGreaterThan(bound - 500);
      expect(after).toBeLessThan(bound + 500);
      await waitFor(
        () => lab!.holders(lab!.vip4),
        (hs) => hs.length === 1 && hs[0] === lab!.nodes[1],
        { timeoutMs: 5000, intervalMs: 100, what: "n2 the only holder (n1's copy expired)" },
      );
    }, 180_000);
  },
);

/** An entry's wall-clock time, ms since the epoch. */
function realtimeMs(e: JournalEntry): number {
  return Number(e.__REALTIME_TIMESTAMP) / 1000;
}
