/**
 * rtnetlink dumps while address notifications arrive, in a lab namespace (prefix brtn,
 * 10.78.156.0/24): the `netlink` package ends a multipart reply at the first other message on
 * its socket, so on a socket that also joined RTNLGRP_IPV4_IFADDR a notification arriving during
 * a dump fails the dump ("Multipart message not terminated properly"). An agent the chaos soak
 * restarted after SIGKILL exited 1 on it, at the election edge's first dump. The edge (src/vrrp/edge.ts) therefore takes notifications on a socket of
 * its own; this test shows both halves on the real kernel: the shared socket's dumps fail under
 * churn (another process adding and deleting an address), the request-only socket's never do,
 * and the events socket still hears the churn.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import type { Lab } from '../../lab/lab.js';
import { needs, startLab } from '../support/index.js';

const PREFIX = 'brtn';
const SUBNET = 156;
/** addresses on the churned interface: a dump of them spans several netlink datagrams */
const ADDRESSES = 2000;
/** dumps per socket */
const DUMPS = 150;

/** In the namespace: DUMPS dumps on each socket while `ip -batch` (another process) adds and deletes one address over and over. */
const SCRIPT = `
import { openRtnl } from ${JSON.stringify(join(process.cwd(), 'dist/src/vip/netlink.js'))};
const ifindex = Number(process.argv[1]);
const dumps = Number(process.argv[2]);
const shared = openRtnl();
shared.raw.addMembership('IPV4_IFADDR');
const requests = openRtnl();
const events = openRtnl();
events.raw.addMembership('IPV4_IFADDR');
let heard = 0;
events.raw.on('message', () => { heard++; });
shared.raw.on('message', () => undefined);
const run = async (rt) => {
  let failed = 0;
  let ok = 0;
  let message = '';
  for (let i = 0; i < dumps; i++) {
    try {
      const a = await rt.getAddresses();
      if (a.length >= ${ADDRESSES}) ok++;
    } catch (e) {
      failed++;
      if (!message) message = e.message; // the first: once a dump is cut, the next ones meet its rest (EBUSY)
    }
  }
  return { failed, ok, message };
};
const r = { shared: await run(shared), requests: await run(requests) };
console.log(JSON.stringify({ ...r, heard }));
for (const s of [shared, requests, events]) s.close();
`;

describe.skipIf(needs('root'))('rtnetlink: dumps and notifications (root; skipped otherwise)', () => {
  let lab: Lab;
  let ifindex = 0;

  beforeAll(async () => {
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 1, ipv6: false });
    const ns = lab.nodes[0]!.netns;
    // a veth pair inside the namespace (this kernel has no dummy driver)
    await lab.exec(ns, ['ip', 'link', 'add', 'churn0', 'type', 'veth', 'peer', 'name', 'churn1']);
    await lab.exec(ns, ['ip', 'link', 'set', 'churn0', 'up']);
    const batch = Array.from({ length: ADDRESSES }, (_, i) => `address add 10.99.${Math.floor(i / 250)}.${(i % 250) + 1}/32 dev churn0`).join('\n');
    await lab.exec(ns, ['sh', '-c', `printf '%s\\n' "${batch}" | ip -batch -`]);
    const link = JSON.parse((await lab.exec(ns, ['ip', '-j', 'link', 'show', 'churn0'])).stdout) as { ifindex: number }[];
    ifindex = link[0]!.ifindex;
  }, 60_000);
  afterAll(async () => {
    await lab?.teardown();
  });

  it(`${DUMPS} dumps of ${ADDRESSES} addresses under address churn: a subscribed socket's fail, a request-only socket's all succeed, the events socket hears the churn`, async () => {
    // the churn, one `ip` run per change (a flood from ip -batch overruns the subscribed
    // sockets' receive buffers: ENOBUFS); at most 2 × 5,000 changes, stopped when the dumps are done
    const churn = lab.spawn(lab.nodes[0]!.netns, [
      'sh',
      '-c',
      'for i in $(seq 5000); do ip address add 10.99.255.1/32 dev churn0; ip address del 10.99.255.1/32 dev churn0; done',
    ]);
    const r = await lab.exec(lab.nodes[0]!.netns, [process.execPath, '--input-type=module', '-e', SCRIPT, String(ifindex), String(DUMPS)], {
      timeoutMs: 60_000,
    });
    await churn.stop('SIGTERM');
    const out = JSON.parse(r.stdout.trim().split('\n').pop()!) as {
      shared: { failed: number; ok: number; message: string };
      requests: { failed: number; ok: number; message: string };
      heard: number;
    };
    console.log(
      `rtnetlink under churn: subscribed socket ${out.shared.failed}/${DUMPS} dumps failed (${out.shared.message}), request-only socket ${out.requests.failed}/${DUMPS} failed; events heard ${out.heard}`,
    );
    expect(out.shared.failed).toBeGreaterThan(0);
    expect(out.shared.message).toBe('Multipart message not terminated properly');
    expect(out.requests).toStrictEqual({ failed: 0, ok: DUMPS, message: '' });
    expect(out.heard).toBeGreaterThan(DUMPS);
  }, 90_000);
});
