/**
 * `npm run demo`: the main job on an embedded lab.
 *
 * Three control-plane nodes (network namespaces on a bridge) run ballast with priorities
 * 150/100/50 and a TLS stand-in apiserver each; a client namespace requests
 * https://VIP:6443/version every 10 ms. The demo shows who holds the VIP, takes the holder's link
 * down, and prints the outage the client saw and the new holder. Everything is torn down at the end.
 */
import { Lab, runProber } from './lab.js';
import { startAgent, waitFor, waitForSingleHolder, type LabAgent } from './cluster.js';
import { masterDownIntervalMs } from '../src/vrrp/state.js';

const PREFIX = 'bdemo';
const SUBNET = 90;
const ADVERT_MS = 100;

function say(line: string): void {
  process.stdout.write(`${line}\n`);
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
      agents.push(await startAgent(lab, node, { priority: priorities[i]!, advertisementInterval: `${ADVERT_MS}ms` }));
    }
    say(`ballast running on ${lab.nodes.map((n, i) => `${n.name} (priority ${priorities[i]})`).join(', ')}, VIP ${lab.vip4}, adverts every ${ADVERT_MS} ms`);

    const holder = await waitForSingleHolder(lab, lab.vip4, 10_000);
    const holderAgent = agents.find((a) => a.node === holder)!;
    const st = await holderAgent.status();
    say(`holder: ${holder.name} (${holder.ipv4}), state ${st.state}, priority ${st.priority}`);

    const url = `https://${lab.vip4}:6443/version`;
    say(`client: GET ${url} every 10 ms, verifying the lab CA`);
    const prober = runProber(lab, { url, intervalMs: 10, durationMs: 15_000, timeoutMs: 250 });
    await new Promise((r) => setTimeout(r, 1500));

    say(`taking ${holder.name}'s link down`);
    await lab.linkDown(holder);
    const others = lab.nodes.filter((n) => n !== holder);
    const next = await waitFor(
      () => lab.holders(lab.vip4),
      (hs) => hs.length === 1 && others.includes(hs[0]!),
      { timeoutMs: 5000, what: 'a new holder' },
    );
    await new Promise((r) => setTimeout(r, 1500));
    const summary = await prober.stop();

    const nextNode = next[0]!;
    const nextPriority = priorities[lab.nodes.indexOf(nextNode)]!;
    const bound = masterDownIntervalMs(nextPriority, ADVERT_MS / 10);
    say(`new holder: ${nextNode.name} (${nextNode.ipv4})`);
    say(`client: ${summary.requests} requests, ${summary.ok} ok, ${summary.failed} failed, served by ${Object.entries(summary.nodes).map(([n, c]) => `${n}=${c}`).join(' ')}`);
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
