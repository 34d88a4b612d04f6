/**
 * `node dist/bench/probe-cpu.js [--rounds 5] [--checks 200] [--json]` (no root): the CPU one
 * readiness check costs the agent, with a full TLS handshake every check (`sessionReuseMs: 0`,
 * what the probe did before) and with the session resumed (the default, SESSION_REUSE_MS),
 * side by side in one run with interleaved rounds.
 *
 * The server, an HTTPS `/readyz` on 127.0.0.1 with a P-256 certificate from a throw-away CA
 * (openssl), runs in a forked child, so the parent's CPU time (process.cpuUsage: user + system)
 * is the client's alone: the probe's connect, handshake, verification and request. Per round and
 * setup: `--checks` sequential checks of one backend; the figure is CPU ms per check, the median
 * over the rounds, and the ratio resumed / full.
 */
import { fork } from 'node:child_process';
import { once } from 'node:events';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { intArg, runIfMain } from '../lab/entry.js';
import { createProbe, type Probe } from '../src/health/probe.js';
import { makeTestPki } from '../test/support/tls.js';
import { load, ratioOf, round2, say } from './common.js';
import { stats, type Stats } from './stats.js';

const SETUPS = ['full', 'resumed'] as const;
type Setup = (typeof SETUPS)[number];
const USAGE = 'usage: node dist/bench/probe-cpu.js [--rounds 5] [--checks 200] [--json]';

/** The child: serves `/readyz` with the certificate files named in argv and sends its port to the parent (IPC). */
async function serve(certFile: string, keyFile: string): Promise<void> {
  const srv = https.createServer({ cert: readFileSync(certFile), key: readFileSync(keyFile) }, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
  });
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  process.send?.({ port: (srv.address() as AddressInfo).port });
  process.on('disconnect', () => process.exit(0));
}

/** CPU ms (user + system) per check over `checks` sequential checks. @throws when a check fails. */
async function cpuPerCheck(probe: Probe, port: number, checks: number): Promise<number> {
  const before = process.cpuUsage();
  for (let i = 0; i < checks; i++) {
    const r = await probe({ host: '127.0.0.1', port });
    if (!r.ok) throw new Error(`check ${i} failed: ${r.error}`);
  }
  const d = process.cpuUsage(before);
  return (d.user + d.system) / 1000 / checks;
}

async function main(argv: string[]): Promise<number> {
  if (argv[0] === '--serve') {
    await serve(argv[1]!, argv[2]!);
    return new Promise<number>(() => undefined);
  }
  let v;
  try {
    v = parseArgs({
      args: argv,
      options: { rounds: { type: 'string' }, checks: { type: 'string' }, json: { type: 'boolean', default: false } },
      strict: true,
    }).values;
  } catch (e) {
    process.stderr.write(`${(e as Error).message}\n${USAGE}\n`);
    return 2;
  }
  const rounds = intArg('rounds', v.rounds, 5, 1, 100);
  const checks = intArg('checks', v.checks, 200, 10, 100_000);
  const pki = makeTestPki(['127.0.0.1']);
  const child = fork(fileURLToPath(import.meta.url), ['--serve', `${pki.dir}/server.crt`, `${pki.dir}/server.key`], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  try {
    const [msg] = (await once(child, 'message')) as [{ port: number }];
    const settings = { path: '/readyz', timeoutMs: 2000, caFile: pki.caFile, insecureSkipVerify: false };
    const perCheck: Record<Setup, number[]> = { full: [], resumed: [] };
    const loadBefore = load();
    for (let r = 0; r < rounds; r++) {
      // alternate which setup goes first, so a drift in the machine's load favours neither
      const order = r % 2 === 0 ? SETUPS : [...SETUPS].reverse();
      for (const s of order) {
        const probe = createProbe(settings, s === 'full' ? { sessionReuseMs: 0 } : {});
        await probe({ host: '127.0.0.1', port: msg.port }); // warm-up: the file reads, the first full handshake
        perCheck[s].push(await cpuPerCheck(probe, msg.port, checks));
      }
    }
    const result: Record<Setup, Stats> = { full: stats(perCheck.full, 3), resumed: stats(perCheck.resumed, 3) };
    const ratio = ratioOf(result.resumed.median, result.full.median);
    if (v.json) {
      say(JSON.stringify({ rounds, checks, load: { before: loadBefore, after: load() }, cpuMsPerCheck: result, ratio, samples: perCheck }));
      return 0;
    }
    say(`probe CPU per check (ms, user + system, medians of ${rounds} rounds × ${checks} checks; load ${loadBefore.join(' ')})`);
    say(`  full handshake   ${result.full.median?.toFixed(3)}  (min ${round2(result.full.min ?? 0)}, max ${round2(result.full.max ?? 0)})`);
    say(`  resumed session  ${result.resumed.median?.toFixed(3)}  (min ${round2(result.resumed.min ?? 0)}, max ${round2(result.resumed.max ?? 0)})`);
    say(`  resumed / full   ${ratio === null ? '—' : `×${ratio.toFixed(2)}`}`);
    return 0;
  } finally {
    child.disconnect();
    child.kill();
    pki.remove();
  }
}

runIfMain(import.meta.url, 'probe-cpu bench', main);
