/**
 * `ballast status`: the running agent's /status, as text or JSON.
 */
import { createRequire } from 'node:module';
import { createError } from '../errors.js';
import { formatHostPort } from '../net/hostport.js';
import { formatStatus, type StatusDocument } from '../observe/status.js';
// node:http through require (observe/admin.ts says why: an ESM import loads all of undici)
const { get } = createRequire(import.meta.url)('node:http') as typeof import('node:http');

function fetchStatus(addr: { host: string; port: number }, timeoutMs = 2000): Promise<StatusDocument> {
  return new Promise((resolve, reject) => {
    const req = get({ host: addr.host, port: addr.port, path: '/status', timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => {
        if (res.statusCode !== 200) return reject(new Error(`HTTP ${res.statusCode}: ${body.trim()}`));
        let doc: unknown;
        try {
          doc = JSON.parse(body);
        } catch {
          return reject(new Error(`the answer is not JSON, so not a ballast agent's /status (${body.length} bytes)`));
        }
        if (!looksLikeStatus(doc))
          return reject(new Error("the answer is JSON but not a ballast agent's /status (another service on that port, or another version?)"));
        resolve(doc);
      });
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
  });
}

/**
 * Whether `v` has the parts of a /status document that `formatStatus` reads (observe/status.ts):
 * a state, the backends and the local endpoint, and with an election its counters and times.
 */
function looksLikeStatus(v: unknown): v is StatusDocument {
  const isObject = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null && !Array.isArray(x);
  if (!isObject(v) || !Array.isArray(v.backends) || !isObject(v.local) || !isObject(v.dataplane)) return false;
  if (v.state === 'none') return true;
  if (!['init', 'backup', 'master', 'fault'].includes(v.state as string)) return false;
  return typeof v.since === 'string' && isObject(v.counters) && isObject(v.counters.dropped) && Array.isArray(v.vips) && Array.isArray(v.peers);
}

export async function status(opts: { admin: { host: string; port: number }; json?: boolean }): Promise<number> {
  let doc: StatusDocument;
  try {
    doc = await fetchStatus(opts.admin);
  } catch (err) {
    const where = formatHostPort(opts.admin);
    throw createError('BALLAST_E_STATUS_UNREACHABLE', `no agent answers at ${where}: ${(err as Error).message}`, { cause: err });
  }
  process.stdout.write(opts.json ? `${JSON.stringify(doc, null, 2)}\n` : `${formatStatus(doc)}\n`);
  return 0;
}
