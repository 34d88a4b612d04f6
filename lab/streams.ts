/**
 * The watch-streams client (lab/clients/watch-streams.ts) run from the lab's client namespace:
 * started, waited for until every stream is open, and read back once stopped. The tests of
 * connections kept across a move of the VIP (hitless, connection sync over IPv6, the reset
 * probes) share it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { StreamRecord } from './clients/watch-streams.js';
import { compiledScript, onJsonLines, type Lab } from './lab.js';
import type { LabProcess } from './processes.js';
import { waitFor } from './wait.js';

/** Options of {@link openWatchStreams}. */
export interface WatchStreamsOptions {
  /** The watch's base URL (https://VIP:6443, IPv6 literals in brackets). */
  url: string;
  /** Client source addresses (in the client namespace), used in turn. */
  sources: readonly string[];
  /** How many streams. */
  count: number;
  /** How long the client runs at most, ms. */
  durationMs: number;
  /** Gaps between two events longer than this are recorded, ms. */
  gapMs: number;
  /** Names the client's output (`<name>.jsonl`) and log (`<name>.log`) in the lab's directory. */
  name: string;
}

/** A running client. */
export interface WatchStreams {
  process: LabProcess;
  /** Stops the client (SIGTERM) and resolves with every stream's record. @throws Error when it does not report within 20 s. */
  finish(): Promise<StreamRecord[]>;
}

/**
 * Starts the client; resolves once every stream is open.
 * @throws Error when the client does not report its streams open within 20 s, or some failed to open.
 */
export async function openWatchStreams(lab: Lab, o: WatchStreamsOptions): Promise<WatchStreams> {
  const out = join(lab.dir, `${o.name}.jsonl`);
  const args = ['--url', o.url, '--ca', lab.ca.certFile, '--sources', o.sources.join(','), '--count', String(o.count)];
  args.push('--duration', String(o.durationMs), '--gap-ms', String(o.gapMs), '--out', out);
  const client = lab.spawn(lab.client.netns, [process.execPath, compiledScript('watch-streams'), ...args], { logFile: `${o.name}.log` });
  let summary: Record<string, unknown> | null = null;
  onJsonLines<Record<string, unknown>>(client, (line) => {
    if (line.summary === true) summary = line;
  });
  const opened = await client.waitForOutput(/\{"open":(\d+),"failed":(\d+)\}/, { timeoutMs: 20_000, includeExisting: true });
  if (Number(opened[1]) !== o.count) throw new Error(`watch streams: ${opened[1]} of ${o.count} opened, ${opened[2]} failed: ${client.output().slice(-1500)}`);
  return {
    process: client,
    async finish() {
      client.kill('SIGTERM');
      await waitFor(
        () => summary,
        (s) => s !== null,
        { timeoutMs: 20_000, what: 'the streams client to report' },
      ).catch((err: unknown) => {
        throw new Error(`${(err as Error).message}; its output ends: ${client.output().slice(-1500)}`);
      });
      return readFileSync(out, 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as StreamRecord);
    },
  };
}
