/**
 * `ballast reload`: asks the running agent (POST /reload) to re-read its file and apply what
 * changed, and prints what it answered.
 */
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { describeReadError } from '../config/files.js';
import { createError } from '../errors.js';
import { formatHostPort, tryParseHostPort, type HostPort } from '../net/hostport.js';
import type { ReloadResult } from '../observe/status.js';
import { DEFAULT_ADMIN, parseAdmin } from './admin-address.js';
// node:http through require (observe/admin.ts says why: an ESM import loads all of undici)
const { request } = createRequire(import.meta.url)('node:http') as typeof import('node:http');

/**
 * Where `ballast reload` finds the agent: `--admin`, else `admin.listen` of `--config`'s file
 * (read leniently: the file may be the invalid one being reloaded), else the default. An
 * unspecified listen address (0.0.0.0, ::) is reached on loopback.
 * @param note called with a line for the operator when `--config`'s file gives no usable
 *   `admin.listen` and the default is asked instead.
 * @throws BallastError BALLAST_E_CONFIG_READ (exit 2) when `--config`'s file cannot be read: a
 *   mistyped path must not send the reload to whichever agent listens on the default address.
 */
export function reloadAddress(
  o: { admin?: HostPort; config?: string },
  read: (path: string) => string = (p) => readFileSync(p, 'utf8'),
  note: (line: string) => void = () => undefined,
): HostPort {
  if (o.admin) return o.admin;
  if (o.config === undefined) return parseAdmin(DEFAULT_ADMIN);
  let text: string;
  try {
    text = read(o.config);
  } catch (err) {
    throw createError('BALLAST_E_CONFIG_READ', `cannot read ${o.config}: ${describeReadError(err)}; give the agent's file, or --admin ADDR`, { cause: err });
  }
  let listen: unknown;
  try {
    const doc = parseYaml(text) as { admin?: { listen?: unknown } } | null;
    listen = doc?.admin?.listen;
  } catch {
    listen = undefined;
  }
  const hp = typeof listen === 'string' ? tryParseHostPort(listen) : null;
  if (hp === null || typeof hp === 'string') {
    if (listen !== undefined) note(`${o.config}: admin.listen is not a host:port; asking the default ${DEFAULT_ADMIN}`);
    return parseAdmin(DEFAULT_ADMIN);
  }
  if (hp.host === '0.0.0.0') return { ...hp, host: '127.0.0.1' };
  if (hp.host === '::') return { ...hp, host: '::1' };
  return hp;
}

/** What POST /reload answered: the HTTP status and the parsed result. */
export interface ReloadAnswer {
  statusCode: number;
  result: ReloadResult | { ok: false; problems: string[] };
}

/** POST /reload to the admin endpoint. @throws Error when nothing answers, or the answer is not a reload result. */
export function postReload(addr: HostPort, timeoutMs = 30_000): Promise<ReloadAnswer> {
  return new Promise((resolve, reject) => {
    const req = request({ host: addr.host, port: addr.port, path: '/reload', method: 'POST', timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => {
        let doc: unknown;
        try {
          doc = JSON.parse(body);
        } catch {
          return reject(new Error(`HTTP ${res.statusCode}: the answer is not a ballast agent's reload result: ${body.trim().slice(0, 200)}`));
        }
        const d = doc as { ok?: unknown; problems?: unknown };
        if (typeof d.ok !== 'boolean' || !Array.isArray(d.problems))
          return reject(new Error(`HTTP ${res.statusCode}: the answer is JSON but not a ballast agent's reload result`));
        resolve({ statusCode: res.statusCode ?? 0, result: doc as ReloadAnswer['result'] });
      });
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end();
  });
}

/**
 * The text `ballast reload` prints for an answer, and its exit status: 0 applied, 2 refused (the
 * problems, one per line as `ballast validate` prints them), 1 when the agent could not reload now.
 */
export function formatReload(a: ReloadAnswer, where: string): { code: number; stdout: string; stderr: string } {
  const r = a.result;
  if (r.ok && 'changed' in r) {
    const what = r.changed.length === 0 ? 'nothing changed' : `changed: ${r.changed.join(', ')}\n${r.actions.map((x) => `  - ${x}`).join('\n')}`;
    return { code: 0, stdout: `reloaded (${Math.round(r.durationMs)} ms): ${what}\n`, stderr: '' };
  }
  if (a.statusCode === 422) {
    const n = r.problems.length;
    const source = 'source' in r && r.source ? ` from ${r.source}` : '';
    const lines = [
      `ballast: configuration not reloaded${source} (${n} ${n === 1 ? 'problem' : 'problems'}); the agent keeps running as before:`,
      ...r.problems.map((p) => `  ${p}`),
    ];
    return { code: 2, stdout: '', stderr: `${lines.join('\n')}\n` };
  }
  return { code: 1, stdout: '', stderr: `ballast: the agent at ${where} did not reload: ${r.problems.join('; ')} (BALLAST_E_RELOAD_UNREACHABLE)\n` };
}

export async function reload(o: { admin?: HostPort; config?: string; json?: boolean }): Promise<number> {
  const addr = reloadAddress(o, undefined, (line) => process.stderr.write(`ballast reload: ${line}\n`));
  const where = formatHostPort(addr);
  let a: ReloadAnswer;
  try {
    a = await postReload(addr);
  } catch (err) {
    throw createError('BALLAST_E_RELOAD_UNREACHABLE', `no agent answers at ${where}: ${(err as Error).message}`, { cause: err });
  }
  const out = formatReload(a, where);
  if (o.json) process.stdout.write(`${JSON.stringify(a.result, null, 2)}\n`);
  else {
    process.stdout.write(out.stdout);
    process.stderr.write(out.stderr);
  }
  return out.code;
}
