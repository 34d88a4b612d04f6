/**
 * The election policy phase (src/agent/phases/priority.ts) tells the operator each change of the
 * advertised priority, with the policy's reason; a fake checker and host, no timers of note.
 */
import { describe, expect, it } from 'vitest';
import { startPriority } from '../../src/agent/phases/priority.js';
import type { AgentContext } from '../../src/agent/phase.js';
import { parseConfig } from '../../src/config/index.js';
import type { BackendHealth, HealthChecker } from '../../src/health/checker.js';
import type { Logger } from '../../src/log/log.js';
import type { InterfaceInfo } from '../../src/vip/netlink.js';
import type { VrrpHost } from '../../src/vrrp/host.js';

const B = ['10.0.0.11:6443', '10.0.0.12:6443'];
const config = parseConfig(
  [
    'interface: eth0',
    'vrrp:\n  vrid: 51\n  priority: 150',
    'vips: [10.0.0.100]',
    `apiserver:\n  backends: [${B.join(', ')}]\n  health:\n    insecureSkipVerify: true\n    interval: 200ms\n    timeout: 200ms`,
    'policy:\n  unhealthyPriorityWeight: 100',
  ].join('\n'),
);

function bh(address: string, state: 'up' | 'down', reason: string | null = null): BackendHealth {
  return { address, state, healthy: state === 'up', lastCheck: null, lastLatencyMs: null, reason, consecutive: 2 };
}

describe('startPriority logs each change of the advertised priority with its reason', () => {
  it('lowered (warn, with the backends), then restored (info); no line while it does not change', async () => {
    const lines: [string, Record<string, unknown>, string][] = [];
    const at = (level: string) => (o: Record<string, unknown>, m: string) => void lines.push([level, o, m]);
    const log = { warn: at('warn'), info: at('info'), debug: () => undefined, error: at('error') } as unknown as Logger;
    const ctx: AgentContext = { log, signal: new AbortController().signal, fail: () => undefined };
    let snap = [bh(B[0]!, 'down', 'ECONNREFUSED'), bh(B[1]!, 'down', 'timeout')];
    const checker = { snapshot: () => snap } as unknown as HealthChecker;
    const sent: number[] = [];
    const host = { setPriority: (p: number) => void sent.push(p), setPreemptHold: () => undefined } as unknown as VrrpHost;
    const iface = { addresses: [{ address: '10.0.0.11', prefixLen: 24 }] } as unknown as InterfaceInfo;
    const phase = await startPriority(ctx, config, { iface, host, checker, dataplaneReady: true });
    phase.evaluate();
    phase.evaluate();
    expect(sent.at(-1)).toBe(50);
    expect(phase.reason()).toBe(`no ready backend (${B[0]} down: ECONNREFUSED, ${B[1]} down: timeout)`);
    expect(lines).toStrictEqual([
      ['warn', { from: 150, to: 50, configured: 150, weight: 100, reason: phase.reason() }, `election priority lowered to 50: ${phase.reason()}`],
    ]);
    snap = [bh(B[0]!, 'up'), bh(B[1]!, 'down', 'timeout')];
    phase.evaluate();
    expect(phase.reason()).toBeNull();
    expect(lines.slice(1)).toStrictEqual([
      [
        'info',
        { from: 50, to: 150, configured: 150, weight: 100, reason: 'this node can serve again' },
        'election priority restored to 150: this node can serve again',
      ],
    ]);
    await phase.undo();
  });
});
