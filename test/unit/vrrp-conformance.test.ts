/**
 * VRRP conformance, holo-vrrp style: each file in ./vrrp-conformance/ is one scenario — an input
 * event sequence and, after each event, the EXACT actions the machine must emit (and optionally
 * its state, its next deadline and a part of its snapshot). The expected values are written out
 * from RFC 9568 §6.1's formulas, never computed by the code under test. No root, no clock.
 *
 * New behaviour starts as a new file. The last test checks that the table as a whole covers
 * every §6.4 transition and every output ballast adds.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { VrrpMachine, type MachineAction, type MachineConfig, type MachineEvent, type MachineSnapshot, type VrrpState } from '../../src/vrrp/state.js';

interface Step {
  in: MachineEvent;
  out: MachineAction[];
  state?: VrrpState;
  /** The machine's next deadline after the event, ms (null: no timer runs). */
  deadline?: number | null;
  snapshot?: Partial<MachineSnapshot>;
}
interface Scenario {
  title: string;
  /** Where the behaviour comes from. */
  rfc: string;
  /** Overrides of {@link BASE}. */
  config?: Partial<MachineConfig>;
  steps: Step[];
}

/** The router every scenario starts from: priority 100, Advertisement_Interval 100 ms, one VIP. */
const BASE: MachineConfig = {
  vrid: 51,
  priority: 100,
  advertisementIntervalCs: 10,
  preempt: true,
  preemptDelayMs: 0,
  primaryAddress: '10.0.0.12',
  vips: ['10.0.0.100'],
  manageVips: true,
  announce: { repeatAfterMs: 0, refreshMs: 0 },
  vipLifetimeMs: 0,
};

const dir = join(import.meta.dirname, 'vrrp-conformance');
const scenarios = readdirSync(dir)
  .filter((f) => f.endsWith('.json'))
  .sort()
  .map((file) => ({ file, ...(JSON.parse(readFileSync(join(dir, file), 'utf8')) as Scenario) }));

describe('VRRP conformance (RFC 9568 §6.4 and ballast outputs)', () => {
  it('has its scenarios', () => {
    expect(scenarios.length).toBeGreaterThanOrEqual(36);
  });

  describe.each(scenarios)('$file: $title ($rfc)', (s) => {
    it('emits exactly the expected actions after each event', () => {
      const m = new VrrpMachine({ ...BASE, ...s.config });
      s.steps.forEach((step, i) => {
        const where = `step ${i + 1} (${step.in.type} at ${step.in.now})`;
        expect(m.handle(step.in), where).toStrictEqual(step.out);
        if (step.state !== undefined) expect(m.state, where).toBe(step.state);
        if (step.deadline === null) expect(m.nextDeadline(), where).toBeNull();
        else if (step.deadline !== undefined) expect(m.nextDeadline(), where).toBeCloseTo(step.deadline, 9);
        if (step.snapshot) expect(m.snapshot(), where).toMatchObject(step.snapshot);
      });
    });
  });

  it('covers every §6.4 transition and every action and reason ballast emits', () => {
    const seen = new Set<string>();
    for (const s of scenarios) {
      for (const step of s.steps) {
        for (const a of step.out) {
          seen.add(a.type);
          if (a.type === 'transition') seen.add(`${a.from}>${a.to}:${a.reason}`);
          if (a.type === 'announce' || a.type === 'addVips' || a.type === 'removeVips') seen.add(`${a.type}:${a.reason}`);
          if (a.type === 'send' && a.priority === 0) seen.add('send:0');
        }
      }
    }
    const required = [
      // §6.4.1
      'initialize>backup:startup',
      'initialize>active:owner',
      // §6.4.2
      'backup>active:masterDown',
      'backup>active:resigned',
      'backup>active:preempt',
      'backup>initialize:shutdown',
      // §6.4.3
      'active>backup:higherPriority',
      'active>backup:addressTieBreak',
      'active>initialize:shutdown',
      'send:0',
      // link (keepalived's FAULT)
      'backup>fault:linkDown',
      'active>fault:linkDown',
      'fault>initialize:linkUp',
      'initialize>backup:linkUp',
      'fault>initialize:shutdown',
      // ballast's outputs
      'send',
      'transition',
      'addVips',
      'renewVips',
      'removeVips',
      'destroyVipSockets',
      'announce',
      'addVips:becameActive',
      'addVips:restored',
      'removeVips:released',
      'removeVips:stray',
      'announce:becameActive',
      'announce:repeat',
      'announce:refresh',
      'announce:healedPartition',
      'announce:restored',
      // reconfigure (a reload)
      'addVips:added',
      'removeVips:removed',
      'announce:added',
      // not a member (acceptFrom members)
      'active>backup:notMember',
      // restart in place
      'active>initialize:handOff',
      'initialize>active:resumed',
    ];
    expect(required.filter((r) => !seen.has(r))).toStrictEqual([]);
  });
});
