/**
 * The Debian package on nodes that boot a real systemd: two lab nodes, each a
 * systemd-nspawn container of a debootstrapped Debian 12 sharing the lab node's network namespace
 * (lab/systemd-node.ts), the .deb built from this tree installed with apt inside, the packaged
 * unit started by systemctl. What an operator meets:
 *   - apt installs from the file alone (no download); `systemctl enable --now` returns at READY=1
 *     with the STATUS= line; the holder is the higher priority;
 *   - the eBPF local endpoint attaches on a fresh boot (bpffs empty) under the unit's sandbox, and
 *     a `systemctl restart` keeps it: no request to 127.0.0.1:7443 from inside the node fails;
 *   - `systemctl reload` of a good file exits 0, of a bad one non-zero with the agent still
 *     running the old configuration; the refusal is in `journalctl -u ballast -p warning`;
 *   - `vrrp.realtimePriority` gives the `vrrp-pacer` thread SCHED_FIFO under the unit;
 *   - the watchdog kills and restarts a SIGSTOPped agent within WatchdogSec;
 *   - `apt-get remove` and `apt-get purge` leave exactly what Debian's rules say.
 * Lab prefix bsysd, subnet 160. Needs root, BPF, systemd-nspawn and debootstrap (or the cached
 * root file system; the first build downloads Debian 12's packages from this machine's mirror).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import type { Lab } from '../../lab/lab.js';
import { bootSystemdNodes, debDependencies, ensureRootfs, stopSystemdNodes, systemdNodesMissing, type SystemdNode } from '../../lab/systemd-node.js';
import { WATCHDOG_SEC } from '../../src/manifest/systemd.js';
import { masterDownIntervalMs } from '../../src/vrrp/state.js';
import { ensureArtefacts, type Artefacts } from '../support/artefacts.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'bsysd';
const SUBNET = 160;
const PRIORITIES = [150, 100];
const INTERVAL_MS = 100;
const CONFIG = '/etc/ballast/ballast.yaml';
const CA = '/etc/kubernetes/pki/ca.crt';
/** systemd's RestartSec= of the unit (src/manifest/systemd.ts). */
const RESTART_SEC = 1;
/** The client's pace inside the node during a restart: a new connection every 20 ms. */
const PROBE_EVERY_MS = 20;

const why = needs('root', 'bpf') ?? systemdNodesMissing();

/** The client loop run inside a node (the package's own node binary runs it): HTTPS GET /readyz of `url` with a new connection every `every` ms until `stopFile` exists or `maxMs` passed; prints a JSON summary. */
const PROBE_JS = `
import { request } from 'node:https';
import { existsSync, writeFileSync } from 'node:fs';
const [url, stopFile, startedFile, maxMs, every] = process.argv.slice(2);
const t0 = Date.now();
const sum = { ok: 0, failed: 0, errors: [], firstAt: null, lastAt: null };
const once = () => new Promise((resolve) => {
  const at = Date.now() - t0;
  const req = request(url, { rejectUnauthorized: false, agent: false, timeout: 1000 }, (res) => {
    res.resume();
    res.on('end', () => { if (res.statusCode === 200) sum.ok++; else { sum.failed++; sum.errors.push({ at, status: res.statusCode }); } resolve(); });
  });
  req.on('timeout', () => req.destroy(new Error('timeout')));
  req.on('error', (e) => { sum.failed++; if (sum.errors.length < 20) sum.errors.push({ at, err: e.code ?? e.message }); resolve(); });
  req.end();
});
const max = Math.ceil(Number(maxMs) / Number(every)) + 1;
for (let i = 0; i < max && Date.now() - t0 < Number(maxMs) && !existsSync(stopFile); i++) {
  const next = Date.now() + Number(every);
  await once();
  if (i === 0) writeFileSync(startedFile, '1');
  const wait = next - Date.now();
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
}
sum.durationMs = Date.now() - t0;
process.stdout.write(JSON.stringify(sum) + '\\n');
`;

interface ProbeSummary {
  ok: number;
  failed: number;
  errors: unknown[];
  durationMs: number;
}

/** The agent's warning that the eBPF local endpoint fell back to the proxy (matched by its start: the wording after it may change). */
const isEbpfFallback = (message: string): boolean => /eBPF/.test(message) && /unavailable|fall(s|ing)? ?back|proxy instead/i.test(message);

describe.skipIf(why)(
  'the package on nodes booting a real systemd (systemd-nspawn, Debian 12): apt, the unit, reload, watchdog, eBPF, real time, journal, remove (root; skipped otherwise)',
  () => {
    let art: Artefacts;
    let lab: Lab | undefined;
    let nodes: SystemdNode[] = [];

    /** `systemctl show -p …` of ballast on a node, as a record. */
    const show = async <K extends string>(n: SystemdNode, ...props: K[]): Promise<Record<K, string>> => {
      const r = await n.exec(['systemctl', 'show', ...props.flatMap((p) => ['-p', p]), 'ballast']);
      const got = new Map(
        r.stdout
          .trim()
          .split('\n')
          .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
      );
      return Object.fromEntries(props.map((p) => [p, got.get(p) ?? ''])) as Record<K, string>;
    };
    const status = async (n: SystemdNode): Promise<{ state: string; local: { mode: string } } | null> => {
      const r = await n.exec(['ballast', 'status', '--json'], { allowFail: true, timeoutMs: 5000 });
      return r.code === 0 ? (JSON.parse(r.stdout) as { state: string; local: { mode: string } }) : null;
    };
    const configFor = (i: number, extra: { realtimePriority?: number } = {}): string =>
      stringify({
        interface: 'eth0',
        vrrp: { vrid: 51, priority: PRIORITIES[i], advertisementInterval: `${INTERVAL_MS}ms`, ...extra },
        vips: [lab!.vip4],
        apiserver: {
          port: 6443,
          backends: lab!.nodes.map((n) => `${n.ipv4}:6443`),
          health: { caFile: CA, interval: '200ms', timeout: '200ms', rise: 2, fall: 2 },
        },
        dataplane: { vip: 'nftables', local: 'ebpf' },
        localEndpoint: { address: '127.0.0.1:7443' },
        admin: { listen: '127.0.0.1:9641' },
      });

    beforeAll(async () => {
      art = ensureArtefacts();
      if (art.built) console.log(`systemd nodes: built ${art.deb} in ${(art.buildMs / 1000).toFixed(1)} s`);
      const rootfs = ensureRootfs({ packages: debDependencies(art.deb) });
      console.log(
        `systemd nodes: root file system ${rootfs.dir} ${rootfs.built ? `built by debootstrap in ${(rootfs.buildMs / 1000).toFixed(1)} s` : 'from the cache'}`,
      );
      lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 2, ipv6: false, apiservers: true });
      nodes = await bootSystemdNodes(lab, { rootfs });
      console.log(`systemd nodes: booted ${nodes.map((n) => `${n.machine} in ${n.bootMs.toFixed(0)} ms (${n.bootState})`).join(', ')}`);
    }, 600_000);

    afterAll(async () => {
      try {
        const stops = await stopSystemdNodes(nodes);
        if (stops.length > 0)
          console.log(
            `systemd nodes: stopped ${stops.map((s, i) => `${nodes[i]!.machine} in ${s.ms.toFixed(0)} ms (${s.poweredOff ? 'powered off' : 'KILLED: no poweroff within 20 s'})`).join(', ')}`,
          );
      } finally {
        await lab?.teardown();
      }
    }, 60_000);

    it("boots systemd as PID 1 of each node, in the lab node's network namespace, with no failed unit", async () => {
      for (const [i, n] of nodes.entries()) {
        expect(n.bootState).toBe('running');
        const r = await n.exec([
          'sh',
          '-c',
          'cat /proc/1/comm; hostname; ip -4 -o addr show dev eth0 | cut -d" " -f2,7; cat /proc/sys/net/ipv4/ip_forward; findmnt -n -o FSTYPE /sys/fs/bpf',
        ]);
        expect(r.stdout.split('\n').map((l) => l.trim().replace(/\s+/g, ' '))).toEqual([
          'systemd',
          n.machine,
          `eth0 ${lab!.nodes[i]!.ipv4}/24`,
          '1',
          'bpf',
          '',
        ]);
      }
    });

    it('apt-get installs the .deb inside each node from the file alone (no download)', async () => {
      const rs = await Promise.all(nodes.map((n) => n.install(art.deb)));
      for (const [i, r] of rs.entries()) {
        expect(r.stdout, 'apt fetched something').not.toMatch(/^Get:\d+ (https?|ftp):/m);
        expect(r.stdout).toMatch(/^The following NEW packages will be installed:\n {2}ballast\n/m);
        const n = nodes[i]!;
        expect((await n.exec(['dpkg-query', '-W', '-f=${Status} ${Version}', 'ballast'])).stdout).toBe(`install ok installed ${art.version}`);
        expect((await n.exec(['ballast', '--version'])).stdout.trim()).toBe(art.version);
        await n.exec(['mkdir', '-p', '/etc/kubernetes/pki']);
        n.copyIn(lab!.ca.certFile, CA);
        n.writeFile(CONFIG, configFor(i), 0o600);
        expect((await n.exec(['ballast', 'validate', '--config', CONFIG])).stdout).toMatch(/: ok/);
      }
    }, 120_000);

    it('systemctl enable --now returns at READY=1 with the STATUS= line; the higher priority holds the VIP', async () => {
      const ready: number[] = [];
      await Promise.all(
        nodes.map(async (n) => {
          const r = await n.exec(['systemctl', 'enable', '--now', 'ballast'], { allowFail: true, timeoutMs: 60_000 });
          expect(r.code, r.stderr).toBe(0);
          // Type=notify: active means READY=1 arrived; systemd's own timestamps of the fork and of READY
          const s = await show(n, 'ActiveState', 'SubState', 'StatusText', 'ExecMainStartTimestampMonotonic', 'ActiveEnterTimestampMonotonic', 'UnitFileState');
          expect([s.ActiveState, s.SubState, s.UnitFileState]).toEqual(['active', 'running', 'enabled']);
          expect(s.StatusText).toMatch(new RegExp(`^(BACKUP|MASTER) for ${lab!.vip4.replace(/\./g, '\\.')}`));
          ready.push((Number(s.ActiveEnterTimestampMonotonic) - Number(s.ExecMainStartTimestampMonotonic)) / 1000);
        }),
      );
      console.log(`systemd nodes: ExecStart → READY=1 ${ready.map((ms) => `${ms.toFixed(0)} ms`).join(', ')}`);
      // within the unit's start timeout (systemd's DefaultTimeoutStartSec, 90 s), or systemd would have failed it
      for (const ms of ready) expect(ms).toBeGreaterThan(0);
      const [n1, n2] = nodes as [SystemdNode, SystemdNode];
      // n1 (150) preempts n2 (100) within Master_Down_Interval of its start, plus the health checks' rise
      await waitFor(
        async () => (await show(n1, 'StatusText')).StatusText,
        (t) => t.startsWith(`MASTER for ${lab!.vip4}`) && t.endsWith('2 of 2 backends ready'),
        { timeoutMs: masterDownIntervalMs(PRIORITIES[0]!, INTERVAL_MS / 10) + 5000, intervalMs: 100, what: 'n1 to be MASTER with both backends ready' },
      );
      await waitFor(
        async () => (await show(n2, 'StatusText')).StatusText,
        (t) => t === `BACKUP for ${lab!.vip4} (master ${lab!.nodes[0]!.ipv4}), 2 of 2 backends ready`,
        { timeoutMs: 5000, intervalMs: 100, what: "n2's STATUS= to say BACKUP (STATUS= is refreshed every second)" },
      );
      expect(await lab!.holders(lab!.vip4)).toEqual([lab!.nodes[0]]);
    }, 90_000);

    it("the eBPF local endpoint is attached on a fresh boot under the unit's sandbox (bpffs writable), with no fallback warning", async () => {
      for (const n of nodes) {
        expect((await status(n))?.local.mode).toBe('ebpf');
        expect((await n.exec(['ls', '/sys/fs/bpf/ballast'])).stdout.trim().split('\n')).toContain('local');
        const warned = (await n.journal('ballast')).filter((e) => isEbpfFallback(e.MESSAGE));
        expect(warned.map((e) => e.MESSAGE)).toEqual([]);
      }
    });

    it('systemctl reload: a good file exits 0 and is applied; a bad one exits non-zero, the agent keeps running as before and logs the refusal', async () => {
      const n = nodes[1]!;
      const before = await show(n, 'MainPID', 'ActiveState');
      // good: another health interval (reloadable)
      n.writeFile(CONFIG, configFor(1).replace('interval: 200ms', 'interval: 300ms'), 0o600);
      const good = await n.exec(['systemctl', 'reload', 'ballast'], { allowFail: true, timeoutMs: 30_000 });
      expect(good.code, good.stderr).toBe(0);
      // bad: a VRID out of range
      n.writeFile(CONFIG, configFor(1).replace('vrid: 51', 'vrid: 300'), 0o600);
      const bad = await n.exec(['systemctl', 'reload', 'ballast'], { allowFail: true, timeoutMs: 30_000 });
      expect(bad.code).not.toBe(0);
      const after = await show(n, 'MainPID', 'ActiveState', 'SubState', 'StatusText');
      expect([after.MainPID, after.ActiveState, after.SubState]).toEqual([before.MainPID, 'active', 'running']);
      expect(after.StatusText).toMatch(/^BACKUP for /);
      expect((await status(n))?.state).toBe('backup');
      n.writeFile(CONFIG, configFor(1), 0o600);
      expect((await n.exec(['systemctl', 'reload', 'ballast'], { allowFail: true, timeoutMs: 30_000 })).code).toBe(0);
      // the agent's own record of the two: refused, then applied
      expect((await n.journal('ballast')).filter((e) => e._PID === before.MainPID && /configuration reload (failed|refused)/.test(e.MESSAGE)).length).toBe(1);
    }, 90_000);

    it("journal priorities: the agent's refused reload is in journalctl -u ballast -p warning (needs the agent's <N> level prefix on stdout)", async () => {
      const n = nodes[1]!;
      const pid = await n.mainPid('ballast');
      const refused = (await n.journal('ballast')).filter((e) => e._PID === String(pid) && e.MESSAGE.includes('configuration reload failed'));
      expect(refused.length, 'the refused reload of the test before').toBe(1);
      // journalctl -p warning: the agent's own error line (PRIORITY ≤ 4 from the agent's process,
      // not systemd's "Reload failed" and not the reload command's stderr)
      const warnings = await n.journal('ballast', { priority: 'warning' });
      const fromAgent = warnings.filter((e) => e._PID === String(pid) && e.MESSAGE.includes('configuration reload failed'));
      expect(
        fromAgent.length,
        `journalctl -u ballast -p warning from the agent (pid ${pid}): ${JSON.stringify(warnings.map((e) => [e._PID, e.PRIORITY, e.MESSAGE.slice(0, 120)]))}`,
      ).toBe(1);
      expect(Number(fromAgent[0]!.PRIORITY)).toBeLessThanOrEqual(4);
    });

    it('journal priorities: where the eBPF local endpoint cannot attach (CAP_BPF taken away by a drop-in), journalctl -u ballast -p warning shows the fallback (needs the <N> level prefix)', async () => {
      const n = nodes[1]!;
      const dropIn = '/etc/systemd/system/ballast.service.d/no-bpf.conf';
      await n.exec(['mkdir', '-p', '/etc/systemd/system/ballast.service.d']);
      n.writeFile(dropIn, '[Service]\nCapabilityBoundingSet=~CAP_BPF\n');
      try {
        await n.exec(['systemctl', 'daemon-reload']);
        expect((await n.exec(['systemctl', 'restart', 'ballast'], { allowFail: true, timeoutMs: 60_000 })).code).toBe(0);
        const pid = String(await n.mainPid('ballast'));
        expect((await status(n))?.local.mode).toBe('proxy');
        const fallback = (e: { _PID?: string; MESSAGE: string }): boolean => e._PID === pid && isEbpfFallback(e.MESSAGE);
        expect((await n.journal('ballast')).filter(fallback).length, 'the agent logged the fallback').toBe(1);
        expect((await n.journal('ballast', { priority: 'warning' })).filter(fallback).length, 'journalctl -p warning shows it').toBe(1);
      } finally {
        await n.exec(['rm', '-f', dropIn]);
        await n.exec(['rmdir', '--ignore-fail-on-non-empty', '/etc/systemd/system/ballast.service.d']);
        await n.exec(['systemctl', 'daemon-reload']);
        await n.exec(['systemctl', 'restart', 'ballast'], { allowFail: true, timeoutMs: 60_000 });
      }
      expect((await status(n))?.local.mode).toBe('ebpf');
    }, 60_000);

    it("systemd-analyze security of the installed unit, on the node's own systemd", async () => {
      const r = await nodes[0]!.exec(['systemd-analyze', 'security', '--no-pager', 'ballast'], { allowFail: true });
      const score = Number(/Overall exposure level for ballast\.service: ([\d.]+)/.exec(r.stdout)?.[1]);
      console.log(`systemd nodes: systemd-analyze security ballast: ${score}`);
      // docs/install.md's figure: 4.2 on systemd 252 (3.9 with ProtectKernelTunables=yes, which keeps
      // bpffs read-only, and RestrictRealtime=yes, which refuses the pacer's SCHED_FIFO)
      expect(score).toBeLessThanOrEqual(4.2);
    });

    it('systemctl restart of the holder keeps the eBPF local endpoint: no request to 127.0.0.1:7443 from inside the node fails', async () => {
      const n = nodes[0]!;
      const pid0 = await n.mainPid('ballast');
      n.writeFile('/root/probe.mjs', PROBE_JS);
      await n.exec(['rm', '-f', '/run/probe.stop', '/run/probe.started']);
      const maxMs = 30_000;
      // a transient service of the node's systemd: inside the container's cgroup tree, where the agent attached
      const probe = n.exec(
        [
          '/usr/lib/ballast/bin/node',
          '/root/probe.mjs',
          'https://127.0.0.1:7443/readyz',
          '/run/probe.stop',
          '/run/probe.started',
          String(maxMs),
          String(PROBE_EVERY_MS),
        ],
        { service: true, timeoutMs: maxMs + 10_000 },
      );
      await waitFor(
        () => {
          try {
            return n.readFile('/run/probe.started') === '1';
          } catch {
            return false;
          }
        },
        { timeoutMs: 10_000, intervalMs: 20, what: 'the client loop to make its first request' },
      );
      await sleep(500);
      const t0 = performance.now();
      const r = await n.exec(['systemctl', 'restart', 'ballast'], { allowFail: true, timeoutMs: 60_000 });
      const restartMs = performance.now() - t0;
      expect(r.code, r.stderr).toBe(0);
      const pid1 = await n.mainPid('ballast');
      expect(pid1).not.toBe(pid0);
      // a second more of requests against the new agent
      await sleep(1000);
      n.writeFile('/run/probe.stop', '1');
      const sum = JSON.parse((await probe).stdout.trim()) as ProbeSummary;
      console.log(
        `systemd nodes: restart of the holder took ${restartMs.toFixed(0)} ms; ${sum.ok} requests ok, ${sum.failed} failed over ${sum.durationMs} ms`,
      );
      expect((await status(n))?.local.mode).toBe('ebpf');
      expect(sum.failed, JSON.stringify(sum.errors)).toBe(0);
      // the loop really ran through the restart: at least one request per 4 periods
      expect(sum.ok).toBeGreaterThanOrEqual(Math.floor(sum.durationMs / (4 * PROBE_EVERY_MS)));
      const warned = (await n.journal('ballast')).filter((e) => isEbpfFallback(e.MESSAGE));
      expect(warned.map((e) => e.MESSAGE)).toEqual([]);
    }, 90_000);

    it('vrrp.realtimePriority under the unit: the vrrp-pacer thread runs SCHED_FIFO at that priority, the main thread does not', async () => {
      const n = nodes[0]!;
      n.writeFile(CONFIG, configFor(0, { realtimePriority: 20 }), 0o600);
      expect((await n.exec(['systemctl', 'restart', 'ballast'], { allowFail: true, timeoutMs: 60_000 })).code).toBe(0);
      const pid = await n.mainPid('ballast');
      const threads = await waitFor(
        async () =>
          (await n.exec(['sh', '-c', `for t in /proc/${pid}/task/*; do echo "\${t##*/} $(cat $t/comm)"; done`])).stdout
            .trim()
            .split('\n')
            .map((l) => l.split(' ') as [string, string]),
        (ts) => ts.some(([, c]) => c === 'vrrp-pacer'),
        { timeoutMs: 10_000, intervalMs: 100, what: 'the vrrp-pacer thread' },
      );
      const pacer = threads.find(([, c]) => c === 'vrrp-pacer')![0];
      expect((await n.exec(['chrt', '-p', pacer])).stdout).toBe(
        `pid ${pacer}'s current scheduling policy: SCHED_FIFO\npid ${pacer}'s current scheduling priority: 20\n`,
      );
      expect((await n.exec(['chrt', '-p', String(pid)])).stdout).toMatch(/policy: SCHED_OTHER\n/);
      const msgs = (await n.journal('ballast')).filter((e) => e._PID === String(pid)).map((e) => e.MESSAGE);
      expect(msgs.some((m) => m.includes('the advert pacer thread runs SCHED_FIFO'))).toBe(true);
      expect(msgs.filter((m) => m.includes('cannot give the advert pacer thread SCHED_FIFO'))).toEqual([]);
      n.writeFile(CONFIG, configFor(0), 0o600);
      expect((await n.exec(['systemctl', 'restart', 'ballast'], { allowFail: true, timeoutMs: 60_000 })).code).toBe(0);
    }, 60_000);

    it(
      `the watchdog kills a SIGSTOPped agent within WatchdogSec (${WATCHDOG_SEC} s) and systemd starts a new one`,
      async () => {
        const n = nodes[1]!;
        const before = await show(n, 'MainPID', 'NRestarts');
        const sinceUs = BigInt(Date.now()) * 1000n;
        await n.exec(['kill', '-STOP', before.MainPID!]);
        const stoppedAtUs = BigInt(Date.now()) * 1000n;
        // the agent pings every WatchdogSec/2: the last ping was at most that long before the stop,
        // so systemd times out between WatchdogSec/2 and WatchdogSec after it; then RestartSec
        const after = await waitFor(
          () => show(n, 'MainPID', 'NRestarts', 'ActiveState'),
          (s) => s.NRestarts === String(Number(before.NRestarts) + 1) && s.ActiveState === 'active' && s.MainPID !== before.MainPID && s.MainPID !== '0',
          { timeoutMs: (WATCHDOG_SEC + RESTART_SEC) * 1000 + 20_000, intervalMs: 200, what: 'systemd to restart the stopped agent' },
        );
        expect(after.MainPID).not.toBe(before.MainPID);
        const timeout = (await n.journal('ballast')).find((e) => BigInt(e.__REALTIME_TIMESTAMP!) >= sinceUs && /Watchdog timeout/.test(e.MESSAGE));
        expect(timeout, 'systemd\'s "Watchdog timeout" line').toBeDefined();
        const afterMs = Number(BigInt(timeout!.__REALTIME_TIMESTAMP!) - stoppedAtUs) / 1000;
        console.log(`systemd nodes: watchdog timeout ${afterMs.toFixed(0)} ms after SIGSTOP (WatchdogSec ${WATCHDOG_SEC} s)`);
        expect(afterMs).toBeGreaterThanOrEqual((WATCHDOG_SEC / 2) * 1000 - 1000);
        expect(afterMs).toBeLessThanOrEqual(WATCHDOG_SEC * 1000 + 1000);
        await waitFor(
          async () => (await show(n, 'StatusText')).StatusText,
          (t) => t.startsWith(`BACKUP for ${lab!.vip4}`),
          { timeoutMs: 10_000, intervalMs: 100, what: 'the new agent to be BACKUP again' },
        );
      },
      (WATCHDOG_SEC + RESTART_SEC) * 1000 + 40_000,
    );

    it('apt-get remove leaves the configuration, the state and the enablement link; apt-get purge leaves nothing', async () => {
      const n = nodes[1]!;
      // every path named ballast on the node's file systems (the root, /run, bpffs), but our own copy of the .deb
      const left = async (): Promise<string[]> =>
        (
          await n.exec(
            [
              'sh',
              '-c',
              'find / /run /sys/fs/bpf -xdev -name "*ballast*" -not -path "/root/*" -not -path "/proc/*" -not -path /.ballast-rootfs -not -path "/var/lib/dpkg/info/*" 2>/dev/null; ls /var/lib/dpkg/info | grep "^ballast\\." | sed "s|^|/var/lib/dpkg/info/|"; nft list tables | grep ballast',
            ],
            { allowFail: true },
          )
        ).stdout
          .trim()
          .split('\n')
          .filter(Boolean)
          .sort();
      const r = await n.exec(['apt-get', 'remove', '-y', '-q', 'ballast'], { allowFail: true, timeoutMs: 60_000 });
      expect(r.code, r.stderr + r.stdout).toBe(0);
      expect((await n.exec(['dpkg-query', '-W', '-f=${Status}', 'ballast'])).stdout).toBe('deinstall ok config-files');
      expect((await show(n, 'LoadState')).LoadState).toBe('not-found');
      expect(await left()).toEqual([
        '/etc/ballast',
        '/etc/ballast/ballast.yaml',
        '/etc/systemd/system/multi-user.target.wants/ballast.service',
        '/var/lib/ballast',
        // dpkg's record of a package in state config-files: its file list and the postrm that purge runs
        '/var/lib/dpkg/info/ballast.list',
        '/var/lib/dpkg/info/ballast.postrm',
      ]);
      const p = await n.exec(['apt-get', 'purge', '-y', '-q', 'ballast'], { allowFail: true, timeoutMs: 60_000 });
      expect(p.code, p.stderr + p.stdout).toBe(0);
      expect((await n.exec(['dpkg-query', '-W', '-f=${Status}', 'ballast'], { allowFail: true })).stdout).not.toMatch(/installed|config-files/);
      expect(await left()).toEqual([]);
    }, 120_000);

    it('the nodes power off by themselves, the agent still running on n1: nothing is killed', async () => {
      expect((await show(nodes[0]!, 'ActiveState')).ActiveState).toBe('active');
      const stops = await stopSystemdNodes(nodes);
      expect(stops.map((x) => x.poweredOff)).toEqual([true, true]);
    }, 60_000);
  },
);
