/**
 * The probe decides the cause of a failure from the error's code, where the error happens: the
 * mapping on synthetic errors, and real failures over loopback (a closed port, a reset, a silent
 * server, a server that does not speak TLS, a missing CA file, an abort). The message stays what
 * it always was; only the typed cause decides drain vs reset (verdict.ts).
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createProbe, describeFailure, type ProbeSettings } from '../../src/health/probe.js';
import { failureState } from '../../src/health/verdict.js';

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
    [Object.assign(new Error('certificate has expired'), { code: 'CERT_HAS_EXPIRED' }), { kind: 'tls', code: 'CERT_HAS_EXPIRED' }, 'tls: CERT_HAS_EXPIRED: certificate has expired', 'unready'],
    [
      Object.assign(new Error('unable to verify the first certificate; if the root CA is installed locally, try running Node.js with --use-system-ca'), { code: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' }),
      { kind: 'tls', code: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' },
      'tls: UNABLE_TO_VERIFY_LEAF_SIGNATURE: unable to verify the first certificate',
      'unready',
    ],
    [Object.assign(new Error('wrong version number'), { code: 'ERR_SSL_WRONG_VERSION_NUMBER' }), { kind: 'tls', code: 'ERR_SSL_WRONG_VERSION_NUMBER' }, 'tls: ERR_SSL_WRONG_VERSION_NUMBER: wrong version number', 'unready'],
    [Object.assign(new Error('The operation was aborted'), { name: 'AbortError' }), { kind: 'aborted' }, 'aborted', 'unready'],
    [new Error('something odd'), { kind: 'failed' }, 'something odd', 'dead'],
  ] as const)('%s → %j', (err, cause, message, state) => {
    const f = describeFailure(err, false);
    expect(f).toStrictEqual({ cause, message });
    expect(failureState(f.cause)).toBe(state);
  });

  it('a non-errno code during the handshake is TLS; an errno during the handshake is the network', () => {
    expect(describeFailure(Object.assign(new Error('Client network socket disconnected before secure TLS connection was established'), { code: 'ECONNRESET' }), true).cause).toStrictEqual({ kind: 'reset' });
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
    expect(await createProbe(settings())({ host: '127.0.0.1', port: closedPort })).toMatchObject({ ok: false, cause: { kind: 'refused' }, error: 'ECONNREFUSED' });
  });
  it('a server that resets the connection: reset', async () => {
    const port = await listen((s) => s.resetAndDestroy());
    expect(await createProbe(settings())({ host: '127.0.0.1', port })).toMatchObject({ ok: false, cause: { kind: 'reset' }, error: 'ECONNRESET' });
  });
  it('a server that accepts and never answers: timeout (the deadline)', async () => {
    const port = await listen(() => undefined);
    expect(await createProbe(settings({ timeoutMs: 150 }))({ host: '127.0.0.1', port })).toMatchObject({ ok: false, cause: { kind: 'timeout' }, error: 'timeout' });
  });
  // OpenSSL reports the plain-text answer as the errno EPROTO on the write: classified by its
  // code as before (the old text rule also made it dead), not by reading the message
  it('a server that does not speak TLS: EPROTO, a network failure by its code', async () => {
    const port = await listen((s) => s.end('HTTP/1.1 400 Bad Request\r\n\r\n'));
    expect(await createProbe(settings())({ host: '127.0.0.1', port })).toMatchObject({ ok: false, cause: { kind: 'network', code: 'EPROTO' }, error: 'EPROTO' });
  });
  it('a CA file that does not exist yet: waitingForFile (this node’s wait, never a reset)', async () => {
    const r = await createProbe(settings({ caFile: '/nonexistent/ca.crt', insecureSkipVerify: false }))({ host: '127.0.0.1', port: closedPort });
    expect(r).toMatchObject({ ok: false, cause: { kind: 'waitingForFile', setting: 'apiserver.health.caFile', path: '/nonexistent/ca.crt' }, error: 'waiting for apiserver.health.caFile /nonexistent/ca.crt (it does not exist yet)' });
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
