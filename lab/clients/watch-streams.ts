/**
 * Long-lived watch streams, the way kubectl and controllers hold them: N TLS connections to the
 * stand-in apiserver's EndpointSlice watch with bookmarks (the stand-in sends one every
 * `--bookmark-ms` of its own, e.g. 200 ms: a server-initiated event), each bound to one of the
 * given source addresses in turn. It never reconnects: it records how each stream fared, so
 * that a test can tell a connection that was kept from one that was reset or left hanging.
 *
 *   node dist/lab/clients/watch-streams.js --url https://10.78.S.100:6443 --ca CA
 *        --sources 10.78.S.31,10.78.S.32 [--count 300] [--duration 60000] [--open-rate 200]
 *        [--gap-ms 1000] [--token T] [--out FILE]
 *
 * stdout, one JSON object per line: `{"open":N,"failed":N}` once every stream opened (or failed
 * to), then on SIGTERM / SIGINT or after --duration one line per stream (into --out FILE
 * instead, when given) and a last `{"summary":true,…}` on stdout:
 *   {"stream":7,"source":"10.78.S.32","node":"n2","openedAt":…,"events":412,"lastEventAt":…,
 *    "gaps":[[at, ms], …],"endedAt":null,"end":null}
 * Times are wall-clock ms (Date.now(), comparable with another process's on the same machine).
 * `gaps`: every gap between two events (or from the last event to the end) longer than --gap-ms
 * (default 1000),
 * with when it started. `end`: null (open at the end), 'reset' (ECONNRESET, EPIPE), 'fin' (the
 * server closed it), 'error' (anything else, `error` says what).
 * Bounded: --count connections, opened once, for --duration ms at most.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import tls from 'node:tls';
import { parseArgs } from 'node:util';
import { intArg, runIfMain } from '../entry.js';

/** One stream's record (a line of the output). */
export interface StreamRecord {
  stream: number;
  source: string;
  /** the client's TCP port (null until connected) */
  port: number | null;
  /** the node that serves it (the stand-in's x-ballast-lab-node header), null before the headers */
  node: string | null;
  openedAt: number;
  events: number;
  lastEventAt: number | null;
  /** gaps between events longer than GAP_MS: [start, length ms] */
  gaps: [number, number][];
  endedAt: number | null;
  end: 'reset' | 'fin' | 'error' | null;
  error?: string;
}

/** Gaps shorter than this are not listed by default (--gap-ms), ms. */
export const GAP_MS = 1000;

const WATCH_PATH = '/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?watch=true&allowWatchBookmarks=true';

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      url: { type: 'string' },
      ca: { type: 'string' },
      sources: { type: 'string' },
      count: { type: 'string' },
      duration: { type: 'string' },
      'open-rate': { type: 'string' },
      token: { type: 'string' },
      'gap-ms': { type: 'string' },
      out: { type: 'string' },
    },
  });
  if (!values.url || !values.ca || !values.sources) throw new TypeError('--url, --ca and --sources are required');
  const url = new URL(values.url);
  const ca = readFileSync(values.ca);
  const sources = values.sources.split(',').filter((s) => s !== '');
  const count = intArg('count', values.count, 300, 1, 20_000);
  const duration = intArg('duration', values.duration, 60_000, 1000, 3_600_000);
  const openRate = intArg('open-rate', values['open-rate'], 200, 1, 10_000);
  const gapMs = intArg('gap-ms', values['gap-ms'], GAP_MS, 10, 600_000);
  const host = url.hostname.replace(/^\[|\]$/g, '');
  const port = Number(url.port || 443);
  const records: StreamRecord[] = [];
  const sockets: tls.TLSSocket[] = [];
  let opened = 0;
  let failed = 0;

  const open = (i: number): Promise<void> =>
    new Promise((resolve) => {
      const rec: StreamRecord = {
        stream: i,
        source: sources[i % sources.length]!,
        port: null,
        node: null,
        openedAt: Date.now(),
        events: 0,
        lastEventAt: null,
        gaps: [],
        endedAt: null,
        end: null,
      };
      records.push(rec);
      // the TCP socket first: tls.connect has no localAddress of its own
      const tcp = net.connect({ host, port, localAddress: rec.source });
      const s = tls.connect({ socket: tcp, host, ca, ...(net.isIP(host) ? {} : { servername: host }) });
      sockets.push(s);
      let head = '';
      let headersDone = false;
      let settled = false;
      const settle = (): void => {
        if (settled) return;
        settled = true;
        resolve();
      };
      const finish = (end: StreamRecord['end'], error?: string): void => {
        if (rec.end !== null) return;
        rec.end = end;
        rec.endedAt = Date.now();
        if (error !== undefined) rec.error = error;
        if (!headersDone) failed++;
        settle();
      };
      s.setNoDelay(true);
      tcp.once('connect', () => (rec.port = tcp.localPort ?? null));
      s.once('secureConnect', () => {
        s.write(
          `GET ${WATCH_PATH} HTTP/1.1\r\nHost: ${url.host}\r\n${values.token ? `Authorization: Bearer ${values.token}\r\n` : ''}Accept: application/json\r\n\r\n`,
        );
      });
      s.on('data', (buf: Buffer) => {
        const now = Date.now();
        if (!headersDone) {
          head += buf.toString('latin1');
          const end = head.indexOf('\r\n\r\n');
          if (end < 0) return;
          headersDone = true;
          rec.node = /x-ballast-lab-node: *(\S+)/i.exec(head.slice(0, end))?.[1] ?? null;
          opened++;
          settle();
          buf = Buffer.from(head.slice(end + 4), 'latin1');
        }
        // every event is one JSON line in its own chunk: count the newlines
        const n = buf.toString('latin1').split('\n').length - 1;
        if (n === 0) return;
        if (rec.lastEventAt !== null && now - rec.lastEventAt > gapMs) rec.gaps.push([rec.lastEventAt, now - rec.lastEventAt]);
        rec.events += n;
        rec.lastEventAt = now;
      });
      s.once('end', () => finish('fin'));
      s.once('error', (err: NodeJS.ErrnoException) => finish(err.code === 'ECONNRESET' || err.code === 'EPIPE' ? 'reset' : 'error', err.code ?? err.message));
      s.once('close', () => finish('fin'));
    });

  const started = Date.now();
  for (let i = 0; i < count; i++) {
    void open(i);
    if ((i + 1) % Math.max(1, Math.round(openRate / 20)) === 0) await new Promise((r) => setTimeout(r, 50));
  }
  const deadline = started + duration;
  while (opened + failed < count && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  process.stdout.write(`${JSON.stringify({ open: opened, failed })}\n`);

  await new Promise<void>((resolve) => {
    const t = setTimeout(resolve, Math.max(0, deadline - Date.now()));
    process.once('SIGTERM', () => (clearTimeout(t), resolve()));
    process.once('SIGINT', () => (clearTimeout(t), resolve()));
  });
  const now = Date.now();
  for (const r of records) {
    // a stream that went quiet and was never ended: its last gap runs to now
    if (r.end === null && r.lastEventAt !== null && now - r.lastEventAt > gapMs) r.gaps.push([r.lastEventAt, now - r.lastEventAt]);
  }
  const lines = records.map((r) => `${JSON.stringify(r)}\n`).join('');
  if (values.out) writeFileSync(values.out, lines);
  else process.stdout.write(lines);
  const ended = records.filter((r) => r.end !== null).length;
  process.stdout.write(`${JSON.stringify({ summary: true, streams: records.length, opened, failed, ended, at: now })}\n`);
  for (const s of sockets) s.destroy();
  return 0;
}

runIfMain(import.meta.url, 'watch-streams', main);
