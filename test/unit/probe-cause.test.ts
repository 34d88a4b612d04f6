/**
 * The probe decides the cause of a failure from the error's code, where the error happens: the
 * mapping on synthetic errors, and real failures over loopback (a closed port, a reset, a silent
 * server, a server that does not speak TLS, a missing CA file, an abort). The message stays what
 * it always was; only the typed cause decides drain vs reset (verdict.ts).
 */
import https from 'node:https';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createProbe, deadlineFailure, describeFailure, type ProbeSettings } from '../../src/health/probe.js';
import { failureState } from '../../src/health/verdict.js';
import { makeTestPki } from '../support/tls.js';

const errno = (code: string, syscall = 'connect'): NodeJS.ErrnoException => Object.assign(new Error(`${syscall} ${code}`), { code, syscall });

describe('describeFailure: the cause from the code, the message as before', () => {
  it.each([
    [errno('ECONNREFUSED'), { kind: 'refused' }, 'ECONNREFUSED', 'dead'],
    [errno('ECONNRESET', 'read'), { kind: 'reset' }, 'ECONNRESET', 'dead'],
    [errno('EPIPE', 'write'), { kind: 'reset' }, 'EPIPE', 'dead'],
    [errno('ETIMEDOUT'), { kind: 'timeout' }, 'ETIMEDOUT', 'dead'],
    [errno('EHOSTUNREACH'), { kind: 'unreachable', code: 'EHOSTUNREACH' }, 'EHOSTUNREACH', 'dead'],
    [errno('ENETUNREACH'), { kind: 'unreachable', code: 'ENETUNREACH' }, 'ENETUNREACH', 'dead'],
    [errno('EADDRNOTAVAIL'), { kind: 'network', code: 'EADDRNOTAVAIL' }, 'EADDRNOTAVAIL', 'dead'],
    [
      Object.assign(new Error('certificate has expired'), { code: 'CERT_HAS_EXPIRED' }),
      { kind: 'tls', code: 'CERT_HAS_EXPIRED' },
      'tls: CERT_HAS_EXPIRED: certificate has expired',
      'unready',
    ],
    [
      Object.assign(new Error('unable to verify the first certificate; if the root CA is installed locally, try running Node.js with --use-system-ca'), {
        code: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
      }),
      { kind: 'tls', code: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' },
      'tls: UNABLE_TO_VERIFY_LEAF_SIGNATURE: unable to verify the first certificate',
      'unready',
    ],
    [
      Object.assign(new Error('wrong version number'), { code: 'ERR_SSL_WRONG_VERSION_NUMBER' }),
      { kind: 'tls', code: 'ERR_SSL_WRONG_VERSION_NUMBER' },
      'tls: ERR_SSL_WRONG_VERSION_NUMBER: wrong version number',
      'unready',
    ],
    [Object.assign(new Error('The operation was aborted'), { name: 'AbortError' }), { kind: 'aborted' }, 'aborted', 'unready'],
    [new Error('something odd'), { kind: 'failed' }, 'something odd', 'dead'],
  ] as const)('%s → %j', (err, cause, message, state) => {
    const f = describeFailure(err, false);
    expect(f).toStrictEqual({ cause, message });
    expect(failureState(f.cause)).toBe(state);
  });

  it('a non-errno code during the handshake is TLS; an errno during the handshake is the network', () => {
    expect(
      describeFailure(Object.assign(new Error('Client network socket disconnected before secure TLS connection was established'), { code: 'ECONNRESET' }), true)
        .cause,
    ).toStrictEqual({ kind: 'reset' });
    expect(describeFailure(Object.assign(new Error('odd'), { code: 'ERR_UNEXPECTED' }), true).cause).toStrictEqual({ kind: 'tls', code: 'ERR_UNEXPECTED' });
  });
});

describe('createProbe over loopback: the cause of real failures', () => {
  const servers: net.Server[] = [];
  const listen = async (onConn: (s: net.Socket) => void): Promise<number> => {
    const srv = net.createServer(onConn);
    servers.push(srv);
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
    return (srv.address() as net.AddressInfo).port;
  };
  let closedPort = 0;
  beforeAll(async () => {
    const srv = net.createServer();
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
    closedPort = (srv.address() as net.AddressInfo).port;
    await new Promise((r) => srv.close(r));
  });
  afterAll(async () => {
    for (const s of servers) s.close();
  });
  const settings = (o: Partial<ProbeSettings> = {}): ProbeSettings => ({ path: '/readyz', timeoutMs: 300, insecureSkipVerify: true, ...o });

  it('a closed port: refused', async () => {
    expect(await createProbe(settings())({ host: '127.0.0.1', port: closedPort })).toMatchObject({
      ok: false,
      cause: { kind: 'refused' },
      error: 'ECONNREFUSED',
    });
  });
  it('a server that resets the connection: reset', async () => {
    const port = await listen((s) => s.resetAndDestroy());
    expect(await createProbe(settings())({ host: '127.0.0.1', port })).toMatchObject({ ok: false, cause: { kind: 'reset' }, error: 'ECONNRESET' });
  });
  // the kernel accepted the connection: the host is up and the port served; a slow process is
  // drained, never reset (a loaded apiserver's clients are not thrown onto the others)
  it('a server that accepts and never answers: slow (the deadline after connect), unready', async () => {
    const port = await listen(() => undefined);
    const r = await createProbe(settings({ timeoutMs: 150 }))({ host: '127.0.0.1', port });
    expect(r).toMatchObject({ ok: false, cause: { kind: 'slow' }, error: 'timeout after connect' });
    expect(failureState(r.cause)).toBe('unready');
  });
  it('the deadline before any TCP connection (no SYN-ACK): timeout, dead', () => {
    const f = deadlineFailure(false);
    expect(f).toStrictEqual({ cause: { kind: 'timeout' }, message: 'timeout' });
    expect(failureState(f.cause)).toBe('dead');
  });
  // the rolling-restart lab: on 2 loaded cores the agent itself was not scheduled past the
  // deadline; the answer was in its socket already, and the late timer must not fail the check
  it('an answer that arrived while this process was not running: the late deadline timer does not fail the check', async () => {
    const pki = makeTestPki(['127.0.0.1']);
    const srv = https.createServer({ key: pki.key, cert: pki.cert }, (_req, res) => {
      res.end('ok');
      // the answer is written; now this process is "descheduled" past the client's deadline
      const until = performance.now() + 1300;
      while (performance.now() < until) {
        // busy: neither timers nor I/O run
      }
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
    try {
      // a deadline the handshake meets even on a loaded machine, which the busy wait then passes
      const r = await createProbe(settings({ timeoutMs: 1000 }))({ host: '127.0.0.1', port: (srv.address() as net.AddressInfo).port });
      expect(r).toMatchObject({ ok: true, status: 200, cause: { kind: 'http', status: 200 } });
      expect(r.latencyMs).toBeGreaterThanOrEqual(1300);
    } finally {
      await new Promise((r) => srv.close(r));
      pki.remove();
    }
  });
  // OpenSSL reports the plain-text answer as the errno EPROTO on the write: classified by its
  // code as before (the old text rule also made it dead), not by reading the message
  it('a server that does not speak TLS: EPROTO, a network failure by its code', async () => {
    const port = await listen((s) => s.end('HTTP/1.1 400 Bad Request\r\n\r\n'));
    expect(await createProbe(settings())({ host: '127.0.0.1', port })).toMatchObject({
      ok: false,
      cause: { kind: 'network', code: 'EPROTO' },
      error: 'EPROTO',
    });
  });
  it('a CA file that does not exist yet: waitingForFile (this node’s wait, never a reset)', async () => {
    const r = await createProbe(settings({ caFile: '/nonexistent/ca.crt', insecureSkipVerify: false }))({ host: '127.0.0.1', port: closedPort });
    expect(r).toMatchObject({
      ok: false,
      cause: { kind: 'waitingForFile', setting: 'apiserver.health.caFile', path: '/nonexistent/ca.crt' },
      error: 'waiting for apiserver.health.caFile /nonexistent/ca.crt (it does not exist yet)',
    });
    expect(failureState(r.cause)).toBe('unready');
  });
  it('an aborted check: aborted', async () => {
    const port = await listen(() => undefined);
    const ac = new AbortController();
    const p = createProbe(settings({ timeoutMs: 2000 }))({ host: '127.0.0.1', port }, ac.signal);
    ac.abort();
    expect(await p).toMatchObject({ ok: false, cause: { kind: 'aborted' }, error: 'aborted' });
  });
});
