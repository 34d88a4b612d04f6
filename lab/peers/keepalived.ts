/**
 * keepalived as a lab peer (lab/lab.ts): renders a keepalived.conf for one VRRP instance,
 * checks it with `keepalived --config-test`, and runs keepalived in the foreground inside a
 * node's network namespace. Used by the failover benchmark and the interop tests.
 *
 *   keepalived --dont-fork --log-console --log-detail --no-syslog --vrrp --dont-respawn
 *              -f <lab.dir>/<node>-keepalived.conf
 *              -p <lab.dir>/<node>-keepalived.pid -r <lab.dir>/<node>-keepalived-vrrp.pid
 *
 * Several keepalived run side by side on one machine (one per lab node) without clashing:
 * - `ip netns exec` already puts the process in the node's namespace, so no `net_namespace` /
 *   `--namespace` (which would also make keepalived unshare a mount namespace for /run/keepalived);
 * - the two pid files are per node, in lab.dir, instead of /run/keepalived.pid and /run/vrrp.pid
 *   (keepalived refuses to start when its pid file names a live process);
 * - no `instance` / `--config-id` is needed: those only rename pid files and select `@id` lines;
 * - `--no-syslog`: the log goes to the console only, not into the machine's journal.
 * `--dont-respawn` makes a crash of the VRRP child end the whole daemon, visibly, instead of
 * being papered over by a respawn.
 *
 * Signals: keepalived's parent forwards SIGTERM to its VRRP child, which (as Active) sends one
 * advertisement with priority 0 and removes the VIPs. stop() signals the parent only, the way
 * `kill $(cat keepalived.pid)` would; SIGKILL goes to the whole process group (a crash).
 *
 * Script security: keepalived warns (and `--config-test` exits non-zero) when a notify/track
 * script could run and `script_user` / `enable_script_security` are not set, and it looks up a
 * `keepalived_script` user that does not exist here. The rendered config sets
 * `script_user root` and `enable_script_security` by default, so adding a script later does not
 * turn into a startup failure.
 */
import { spawnSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { join } from 'node:path';
import type { Lab, LabNode, LabProcess } from '../lab.js';

/** The keepalived binary (Debian's package installs it here). */
export const KEEPALIVED_PATH = '/usr/sbin/keepalived';

/** Gratuitous ARP / unsolicited NA settings of one instance (keepalived's names; seconds). */
export interface KeepalivedGarp {
  /** `garp_master_delay`: seconds to the second burst after becoming MASTER (keepalived default 5; 0: none) */
  masterDelayS?: number;
  /** `garp_master_repeat`: messages per burst (keepalived default 5) */
  masterRepeat?: number;
  /** `garp_interval` (IPv4) and `gna_interval` (IPv6): seconds between messages of a burst (default 0) */
  intervalS?: number;
  /** `garp_master_refresh`: seconds between refresh bursts while MASTER (default 0: none) */
  masterRefreshS?: number;
  /** `garp_master_refresh_repeat`: messages per refresh burst (default 1) */
  masterRefreshRepeat?: number;
  /** `garp_lower_prio_delay`: seconds to the second burst after a lower-priority advert as MASTER */
  lowerPrioDelayS?: number;
  /** `garp_lower_prio_repeat`: messages per burst after a lower-priority advert as MASTER */
  lowerPrioRepeat?: number;
}

/** One keepalived VRRP instance, as the lab runs it. Only `priority` and `vips` are required. */
export interface KeepalivedOptions {
  /** `virtual_router_id`, 1..255; default 51 (the lab's ballast default) */
  vrid?: number;
  /** `priority`, 1..255 (255: address owner) */
  priority: number;
  /**
   * `advert_int` in seconds; default 0.1 (= ballast's 100 ms in the lab). VRRPv3: 0.01..40.95 in
   * steps of 0.01 (centiseconds on the wire); VRRPv2: whole seconds 1..255.
   */
  advertIntervalS?: number;
  /** `interface`; default "eth0" (every lab node's only interface) */
  interface?: string;
  /**
   * `virtual_ipaddress`: addresses of one family, optionally with "/len" (default /32 or /128),
   * each configured with `dev <interface>`.
   */
  vips: string[];
  /** `unicast_peer` addresses; absent or empty: multicast (224.0.0.18 / ff02::12) */
  unicastPeers?: string[];
  /** `unicast_src_ip` (default: keepalived picks the interface's primary address) */
  unicastSrcIp?: string;
  /** `version`; default 3. IPv6 instances are always version 3 in keepalived. */
  vrrpVersion?: 2 | 3;
  /**
   * `v3_checksum_as_v2`: a VRRPv3 IPv4 checksum without the IPv4 pseudo-header (RFC 9568 style).
   * Added in keepalived 2.2.8; keepalived 2.2.7 has no such keyword (it always includes the
   * pseudo-header), and startKeepalived rejects it there through the config test.
   */
  checksumAsV2?: boolean;
  /** `nopreempt` (the initial state stays BACKUP, as nopreempt requires) */
  nopreempt?: boolean;
  /** `preempt_delay` in seconds, 0..1000 */
  preemptDelayS?: number;
  /** `accept` (true) / `no_accept` (false); absent: keepalived's default (accept unless strict) */
  accept?: boolean;
  /** GARP / NA settings; absent fields keep keepalived's defaults */
  garp?: KeepalivedGarp;
  /** `router_id` in global_defs; default "ballast-lab" */
  routerId?: string;
  /** the vrrp_instance name; default `VI_<vrid>` */
  instanceName?: string;
  /** `script_user`, default "root"; `enable_script_security` is set with it (see file comment) */
  scriptUser?: string;
  /** `vrrp_script` blocks, each tracked by the instance (`track_script`), e.g. the kubeadm guide's check_apiserver */
  trackScripts?: KeepalivedTrackScript[];
  /** extra raw lines for global_defs (one keyword each, no newlines) */
  extraGlobal?: string[];
  /** extra raw lines for the vrrp_instance (one keyword each, no newlines) */
  extraInstance?: string[];
}

/**
 * One `vrrp_script` (keepalived's names; seconds). The kubeadm HA guide's check_apiserver is
 * `interval 3, weight -2, fall 10, rise 2` running a curl of the local load balancer.
 */
export interface KeepalivedTrackScript {
  /** the block's name, [A-Za-z0-9_.-] */
  name: string;
  /** `script`: the command line keepalived runs (no shell): an absolute program path and arguments, no double quote */
  script: string;
  /** `interval`, seconds between runs (1..3600) */
  intervalS: number;
  /** `timeout`, seconds a run may take (absent: keepalived's default, the interval) */
  timeoutS?: number;
  /** `weight`, -253..253 (absent: keepalived's default 0, a failing script means FAULT) */
  weight?: number;
  /** `fall`: failed runs before it counts as failed (absent: 1) */
  fall?: number;
  /** `rise`: passed runs before it counts as passed (absent: 1) */
  rise?: number;
}

const NAME_RE = /^[A-Za-z0-9_.-]{1,64}$/;
const IFNAME_RE = /^[A-Za-z0-9_.:-]{1,15}$/;

function checkInt(name: string, v: number, min: number, max: number): void {
  if (!Number.isInteger(v) || v < min || v > max) throw new TypeError(`${name} must be an integer ${min}..${max}, got ${v}`);
}

function checkSeconds(name: string, v: number, min: number, max: number): void {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max) throw new TypeError(`${name} must be a number of seconds ${min}..${max}, got ${v}`);
}

/** "10.0.0.1" or "10.0.0.1/24" → family and the text keepalived gets (with a prefix length). */
function parseVip(v: string): { family: 4 | 6; text: string } {
  const [addr = '', len, ...rest] = v.split('/');
  const family = isIP(addr);
  if ((family !== 4 && family !== 6) || rest.length > 0) throw new TypeError(`vips: not an IP address: ${JSON.stringify(v)}`);
  const max = family === 4 ? 32 : 128;
  if (len !== undefined && (!/^\d{1,3}$/.test(len) || Number(len) > max)) throw new TypeError(`vips: bad prefix length in ${JSON.stringify(v)}`);
  return { family, text: `${addr}/${len ?? max}` };
}

/** Seconds with at most 6 decimals, without exponent notation (keepalived parses decimals). */
const secs = (s: number): string => String(Number(s.toFixed(6)));

function rawLines(name: string, lines: string[] | undefined): string[] {
  for (const l of lines ?? []) {
    if (/[\r\n]/.test(l)) throw new TypeError(`${name}: one keyword per line, got ${JSON.stringify(l)}`);
  }
  return lines ?? [];
}

/**
 * Renders keepalived.conf for one VRRP instance starting in state BACKUP (pure). Validates
 * every option and throws a TypeError naming the bad one. Times are in seconds, keepalived's
 * unit (advert_int 0.1 = 100 ms).
 */
export function keepalivedConfig(opts: KeepalivedOptions): string {
  const vrid = opts.vrid ?? 51;
  checkInt('vrid', vrid, 1, 255);
  checkInt('priority', opts.priority, 1, 255);
  const version = opts.vrrpVersion ?? 3;
  if (version !== 2 && version !== 3) throw new TypeError(`vrrpVersion must be 2 or 3, got ${String(version)}`);
  const advert = opts.advertIntervalS ?? 0.1;
  if (version === 3) {
    checkSeconds('advertIntervalS', advert, 0.01, 40.95);
    if (Math.abs(advert * 100 - Math.round(advert * 100)) > 1e-9) throw new TypeError(`advertIntervalS must be whole centiseconds for VRRPv3, got ${advert}`);
  } else {
    // keepalived would round a fractional VRRPv2 interval up to a second and only log it
    checkInt('advertIntervalS (VRRPv2: whole seconds)', advert, 1, 255);
  }
  const ifname = opts.interface ?? 'eth0';
  if (!IFNAME_RE.test(ifname)) throw new TypeError(`interface: not an interface name: ${JSON.stringify(ifname)}`);
  if (opts.vips.length === 0) throw new TypeError('vips: at least one address is required');
  const vips = opts.vips.map(parseVip);
  const family = vips[0]!.family;
  if (vips.some((v) => v.family !== family)) throw new TypeError('vips: all addresses must be of one family (keepalived excludes the others from adverts)');
  if (family === 6 && version === 2) throw new TypeError('vrrpVersion 2 cannot carry IPv6 VIPs');
  for (const p of opts.unicastPeers ?? []) {
    if (isIP(p) === 0) throw new TypeError(`unicastPeers: not an IP address: ${JSON.stringify(p)}`);
  }
  if (opts.unicastSrcIp !== undefined && isIP(opts.unicastSrcIp) === 0)
    throw new TypeError(`unicastSrcIp: not an IP address: ${JSON.stringify(opts.unicastSrcIp)}`);
  if (opts.preemptDelayS !== undefined) checkSeconds('preemptDelayS', opts.preemptDelayS, 0, 1000);
  const routerId = opts.routerId ?? 'ballast-lab';
  const instance = opts.instanceName ?? `VI_${vrid}`;
  const scriptUser = opts.scriptUser ?? 'root';
  for (const [k, v] of [
    ['routerId', routerId],
    ['instanceName', instance],
    ['scriptUser', scriptUser],
  ] as const) {
    if (!NAME_RE.test(v)) throw new TypeError(`${k}: only [A-Za-z0-9_.-], got ${JSON.stringify(v)}`);
  }
  const g = opts.garp ?? {};
  const garp: string[] = [];
  if (g.masterDelayS !== undefined) {
    checkSeconds('garp.masterDelayS', g.masterDelayS, 0, 1000);
    garp.push(`garp_master_delay ${secs(g.masterDelayS)}`);
  }
  if (g.masterRepeat !== undefined) {
    checkInt('garp.masterRepeat', g.masterRepeat, 1, 255);
    garp.push(`garp_master_repeat ${g.masterRepeat}`);
  }
  if (g.intervalS !== undefined) {
    checkSeconds('garp.intervalS', g.intervalS, 0, 1);
    garp.push(`${family === 4 ? 'garp_interval' : 'gna_interval'} ${secs(g.intervalS)}`);
  }
  if (g.masterRefreshS !== undefined) {
    checkSeconds('garp.masterRefreshS', g.masterRefreshS, 0, 86400);
    garp.push(`garp_master_refresh ${secs(g.masterRefreshS)}`);
  }
  if (g.masterRefreshRepeat !== undefined) {
    checkInt('garp.masterRefreshRepeat', g.masterRefreshRepeat, 1, 255);
    garp.push(`garp_master_refresh_repeat ${g.masterRefreshRepeat}`);
  }
  if (g.lowerPrioDelayS !== undefined) {
    checkSeconds('garp.lowerPrioDelayS', g.lowerPrioDelayS, 0, 1000);
    garp.push(`garp_lower_prio_delay ${secs(g.lowerPrioDelayS)}`);
  }
  if (g.lowerPrioRepeat !== undefined) {
    checkInt('garp.lowerPrioRepeat', g.lowerPrioRepeat, 1, 255);
    garp.push(`garp_lower_prio_repeat ${g.lowerPrioRepeat}`);
  }
  const scripts = (opts.trackScripts ?? []).map((t) => {
    if (!NAME_RE.test(t.name)) throw new TypeError(`trackScripts: name must match ${NAME_RE}, got ${JSON.stringify(t.name)}`);
    if (!t.script.startsWith('/') || /["\r\n]/.test(t.script))
      throw new TypeError(`trackScripts[${t.name}].script must be an absolute command line without double quotes or newlines, got ${JSON.stringify(t.script)}`);
    checkSeconds(`trackScripts[${t.name}].intervalS`, t.intervalS, 1, 3600);
    if (t.timeoutS !== undefined) checkSeconds(`trackScripts[${t.name}].timeoutS`, t.timeoutS, 1, 3600);
    if (t.weight !== undefined) checkInt(`trackScripts[${t.name}].weight`, t.weight, -253, 253);
    if (t.fall !== undefined) checkInt(`trackScripts[${t.name}].fall`, t.fall, 1, 255);
    if (t.rise !== undefined) checkInt(`trackScripts[${t.name}].rise`, t.rise, 1, 255);
    return [
      `vrrp_script ${t.name} {`,
      `  script "${t.script}"`,
      `  interval ${secs(t.intervalS)}`,
      ...(t.timeoutS === undefined ? [] : [`  timeout ${secs(t.timeoutS)}`]),
      ...(t.weight === undefined ? [] : [`  weight ${t.weight}`]),
      ...(t.fall === undefined ? [] : [`  fall ${t.fall}`]),
      ...(t.rise === undefined ? [] : [`  rise ${t.rise}`]),
      '}',
      '',
    ];
  });
  const extraGlobal = rawLines('extraGlobal', opts.extraGlobal);
  const extraInstance = rawLines('extraInstance', opts.extraInstance);

  const peers = opts.unicastPeers ?? [];
  const lines = [
    '# rendered by ballast lab/peers/keepalived.ts',
    'global_defs {',
    `  router_id ${routerId}`,
    `  vrrp_version ${version}`,
    `  script_user ${scriptUser}`,
    '  enable_script_security',
    ...extraGlobal.map((l) => `  ${l}`),
    '}',
    '',
    ...scripts.flat(),
    `vrrp_instance ${instance} {`,
    '  state BACKUP',
    `  interface ${ifname}`,
    `  virtual_router_id ${vrid}`,
    `  version ${version}`,
    `  priority ${opts.priority}`,
    `  advert_int ${secs(advert)}`,
    ...(opts.nopreempt ? ['  nopreempt'] : []),
    ...(opts.preemptDelayS !== undefined ? [`  preempt_delay ${secs(opts.preemptDelayS)}`] : []),
    ...(opts.accept === undefined ? [] : [opts.accept ? '  accept' : '  no_accept']),
    ...(opts.checksumAsV2 ? ['  v3_checksum_as_v2'] : []),
    ...garp.map((l) => `  ${l}`),
    ...(opts.unicastSrcIp !== undefined ? [`  unicast_src_ip ${opts.unicastSrcIp}`] : []),
    ...(peers.length > 0 ? ['  unicast_peer {', ...peers.map((p) => `    ${p}`), '  }'] : []),
    '  virtual_ipaddress {',
    ...vips.map((v) => `    ${v.text} dev ${ifname}`),
    '  }',
    ...(scripts.length > 0 ? ['  track_script {', ...(opts.trackScripts ?? []).map((t) => `    ${t.name}`), '  }'] : []),
    ...extraInstance.map((l) => `  ${l}`),
    '}',
    '',
  ];
  return lines.join('\n');
}

/** The keepalived VRRP states, as its log names them. */
export type KeepalivedState = 'INIT' | 'BACKUP' | 'MASTER' | 'FAULT' | 'STOP';

/** A keepalived running in a lab node (see startKeepalived). */
export interface KeepalivedPeer {
  node: LabNode;
  /** the keepalived parent process (its VRRP child runs in the same process group) */
  proc: LabProcess;
  configPath: string;
  /** the vrrp_instance name, as it appears in the log: "(VI_51) Entering MASTER STATE" */
  instance: string;
  /**
   * Signals keepalived's parent (default SIGTERM: it sends priority 0 as MASTER and removes its
   * VIPs); SIGKILL kills the whole process group at once. Waits up to `timeoutMs` (default
   * 5000 ms) for the exit, then SIGKILLs the group. Resolves with the exit code (null: ended by
   * a signal). Harmless when it already exited.
   */
  stop(signal?: NodeJS.Signals, timeoutMs?: number): Promise<number | null>;
  /** The last state keepalived logged for the instance ("STOP" once it exited), or undefined before its first one. */
  state(): KeepalivedState | undefined;
  /**
   * Resolves once the instance logs "Entering <state> STATE" after this call (or already is in
   * it, with `includeCurrent`, default true). Rejects after `timeoutMs` (default 5000 ms) or
   * when keepalived exits.
   */
  waitForState(state: KeepalivedState, opts?: { timeoutMs?: number; includeCurrent?: boolean }): Promise<void>;
}

/** keepalived processes this module started, per lab and node name: one per node at a time. */
const running = new WeakMap<Lab, Map<string, KeepalivedPeer | 'starting'>>();

/** `keepalived --version` → [major, minor, patch], or undefined when it cannot tell. */
export function keepalivedVersion(): [number, number, number] | undefined {
  const r = spawnSync(KEEPALIVED_PATH, ['--version'], { encoding: 'utf8', timeout: 5000 });
  const m = /Keepalived v(\d+)\.(\d+)\.(\d+)/.exec(`${r.stdout ?? ''}${r.stderr ?? ''}`);
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : undefined;
}

const esc = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * Writes `<lab.dir>/<node>-keepalived.conf` from `opts`, checks it with `keepalived -t`
 * (rejects with keepalived's complaint, e.g. an unknown keyword, before anything runs), and
 * starts keepalived in the foreground inside `node`'s namespace. Resolves once the instance
 * logged its first state (BACKUP; startup is done and its sockets are open). Rejects when
 * keepalived exits or logs nothing within `timeoutMs` (default 10000 ms), or when a keepalived
 * this module started still runs on that node. The lab stops it at teardown if nobody did.
 */
export async function startKeepalived(lab: Lab, node: LabNode, opts: KeepalivedOptions, start: { timeoutMs?: number } = {}): Promise<KeepalivedPeer> {
  const timeoutMs = start.timeoutMs ?? 10_000;
  let perLab = running.get(lab);
  if (!perLab) running.set(lab, (perLab = new Map()));
  if (perLab.has(node.name)) throw new Error(`keepalived already runs on ${node.name}; stop it first`);
  const config = keepalivedConfig(opts);
  const instance = opts.instanceName ?? `VI_${opts.vrid ?? 51}`;
  const configPath = join(lab.dir, `${node.name}-keepalived.conf`);
  const pidFile = join(lab.dir, `${node.name}-keepalived.pid`);
  const vrrpPidFile = join(lab.dir, `${node.name}-keepalived-vrrp.pid`);
  writeFileSync(configPath, config);
  // a SIGKILLed predecessor leaves its pid files; a reused PID in them would block the start
  rmSync(pidFile, { force: true });
  rmSync(vrrpPidFile, { force: true });
  // held from here (the first await), so two concurrent starts on one node cannot both pass the check above
  perLab.set(node.name, 'starting');

  const test = await lab.exec(node.netns, [KEEPALIVED_PATH, '--config-test', '-f', configPath], { allowFail: true, timeoutMs: 10_000 }).catch((e: unknown) => {
    perLab.delete(node.name);
    throw e;
  });
  if (test.code !== 0) {
    perLab.delete(node.name);
    const v = keepalivedVersion();
    const hint =
      opts.checksumAsV2 && v && (v[0] < 2 || (v[0] === 2 && (v[1] < 2 || (v[1] === 2 && v[2] < 8))))
        ? ` (checksumAsV2 needs keepalived ≥ 2.2.8, this is ${v.join('.')})`
        : '';
    throw new Error(
      `keepalived --config-test rejected ${configPath} (exit ${test.code})${hint}:\n${(test.stdout + test.stderr).trim()}\n--- config ---\n${config}`,
    );
  }

  const proc = lab.spawn(
    node.netns,
    [
      KEEPALIVED_PATH,
      '--dont-fork',
      '--log-console',
      '--log-detail',
      '--no-syslog',
      '--vrrp',
      '--dont-respawn',
      '-f',
      configPath,
      '-p',
      pidFile,
      '-r',
      vrrpPidFile,
    ],
    { logFile: join(lab.dir, `${node.name}-keepalived.log`) },
  );
  let exited = false;
  const stateRe = new RegExp(`\\(${esc(instance)}\\) Entering (INIT|BACKUP|MASTER|FAULT|STOP) STATE`, 'g');
  const state = (): KeepalivedState | undefined => {
    if (exited) return 'STOP';
    const all = [...proc.output().matchAll(stateRe)];
    return all.at(-1)?.[1] as KeepalivedState | undefined;
  };
  const peer: KeepalivedPeer = {
    node,
    proc,
    configPath,
    instance,
    async stop(signal: NodeJS.Signals = 'SIGTERM', stopTimeoutMs = 5000): Promise<number | null> {
      if (exited) return proc.exited;
      if (signal === 'SIGKILL') return proc.stop('SIGKILL', stopTimeoutMs);
      // the parent alone, as `kill $(cat keepalived.pid)` does; it tells its VRRP child
      try {
        proc.child.kill(signal);
      } catch {
        // already gone
      }
      let timer: NodeJS.Timeout | undefined;
      const timedOut = await Promise.race([
        proc.exited.then(() => false),
        new Promise<boolean>((r) => {
          timer = setTimeout(() => r(true), stopTimeoutMs);
        }),
      ]);
      clearTimeout(timer);
      if (timedOut) return proc.stop('SIGKILL', 2000);
      return proc.exited;
    },
    state,
    async waitForState(want: KeepalivedState, o: { timeoutMs?: number; includeCurrent?: boolean } = {}): Promise<void> {
      if ((o.includeCurrent ?? true) && state() === want) return;
      await proc.waitForOutput(new RegExp(`\\(${esc(instance)}\\) Entering ${want} STATE`), { timeoutMs: o.timeoutMs ?? 5000 });
    },
  };
  perLab.set(node.name, peer);
  void proc.exited.then(() => {
    exited = true;
    if (perLab.get(node.name) === peer) perLab.delete(node.name);
  });
  try {
    await proc.waitForOutput(new RegExp(`\\(${esc(instance)}\\) Entering (BACKUP|MASTER|FAULT) STATE`), { timeoutMs, includeExisting: true });
  } catch (e) {
    await proc.stop('SIGKILL', 2000);
    throw new Error(`keepalived on ${node.name} did not start: ${(e as Error).message}`, { cause: e });
  }
  return peer;
}
