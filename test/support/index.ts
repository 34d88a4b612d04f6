/**
 * Test support: what the test files share. Import from here:
 *   needs      — visible skips: `describe.skipIf(needs('root'))(…)` (needs.ts)
 *   sleep, waitFor — the one pause and the one bounded poll (lab/wait.ts, shared with the lab and benchmarks)
 *   startLab   — the one way to start a lab (lab.ts)
 * The packet helpers (pcap.ts, prng.ts) and the native peer (native-peer.ts) are imported directly.
 */
export { needs, type Need } from './needs.js';
export { sleep, waitFor, type WaitOptions } from '../../lab/wait.js';
export { startLab, useElectionLab, type StartLabOptions } from './lab.js';
