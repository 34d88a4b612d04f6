/**
 * A dead backend's clients that only receive are reset at once (src/dataplane/probe.ts): one agent
 * on n1 holding the VIP (prefix btk, 10.78.201.0/24, fd78:201::/64) balances to the stand-in
 * apiservers of n1, n2, n3 (checks every 200 ms, timeout 200 ms, fall 2), each stand-in sending
 * a watch bookmark every 200 ms. STREAMS TLS watch streams through the VIP from SOURCES client
 * addresses (lab/clients/watch-streams.ts: they never write after their request). Then n3's link
 * goes down: to n1 and the clients n3 falls silent, nothing is reset by n3 itself, and a watch
 * client sends nothing the node could answer with a RST.
 *
 *   - every stream served by n3 ends with ECONNRESET within the checks' detection bound
 *     (fall × interval + one interval + timeout) + the probes' pace (two packets per client at
 *     PROBE_PACKETS_PER_SECOND) + the apply, the conntrack run and scheduling (MARGIN_MS);
 *   - on the wire (tcpdump in the client's namespace), each of them saw the probe from VIP:6443,
 *     answered it with an ACK, and got a RST whose sequence number is that ACK's acknowledgment
 *     number (RFC 9293 §3.10.7.4, §3.10.7.3);
 *   - every stream served by n1 or n2 is untouched: no reset, events after the probes;
 *   - /status counts two probes per client of n3 and no refusal.
 *
 * Without the probes (before them) the n3 streams hung until the clients' own timeouts.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Lab } from '../../lab/lab.js';
import { packageRoot } from '../../lab/lab.js';
import { restoreNodes, startAgent, waitForHolder, type LabAgent } from '../../lab/cluster.js';
import { PROBE_PACKETS_PER_SECOND } from '../../src/dataplane/probe.js';
import { VIP_PLANE_MESSAGES } from '../../src/dataplane/controller.js';
import { TCP_PROBE_MAX_CLIENTS } from '../../src/native.js';
import { openWatchStreams } from '../../lab/streams.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'btk';
const SUBNET = 201;
const INTERVAL_MS = 200;
/** The lab's agents check with timeout = interval (lab/cluster.ts agentConfig), rise and fall 2. */
const TIMEOUT_MS = INTERVAL_MS;
const FALL = 2;
/** The stand-ins' bookmark interval: one server event per stream every this many ms. */
const EVENT_MS = 200;
const STREAMS = 60;
const SOURCES = 3;
/** The apply without n3 (nft -f), the conntrack -D run and scheduling on 2 shared cores, ms. */
const MARGIN_MS = 300;

/** One line of `tcpdump -n -tt -S -l` for a TCP segment: time (ms), ends, flags, seq, ack, window. */
interface Segment {
  at: number;
  src: string;
  dst: string;
  flags: string;
  seq: number | null;
  ack: number | null;
  win: number | null;
  length: number;
}

function parseTcpdump(text: string): Segment[] {
  const out: Segment[] = [];
  for (const line of text.split('\n')) {
    const m = /^(\d+\.\d+) IP6? (\S+) > (\S+): Flags \[([^\]]*)\](.*)$/.exec(line);
    if (!m) continue;
    const rest = m[5]!;
    const num = (re: RegExp): number | null => {
      const x = re.exec(rest);
      return x ? Number(x[1]) : null;
    };
    out.push({
      at: Number(m[1]) * 1000,
      src: m[2]!,
      dst: m[3]!,
      flags: m[4]!,
      seq: num(/, seq (\d+)/),
      ack: num(/, ack (\d+)/),
      win: num(/, win (\d+)/),
      length: num(/, length (\d+)/) ?? 0,
    });
  }
  return out;
}

/**
 * The sender alone (native/tcp_probe.cc), in two namespaces of its own (btl-p ⇄ btl-q, a veth
 * pair, 10.78.202.0/24 and fd78:202::/64; btl-q drops what it gets: nothing listens, no
 * forwarding): the most clients one call takes, the pace, the mark, a refusal, the event loop.
 */
describe.skipIf(needs('root', 'nft'))('the TCP probe sender on the real kernel (root; skipped otherwise)', () => {
  const P = 'btl-p';
  const Q = 'btl-q';
  const run = (args: string[]): string => {
    const r = spawnSync(args[0]!, args.slice(1), { encoding: 'utf8', timeout: 10_000 });
    if (r.status !== 0) throw new Error(`${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
  };
  const teardown = (): void => {
    for (const ns of [P, Q]) spawnSync('ip', ['netns', 'del', ns], { timeout: 10_000 });
  };
  beforeAll(() => {
    teardown();
    run(['ip', 'netns', 'add', P]);
    run(['ip', 'netns', 'add', Q]);
    run([
      'ip',
      '-n',
      P,
      'link',
      'add',
      'btlp',
      'address',
      '02:78:ca:00:00:01',
      'type',
      'veth',
      'peer',
      'name',
      'btlq',
      'address',
      '02:78:ca:00:00:02',
      'netns',
      Q,
    ]);
    for (const [ns, dev, host] of [
      [P, 'btlp', 1],
      [Q, 'btlq', 2],
    ] as const) {
      run(['ip', '-n', ns, 'link', 'set', dev, 'up']);
      run(['ip', '-n', ns, 'addr', 'add', `10.78.202.${host}/24`, 'dev', dev]);
      run(['ip', '-n', ns, 'addr', 'add', `fd78:202::${host}/64`, 'dev', dev, 'nodad']);
    }
    // the probes' destinations are nobody's: their frames go to btl-q, which drops them
    run(['ip', '-n', P, 'neigh', 'replace', '10.78.202.9', 'lladdr', '02:78:ca:00:00:02', 'dev', 'btlp', 'nud', 'permanent']);
    run(['ip', '-n', P, 'neigh', 'replace', 'fd78:202::9', 'lladdr', '02:78:ca:00:00:02', 'dev', 'btlp', 'nud', 'permanent']);
    run(['ip', '-n', P, 'neigh', 'replace', '10.78.202.66', 'lladdr', '02:78:ca:00:00:02', 'dev', 'btlp', 'nud', 'permanent']);
    run(['ip', '-n', P, 'neigh', 'replace', 'fd78:202::66', 'lladdr', '02:78:ca:00:00:02', 'dev', 'btlp', 'nud', 'permanent']);
  });
  afterAll(teardown);

  for (const family of [4, 6] as const) {
    it(`IPv${family}: ${TCP_PROBE_MAX_CLIENTS} clients go out paced (≥ their count / the pace), every packet marked, a refused one counted with its errno, the event loop free`, () => {
      const dst = family === 4 ? '10.78.202.9' : 'fd78:202::9';
      const dropped = family === 4 ? '10.78.202.66' : 'fd78:202::66';
      const l3 = family === 4 ? 'ip' : 'ip6';
      // counts every packet that carries the mark at the output hook (before any other chain), and drops the probes to one client
      spawnSync('ip', ['netns', 'exec', P, 'nft', 'delete', 'table', 'inet', 'btl'], { timeout: 10_000 });
      const nft = spawnSync('ip', ['netns', 'exec', P, 'nft', '-f', '-'], {
        input: `table inet btl {\n\tcounter marked {}\n\tchain out {\n\t\ttype filter hook output priority -400; policy accept;\n\t\tmeta mark 0xba counter name marked\n\t\t${l3} daddr ${dropped} drop\n\t}\n}\n`,
        encoding: 'utf8',
        timeout: 10_000,
      });
      expect(nft.stderr).toBe('');
      const rx = (): number =>
        (JSON.parse(run(['ip', '-n', Q, '-s', '-j', 'link', 'show', 'btlq'])) as { stats64: { rx: { packets: number } } }[])[0]!.stats64.rx.packets;
      const before = rx();
      const script = `
        const { sendTcpProbes } = await import(${JSON.stringify(join(packageRoot(), 'dist', 'src', 'native.js'))});
        let ticks = 0;
        const timer = setInterval(() => ticks++, 10);
        const clients = Array.from({ length: ${TCP_PROBE_MAX_CLIENTS} }, (_, i) => ({ address: ${JSON.stringify(dst)}, port: 1 + i }));
        clients[0] = { address: ${JSON.stringify(dropped)}, port: 40000 };
        const t0 = performance.now();
        const r = await sendTcpProbes({ family: ${family}, source: ${JSON.stringify(family === 4 ? '10.78.202.100' : 'fd78:202::100')}, sourcePort: 6443, mark: 0xba, packetsPerSecond: ${PROBE_PACKETS_PER_SECOND}, clients });
        const ms = performance.now() - t0;
        clearInterval(timer);
        console.log(JSON.stringify({ sent: r.sent, failed: r.failed, error: r.error ? { code: r.error.code, errno: r.error.errno, syscall: r.error.syscall, message: r.error.message } : null, ms, ticks }));`;
      const child = spawnSync('ip', ['netns', 'exec', P, process.execPath, '--input-type=module', '-e', script], { encoding: 'utf8', timeout: 30_000 });
      expect(child.stderr).toBe('');
      const r = JSON.parse(child.stdout) as {
        sent: number;
        failed: number;
        error: { code: string; errno: number; syscall: string; message: string } | null;
        ms: number;
        ticks: number;
      };
      const counted = (
        JSON.parse(run(['ip', 'netns', 'exec', P, 'nft', '-j', 'list', 'counter', 'inet', 'btl', 'marked'])) as {
          nftables: { counter?: { packets: number } }[];
        }
      ).nftables.find((o) => o.counter)!.counter!.packets;
      const packets = 2 * TCP_PROBE_MAX_CLIENTS;
      // the pace: packet i leaves no earlier than i / rate after the first (batches of up to 64 at once)
      const floorMs = (1000 * (packets - 64)) / PROBE_PACKETS_PER_SECOND;
      console.log(
        `[reset-probe sender] IPv${family}: ${JSON.stringify({ ...r, error: r.error?.code })}, marked at the output hook ${counted}, received in btl-q ${rx() - before}, pace floor ${floorMs} ms`,
      );
      expect(r).toMatchObject({ sent: packets - 2, failed: 2, error: { code: 'EPERM', errno: 1, syscall: 'sendmmsg' } });
      expect(r.error!.message).toMatch(/^sendmmsg failed on a raw IPv[46] socket: EPERM \(Operation not permitted\); an output rule/);
      expect(counted).toBe(packets);
      expect(rx() - before).toBeGreaterThanOrEqual(packets - 2);
      expect(r.ms).toBeGreaterThanOrEqual(floorMs);
      // the sends ran on a worker thread: the event loop kept its 10 ms timer going (a quarter of the ticks, on 2 shared cores)
      expect(r.ticks).toBeGreaterThanOrEqual(floorMs / 10 / 4);
    }, 40_000);
  }
});

describe.skipIf(needs('root', 'conntrack', 'conntrackd', 'tcpdump'))("a dead backend's watch clients are reset at once (root; skipped otherwise)", () => {
  let lab: Lab;
  let agent: LabAgent | undefined;
  let sources: { ipv4: string[]; ipv6: string[] };

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 3, ipv6: true });
    await lab.startApiservers({ store: true, bookmarkMs: EVENT_MS });
    sources = await lab.addClientSources(SOURCES);
  }, 60_000);
  afterEach(async () => {
    await agent?.stop('SIGKILL').catch(() => undefined);
    agent = undefined;
    await restoreNodes(lab);
  });
  afterAll(async () => {
    await lab?.teardown();
  });

  for (const family of [4, 6] as const) {
    it(`IPv${family}: n3's link goes down under ${STREAMS} watch streams: each of its streams is reset within the detection bound + the probes, the others are kept`, async () => {
      const vip = family === 6 ? lab.vip6 : lab.vip4;
      const a = await startAgent(lab, lab.nodes[0]!, { priority: 100, family, balance: true, healthInterval: `${INTERVAL_MS}ms` });
      agent = a;
      await waitForHolder(lab, vip, 'n1');
      await waitFor(
        () => a.status(),
        (s) => s.backends.length === 3 && s.backends.every((b) => b.healthy),
        { timeoutMs: 8000, what: 'all backends up on n1' },
      );
      const url = family === 6 ? `https://[${vip}]:6443` : `https://${vip}:6443`;
      const streams = await openWatchStreams(lab, {
        url: url,
        sources: family === 6 ? sources.ipv6 : sources.ipv4,
        count: STREAMS,
        durationMs: 60_000,
        gapMs: 1.5 * EVENT_MS,
        name: `probe-streams-ipv${family}`,
      });
      // into a file, decoded after the stop: a pipe read by this busy process could make tcpdump fall behind and drop
      const pcap = join(lab.dir, `probe-ipv${family}.pcap`);
      const dump = lab.spawn(lab.client.netns, ['tcpdump', '-i', 'eth0', '-n', '-U', '--immediate-mode', '-s', '128', '-w', pcap, 'tcp port 6443'], {
        logFile: `probe-dump-ipv${family}.txt`,
      });
      await dump.waitForOutput(/listening on/, { timeoutMs: 5000, includeExisting: true });
      await sleep(2 * EVENT_MS);

      const downAt = Date.now();
      await lab.linkDown(lab.nodes[2]!);
      const n3 = family === 6 ? `[${lab.nodes[2]!.ipv6}]:6443` : `${lab.nodes[2]!.ipv4}:6443`;
      const probed = await waitFor(
        async () => a.logLines().find((l) => l.msg === VIP_PLANE_MESSAGES.probed && l.backend === n3),
        (l) => l !== undefined,
        { timeoutMs: 8000, intervalMs: 20, what: "n1 to probe n3's clients" },
      );
      // the live streams' next events, past the probes
      await sleep(5 * EVENT_MS);
      const st = await a.status();
      const finished = streams.finish();
      await dump.stop('SIGINT', 3000);
      const records = await finished;

      const resetLine = a.logLines().find((l) => l.msg === 'dead backend: its connections were reset' && l.backend === n3);
      const resetAt = Date.parse(String(resetLine?.time));
      const probedAt = Date.parse(String(probed!.time));
      const dead = records.filter((r) => r.node === 'n3');
      const live = records.filter((r) => r.node !== 'n3');
      const paceMs = (1000 * 2 * dead.length) / PROBE_PACKETS_PER_SECOND;
      const bound = FALL * INTERVAL_MS + INTERVAL_MS + TIMEOUT_MS + paceMs + MARGIN_MS;
      const endedAfter = dead.map((r) => (r.endedAt ?? Infinity) - downAt).sort((x, y) => x - y);
      const afterReset = dead.map((r) => (r.endedAt ?? Infinity) - resetAt).sort((x, y) => x - y);

      // the wire, per n3 stream: probe (VIP:6443 → client, ACK, window 1024, no data), the
      // client's ACK, then a RST to the client whose seq is that ACK's acknowledgment number
      const decoded = (await lab.exec(lab.client.netns, ['tcpdump', '-r', pcap, '-n', '-tt', '-S'])).stdout;
      const segments = parseTcpdump(decoded);
      const end = (address: string, port: number): string => `${address}.${port}`;
      const vipEnd = end(vip, 6443);
      const wire = dead.map((r) => {
        const me = end(r.source, r.port!);
        const probe = segments.find((s) => s.src === vipEnd && s.dst === me && s.flags === '.' && s.win === 1024 && s.length === 0 && s.at >= downAt);
        const answer = probe && segments.find((s) => s.src === me && s.dst === vipEnd && s.flags === '.' && s.at >= probe.at);
        const rst = answer && segments.find((s) => s.src === vipEnd && s.dst === me && s.flags.startsWith('R') && s.at >= answer.at);
        return { port: r.port, probe: !!probe, answered: !!answer, rstSeqOk: !!rst && rst.seq === answer!.ack, rstMs: rst && probe ? rst.at - probe.at : null };
      });
      const rstMs = wire.map((w) => w.rstMs ?? Infinity).sort((x, y) => x - y);
      const byNode: Record<string, number> = {};
      for (const r of records) byNode[r.node ?? '?'] = (byNode[r.node ?? '?'] ?? 0) + 1;
      const nft = st.dataplane.mode === 'nftables' ? st.dataplane : null;
      console.log(
        `[reset-probe] IPv${family}: streams ${JSON.stringify(byNode)}; n3 judged dead and its flows deleted ${resetAt - downAt} ms after its link went down, ` +
          `probes done ${probedAt - downAt} ms after (${JSON.stringify({ clients: probed!.clients, probes: probed!.probes, durationMs: probed!.durationMs })}); ` +
          `n3 streams ended: ${JSON.stringify(dead.map((r) => r.end))}; ended after the link went down p50 ${endedAfter[Math.floor(endedAfter.length / 2)]} max ${endedAfter.at(-1)} ms (bound ${bound}); ` +
          `after the deletion p50 ${afterReset[Math.floor(afterReset.length / 2)]} max ${afterReset.at(-1)} ms; ` +
          `probe → RST on the wire p50 ${rstMs[Math.floor(rstMs.length / 2)]?.toFixed(2)} max ${rstMs.at(-1)?.toFixed(2)} ms; ` +
          `live streams ended ${live.filter((r) => r.end !== null).length}; status probes ${nft?.probesSent} sent, ${nft?.probesFailed} failed, flushed ${nft?.flushedEntries}`,
      );
      const unseen = wire.filter((w) => !(w.probe && w.answered && w.rstSeqOk));
      if (unseen.length > 0) {
        const p = unseen[0]!.port!;
        console.log(
          `[reset-probe debug] ${JSON.stringify(unseen)}\n${decoded
            .split('\n')
            .filter((l) => l.includes(`.${p}`))
            .slice(-12)
            .join('\n')}\n${dump.output()}`,
        );
      }
      expect(records).toHaveLength(STREAMS);
      expect(dead.length).toBeGreaterThan(STREAMS / 6);
      // each of n3's streams: reset (not left hanging, not closed), within the bound
      expect(dead.map((r) => r.end)).toEqual(dead.map(() => 'reset'));
      expect(endedAfter.at(-1)!).toBeLessThanOrEqual(bound);
      // the mechanism, packet by packet
      expect(unseen).toEqual([]);
      // the others: untouched, their events go on past the probes
      expect(live.filter((r) => r.end !== null)).toEqual([]);
      expect(live.filter((r) => (r.lastEventAt ?? 0) <= probedAt + EVENT_MS)).toEqual([]);
      expect(nft).toMatchObject({ probesSent: 2 * dead.length, probesFailed: 0 });
      expect(nft!.flushedEntries).toBeGreaterThanOrEqual(dead.length);
    }, 60_000);
  }
});
