/**
 * The Debian package, installed for real on this machine with apt-get and
 * removed again: scripts/package.sh's .deb (built by ensureArtefacts when dist-pkg/ is stale),
 * lintian on the .deb (no error), the control file's Depends against
 * docs/install.md's list, `ballast --version`, `ballast validate` of the shipped example,
 * `systemd-analyze verify` of the installed unit, the installed file list (nothing of the lab,
 * tests or build tools; /usr/share/doc/ballast with the DEP-5 copyright, the changelog and every
 * doc the agent names; `dpkg --verify` clean), the installed
 * agent run in a lab node with exactly the unit's CapabilityBoundingSet (it elects itself within
 * Master_Down_Interval, balances with nftables and serves the local endpoint with eBPF), then
 * `apt-get remove` (only the conffile stays) and `apt-get purge` (nothing stays).
 * A machine where ballast is already installed is refused: the test never removes an operator's
 * install. afterAll purges whatever the test installed, also after a failure.
 * Lab prefix bpkg, subnet 101. Needs root, dpkg/apt, systemd-analyze, setpriv, BPF.
 */
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import type { Lab, LabProcess } from '../../lab/lab.js';
import { UNIT_CAPABILITIES } from '../../src/manifest/capabilities.js';
import { masterDownIntervalMs } from '../../src/vrrp/state.js';
import type { StatusDocument } from '../../src/observe/status.js';
import { ensureArtefacts, type Artefacts } from '../support/artefacts.js';
import { needs, startLab, waitFor } from '../support/index.js';
import { packageRoot } from '../../lab/lab.js';

const PREFIX = 'bpkg';
const SUBNET = 101;
const PRIORITY = 150;
const INTERVAL_CS = 10;
/** Timer and scheduling jitter of a lone agent on 2 busy cores. */
const MARGIN_MS = 150;
const UNIT = '/lib/systemd/system/ballast.service';
const CONFFILE = '/etc/ballast/ballast.yaml';
const DOC = '/usr/share/doc/ballast';
/** capabilities(7) numbers of the names UNIT_CAPABILITIES may hold. */
const CAP_NUMBER: Record<string, number> = {
  CAP_DAC_OVERRIDE: 1,
  CAP_NET_ADMIN: 12,
  CAP_NET_RAW: 13,
  CAP_IPC_LOCK: 14,
  CAP_SYS_ADMIN: 21,
  CAP_SYS_NICE: 23,
  CAP_SYS_RESOURCE: 24,
  CAP_PERFMON: 38,
  CAP_BPF: 39,
};

const run = promisify(execFile);
interface Ran {
  code: number;
  stdout: string;
  stderr: string;
}
/** Runs argv in the machine's namespaces; never rejects on a non-zero exit. */
async function sh(argv: string[], timeoutMs = 60_000): Promise<Ran> {
  try {
    const r = await run(argv[0]!, argv.slice(1), { timeout: timeoutMs, env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' }, maxBuffer: 16 << 20 });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (err) {
    const e = err as { code?: number | string; stdout?: string; stderr?: string; message: string };
    return { code: typeof e.code === 'number' ? e.code : -1, stdout: e.stdout ?? '', stderr: e.stderr ?? e.message };
  }
}
/** dpkg's status of the ballast package ("install ok installed", "deinstall ok config-files"), or null when dpkg does not know it. */
async function dpkgStatus(): Promise<string | null> {
  const r = await sh(['dpkg-query', '-W', '-f=${Status} ${Version}', 'ballast']);
  return r.code === 0 && r.stdout.trim() !== 'unknown ok not-installed' ? r.stdout.trim() : null;
}

describe.skipIf(needs('root', 'bpf'))("the Debian package: apt install, run with the unit's capabilities, remove, purge (root; skipped otherwise)", () => {
  let art: Artefacts;
  let lab: Lab | undefined;
  let agent: LabProcess | undefined;
  let installedByUs = false;
  let refused: string | null = null;

  beforeAll(async () => {
    const before = await dpkgStatus();
    if (before !== null) {
      refused = `ballast is already known to dpkg on this machine (${before}): this test installs and purges the package, so it refuses to touch an operator's install; remove it first (apt-get purge ballast)`;
      return;
    }
    art = ensureArtefacts();
    if (art.built) console.log(`package: built ${art.deb} in ${(art.buildMs / 1000).toFixed(1)} s`);
  }, 200_000);

  afterAll(async () => {
    await agent?.stop('SIGKILL', 2000).catch(() => undefined);
    await lab?.teardown();
    if (installedByUs && (await dpkgStatus()) !== null) await sh(['dpkg', '--purge', 'ballast']);
  }, 60_000);

  it("lintian finds no error in the .deb (the overrides name what is so by design); the Depends docs/install.md lists are the control file's", async () => {
    expect(refused).toBeNull();
    const l = await sh(['lintian', '--tag-display-limit', '0', art.deb], 180_000);
    // exit 0: nothing; 1: tags at or above --fail-on (error, the default); 2: lintian itself failed
    expect(l.code, l.stderr + l.stdout).toBeLessThan(2);
    const tags = l.stdout.split('\n').filter((line) => /^[EW]: /.test(line));
    expect(tags.filter((t) => t.startsWith('E: '))).toEqual([]);
    console.log(`package: lintian: 0 errors, ${tags.length} warnings${tags.length ? `\n  ${tags.join('\n  ')}` : ''}`);
    // docs/install.md's "Depends:" paragraph names exactly the control file's packages
    const depends = (await sh(['dpkg-deb', '-f', art.deb, 'Depends'])).stdout.trim();
    const controlNames = depends
      .split(',')
      .map((d) => d.trim().split(/[\s(]/)[0]!)
      .sort();
    const install = readFileSync(join(packageRoot(), 'docs/install.md'), 'utf8');
    const para = /^Depends[^\n]*(?:\n(?!\n)[^\n]*)*/m.exec(install)?.[0] ?? '';
    const docNames = [...para.matchAll(/`([a-z0-9][a-z0-9.+-]*)`/g)]
      .map((m) => m[1]!)
      .filter((n) => n !== 'dpkg-shlibdeps')
      .sort();
    expect(docNames, `docs/install.md says: ${para}`).toEqual(controlNames);
  }, 200_000);

  it("installs with apt-get from the file alone (no download: the dependencies are Debian 12's, already here)", async () => {
    expect(refused).toBeNull();
    installedByUs = true;
    const t0 = performance.now();
    // (apt-get's --no-download refuses local .deb files: "Pathname to install is not absolute")
    const r = await sh(['apt-get', 'install', '-y', '-q', '--no-install-recommends', art.deb]);
    expect(r.code, r.stderr + r.stdout).toBe(0);
    expect(r.stdout, 'apt-get fetched something from the network').not.toMatch(/^Get:\d+ (https?|ftp):/m);
    expect(r.stdout).toMatch(/^The following NEW packages will be installed:\n  ballast\n/m);
    console.log(`package: apt-get install ${((performance.now() - t0) / 1000).toFixed(1)} s; deb ${(readFileSync(art.deb).length / 1e6).toFixed(1)} MB`);
    expect(await dpkgStatus()).toBe(`install ok installed ${art.version}`);
    expect((await sh(['sh', '-c', 'command -v ballast'])).stdout.trim()).toBe('/usr/bin/ballast');
  }, 60_000);

  it('ballast --version prints the package version; the shipped example validates (missing CA and kubeconfig are notes)', async () => {
    expect(await sh(['ballast', '--version'])).toEqual({ code: 0, stdout: `${art.version}\n`, stderr: '' });
    const v = await sh(['/usr/bin/ballast', 'validate', '--config', CONFFILE]);
    expect(v.code, v.stderr).toBe(0);
    expect(v.stdout.trim().split('\n').at(-1)).toBe(`${CONFFILE}: ok (2 files to wait for)`);
  });

  it('the installed unit passes systemd-analyze verify, rates ≤ 4.2 in systemd-analyze security and bounds the capabilities to UNIT_CAPABILITIES', async () => {
    const r = await sh(['systemd-analyze', 'verify', UNIT]);
    expect(r).toEqual({ code: 0, stdout: '', stderr: '' });
    // systemd's own rating of the sandboxing (10 = an unsandboxed root service); see docs/install.md
    // (4.2 on systemd 252 with ProtectKernelTunables=no and RestrictRealtime=no with CAP_SYS_NICE)
    const sec = await sh(['systemd-analyze', 'security', '--offline=true', UNIT]);
    expect(Number(/Overall exposure level for ballast\.service: ([\d.]+)/.exec(sec.stdout)?.[1])).toBeLessThanOrEqual(4.2);
    const unit = readFileSync(UNIT, 'utf8');
    expect(unit).toMatch(/^Type=notify$/m);
    expect(unit).toMatch(/^ExecStart=\/usr\/bin\/ballast run --config \/etc\/ballast\/ballast\.yaml$/m);
    expect(unit).toMatch(/^RestartPreventExitStatus=2 4$/m);
    expect(/^CapabilityBoundingSet=(.*)$/m.exec(unit)?.[1]?.split(' ')).toEqual([...UNIT_CAPABILITIES]);
  });

  it('the installed files are the runtime only: no lab, bench, tests, vitest, typescript or cmake-js; the conffile is registered', async () => {
    const files = (await sh(['dpkg', '-L', 'ballast'])).stdout.trim().split('\n');
    expect(files).toEqual(
      expect.arrayContaining([
        '/usr/bin/ballast',
        '/usr/lib/ballast/bin/node',
        '/usr/lib/ballast/dist/src/cli.js',
        '/usr/lib/ballast/dist/bundle/commands.js',
        '/usr/lib/ballast/build/Release/ballast.node',
        '/usr/lib/ballast/build/Release/ballast_sock_lb.bpf.o',
        '/usr/lib/ballast/node_modules/yaml/package.json',
        UNIT,
        CONFFILE,
      ]),
    );
    const ours = files.filter((f) => f.startsWith('/usr/lib/ballast/') && !f.startsWith('/usr/lib/ballast/node_modules/'));
    expect(ours.filter((f) => /\/(lab|bench|test)(\/|$)|\.ts$|\.map$/.test(f))).toEqual([]);
    expect(files.filter((f) => /\/node_modules\/(vitest|@vitest|vite|typescript|cmake-js|@types\/node)(\/|$)/.test(f))).toEqual([]);
    // no tool's cache or state from the build tree (npm's own hidden lockfile is the one dot file)
    expect(files.filter((f) => /\/node_modules\/\.(?!package-lock\.json$)/.test(f))).toEqual([]);
    expect((await sh(['dpkg-query', '-W', '-f=${Conffiles}', 'ballast'])).stdout.trim()).toMatch(/^\/etc\/ballast\/ballast\.yaml [0-9a-f]{32}$/);
  });

  it('/usr/share/doc/ballast holds the DEP-5 copyright, the changelog of this version and every doc the agent names; a real Maintainer; dpkg --verify is clean', async () => {
    const files = (await sh(['dpkg', '-L', 'ballast'])).stdout.trim().split('\n');
    // the docs/X.md the shipped bundle names (in messages, help, metric descriptions), as installed
    const named = new Set<string>();
    for (const f of readdirSync('/usr/lib/ballast/dist/bundle'))
      for (const m of readFileSync(join('/usr/lib/ballast/dist/bundle', f), 'utf8').matchAll(/docs\/[a-z0-9-]+\.md/g)) named.add(m[0]);
    expect(named.size).toBeGreaterThan(0);
    const changelog = art.version.includes('-') ? 'changelog.Debian.gz' : 'changelog.gz';
    expect(files).toEqual(
      expect.arrayContaining([DOC, `${DOC}/copyright`, `${DOC}/${changelog}`, `${DOC}/README.md`, ...[...named].map((d) => `${DOC}/${d}`)]),
    );
    // copyright: DEP-5, ballast Apache-2.0 (common-licenses), the runtime, one paragraph per npm package
    const copyright = readFileSync(`${DOC}/copyright`, 'utf8');
    expect(copyright).toMatch(/^Format: https:\/\/www\.debian\.org\/doc\/packaging-manuals\/copyright-format\/1\.0\/\n/);
    expect(copyright).toMatch(/^Files: \*\nCopyright: .+\nLicense: Apache-2\.0$/m);
    expect(copyright).toContain('/usr/share/common-licenses/Apache-2.0');
    expect(copyright).toMatch(/^Files: usr\/lib\/ballast\/bin\/node /m);
    const topLevel = files
      .filter((f) => /^\/usr\/lib\/ballast\/node_modules\/(@[^/]+\/)?[^/@]+\/package\.json$/.test(f))
      .map((f) => f.slice(1, -'/package.json'.length));
    expect(topLevel.length).toBeGreaterThan(10);
    expect(topLevel.filter((d) => !copyright.includes(`\nFiles: ${d}/*\n`))).toEqual([]);
    // the changelog's newest entry is this version's
    expect(gunzipSync(readFileSync(`${DOC}/${changelog}`)).toString('utf8')).toMatch(new RegExp(`^ballast \\(${art.version.replace(/[.+]/g, '\\$&')}\\) `));
    expect((await sh(['dpkg-query', '-W', '-f=${Maintainer}', 'ballast'])).stdout).not.toMatch(/localhost/);
    // md5sums: every installed file as packaged
    expect(await sh(['dpkg', '--verify', 'ballast'])).toEqual({ code: 0, stdout: '', stderr: '' });
  });

  it("the installed agent, with only the unit's capabilities, elects itself within Master_Down_Interval and runs nftables and the eBPF local endpoint", async () => {
    expect(installedByUs).toBe(true);
    lab = await startLab({ prefix: PREFIX, subnet: SUBNET, nodes: 1, ipv6: false, apiservers: true });
    const n1 = lab.nodes[0]!;
    const cgroup = await lab.cgroup(n1);
    const config = join(lab.dir, 'ballast.yaml');
    writeFileSync(
      config,
      stringify({
        interface: n1.ifname,
        vrrp: { vrid: 51, priority: PRIORITY, advertisementInterval: `${INTERVAL_CS * 10}ms` },
        vips: [lab.vip4],
        apiserver: { port: 6443, backends: [`${n1.ipv4}:6443`], health: { caFile: lab.ca.certFile, interval: '200ms', timeout: '200ms', rise: 2, fall: 2 } },
        dataplane: { vip: 'nftables', local: 'ebpf', keepOnStop: 'none' },
        localEndpoint: { address: '127.0.0.1:7443', cgroup },
        admin: { listen: '127.0.0.1:9641' },
      }),
    );
    const unit = readFileSync(UNIT, 'utf8');
    const caps = /^CapabilityBoundingSet=(.*)$/m.exec(unit)![1]!.split(' ');
    const bset = `-all,${caps.map((c) => `+${c.replace(/^CAP_/, '').toLowerCase()}`).join(',')}`;
    // root as under the unit: the bounding set is all it has (and nft / conntrack inherit); setpriv
    // runs after the namespace is entered, which itself needs CAP_SYS_ADMIN
    agent = lab.spawn(
      n1.netns,
      ['setpriv', `--bounding-set=${bset}`, '--inh-caps=-all', '--ambient-caps=-all', '/usr/bin/ballast', 'run', '--config', config],
      { hostMounts: true, logFile: 'installed-agent.log' },
    );
    const statusOf = async (): Promise<StatusDocument | null> => {
      const r = await lab!.exec(n1.netns, ['/usr/bin/ballast', 'status', '--json'], { allowFail: true, timeoutMs: 3000 });
      return r.code === 0 ? (JSON.parse(r.stdout) as StatusDocument) : null;
    };
    const st = await waitFor(
      statusOf,
      (s) =>
        // vipsHeld: master, and the VIP added (after connection sync's commit)
        s !== null &&
        s.state === 'master' &&
        s.vipsHeld === true &&
        s.local.mode === 'ebpf' &&
        s.dataplane.mode === 'nftables' &&
        (s.dataplane as { applies?: number }).applies! > 0,
      { timeoutMs: 10_000, intervalMs: 100, what: 'the installed agent to be master with nftables and the eBPF local endpoint' },
    );
    expect((st as { vips?: string[] }).vips).toEqual([lab.vip4]);
    expect(await lab.holders(lab.vip4)).toEqual([n1]);
    // the process really had only those capabilities (CapBnd = CapEff = their bits)
    const mask = caps.reduce((m, c) => m | (1n << BigInt(CAP_NUMBER[c] ?? -1)), 0n);
    const procStatus = readFileSync(
      `/proc/${(await lab.exec(n1.netns, ['pgrep', '-g', String(agent.pid), '-f', 'dist/src/cli.js run'], { timeoutMs: 3000 })).stdout.trim().split('\n')[0]}/status`,
      'utf8',
    );
    expect(BigInt(`0x${/^CapBnd:\s+(\w+)$/m.exec(procStatus)![1]}`)).toBe(mask);
    expect(BigInt(`0x${/^CapEff:\s+(\w+)$/m.exec(procStatus)![1]}`)).toBe(mask);
    // Backup → Master after exactly Master_Down_Interval of silence (its own log's timestamps)
    const changes = agent
      .output()
      .split('\n')
      .flatMap((l) => {
        try {
          const o = JSON.parse(l) as { msg?: string; to?: string; at?: string };
          return o.msg === 'state change' ? [o] : [];
        } catch {
          return [];
        }
      });
    const backupAt = Date.parse(changes.find((c) => c.to === 'backup')!.at!);
    const masterAt = Date.parse(changes.find((c) => c.to === 'master')!.at!);
    const mdi = masterDownIntervalMs(PRIORITY, INTERVAL_CS);
    expect(masterAt - backupAt).toBeGreaterThanOrEqual(mdi - 5);
    expect(masterAt - backupAt).toBeLessThanOrEqual(mdi + MARGIN_MS);
    console.log(`package: installed agent Backup → Master in ${masterAt - backupAt} ms (Master_Down_Interval ${mdi.toFixed(0)} ms) with ${caps.join(' ')}`);
    expect(await agent.stop('SIGTERM', 5000)).toBe(0);
    agent = undefined;
    expect(await lab.holders(lab.vip4)).toEqual([]);
  }, 30_000);

  it('apt-get remove leaves only the configuration; apt-get purge leaves nothing (no files, no nftables table, no pins)', async () => {
    expect(installedByUs).toBe(true);
    const r = await sh(['apt-get', 'remove', '-y', '-q', 'ballast']);
    expect(r.code, r.stderr + r.stdout).toBe(0);
    expect(await dpkgStatus()).toBe(`deinstall ok config-files ${art.version}`);
    expect(existsSync(CONFFILE)).toBe(true);
    for (const gone of ['/usr/lib/ballast', '/usr/bin/ballast', UNIT]) expect(existsSync(gone), gone).toBe(false);
    const p = await sh(['apt-get', 'purge', '-y', '-q', 'ballast']);
    expect(p.code, p.stderr + p.stdout).toBe(0);
    expect(await dpkgStatus()).toBeNull();
    for (const gone of ['/etc/ballast', '/var/lib/ballast', '/run/ballast', '/sys/fs/bpf/ballast']) expect(existsSync(gone), gone).toBe(false);
    expect((await sh(['nft', 'list', 'tables'])).stdout).not.toMatch(/\bballast\b/);
  }, 60_000);
});
