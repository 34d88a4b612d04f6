/**
 * Connection sync over IPv6 multicast: when the VRRP interface has no IPv4 address, each node's
 * conntrackd sends to and listens on [ff02::1:78:50]:3780+VRID (dataplane/conntrackd.ts
 * SYNC_GROUP_V6). Two nodes (prefix bc6, fd78:204::/64; n1 150, n2 100, adverts every 100 ms,
 * checks every 200 ms) whose eth0 carries IPv6 only (the lab's IPv4 address is removed before the
 * agents start), an IPv6 VIP, both stand-in apiservers as backends and a watch bookmark every
 * 200 ms on each stream. What must hold:
 *
 *   - each node's conntrackd.conf names the IPv6 group and no IPv4 transport, and the Backup's
 *     eth0 carries conntrackd's UDP messages to the group (tcpdump);
 *   - STREAMS long-lived TLS watch streams through the VIP reach the Backup's external cache
 *     (`conntrackd -e`: the holder's entries, ESTABLISHED, to the VIP's port 6443);
 *   - the holder's agent is killed (SIGKILL: its node and apiserver stay) or stopped (SIGTERM: it
 *     hands over): the Backup commits the entries into its kernel before it adds the VIP (its
 *     /status lastCommit, its conntrack table), the client's packets go to it, and every stream
 *     is kept (no reset, events after the takeover), none left hanging.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Lab, LabNode } from '../../lab/lab.js';
import { compiledScript } from '../../lab/lab.js';
import { startAgent, waitForHolder, type LabAgent } from '../../lab/cluster.js';
import { SYNC_GROUP_V6, syncPort } from '../../src/dataplane/conntrackd.js';
import { openWatchStreams } from '../../lab/streams.js';
import { needs, sleep, startLab, waitFor } from '../support/index.js';

const PREFIX = 'bc6';
const SUBNET = 204;
const VRID = 51;
const ADVERT_MS = 100;
const INTERVAL_MS = 200;
/** The stand-ins' bookmark interval: one server event per stream every this many ms. */
const EVENT_MS = 200;
const STREAMS = 16;
const SOURCES = 2;
/** How long the streams run after the takeover, ms: past the killed holder's VIP lifetime (5 s, renewed every third). */
const AFTER_MS = 3000;

/** `cmd` with $CONF set to the node's own conntrackd.conf (its directory names the node's network namespace). */
const withConf = (cmd: string): string[] => [
  'sh',
  '-c',
  `CONF=/run/ballast/conntrackd-$(stat -L -c %i /proc/self/ns/net)-eth0-vrid${VRID}/conntrackd.conf; ${cmd}`,
];

describe.skipIf(needs('root', 'conntrackd', 'conntrack', 'tcpdump'))(
  'connection sync over IPv6 multicast (root, conntrackd, tcpdump; skipped otherwise)',
  () => {
    let lab: Lab;
    const agents: LabAgent[] = [];

    beforeAll(async () => {
      compiledScript('watch-streams');
      lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 2, ipv6: true });
      await lab.startApiservers({ store: true, bookmarkMs: EVENT_MS });
      // the nodes' VRRP interface carries IPv6 only
      for (const n of lab.nodes) {
        await lab.exec(n.netns, ['ip', '-4', 'addr', 'flush', 'dev', 'eth0']);
        expect((await lab.exec(n.netns, ['ip', '-4', '-o', 'addr', 'show', 'dev', 'eth0'])).stdout.trim()).toBe('');
      }
      for (let i = 1; i <= SOURCES; i++) await lab.exec(lab.client.netns, ['ip', 'addr', 'add', `fd78:${SUBNET}::${50 + i}/64`, 'dev', 'eth0', 'nodad']);
    }, 60_000);
    afterEach(async () => {
      await Promise.all(agents.map((a) => a.stop('SIGKILL').catch(() => undefined)));
      agents.length = 0;
    });
    afterAll(async () => {
      await lab?.teardown();
    });

    for (const signal of ['SIGKILL', 'SIGTERM'] as const)
      it(`${signal} of the holder's agent: ${STREAMS} watch streams replicated over [${SYNC_GROUP_V6}]:${syncPort(VRID)}, committed by the Backup, all kept through it`, async () => {
        const vip = lab.vip6;
        const [n1, n2] = lab.nodes as [LabNode, LabNode];
        for (const [i, n] of [n1, n2].entries())
          agents.push(
            await startAgent(lab, n, {
              priority: [150, 100][i]!,
              family: 6,
              vrid: VRID,
              advertisementInterval: `${ADVERT_MS}ms`,
              balance: true,
              healthInterval: `${INTERVAL_MS}ms`,
            }),
          );
        const [a1, a2] = agents as [LabAgent, LabAgent];
        await waitForHolder(lab, vip, 'n1');
        for (const a of agents)
          await waitFor(
            () => a.status(),
            (s) => s.backends.length === 2 && s.backends.every((b) => b.healthy) && s.connectionSync?.state === 'running',
            { timeoutMs: 8000, what: `both backends up and conntrackd running on ${a.node.name}` },
          );

        // the IPv6 transport, and nothing of IPv4
        for (const n of [n1, n2]) {
          const conf = (await lab.exec(n.netns, withConf('cat "$CONF"'))).stdout;
          const transport = /Multicast Default \{([^}]*)\}/.exec(conf)?.[1] ?? '';
          expect(transport.trim().split(/\s*\n\s*/)).toStrictEqual([
            `IPv6_address ${SYNC_GROUP_V6}`,
            `Group ${syncPort(VRID)}`,
            'Interface eth0',
            'SndSocketBuffer 1249280',
            'RcvSocketBuffer 1249280',
            'Checksum on',
          ]);
        }
        // conntrackd's messages on the Backup's wire (FTFW sends an alive message every second at least)
        const dump = await lab.exec(
          n2.netns,
          ['timeout', '5', 'tcpdump', '-i', 'eth0', '-n', '-l', '-c', '3', `ip6 and dst host ${SYNC_GROUP_V6} and udp dst port ${syncPort(VRID)}`],
          { allowFail: true, timeoutMs: 8000 },
        );
        const wire = dump.stdout.split('\n').filter((l) => l.includes(`> ${SYNC_GROUP_V6}.${syncPort(VRID)}: UDP`));
        expect(wire.length, `tcpdump on n2:\n${dump.stdout}${dump.stderr}`).toBe(3);

        const sources = Array.from({ length: SOURCES }, (_, i) => `fd78:${SUBNET}::${51 + i}`);
        const streams = await openWatchStreams(lab, {
          url: `https://[${vip}]:6443`,
          sources: sources,
          count: STREAMS,
          durationMs: 30_000,
          gapMs: 1.5 * EVENT_MS,
          name: `streams-${signal}`,
        });

        // the holder's entries in the Backup's external cache, over IPv6 multicast
        const established = (list: string): number =>
          list.split('\n').filter((l) => / ESTABLISHED /.test(l) && l.includes(`dst=${vip} `) && l.includes(' dport=6443 ')).length;
        const external = await waitFor(
          async () => established((await lab.exec(n2.netns, withConf('conntrackd -C "$CONF" -e'), { allowFail: true })).stdout),
          (k) => k >= STREAMS,
          { timeoutMs: 8000, intervalMs: 200, what: `n2's conntrackd to hold the ${STREAMS} streams` },
        );
        // (before the takeover n2's own kernel has none of them: they never crossed it)
        const before = established((await lab.exec(n2.netns, ['conntrack', '-L', '-f', 'ipv6'], { allowFail: true })).stdout);
        expect(before).toBe(0);
        await sleep(4 * EVENT_MS);

        const killedAt = Date.now();
        await a1.stop(signal);
        await waitFor(
          () => a2.status(),
          (s) => s.state === 'master' && s.connectionSync?.lastCommit !== null,
          { timeoutMs: 5000, what: 'n2 master, its commit done' },
        );
        // the committed entries are in n2's kernel (the streams' own packets follow them)
        const committed = established((await lab.exec(n2.netns, ['conntrack', '-L', '-f', 'ipv6'], { allowFail: true })).stdout);
        await sleep(AFTER_MS);
        const st2 = await a2.status();
        // the streams' packets reach n2 since its unsolicited NA (a killed holder's node keeps its copy of the VIP a while)
        const mac = /link\/ether (\S+)/.exec((await lab.exec(n2.netns, ['ip', '-o', 'link', 'show', 'eth0'])).stdout)?.[1];
        const neighbour = (await lab.exec(lab.client.netns, ['ip', '-6', 'neigh', 'show', vip, 'dev', 'eth0'])).stdout;
        const records = await streams.finish();

        const takeover = a2.logLines().find((l) => l.msg === 'state change' && l.to === 'master' && Date.parse(String(l.at)) >= killedAt);
        const takeoverAt = Date.parse(String(takeover?.at));
        const added = a2.logLines().find((l) => l.msg === 'VIPs added' && Date.parse(String(l.time)) >= takeoverAt);
        const kept = records.filter((r) => r.end === null && (r.lastEventAt ?? 0) > takeoverAt + EVENT_MS);
        const hanging = records.filter((r) => r.end === null && (r.lastEventAt ?? 0) <= takeoverAt + EVENT_MS);
        const nodes: Record<string, number> = {};
        for (const r of records) nodes[r.node ?? '?'] = (nodes[r.node ?? '?'] ?? 0) + 1;
        const stall = Math.max(EVENT_MS, ...kept.flatMap((r) => r.gaps.filter(([at, ms]) => at + ms >= killedAt).map(([, ms]) => ms)));
        console.log(
          `[connection sync IPv6] ${external} entries in n2's external cache; takeover ${takeoverAt - killedAt} ms after the ${signal}, commit ${st2.connectionSync?.lastCommit?.durationMs} ms, ` +
            `VIP added ${Date.parse(String(added?.time)) - takeoverAt} ms after it; ${committed} established in n2's kernel after it; streams by node ${JSON.stringify(nodes)}, kept ${kept.length}/${records.length}, longest stall ${stall} ms`,
        );
        expect(neighbour).toContain(`lladdr ${mac} `);
        expect(records).toHaveLength(STREAMS);
        expect(Object.keys(nodes).sort()).toStrictEqual(['n1', 'n2']);
        expect(st2.connectionSync?.lastCommit).toMatchObject({ ok: true });
        expect(committed).toBeGreaterThanOrEqual(STREAMS);
        expect(added).toBeDefined();
        expect(hanging).toStrictEqual([]);
        expect(kept).toHaveLength(STREAMS);
      }, 90_000);
  },
);
