/**
 * The running agent's eye on other firewalls (the `foreign-firewall` check of `ballast check`,
 * repeated): every {@link FOREIGN_FIREWALL_POLL_MS} it reads `nft -j list ruleset` (and
 * iptables-legacy when installed) and judges the base chains of other tables for the traffic to
 * the VIP and the backends (firewall.ts). It logs once at start (a warn per finding, or one info
 * line when there is none) and then one line per change (a warn for a finding that appeared, an
 * info for one that went), and its last result is /status `foreignFirewall` and the metric
 * `ballast_foreign_firewall_rules`.
 *
 * Polling, not `nft monitor`: a monitor is a second long-running child whose event lines
 * (rules without their chain's policy and position) still need a full listing to judge, and
 * which must be restarted when it dies; one listing every 5 s is a few milliseconds of nft, and
 * a firewall change is noticed within one interval, which is what an operator reading the log
 * after "clients time out" needs.
 */
import type { Log } from '../log/log.js';
import type { Executor } from '../dataplane/apply.js';
import { findingKey, type FirewallFinding, type HookFlows } from './firewall.js';
import { foreignFirewall } from './foreign-firewall.js';

/** Time between two looks, ms. */
export const FOREIGN_FIREWALL_POLL_MS = 5000;

/** /status `foreignFirewall`: the last look. Times: ISO 8601. */
export interface ForeignFirewallStatus {
  checkedAt: string;
  /** the chains that drop (severity fail) or may drop (warn) the traffic; empty when none */
  rules: FirewallFinding[];
  /** set when the ruleset could not be read (then `rules` is empty) */
  error?: string;
}

/** Options of {@link ForeignFirewallWatch}. */
export interface ForeignFirewallWatchOptions {
  log: Pick<Log, 'info' | 'warn'>;
  /** the flows to judge, computed at each look (the configuration and the interface may change) */
  flows: () => Promise<{ family: 4 | 6; hooks: HookFlows[] } | null>;
  nft: Executor;
  /** the iptables-legacy-save text (default: run it when installed) */
  legacy?: (family: 4 | 6) => Promise<string | null>;
  pollMs?: number;
}

/** Polls the other firewalls; see the file comment. */
export class ForeignFirewallWatch {
  readonly #o: ForeignFirewallWatchOptions;
  #last: ForeignFirewallStatus | undefined;
  #keys = new Map<string, FirewallFinding>();
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> = Promise.resolve();
  #stopped = false;
  #busy = false;

  /** @param o the logger, the nft executor and the flows to judge (null: nothing to watch); nothing runs until start(). */
  constructor(o: ForeignFirewallWatchOptions) {
    this.#o = o;
  }

  /** The last look, or undefined before the first one finished. */
  status(): ForeignFirewallStatus | undefined {
    return this.#last;
  }

  /**
   * Starts: looks once now (logging what it finds), then every pollMs until {@link stop}.
   * Returns at once; never throws (a failed look is logged).
   */
  start(): void {
    if (this.#stopped || this.#timer) return;
    this.#running = this.#look(true);
    this.#timer = setInterval(() => {
      // a look still under way (an nft that hangs until its 5 s limit) is not queued behind
      if (this.#busy) return;
      this.#running = this.#look(false);
    }, this.#o.pollMs ?? FOREIGN_FIREWALL_POLL_MS);
    this.#timer.unref();
  }

  /** Stops polling; waits for a look under way. Idempotent. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearInterval(this.#timer);
    await this.#running;
  }

  async #look(first: boolean): Promise<void> {
    if (this.#stopped) return;
    const { log } = this.#o;
    this.#busy = true;
    try {
      const f = await this.#o.flows();
      if (f === null || this.#stopped) return;
      const r = await foreignFirewall(f.hooks, f.family, this.#o.nft, this.#o.legacy);
      const checkedAt = new Date().toISOString();
      if (r.error) {
        if (this.#last?.error !== r.error) log.warn({ err: r.error }, 'foreign firewall: cannot read the ruleset; other firewalls are not watched');
        this.#last = { checkedAt, rules: [], error: r.error };
        return;
      }
      const next = new Map(r.findings.map((x) => [findingKey(x), x]));
      for (const [k, x] of next) {
        if (!this.#keys.has(k)) log.warn(fields(x), `foreign firewall: ${x.severity === 'fail' ? 'drops' : 'may drop'} traffic ballast serves: ${x.detail}`);
      }
      for (const [k, x] of this.#keys) {
        if (!next.has(k)) log.info(fields(x), `foreign firewall: no longer in the way: ${x.detail}`);
      }
      if (first && next.size === 0)
        log.info(
          { chains: r.chains, legacy: r.legacy },
          `foreign firewall: none of ${r.chains} base chains of other tables drops traffic to the VIP or the backends`,
        );
      this.#keys = next;
      this.#last = { checkedAt, rules: r.findings };
    } catch (err) {
      log.warn({ err: (err as Error).message }, 'foreign firewall: the look failed');
    } finally {
      this.#busy = false;
    }
  }
}

function fields(x: FirewallFinding): Record<string, unknown> {
  return {
    severity: x.severity,
    source: x.source,
    table: `${x.family} ${x.table}`,
    chain: x.chain,
    hook: x.hook,
    ...(x.handle !== undefined ? { handle: x.handle } : {}),
    flow: x.flow,
  };
}
