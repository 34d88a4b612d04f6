/**
 * Phase, local endpoint: the node-local API endpoint (`localEndpoint`), served by eBPF (cgroup
 * connect() rewrite) or, where this host cannot run it, by the user-space proxy; fed by the
 * health checks through a LocalBalancer. Started before the election: it needs nothing from it,
 * and a failure here leaves the VIPs untouched.
 */
import type { Config } from '../../config/index.js';
import { createError } from '../../errors.js';
import type { Logger } from '../../log/log.js';
import type { HealthChecker } from '../../health/checker.js';
import { LOCAL_PLANE_MESSAGES, LocalBalancer, type LocalDataplane, type LocalEndpoint } from '../../dataplane/local.js';
import { Reconciler } from '../../dataplane/reconcile.js';
import { EbpfLocalDataplane, checkEbpf } from '../../dataplane/ebpf.js';
import { ProxyLocalDataplane } from '../../dataplane/proxy.js';
import { listeningOn } from '../../net/listening.js';
import { hostPort } from '../../net/address.js';
import { runPhase, throwIfAborted, type AgentContext, type Change, type PhaseHandle, type PhaseSpec, type Reaction } from '../phase.js';

/** The eBPF local endpoint's cgroup and pin directory (preflight found and locked them); null: none (the proxy serves it). */
type EbpfPlace = { cgroup: string; pinDir: string } | null;

/** What the local endpoint needs: the checks it follows, and where its eBPF programs go. */
export interface LocalEndpointInputs {
  checker: HealthChecker;
  ebpf: EbpfPlace;
}

/** With the eBPF local endpoint on a node with VIPs, VIP:apiserver.port is one of its endpoints too. */
const vipEndpoints = ({ next }: Change): Reaction => (next.vrrp !== null && next.dataplane.local === 'ebpf' ? 'rerun' : 'same');

/** Phase 3, the local endpoint: its addresses re-run it; its mode, its cgroup and turning it on or off take a restart. */
export const localEndpointPhase: PhaseSpec<LocalEndpointInputs, LocalEndpointPhase> = {
  name: 'local endpoint',
  settings: [
    { path: 'localEndpoint', exact: true, on: 'restart', why: 'adding or removing the local endpoint' },
    { path: 'localEndpoint.cgroup', on: 'restart', why: "the local endpoint's cgroup" },
    { path: 'dataplane.local', on: 'restart', why: 'the local endpoint mode' },
    { path: 'localEndpoint.addresses', on: 'rerun', does: 'local endpoint re-run' },
    { path: 'localEndpoint.force', on: 'rerun', does: 'local endpoint re-run' },
    { path: 'vips', on: vipEndpoints, does: 'local endpoint re-run' },
    { path: 'apiserver.port', on: vipEndpoints, does: 'local endpoint re-run' },
  ],
  start: startLocalEndpoint,
  rerun: {
    after: async (h, _change, log) => {
      await h.lb.sync();
      log.info({ endpoints: h.local.status().endpoints, mode: h.local.mode }, 'reload: local endpoint re-run');
    },
  },
};

/** The errno names, in an error or its causes, of what stopped the eBPF local endpoint. */
function errnoCodes(err: unknown): { code: string; syscall?: string; message: string }[] {
  const out: { code: string; syscall?: string; message: string }[] = [];
  for (let e = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const { code, syscall } = e as { code?: unknown; syscall?: unknown };
    if (typeof code === 'string' && /^E[A-Z0-9]+$/.test(code)) out.push({ code, ...(typeof syscall === 'string' ? { syscall } : {}), message: e.message });
  }
  return out;
}

/**
 * What stopped {@link EbpfLocalDataplane.open}, in the words of the fix: the errno the kernel
 * gave (the addon's errors carry `code` and `syscall`, also as a BallastError's `cause`) turned
 * into the setting that causes it, under systemd first (the packaged unit is where these meet).
 * Pure; never throws.
 *   EROFS            bpffs read-only in this mount namespace: ProtectKernelTunables=yes (systemd
 *                    remounts /sys read-only; ReadWritePaths=/sys/fs/bpf does not lift it on
 *                    every version) or a read-only /sys in a container
 *   EPERM / EACCES   the kernel refused bpf() or the attach: CAP_BPF / CAP_NET_ADMIN
 *                    (CapabilityBoundingSet=), or a seccomp filter (SystemCallFilter=)
 *   anything else    the error's own message
 * @returns `text`, one clause for the log line, and the errno name when there is one.
 */
export function ebpfBlocker(err: unknown): { text: string; code?: string } {
  const codes = errnoCodes(err);
  const message = err instanceof Error ? err.message : String(err);
  const rofs = codes.find((c) => c.code === 'EROFS');
  if (rofs) {
    return {
      code: 'EROFS',
      text:
        `bpffs (/sys/fs/bpf) is read-only in this process's mount namespace (${rofs.message}): under systemd, ProtectKernelTunables=yes makes it so, and ReadWritePaths=/sys/fs/bpf must be listed for it to be writable; ` +
        '`systemctl edit ballast` and add `[Service]` `ProtectKernelTunables=no` and `ReadWritePaths=/sys/fs/bpf`, then `systemctl restart ballast` (in a container: mount /sys/fs/bpf read-write)',
    };
  }
  const perm = codes.find((c) => c.code === 'EPERM' || c.code === 'EACCES');
  if (perm) {
    return {
      code: perm.code,
      text:
        `the kernel refused ${perm.syscall ?? 'a BPF call'} (${perm.message}): the process lacks CAP_BPF and CAP_NET_ADMIN (CAP_SYS_ADMIN before Linux 5.8), or a seccomp filter forbids bpf(); ` +
        'under systemd, `systemctl edit ballast` and make sure `CapabilityBoundingSet=` lists CAP_BPF CAP_NET_ADMIN (with `User=`, `AmbientCapabilities=` too) and `SystemCallFilter=` allows bpf (in a container: add the BPF and NET_ADMIN capabilities)',
    };
  }
  return {
    ...(codes[0] ? { code: codes[0].code } : {}),
    text: `${message} (\`ballast check\` run the same way, under the unit or in the container, tells more)`,
  };
}

/** The running local endpoint. */
export interface LocalEndpointPhase extends PhaseHandle {
  local: LocalDataplane;
  /** The data plane following the checker's verdicts (for /status and a re-sync after the backend set changed). */
  lb: Reconciler<LocalBalancer>;
}

/**
 * Opens the local endpoint's data plane and has it follow the checker's verdicts (one
 * subscription), which the undo closes
 * unless dataplane.keepOnStop is `none`).
 * @throws BallastError as {@link startLocalDataplane}.
 */
export function startLocalEndpoint(ctx: AgentContext, config: Config, inputs: LocalEndpointInputs): Promise<LocalEndpointPhase> {
  return runPhase(ctx, 'local endpoint', async (own) => {
    const { checker } = inputs;
    const { log } = ctx;
    // a stop is a restart unless keepOnStop: none (the eBPF programs keep serving, the next start adopts them)
    // (and a restart in place always keeps it)
    const keep = (): boolean => config.dataplane.keepOnStop !== 'none' || (ctx.restarting?.() ?? null) !== null;
    const local = await startLocalDataplane(config, log, ctx.signal, inputs.ebpf);
    own.defer('local endpoint data plane', () =>
      local.close({ keep: keep() }).catch((err: unknown) => log.error({ err: (err as Error).message }, 'cannot remove the local endpoint data plane')),
    );
    const localLb = new Reconciler(new LocalBalancer(local, log), checker, { log, ...LOCAL_PLANE_MESSAGES });
    own.defer('local endpoint verdict subscription', localLb.follow());
    return { local, lb: localLb, report: () => ({ local: { ...localLb.plane.status(), ...localLb.status() } }) };
  });
}

/**
 * Opens the node-local endpoint's data plane: `ebpf` (falling back to `proxy`, logged, when this
 * host cannot run it) or `proxy`. With `ebpf` on a node with VIPs, VIP:apiserver.port is an
 * endpoint too, so this node's own clients of the VIP are balanced without the DNAT hairpin.
 * `ebpf` is the cgroup and pin directory preflight found and locked (null: no cgroup v2, proxy).
 * @throws BallastError BALLAST_E_LOCAL_ENDPOINT_IN_USE when something already listens on an
 *   endpoint's port (unless localEndpoint.force), BALLAST_E_DATAPLANE when neither mode starts;
 *   StartAborted when `signal` is aborted while the eBPF check runs (nothing is open then).
 */
async function startLocalDataplane(config: Config, log: Logger, signal: AbortSignal, ebpf: EbpfPlace): Promise<LocalDataplane> {
  const le = config.localEndpoint!;
  const endpoints: LocalEndpoint[] = le.addresses.map((a) => ({ address: a.host, port: a.port }));
  const busy = endpoints.filter((e) => listeningOn(e.address, e.port));
  if (busy.length > 0 && !le.force) {
    throw createError(
      'BALLAST_E_LOCAL_ENDPOINT_IN_USE',
      `localEndpoint.address: something on this node already listens on ${busy.map((e) => hostPort(e.address, e.port)).join(', ')}; its clients would be taken over. Pick another port (7443 is the convention), or set localEndpoint.force: true`,
    );
  }
  if (busy.length > 0)
    log.warn(
      { endpoints: busy.map((e) => hostPort(e.address, e.port)) },
      'localEndpoint.force: taking over an address something already listens on; its clients are balanced from now on',
    );
  if (config.dataplane.local === 'ebpf') {
    const vipEndpoints = config.vrrp !== null ? config.vips.map((vip) => ({ address: vip, port: config.apiserver.port })) : [];
    if (ebpf !== null) {
      const { cgroup, pinDir } = ebpf;
      try {
        return await EbpfLocalDataplane.open({ endpoints: [...endpoints, ...vipEndpoints], cgroup, pinDir, log });
      } catch (err) {
        const check = await checkEbpf().catch(() => ({ ok: false, reasons: ['ballast check itself failed'] }));
        throwIfAborted(signal);
        // the host can run eBPF (check attached to a test cgroup): this failure is ours to report
        if (check.ok) throw createError('BALLAST_E_DATAPLANE', `cannot start the eBPF local endpoint: ${(err as Error).message}`, { cause: err });
        const blocker = ebpfBlocker(err);
        log.warn(
          { err: (err as Error).message, ...(blocker.code ? { code: blocker.code } : {}), checkReasons: check.reasons },
          `eBPF local endpoint unavailable: ${blocker.text}; serving it with the user-space proxy instead (the slower path: every byte is copied through the agent)`,
        );
      }
    } else {
      log.warn(
        { reasons: ['no cgroup v2 hierarchy is mounted'] },
        'eBPF local endpoint unavailable on this host; serving it with the user-space proxy instead (the slower path)',
      );
    }
  }
  try {
    const dp = await ProxyLocalDataplane.open({ endpoints, log });
    log.info({ endpoints: endpoints.map((e) => hostPort(e.address, e.port)) }, 'local endpoint served by the user-space proxy (slower path than ebpf)');
    return dp;
  } catch (err) {
    throw createError('BALLAST_E_DATAPLANE', `cannot serve the local endpoint: ${(err as Error).message}`, { cause: err });
  }
}
