/**
 * `npm run demo`: the main job on an embedded lab.
 *
 * Three control-plane nodes (network namespaces on a bridge) run ballast with priorities
 * 150/100/50 and load balancing on (VIP:6443 → every ready apiserver, /readyz every 200 ms), and a
 * TLS stand-in apiserver each; a client namespace requests https://VIP:6443/version every 10 ms,
 * each request on a new TLS connection. The demo shows:
 *   1. who holds the VIP, and that the client's requests are spread over n1, n2 and n3;
 *   2. the holder's apiserver stops while its node and agent stay up: the client's error window,
 *      that the VIP did not move, who serves now; then the apiserver comes back and is back in
 *      rotation;
 *   3. the holder's link goes down: the outage the client saw and the new holder.
 * Everything is torn down at the end.
 */
import { Lab, runProber, type ProbeResult } from './lab.js';
import { startAgent, waitForSingleHolder, type LabAgent } from './cluster.js';
import { sleep, waitFor } from './wait.js';
import { masterDownIntervalMs } from '../src/vrrp/state.js';

const PREFIX = 'bdemo';
const SUBNET = 90;
const ADVERT_MS = 100;
const HEALTH_INTERVAL_MS = 200;

function say(line: string): void {
  process.stdout.write(`${line}\n`);
}

/** "n1=50 n2=48 n3=52" from successful results (pure). */
function spread(results: readonly ProbeResult[]): string {
  const by: Record<string, number> = {};
  for (const r of results) if (r.ok && r.node !== undefined) by[r.node] = (by[r.node] ?? 0) + 1;
  return (
    Object.entries(by)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([n, c]) => `${n}=${c}`)
      .join(' ') || 'nobody'
  );
}

/** "ECONNREFUSED×3 timeout×1" from failed results (pure). */
function errors(results: readonly ProbeResult[]): string {
  const by: Record<string, number> = {};
  for (const r of results) if (!r.ok) by[r.error] = (by[r.error] ?? 0) + 1;
  return Object.entries(by)
    .map(([e, c]) => `${e}×${c}`)
    .join(' ');
}

async function main(): Promise<number> {
  if (process.getuid?.() !== 0) {
    say('demo: needs root (network namespaces, raw sockets); run it as root');
    return 1;
  }
  await Lab.cleanupStale(PREFIX);
  say(`building the lab: 3 nodes + 1 client in network namespaces (${PREFIX}-*), 10.78.${SUBNET}.0/24`);
  const lab = await Lab.create({ prefix: PREFIX, subnet: SUBNET, nodes: 3 });
  const agents: LabAgent[] = [];
  try {
    await lab.startApiservers();
    say(`TLS stand-in apiservers on ${lab.nodes.map((n) => `${n.name} ${n.ipv4}:6443`).join(', ')}`);
    const priorities = [150, 100, 50];
    for (const [i, node] of lab.nodes.entries()) {
      agents.push(
        await startAgent(lab, node, {
          priority: priorities[i]!,
          advertisementInterval: `${ADVERT_MS}ms`,
          balance: true,
          healthInterval: `${HEALTH_INTERVAL_MS}ms`,
        }),
      );
    }
    say(`ballast running on ${lab.nodes.map((n, i) => `${n.name} (priority ${priorities[i]})`).join(', ')}, VIP ${lab.vip4}, adverts every ${ADVERT_MS} ms`);
    say(
      `load balancing: ${lab.vip4}:6443 → every ready apiserver (nftables DNAT), /readyz checked every ${HEALTH_INTERVAL_MS} ms, passive detection from conntrack`,
    );

    const holder = await waitForSingleHolder(lab, lab.vip4, 10_000);
    const holderAgent = agents.find((a) => a.node === holder)!;
    const st = await holderAgent.status();
    say(`holder: ${holder.name} (${holder.ipv4}), state ${st.state}, priority ${st.priority}`);
    const ready = await waitFor(
      () => holderAgent.status(),
      (s) => s.backends.length === lab.nodes.length && s.backends.every((b) => b.healthy),
      { timeoutMs: 5000, intervalMs: 50, what: `every backend healthy on ${holder.name}` },
    );
    say(`${holder.name}'s backends: ${ready.backends.map((b) => `${b.address} ${b.state}`).join(', ')}`);

    const url = `https://${lab.vip4}:6443/version`;
    say(`client: GET ${url} every 10 ms, a new TLS connection each, verifying the lab CA`);

    // 1. the spread
    const first = await runProber(lab, { url, intervalMs: 10, durationMs: 1500, timeoutMs: 250 }).done;
    say(`1.5 s of requests: ${first.ok} ok, ${first.failed} failed, served by ${spread(first.results)}`);

    // 2. the holder's apiserver stops, its node and agent stay up
    const during = runProber(lab, { url, intervalMs: 10, durationMs: 15_000, timeoutMs: 250 });
    await sleep(500);
    const faultT = Math.max(0, ...during.results().map((r) => r.t));
    say(`stopping ${holder.name}'s apiserver (${holder.name} and its agent stay up)`);
    await lab.stopApiserver(holder);
    await sleep(1500);
    const stopped = await during.stop();
    const after = stopped.results.filter((r) => r.t > faultT);
    const failedAfter = after.filter((r) => !r.ok);
    const holdersNow = await lab.holders(lab.vip4);
    const down = (await holderAgent.status()).backends.find((b) => b.address === `${holder.ipv4}:6443`);
    say(
      `client: error window ${stopped.maxOutageMs} ms, ${failedAfter.length} of ${after.length} requests failed${failedAfter.length ? ` (${errors(failedAfter)})` : ''}`,
    );
    say(
      `VIP: ${holdersNow.length === 1 && holdersNow[0] === holder ? `still on ${holder.name}, it did not move` : `now on ${holdersNow.map((n) => n.name).join(',') || 'nobody'}`}`,
    );
    say(`${holder.name}'s agent: backend ${holder.ipv4}:6443 ${down?.state ?? 'unknown'}${down?.reason ? ` (${down.reason})` : ''}`);
    // requests that started during the stand-in's shutdown may still have been answered by it
    const settled = after.filter((r) => r.t > faultT + 200);
    say(`served since: ${spread(settled)}`);

    say(`starting ${holder.name}'s apiserver again`);
    await lab.startApiserver(holder);
    const t0 = Date.now();
    await waitFor(
      () => holderAgent.status(),
      (s) => s.backends.find((b) => b.address === `${holder.ipv4}:6443`)?.healthy === true,
      { timeoutMs: 5000, intervalMs: 25, what: `${holder.name}'s apiserver back in rotation` },
    );
    say(`back in rotation ${Date.now() - t0} ms after it answered again (rise 2 × ${HEALTH_INTERVAL_MS} ms checks)`);
    const back = await runProber(lab, { url, intervalMs: 10, durationMs: 1000, timeoutMs: 250 }).done;
    say(`1 s of requests: ${back.ok} ok, ${back.failed} failed, served by ${spread(back.results)}`);

    // 3. the holder's link goes down
    const prober = runProber(lab, { url, intervalMs: 10, durationMs: 15_000, timeoutMs: 250 });
    await sleep(1500);

    say(`taking ${holder.name}'s link down`);
    await lab.linkDown(holder);
    const others = lab.nodes.filter((n) => n !== holder);
    const next = await waitFor(
      () => lab.holders(lab.vip4),
      (hs) => hs.length === 1 && others.includes(hs[0]!),
      { timeoutMs: 5000, what: 'a new holder' },
    );
    await sleep(1500);
    const summary = await prober.stop();

    const nextNode = next[0]!;
    const nextPriority = priorities[lab.nodes.indexOf(nextNode)]!;
    const bound = masterDownIntervalMs(nextPriority, ADVERT_MS / 10);
    say(`new holder: ${nextNode.name} (${nextNode.ipv4})`);
    say(
      `client: ${summary.requests} requests, ${summary.ok} ok, ${summary.failed} failed, served by ${Object.entries(summary.nodes)
        .map(([n, c]) => `${n}=${c}`)
        .join(' ')}`,
    );
    say(`outage: ${summary.maxOutageMs} ms (Master_Down_Interval of ${nextNode.name}: ${bound.toFixed(1)} ms)`);
    return 0;
  } finally {
    for (const a of agents) await a.stop().catch(() => undefined);
    await lab.teardown();
    say('lab torn down');
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`demo failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
