/**
 * Each backend's serving certificate, for real (lab prefix `bcrt`, subnet 106, needs root):
 * three TLS stand-in apiservers whose certificates the lab issues with chosen SANs, validity and
 * CA (lab.issueServerCert, rotated in place with lab.reloadApiserverCert).
 *
 * 1. checkBackendCertificates, run in node n1's namespace: n2's certificate lacks the VIP → fail
 *    naming n2 and the SAN; then a certificate expiring in 10 days → warn; one from another CA →
 *    fail with OpenSSL's verify reason; an unreachable backend → warn; all good → ok.
 * 2. `ballast check --config FILE --json` (exit 2 naming the backend and the SAN). On this branch
 *    the command is the temporary wiring of src/check/certificates-cli.ts; after the merge with
 *    checknet it is the whole `ballast check`, and this test still holds (it reads only the
 *    backend-certificate results and the exit status).
 * 3. A running agent: /status, `ballast status` and the metric show the missing SAN for n2 only,
 *    the log has one line for n2's certificate over many checks, and a rotated good certificate
 *    clears it with one more line — while n2 stays healthy (a certificate never drains).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Lab, LabNode } from '../../lab/lab.js';
import { packageRoot } from '../../lab/lab.js';
import { cliPath, startAgent, type LabAgent } from '../../lab/cluster.js';
import { waitFor } from '../../lab/wait.js';
import type { CheckReport, CheckResult } from '../../src/check/report.js';
import { CERT_MISSING_MSG, CERT_OK_MSG } from '../../src/health/certificates.js';
import { needs, startLab } from '../support/index.js';

const why = needs('root', 'ip', 'nft');

describe.skipIf(why)('backend serving certificates (lab bcrt)', () => {
  let lab: Lab;
  let n1: LabNode, n2: LabNode, n3: LabNode;
  let configPath: string;
  let closedPath: string;
  const addr = (n: LabNode): string => `${n.ipv4}:6443`;

  beforeAll(async () => {
    lab = await startLab({ prefix: 'bcrt', subnet: 106, nodes: 3, ipv6: false });
    [n1, n2, n3] = lab.nodes as [LabNode, LabNode, LabNode];
    // a year: the 30-day expiry warning stays out of the way of the SAN findings
    await Promise.all([
      lab.issueServerCert(n1, { days: 365 }),
      lab.issueServerCert(n2, { days: 365, omit: [`IP:${lab.vip4}`] }),
      lab.issueServerCert(n3, { days: 365 }),
    ]);
    await lab.startApiservers();
    const config = (backends: string[]): string =>
      stringify({
        interface: 'eth0',
        vrrp: { vrid: 51, priority: 100 },
        vips: [lab.vip4],
        apiserver: { backends, health: { caFile: lab.ca.certFile } },
        localEndpoint: { address: ['127.0.0.1:7443'] },
      });
    configPath = join(lab.dir, 'check.yaml');
    writeFileSync(configPath, config(lab.nodes.map(addr)));
    // n2's address on a port nothing listens on: a backend that cannot be reached
    closedPath = join(lab.dir, 'check-closed.yaml');
    writeFileSync(closedPath, config([addr(n1), `${n2.ipv4}:6444`, addr(n3)]));
  }, 30_000);
  afterAll(async () => {
    await lab?.teardown();
  });

  /** checkBackendCertificates(loadConfig(configPath)) in n1's namespace. */
  const check = async (path = configPath): Promise<CheckResult[]> => {
    const dist = join(packageRoot(), 'dist', 'src');
    const js = [
      `const { loadConfig } = await import(${JSON.stringify(join(dist, 'config', 'index.js'))});`,
      `const { checkBackendCertificates } = await import(${JSON.stringify(join(dist, 'check', 'certificates.js'))});`,
      `process.stdout.write(JSON.stringify(await checkBackendCertificates(loadConfig(${JSON.stringify(path)}), { timeoutMs: 2000 })));`,
    ].join('\n');
    const r = await lab.exec(n1.netns, [process.execPath, '--input-type=module', '-e', js], { timeoutMs: 10_000 });
    return JSON.parse(r.stdout) as CheckResult[];
  };
  const statuses = (rs: CheckResult[]): string[] => rs.map((r) => `${r.id} ${r.title} ${r.status}`);
  const title = (n: LabNode): string => `serving certificate of backend ${addr(n)}`;

  it('a certificate without the VIP fails, naming the backend and the missing SAN; the others are ok', async () => {
    const rs = await check();
    expect(statuses(rs)).toStrictEqual([`backend-certificate ${title(n1)} ok`, `backend-certificate ${title(n2)} fail`, `backend-certificate ${title(n3)} ok`]);
    expect(rs[1]!.detail).toBe(`backend ${addr(n2)}: certificate lacks IP SAN ${lab.vip4} (the VIP).`);
    expect(rs[1]!.fix).toContain('apiServer.certSANs');
    expect(rs[1]!.fix).toContain('kubeadm init phase certs apiserver');
    expect(rs[0]!.detail).toContain(`SANs cover ${lab.vip4} (the VIP), 127.0.0.1 (a local endpoint address), ${n1.ipv4} (the backend's own address`);
  });

  it('ballast check --config [--json]: exit 2, the backend-certificate failure names n2 and the SAN', async () => {
    const r = await lab.exec(n1.netns, [process.execPath, cliPath(), 'check', '--config', configPath, '--json'], { timeoutMs: 20_000, allowFail: true });
    expect(r.code, r.stderr).toBe(2);
    const report = JSON.parse(r.stdout) as CheckReport;
    const mine = report.checks.filter((c) => c.id === 'backend-certificate');
    expect(mine.map((c) => [c.title, c.status])).toStrictEqual([
      [title(n1), 'ok'],
      [title(n2), 'fail'],
      [title(n3), 'ok'],
    ]);
    expect(mine[1]!.detail).toContain(`backend ${addr(n2)}: certificate lacks IP SAN ${lab.vip4} (the VIP)`);
    // and for a person: the same exit status, the sentence on stdout
    const text = await lab.exec(n1.netns, [process.execPath, cliPath(), 'check', '--config', configPath], { timeoutMs: 20_000, allowFail: true });
    expect(text.code, text.stderr).toBe(2);
    expect(text.stdout).toContain(`backend ${addr(n2)}: certificate lacks IP SAN ${lab.vip4} (the VIP)`);
  });

  describe('the running agent', () => {
    let agent: LabAgent;
    const certLines = (n: LabNode): { level: string; msg: string; missing: string[] }[] =>
      agent
        .logLines()
        .filter((l) => l.backend === addr(n) && (l.msg === CERT_OK_MSG || l.msg === CERT_MISSING_MSG))
        .map((l) => ({ level: String(l.level), msg: String(l.msg), missing: l.missing as string[] }));

    beforeAll(async () => {
      agent = await startAgent(lab, n1, { priority: 200, balance: true, healthInterval: '200ms' });
    }, 15_000);
    afterAll(async () => {
      await agent?.stop();
    });

    it('reports the missing SAN for n2 only, in /status, ballast status, the metric and one log line; n2 stays up', async () => {
      // several checks of every backend after the first certificate was seen
      const doc = await waitFor(
        () => agent.anyStatus(),
        (d) => d.backends.length === 3 && d.backends.every((b) => b.state === 'up' && b.consecutive >= 4),
        { timeoutMs: 8000, what: 'four passing checks of each backend' },
      );
      expect(doc.backends.map((b) => [b.address, b.healthy, b.certificate?.missing])).toStrictEqual([
        [addr(n1), true, []],
        [addr(n2), true, [lab.vip4]],
        [addr(n3), true, []],
      ]);
      expect(doc.backends[1]!.certificate).toMatchObject({
        subject: 'CN=kube-apiserver, O=ballast lab n2',
        lacks: [`certificate lacks IP SAN ${lab.vip4} (the VIP)`],
      });
      const metrics = (await agent.admin('/metrics')).split('\n').filter((l) => l.startsWith('ballast_backend_certificate_san_missing{'));
      expect(metrics).toStrictEqual([0, 1, 0].map((v, i) => `ballast_backend_certificate_san_missing{backend="${addr(lab.nodes[i]!)}"} ${v}`));
      const text = await lab.exec(n1.netns, [process.execPath, cliPath(), 'status', '--admin', '127.0.0.1:9641'], { timeoutMs: 5000 });
      expect(text.stdout.split('\n').filter((l) => l.startsWith('certificate:'))).toStrictEqual([
        `certificate: ${addr(n2)}: certificate lacks IP SAN ${lab.vip4} (the VIP); clients using those names fail with ERR_TLS_CERT_ALTNAME_INVALID`,
      ]);
      expect(certLines(n2)).toStrictEqual([{ level: 'warn', msg: CERT_MISSING_MSG, missing: [lab.vip4] }]);
      expect(certLines(n1)).toStrictEqual([{ level: 'info', msg: CERT_OK_MSG, missing: [] }]);
    });

    it('a rotated good certificate clears it, with one more line', async () => {
      await lab.issueServerCert(n2, { days: 365 });
      await lab.reloadApiserverCert(n2);
      const doc = await waitFor(
        () => agent.anyStatus(),
        (d) => d.backends[1]?.certificate?.missing.length === 0,
        { timeoutMs: 3000, what: "n2's new certificate seen" },
      );
      expect(doc.backends[1]!.healthy).toBe(true);
      // more checks with the new certificate: still one line for it
      const c0 = doc.backends[1]!.consecutive;
      await waitFor(
        () => agent.anyStatus(),
        (d) => d.backends[1]!.consecutive >= c0 + 3,
        { timeoutMs: 3000, what: 'three more checks of n2' },
      );
      expect(certLines(n2)).toStrictEqual([
        { level: 'warn', msg: CERT_MISSING_MSG, missing: [lab.vip4] },
        { level: 'info', msg: CERT_OK_MSG, missing: [] },
      ]);
      const metrics = (await agent.admin('/metrics')).split('\n').filter((l) => l.startsWith(`ballast_backend_certificate_san_missing{backend="${addr(n2)}"}`));
      expect(metrics).toStrictEqual([`ballast_backend_certificate_san_missing{backend="${addr(n2)}"} 0`]);
    });
  });

  it('expiring in 10 days warns; another CA fails with the verify reason; an unreachable backend warns', async () => {
    await Promise.all([lab.issueServerCert(n3, { days: 10 }), lab.issueServerCert(n1, { days: 365, otherCa: true })]);
    await Promise.all([lab.reloadApiserverCert(n3), lab.reloadApiserverCert(n1)]);
    const rs = await check(closedPath);
    expect(rs.map((r) => `${r.title} ${r.status}`)).toStrictEqual([
      `${title(n1)} fail`,
      `serving certificate of backend ${n2.ipv4}:6444 warn`,
      `${title(n3)} warn`,
    ]);
    // the stand-in sends its certificate alone: OpenSSL cannot find its issuer among caFile's
    expect(rs[0]!.detail).toBe(
      `backend ${addr(n1)}: certificate chain does not verify against apiserver.health.caFile ${lab.ca.certFile}: UNABLE_TO_VERIFY_LEAF_SIGNATURE (issuer CN=ballast lab other CA).`,
    );
    expect(rs[1]!.detail).toBe(`backend ${n2.ipv4}:6444: cannot check its certificate, no TLS handshake: ECONNREFUSED`);
    expect(rs[2]!.detail).toMatch(new RegExp(`^backend ${addr(n3).replace(/\./g, '\\.')}: certificate expires on \\S+, in (9|10) days \\(less than 30\\)\\.$`));
  });

  it('all good: every backend ok', async () => {
    await Promise.all([lab.issueServerCert(n1, { days: 365 }), lab.issueServerCert(n3, { days: 365 })]);
    await Promise.all([lab.reloadApiserverCert(n1), lab.reloadApiserverCert(n3)]);
    const rs = await check();
    expect(statuses(rs)).toStrictEqual([n1, n2, n3].map((n) => `backend-certificate ${title(n)} ok`));
  });
});
