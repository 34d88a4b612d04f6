/**
 * What an operator sees, on the lab:
 *
 * - the status page (GET / on the admin port) in a real headless browser (Debian's Chromium),
 *   run inside a lab node's namespace against that node's agent (admin on 127.0.0.1 there): the
 *   rendered DOM names the VIP holder, this node's state and each backend with its state, and a
 *   screenshot of the window size is written to test-output/status-page.png (a PNG whose IHDR
 *   says 1200 × 900);
 * - the send-error rate limit: one agent with 252 unicast peers nobody answers for (TEST-NET-3,
 *   203.0.113.0/24; the socket is bound to eth0, so the kernel takes them as on-link: ARP
 *   requests on the lab's bridge, nothing else leaves the node) at a 10 ms interval: the sends
 *   queue behind unresolved neighbours until the socket's buffer is full (ENOBUFS), and failed
 *   resolutions come back as EHOSTUNREACH. One key per error code: in 3 s each code writes one
 *   `cannot send advertisement` line (the window is 10 s: a key writes its first line, then at
 *   most one per window), and at stop one summary with its count.
 *
 * Chromium gets a temporary HOME and --user-data-dir, runs in its own process group (lab.spawn),
 * is killed by that group if it hangs, and the test checks that none of its processes is left.
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Lab, LabNode } from '../../lab/lab.js';
import { packageRoot } from '../../lab/lab.js';
import { resetElectionLab, startAgent, waitForHolder, type LabAgent } from '../../lab/cluster.js';
import { LOG_REPEAT_WINDOW_MS } from '../../src/log/ratelimit.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'bui';
const SUBNET = 108;
const WIDTH = 1200;
const HEIGHT = 900;
const CHROMIUM = '/usr/bin/chromium';
/** One Chromium run may take this long before its process group is killed, ms. */
const CHROMIUM_TIMEOUT_MS = 15_000;

/** The PNG signature and the IHDR chunk's width and height (PNG spec §5.2, §11.2.2). */
function pngSize(file: Buffer): { width: number; height: number } {
  const signature = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  if (file.length < 24 || !file.subarray(0, 8).equals(signature)) throw new Error('not a PNG: bad signature');
  if (file.subarray(12, 16).toString('latin1') !== 'IHDR') throw new Error('not a PNG: the first chunk is not IHDR');
  return { width: file.readUInt32BE(16), height: file.readUInt32BE(20) };
}

/** PIDs whose command line mentions `needle` (Chromium's processes carry their --user-data-dir). */
function processesWith(needle: string): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (readFileSync(`/proc/${d}/cmdline`, 'latin1').includes(needle)) out.push(Number(d));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

describe.skipIf(needs('root') ?? needs('chromium'))(
  'the status page in headless Chromium, and rate-limited send errors, on the lab (root, chromium; skipped otherwise)',
  () => {
    let lab: Lab;
    let agents: LabAgent[] = [];
    let scratch: string;

    beforeAll(async () => {
      lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 2, ipv6: false, apiservers: true });
      scratch = mkdtempSync(join(tmpdir(), 'ballast-ui-'));
    });
    afterEach(async () => {
      await resetElectionLab(lab, agents);
      agents = [];
    });
    afterAll(async () => {
      await lab?.teardown();
      if (scratch) rmSync(scratch, { recursive: true, force: true });
    });

    /** Chromium headless in `node`'s namespace with `args` and the URL; its stdout once it exits. */
    async function chromium(node: LabNode, name: string, args: string[], url: string): Promise<string> {
      const home = join(scratch, name);
      mkdirSync(home);
      const profile = join(home, 'profile');
      const p = lab.spawn(
        node.netns,
        [
          CHROMIUM,
          '--headless=new',
          '--no-sandbox',
          '--disable-gpu',
          '--no-first-run',
          '--disable-extensions',
          '--disable-background-networking',
          `--user-data-dir=${profile}`,
          ...args,
          url,
        ],
        { env: { HOME: home } },
      );
      let timer: NodeJS.Timeout | undefined;
      const timedOut = new Promise<'timeout'>((r) => (timer = setTimeout(() => r('timeout'), CHROMIUM_TIMEOUT_MS)));
      const code = await Promise.race([p.exited, timedOut]);
      clearTimeout(timer);
      if (code === 'timeout') await p.stop('SIGKILL', 2000);
      // whatever it forked went with its group: nothing may carry its profile any more
      await waitFor(
        async () => processesWith(profile),
        (pids) => pids.length === 0,
        { timeoutMs: 3000, intervalMs: 100, what: `no process of Chromium's ${name} run left` },
      );
      if (code !== 0) throw new Error(`chromium ${name} ended with ${String(code)}:\n${p.output().slice(-2000)}`);
      return p.output();
    }

    it('GET / renders the holder, the state, each backend and the transitions; a screenshot of 1200×900 is saved', async () => {
      const t0 = performance.now();
      const [n1, n2] = lab.nodes as [LabNode, LabNode];
      // n1 first: n2 then starts into Backup under a known master (no brief master of its own)
      agents.push(await startAgent(lab, n1, { priority: 150, balance: true }));
      await waitForHolder(lab, lab.vip4, 'n1');
      const backup = await startAgent(lab, n2, { priority: 100, balance: true });
      agents.push(backup);
      // every backend up on n2 (rise 2 × 200 ms), and n1 heard as master
      const doc = await waitFor(
        () => backup.status(),
        (d) => d.state === 'backup' && d.masterAddress === n1.ipv4 && d.backends.length === 2 && d.backends.every((b) => b.state === 'up'),
        { timeoutMs: 5000, intervalMs: 100, what: 'n2 backup with both backends up' },
      );
      expect(doc.lastTransition).toMatchObject({ from: 'init', to: 'backup', reason: 'startup' });
      expect(doc.masterSince).toEqual(expect.any(String));
      // n1 is a seed backend's node: a known member, logged as the new master (no stranger warning)
      expect(backup.logLines().filter((l) => l.msg === 'new master')).toMatchObject([{ level: 'info', master: n1.ipv4, priority: 150, previous: null }]);
      expect(backup.logLines().some((l) => String(l.msg).startsWith('the new master is not one of the known members'))).toBe(false);

      const url = `http://127.0.0.1:${backup.adminPort}/`;
      const tPage = performance.now();
      // one run: the DOM after rendering (a real HTML parser; the page has no script) and the screenshot
      const shot = join(scratch, 'status-page.png');
      const dom = await chromium(n2, 'page', ['--dump-dom', `--screenshot=${shot}`, `--window-size=${WIDTH},${HEIGHT}`, '--hide-scrollbars'], url);
      const chromiumMs = Math.round(performance.now() - tPage);
      const visible = dom
        .replace(/<style>[\s\S]*?<\/style>/, '')
        .replace(/<[^>]+>/g, ' ')
        .replace(/\s+/g, ' ');
      expect(visible).toContain(`VIP holder ${n1.ipv4} (priority 150)`);
      expect(visible).toMatch(/state backup since \d{4}-\d\d-\d\dT/);
      expect(visible).toContain('100 (advertised as configured)');
      // connections: 0 — n2 is a backup, so no flow passes its VIP table
      for (const n of [n1, n2]) expect(visible).toMatch(new RegExp(`${n.ipv4.replaceAll('.', '\\.')}:6443 up seed 0 \\d+(\\.\\d)? ms`));
      expect(visible).toContain('init → backup startup');
      expect(visible).toContain(`VIP table nftables: ${n1.ipv4}:6443 ${n2.ipv4}:6443`);

      // the screenshot, into the test output
      const png = readFileSync(shot);
      expect(pngSize(png)).toStrictEqual({ width: WIDTH, height: HEIGHT });
      const outDir = join(packageRoot(), 'test-output');
      mkdirSync(outDir, { recursive: true });
      const saved = join(outDir, 'status-page.png');
      writeFileSync(saved, png);
      console.log(
        `[status-page] screenshot ${saved} (${png.length} bytes, ${WIDTH}x${HEIGHT}); test body ${Math.round(performance.now() - t0)} ms, chromium ${chromiumMs} ms`,
      );
    });

    it(`252 unreachable unicast peers at 10 ms: one "cannot send advertisement" line in 3 s (window ${LOG_REPEAT_WINDOW_MS / 1000} s), the count at stop`, async () => {
      const peers = Array.from({ length: 252 }, (_, i) => `203.0.113.${i + 1}`);
      const n1 = lab.nodes[0]!;
      const agent = await startAgent(lab, n1, { priority: 150, peers, advertisementInterval: '10ms' });
      agents.push(agent);
      // alone: master after Master_Down_Interval (3 × 10 ms + skew), then 252 sends every 10 ms, each refused
      await waitFor(
        () => agent.status(),
        (d) => d.state === 'master' && d.counters.sendErrors > 0,
        { timeoutMs: 3000, intervalMs: 50, what: 'n1 master with send errors' },
      );
      const lines = () => agent.logLines().filter((l) => typeof l.msg === 'string' && l.msg.startsWith('cannot send advertisement'));
      const firstAt = Date.parse(String(lines()[0]!.time));
      await sleep(Math.max(0, firstAt + 3000 - Date.now()));
      const doc = await agent.status();
      const seen = lines();
      console.log(
        `[status-page] after 3 s: ${doc.counters.sendErrors} send errors, ${doc.counters.advertsSent} sent, lines: ${JSON.stringify(seen.map((l) => [l.code, l.destination, l.sendErrors, l.msg]))}`,
      );
      // at least a second's worth of rounds were refused (2 shared cores: not all 300 rounds need to run)
      expect(doc.counters.sendErrors).toBeGreaterThan(252 * 100);
      const codes = [...new Set(seen.map((l) => String(l.code)))];
      expect(codes.every((c) => ['ENOBUFS', 'EHOSTUNREACH', 'ENETUNREACH', 'EAGAIN'].includes(c))).toBe(true);
      // the bound, per key: first line + one per full window since it; 3 s < 10 s, so the first line alone
      for (const c of codes) expect(seen.filter((l) => l.code === c)).toHaveLength(1 + Math.floor(3000 / LOG_REPEAT_WINDOW_MS));
      expect(seen.every((l) => l.msg === 'cannot send advertisement' && l.level === 'warn')).toBe(true);
      // a clean stop writes the count of the lines left out: one summary per code that repeated
      expect(await agent.stop('SIGTERM')).toBe(0);
      const summaries = lines().slice(seen.length);
      expect(summaries.length).toBeGreaterThanOrEqual(1);
      expect(summaries.length).toBeLessThanOrEqual(codes.length);
      for (const l of summaries)
        expect(l.msg).toBe(`cannot send advertisement (repeated ${l.repeated as number} times in the last ${l.repeatedOverS as number} s)`);
      const total = seen.length + summaries.reduce((n, l) => n + (l.repeated as number), 0);
      // the counter also holds the advert pacer's failed sends (it covers a busy main thread at 10 ms
      // adverts), which it reports on a line of its own ('the advert pacer could not send some adverts')
      const pacerErrors = doc.timing?.pacer?.sendErrors ?? 0;
      expect(total).toBeGreaterThanOrEqual(doc.counters.sendErrors - pacerErrors);
    });
  },
);
