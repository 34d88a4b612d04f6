/**
 * The import rules of src/, checked by `npm run lint:deps` (part of `npm run lint`):
 *
 *   1. no cycle between files (type-only imports count: a cycle of types is still a knot a
 *      reader has to untie);
 *   2. the parts of src/ (its top-level folders and files) form a ladder: a part imports only
 *      parts below it in LADDER. Any cycle between parts needs an upward import, so this also
 *      rules out cycles between folders;
 *   3. commands/ is imported by cli.ts alone;
 *   4. a phase (agent/phases/) imports no other phase, nor the agent that orders them (index.ts,
 *      phase-list.ts, reload.ts): it gets earlier phases' handles as typed inputs.
 *
 * A new part goes into LADDER where its imports put it; a rule broken names the two files.
 */
'use strict';

/** The parts of src/, lowest first. Each may import only the parts before it. */
const LADDER = [
  'errors', // the error registry
  'net', // addresses, host:port, checksum: parsed once, carried structured
  'log', // the Log type and rate-limited lines
  'native', // the one door to the addon
  'config', // one validated, frozen object
  'vip', // addresses via rtnetlink, ARP / NA frames
  'vrrp', // codec, state machine, engine, membership
  'discovery', // the backend set
  'health', // checks and verdicts
  'dataplane', // nftables, eBPF, proxy
  'bgp', // BIRD / FRR
  'policy', // effective priority
  'host', // locks, capabilities, interfaces: shared by the agent and the commands
  'check', // the preflight's checks (a library; the command is commands/check.ts)
  'manifest', // manifests and units rendered from a config
  'observe', // /status, metrics, the admin endpoint, sd_notify
  'agent', // the phases, start / reload / stop
  'commands', // one file per command
  'cli', // the entry point
];

/** A path regex matching part `p`: its folder, or its file at the top of src/. */
const part = (p) => `^src/${p}(/|\\.ts$)`;

const ladderRules = LADDER.map((p, i) => ({
  name: `ladder-${p}`,
  comment: `${p} sits below ${LADDER.slice(i + 1).join(', ')} in the ladder (.dependency-cruiser.cjs): it must not import them`,
  severity: 'error',
  from: { path: part(p) },
  to: { path: LADDER.slice(i + 1).map(part) },
})).filter((r) => r.to.path.length > 0);

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'a cycle between files of src/',
      severity: 'error',
      from: { path: '^src/' },
      to: { circular: true },
    },
    {
      name: 'commands-from-cli-only',
      comment: 'commands/ is imported by nothing but cli.ts (and by its own files)',
      severity: 'error',
      from: { path: '^src/', pathNot: ['^src/cli\\.ts$', '^src/commands/'] },
      to: { path: '^src/commands/' },
    },
    {
      name: 'known-part',
      comment: 'every file of src/ that imports belongs to a part of the ladder (LADDER above)',
      severity: 'error',
      from: { path: '^src/', pathNot: LADDER.map(part) },
      to: {},
    },
    {
      name: 'phases-apart',
      comment: "a phase imports no other phase: agent/index.ts, the only place that knows their order, hands it the earlier phases' handles",
      severity: 'error',
      from: { path: '^src/agent/phases/([^/]+)\\.ts$' },
      to: { path: '^src/agent/phases/', pathNot: '^src/agent/phases/$1\\.ts$' },
    },
    {
      name: 'phases-below-the-agent',
      comment: 'a phase does not import the agent that orders the phases (index.ts, phase-list.ts, reload.ts)',
      severity: 'error',
      from: { path: '^src/agent/phases/' },
      to: { path: '^src/agent/(index|phase-list|reload)\\.ts$' },
    },
    ...ladderRules,
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: 'node_modules' },
    tsConfig: { fileName: 'tsconfig.json' },
    // type-only imports are edges too
    tsPreCompilationDeps: true,
    moduleSystems: ['es6'],
  },
};
