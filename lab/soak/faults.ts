/**
 * Injecting and healing the soak's faults on a {@link SoakCluster} (lab/soak/schedule.ts names
 * them). Each `inject` resolves once the fault is in place and says what it hit; each `heal`
 * resolves once it is undone (an agent restarted answers, a link forwards again).
 *
 * | kind              | inject                                                      | heal                          |
 * |-------------------|-------------------------------------------------------------|-------------------------------|
 * | agent-sigkill     | SIGKILL the agent                                           | start it again                |
 * | agent-sigterm     | SIGTERM (graceful: priority 0, VIP released)                | start it again                |
 * | link-down         | the node's bridge port down (lab.linkDown)                  | up                            |
 * | packet-loss       | `table inet bsoak_loss`: eth0 in/out `numgen random mod 100 < P drop` | table deleted      |
 * | vrrp-blocked      | the LAN bridge drops IP protocol 112 (cluster.ts blockVrrp) | table deleted                 |
 * | apiserver-stop    | SIGTERM the stand-in                                        | start it                      |
 * | apiserver-unready | /readyz 500                                                 | 200                           |
 * | apiserver-slow    | /readyz answered P ms late                                  | at once                       |
 * | clock-step        | the agent's faketime offset: base + P (e.g. +1h)            | the base (CLOCK_BASE_MIN)     |
 * | cpu-hog           | `stress-ng --cpu 1` in the node's namespace                 | killed by PID (its group)     |
 * | main-stall        | SIGURG: the agent's main thread busy for stallMs           | (ends by itself)              |
 * | reload-good       | a changed health timeout, `ballast reload` (must exit 0)    | the original file, reload (0) |
 * | reload-bad        | an invalid file, `ballast reload` (must exit 2)             | the original file back, reload (0) |
 * | conntrack-flush   | `conntrack -F` in the node's namespace                      | (instant)                     |
 * | nft-flush         | `nft flush ruleset` in the node's namespace                 | (instant; the agent restores) |
 */
import { writeFileSync } from 'node:fs';
import { blockVrrp, cliPath } from '../cluster.js';
import type { LabProcess } from '../lab.js';
import { LOSS_TABLE, type SoakCluster } from './cluster.js';
import { clockOffset, type PlannedFault } from './schedule.js';

/** What an injection or heal observed: a note for the report, and a failure when the fault did not act as it must. */
export interface FaultOutcome {
  note?: string;
  failed?: string;
}

const hogs = new Map<number, LabProcess>();

/** Injects `f`. @throws when the injection itself could not be carried out (a command failed). */
export async function inject(c: SoakCluster, f: PlannedFault): Promise<FaultOutcome> {
  const lab = c.lab;
  const node = f.target === 'lan' ? undefined : c.node(f.target);
  const role = node ? (c.snapshot().holders.includes(node.name) ? 'holder' : node === c.worker ? 'worker' : 'backup') : 'segment';
  switch (f.kind) {
    case 'agent-sigkill':
    case 'agent-sigterm': {
      const code = await c.stopAgent(f.target, f.kind === 'agent-sigkill' ? 'SIGKILL' : 'SIGTERM');
      if (f.kind === 'agent-sigterm' && code !== 0) return { note: role, failed: `SIGTERM: the agent exited ${code}, not 0` };
      return { note: role };
    }
    case 'link-down':
      await lab.linkDown(node!);
      return { note: role };
    case 'packet-loss': {
      const p = Number(f.param);
      const rules = [
        `add table ${LOSS_TABLE}`,
        `add chain ${LOSS_TABLE} pre { type filter hook prerouting priority -300; policy accept; }`,
        `add chain ${LOSS_TABLE} post { type filter hook postrouting priority 300; policy accept; }`,
        `add rule ${LOSS_TABLE} pre iifname "eth0" numgen random mod 100 < ${p} drop`,
        `add rule ${LOSS_TABLE} post oifname "eth0" numgen random mod 100 < ${p} drop`,
      ];
      let set = c.extraTables.get(node!.name);
      if (!set) c.extraTables.set(node!.name, (set = new Set()));
      set.add(LOSS_TABLE);
      await lab.exec(node!.netns, ['sh', '-c', `printf '%s\\n' ${rules.map((r) => `'${r}'`).join(' ')} | nft -f -`]);
      return { note: `${role}, ${p} %` };
    }
    case 'vrrp-blocked':
      await blockVrrp(lab, true);
      return { note: role };
    case 'apiserver-stop':
      await lab.stopApiserver(node!);
      return { note: role };
    case 'apiserver-unready':
      await lab.setReady(node!, false);
      return { note: role };
    case 'apiserver-slow':
      await lab.setReadyzDelay(node!, Number(f.param));
      return { note: `${role}, ${f.param} ms` };
    case 'clock-step':
      writeFileSync(c.clockFile(f.target), `${clockOffset(f.param)}\n`);
      return { note: `${role}, ${f.param}` };
    case 'cpu-hog': {
      const p = lab.spawn(node!.netns, ['stress-ng', '--cpu', '1', '--timeout', `${Math.ceil(f.durationMs / 1000) + 5}s`, '--quiet']);
      hogs.set(f.id, p);
      c.extraPids.add(p.pid);
      return { note: `${role}, pid ${p.pid}` };
    }
    case 'main-stall': {
      const a = c.agents.get(f.target);
      if (!a) return { note: role, failed: 'no agent runs there' };
      const blocked = a.proc.waitForOutput(/"hook":"blocked","ms":(\d+)/, { timeoutMs: c.o.timing.stallMs + 5000 });
      a.proc.kill('SIGURG');
      const ms = Number((await blocked)[1]);
      return { note: `${role}, ${ms} ms` };
    }
    case 'reload-good': {
      writeFileSync(c.configPath(f.target), c.goodConfig(f.target).replace(/timeout: \d+ms/, `timeout: ${c.o.timing.health.timeoutMs - 10}ms`));
      const r = await reload(c, f.target);
      return r === 0 ? { note: `${role}, applied` } : { note: role, failed: `a good config: ballast reload exited ${r}, not 0` };
    }
    case 'reload-bad': {
      // vrid out of range (1..255): refused as a whole
      writeFileSync(
        c.configPath(f.target),
        c
          .goodConfig(f.target)
          .replace(/vrid: \d+/, 'vrid: 300')
          .replace(/rise: \d+/, 'rise: 99'),
      );
      const r = await reload(c, f.target);
      return r === 2 ? { note: `${role}, refused` } : { note: role, failed: `an invalid config: ballast reload exited ${r}, not 2` };
    }
    case 'conntrack-flush':
      await lab.exec(node!.netns, ['conntrack', '-F'], { allowFail: true });
      return { note: role };
    case 'nft-flush':
      await lab.exec(node!.netns, ['nft', 'flush', 'ruleset']);
      return { note: role };
  }
}

/** Heals `f` (see the table above). */
export async function heal(c: SoakCluster, f: PlannedFault): Promise<FaultOutcome> {
  const lab = c.lab;
  const node = f.target === 'lan' ? undefined : c.node(f.target);
  switch (f.kind) {
    case 'agent-sigkill':
    case 'agent-sigterm': {
      const a = await c.startAgent(f.target);
      return { note: `restarted in ${a.startMs} ms` };
    }
    case 'link-down':
      await lab.linkUp(node!);
      return {};
    case 'packet-loss':
      await lab.exec(node!.netns, ['nft', 'delete', 'table', ...LOSS_TABLE.split(' ')], { allowFail: true });
      // allowed a moment longer: the leak check reads the sampler's last listing
      setTimeout(() => c.extraTables.get(node!.name)?.delete(LOSS_TABLE), 2000).unref();
      return {};
    case 'vrrp-blocked':
      await blockVrrp(lab, false);
      return {};
    case 'apiserver-stop':
      await lab.startApiserver(node!);
      return {};
    case 'apiserver-unready':
      await lab.setReady(node!, true);
      return {};
    case 'apiserver-slow':
      await lab.setReadyzDelay(node!, 0);
      return {};
    case 'clock-step':
      writeFileSync(c.clockFile(f.target), `${clockOffset('+0m')}\n`);
      return {};
    case 'cpu-hog': {
      const p = hogs.get(f.id);
      hogs.delete(f.id);
      await p?.stop('SIGKILL', 2000);
      if (p) c.extraPids.delete(p.pid);
      return {};
    }
    case 'reload-good':
    case 'reload-bad': {
      writeFileSync(c.configPath(f.target), c.goodConfig(f.target));
      const r = await reload(c, f.target);
      return r === 0 ? {} : { failed: `the original config: ballast reload exited ${r}, not 0` };
    }
    case 'main-stall':
    case 'conntrack-flush':
    case 'nft-flush':
      return {};
  }
}

/** `ballast reload --admin 127.0.0.1:9641` in the node; resolves with its exit status (-1: no agent). */
async function reload(c: SoakCluster, name: string): Promise<number> {
  if (!c.agents.has(name)) return -1;
  const r = await c.lab.exec(c.node(name).netns, [process.execPath, cliPath(), 'reload', '--admin', '127.0.0.1:9641', '--json'], {
    allowFail: true,
    timeoutMs: 15_000,
  });
  return r.code;
}

/** Undoes whatever is still injected (an interrupted run): every link up, no loss table, stand-ins ready and prompt, clocks at +0, hogs killed. */
export async function healAll(c: SoakCluster): Promise<void> {
  for (const p of hogs.values()) await p.stop('SIGKILL', 2000).catch(() => undefined);
  hogs.clear();
  await blockVrrp(c.lab, false).catch(() => undefined);
  for (const n of c.lab.nodes) {
    await c.lab.linkUp(n).catch(() => undefined);
    await c.lab.exec(n.netns, ['nft', 'delete', 'table', ...LOSS_TABLE.split(' ')], { allowFail: true }).catch(() => undefined);
  }
}
