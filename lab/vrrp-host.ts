/**
 * One election engine (src/vrrp/host.ts: the engine on this thread, the native edge and its
 * advert pacer) in a lab namespace, driven over stdin: for the tests that reconfigure a running
 * election at the engine level (peers that follow membership, members, VIPs) without a whole
 * agent. Bounded: it stops on `{"op":"stop"}`, on stdin's end, on SIGTERM, or after `--max-ms` (default 120 s).
 *
 *   node dist/lab/vrrp-host.js --ifname eth0 --vip 10.78.S.100 --priority 200 \
 *     [--peer ADDR]... [--member ADDR]... [--interval-cs 10] [--vrid 51] [--max-ms 120000]
 *
 * Without `--peer` it is multicast; `--member` given = acceptFrom members. stdin, one JSON
 * object a line: {"id":1,"op":"reconfigure","patch":{…EngineReconfigure}} | {"id":2,"op":"status"}
 * | {"op":"stop"}. stdout, one JSON object a line: {"event":"started"}, {"id":1,"ok":true} or
 * {"id":1,"error":"…"}, {"id":2,"status":{…}}, the engine's transitions and logs as
 * {"event":"transition"|"log",…}, and {"event":"stopped"} last.
 */
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { VrrpHost } from '../src/vrrp/host.js';
import type { EngineReconfigure } from '../src/vrrp/engine.js';
import { listInterfaces, openRtnl, primaryAddress } from '../src/vip/netlink.js';
import { addressFamily } from '../src/net/address.js';

const { values: a } = parseArgs({
  options: {
    ifname: { type: 'string', default: 'eth0' },
    vip: { type: 'string', multiple: true },
    priority: { type: 'string', default: '100' },
    peer: { type: 'string', multiple: true },
    member: { type: 'string', multiple: true },
    'interval-cs': { type: 'string', default: '10' },
    vrid: { type: 'string', default: '51' },
    'max-ms': { type: 'string', default: '120000' },
  },
});
const out = (o: Record<string, unknown>): void => void process.stdout.write(`${JSON.stringify(o)}\n`);
if (!a.vip?.length) {
  process.stderr.write('usage: vrrp-host --vip ADDR [--peer ADDR]... [options]\n');
  process.exit(2);
}
const family = addressFamily(a.vip[0]!);
if (family === null) throw new Error(`--vip ${a.vip[0]} is not an IP address`);
const rt = openRtnl();
const iface = (await listInterfaces(rt)).find((i) => i.ifname === a.ifname);
rt.close();
if (!iface) throw new Error(`no interface ${a.ifname}`);
const primary = primaryAddress(iface, family, a.vip);
if (primary === null) throw new Error(`${a.ifname} has no primary IPv${family} address`);

const host = await VrrpHost.start(
  {
    vrid: Number(a.vrid),
    priority: Number(a.priority),
    advertisementIntervalCs: Number(a['interval-cs']),
    preempt: true,
    preemptDelayMs: 0,
    checksum: 'rfc5798',
    unicast: a.peer !== undefined,
    peers: a.peer ?? [],
    members: a.member ?? null,
    authKeys: null,
    vips: a.vip,
    family,
    ifname: iface.ifname,
    ifindex: iface.ifindex,
    mac: iface.mac,
    primaryAddress: primary,
    announce: { count: 1, spacingMs: 0, repeatAfterMs: 0, refreshMs: 0 },
    vipLifetimeMs: 0,
    preemptHoldAtStart: false,
    linkRunning: iface.running,
    owner: false,
  },
  (ev) => out({ event: ev.type, ...ev, at: Date.now() }),
);
out({ event: 'started', primary, at: Date.now() });

let stopping = false;
const stop = async (): Promise<void> => {
  if (stopping) return;
  stopping = true;
  await host.stop();
  out({ event: 'stopped', at: Date.now() });
  process.exit(0);
};
const limit = setTimeout(() => void stop(), Number(a['max-ms']));
limit.unref();
process.on('SIGTERM', () => void stop());

const lines = createInterface({ input: process.stdin });
lines.on('line', (line) => {
  let m: { id?: number; op?: string; patch?: EngineReconfigure };
  try {
    m = JSON.parse(line) as typeof m;
  } catch {
    out({ error: `not JSON: ${line}` });
    return;
  }
  if (m.op === 'stop') void stop();
  else if (m.op === 'status') void host.status().then((status) => out({ id: m.id, status }));
  else if (m.op === 'reconfigure') {
    const sentAt = Date.now();
    host.reconfigure(m.patch ?? {}).then(
      () => out({ id: m.id, ok: true, sentAt, at: Date.now() }),
      (err: unknown) => out({ id: m.id, error: (err as Error).message, sentAt, at: Date.now() }),
    );
  } else out({ id: m.id, error: `unknown op ${String(m.op)}` });
});
lines.on('close', () => void stop());
