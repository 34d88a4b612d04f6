/**
 * The probe resumes TLS sessions (a real TLS 1.3 server on loopback, certificates from openssl):
 * a full handshake first, resumed ones after it while younger than the reuse bound, a full one
 * again after any failed check, after the bound, and per backend.
 */
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createProbe, type ProbeSettings } from '../../src/health/probe.js';
import { makeTestPki, type TestPki } from '../support/tls.js';

interface Server {
  port: number;
  /** per accepted connection: true when its TLS session was resumed */
  resumed: boolean[];
  status: number;
  close(): Promise<void>;
}

async function serve(pki: TestPki): Promise<Server> {
  const resumed: boolean[] = [];
  const srv = https.createServer({ cert: pki.cert, key: pki.key, minVersion: 'TLSv1.3' }, (req, res) => {
    resumed.push((req.socket as TLSSocket).isSessionReused());
    res.writeHead(s.status, { 'content-type': 'text/plain' }).end('ok');
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const s: Server = {
    port: (srv.address() as AddressInfo).port,
    resumed,
    status: 200,
    close: () => new Promise((r) => srv.close(() => r())),
  };
  return s;
}

describe('probe TLS session resumption', () => {
  let pki: TestPki;
  let a: Server;
  let b: Server;
  const settings = (): ProbeSettings => ({ path: '/readyz', timeoutMs: 2000, caFile: pki.caFile, insecureSkipVerify: false });
  beforeAll(async () => {
    pki = makeTestPki(['127.0.0.1']);
    a = await serve(pki);
    b = await serve(pki);
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
    pki?.remove();
  });

  it('a full handshake, then resumed ones; the resumed results carry no certificate', async () => {
    a.resumed.length = 0;
    const probe = createProbe(settings());
    const results = [];
    for (let i = 0; i < 3; i++) results.push(await probe({ host: '127.0.0.1', port: a.port }));
    expect(results.map((r) => r.ok)).toStrictEqual([true, true, true]);
    expect(a.resumed).toStrictEqual([false, true, true]);
    expect(results.map((r) => r.peerCertificate !== undefined)).toStrictEqual([true, false, false]);
  });

  it('a failed check forgets the session: the next check makes a full handshake', async () => {
    a.resumed.length = 0;
    const probe = createProbe(settings());
    const target = { host: '127.0.0.1', port: a.port };
    await probe(target);
    a.status = 503;
    const failed = await probe(target);
    a.status = 200;
    const next = await probe(target);
    expect([failed.ok, failed.status, next.ok]).toStrictEqual([false, 503, true]);
    expect(a.resumed).toStrictEqual([false, true, false]);
  });

  it('a session is resumed only while younger than sessionReuseMs (0: never)', async () => {
    a.resumed.length = 0;
    const target = { host: '127.0.0.1', port: a.port };
    const short = createProbe(settings(), { sessionReuseMs: 50 });
    await short(target);
    await new Promise((r) => setTimeout(r, 80));
    await short(target);
    const never = createProbe(settings(), { sessionReuseMs: 0 });
    await never(target);
    await never(target);
    expect(a.resumed).toStrictEqual([false, false, false, false]);
  });

  it('sessions are kept per backend', async () => {
    a.resumed.length = 0;
    b.resumed.length = 0;
    const probe = createProbe(settings());
    for (let i = 0; i < 2; i++) {
      await probe({ host: '127.0.0.1', port: a.port });
      await probe({ host: '127.0.0.1', port: b.port });
    }
    expect([a.resumed, b.resumed]).toStrictEqual([
      [false, true],
      [false, true],
    ]);
  });
});
