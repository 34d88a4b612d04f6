/**
 * `npm run demo:lifecycle`: a cluster's lifecycle on an embedded lab (lab/lifecycle.ts):
 * one config file per node, written before anything exists, carries the VIP from before
 * `kubeadm init` to the replacement of every control-plane node, with a reload at the end.
 * Prints, per step, the longest client outage (VIP client and the worker's local-endpoint
 * client), the failed-request count and the bound the failures were held to; exits 0 only when
 * every step held.
 *
 *   node dist/lab/demo-lifecycle.js [--runs N] [--multicast]
 *
 * With --runs N (default 1) the scenario runs N times on fresh labs and the medians per step
 * are printed at the end.
 */
import { parseArgs } from 'node:util';
import { Lifecycle, type StepFigures } from './lifecycle.js';

const PREFIX = 'bldem';
const SUBNET = 246;

function say(line: string): void {
  process.stdout.write(`${line}\n`);
}

/** The median of `xs` (the mean of the middle two for an even count) (pure). */
function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

async function once(run: number, multicast: boolean): Promise<{ figures: StepFigures[]; error: string | null }> {
  say(`\n=== run ${run}: building a 7-node lab (${PREFIX}-*, 10.78.${SUBNET}.0/24): n1..n6 control plane, n7 a worker`);
  const lc = await Lifecycle.create({ prefix: PREFIX, subnet: SUBNET, vrrp: multicast ? 'multicast' : 'unicast', log: say });
  say(
    `VIP ${lc.lab.vip4}; every node's file written once (${lc.vrrpMode}${lc.vrrpMode === 'unicast' ? ', vrrp.peers: discovered' : ''}; seed ${lc.seed().join(' ')})`,
  );
  let error: string | null = null;
  try {
    await lc.run();
  } catch (e) {
    error = e instanceof Error ? (e.stack ?? e.message) : String(e);
    say(`run ${run} stopped: ${error}`);
  } finally {
    await lc.teardown();
  }
  return { figures: lc.figures, error };
}

async function main(): Promise<number> {
  if (process.getuid?.() !== 0) {
    say('demo:lifecycle: needs root (network namespaces, raw sockets, BPF); run it as root');
    return 1;
  }
  const { values } = parseArgs({ options: { runs: { type: 'string', default: '1' }, multicast: { type: 'boolean', default: false } }, strict: true });
  const runs = Number(values.runs);
  if (!Number.isInteger(runs) || runs < 1 || runs > 10) throw new TypeError(`--runs must be 1..10, got ${values.runs}`);
  const all: { figures: StepFigures[]; error: string | null }[] = [];
  for (let i = 1; i <= runs; i++) all.push(await once(i, values.multicast));

  say('\n=== summary' + (runs > 1 ? ` (medians of ${runs} runs)` : ''));
  say('step | VIP: longest outage ms, failed | local: longest outage ms, failed | VIP moves | held');
  let ok = all.every((r) => r.error === null && r.figures.length === 6);
  for (let step = 1; step <= 6; step++) {
    const f = all.map((r) => r.figures.find((x) => x.step === step)).filter((x): x is StepFigures => x !== undefined);
    if (f.length < runs) ok = false;
    if (f.length === 0) {
      say(`${step}    | not reached`);
      continue;
    }
    const held = f.filter((x) => x.pass).length;
    if (held < runs) ok = false;
    const loc = f.filter((x) => x.local !== null);
    say(
      `${step}    | ${median(f.map((x) => x.vip.maxOutageMs))}, ${median(f.map((x) => x.vip.failed))}` +
        ` | ${loc.length ? `${median(loc.map((x) => x.local!.maxOutageMs))}, ${median(loc.map((x) => x.local!.failed))}` : 'not running'}` +
        ` | ${median(f.map((x) => x.vipMoves))} | ${held}/${runs}  ${f[0]!.title}`,
    );
    const bounds = [
      ...new Set(f[0]!.causes.map((c) => `${c.name}: ${Number.isFinite(c.bound.ms) ? `${c.bound.name} = ${c.bound.ms.toFixed(0)} ms` : c.bound.name}`)),
    ];
    say(`       bounds: ${bounds.join('; ') || 'none spent: no request may fail'}`);
  }
  say(ok ? 'every step held' : 'NOT every step held');
  return ok ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`demo:lifecycle failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
