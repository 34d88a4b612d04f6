/**
 * The announcement, as BIRD carries it: ballast decides *whether* this node announces the VIPs
 * ({@link BirdSpeaker.set}); BIRD speaks BGP and BFD.
 *
 *   set(want) ──► snippet rewritten (disabled yes|no) ──► `enable|disable ballast_vipF` ──► BGP UPDATE
 *   watch (socket closed, `show status` every pollMs) ──► daemon down: reported, retried
 *                                                    └─► back (or restarted): snippet + `configure`,
 *                                                        then the static protocol to the wanted state
 *
 * A restart is told by the control connection closing (BIRD closes its CLI sessions only when it
 * exits), not by `show status`'s "Last reboot on": BIRD prints that as the wall clock now minus
 * the monotonic time since boot, read at different points of its event loop (lib/timer.c,
 * tm_format_time), so it moves by a millisecond when the loop is busy (a start-up, a large
 * reconfiguration) and by whatever NTP steps the clock: comparing it took such a move for a restart.
 *
 * Nothing here throws once started: the daemon being absent or restarting is a state
 * (status, logs, the metrics), and the announcement follows once it answers again.
 */
import type { AddressFamily } from '../net/address.js';
import type { BgpConfig } from '../config/bgp.js';
import {
  announceCommand,
  BirdControl,
  BirdError,
  configure,
  parseProtocols,
  parseStatus,
  peerProtocol,
  renderBirdConfig,
  vipProtocol,
  writeSnippet,
  type BirdDesired,
} from './bird.js';
import type { Log } from '../log/log.js';

/** One peer in /status. */
export interface BgpPeerStatus {
  address: string;
  asn: number;
  /** BIRD's protocol name (ballast_peer4_1, …). */
  protocol: string;
  /** BIRD's protocol state: up, start, down, … (null while the daemon does not answer). */
  state: string | null;
  /** BGP session state from BIRD's Info column: Established, Idle, Active, Connect, … */
  session: string | null;
  bfd: boolean;
}

/** The `bgp` part of /status. */
export interface BgpStatus {
  daemon: 'bird';
  socket: string;
  configFile: string;
  /** The daemon answers on its control socket. */
  daemonUp: boolean;
  /** When daemonUp last changed (ISO), or null before the first answer. */
  daemonSince: string | null;
  /** BIRD's version and router ID, from `show status`; null while down. */
  version: string | null;
  routerId: string | null;
  announce: 'backends' | 'local';
  balance: 'all' | 'local';
  /** Whether ballast wants the VIPs announced now, and why. */
  wanted: boolean;
  reason: string;
  /** Whether BIRD's static protocol carrying the VIPs is up (the VIPs are offered to the peers). */
  announced: boolean;
  /** When `announced` last changed (ISO). */
  since: string | null;
  /** How long the last enable/disable took, ms (snippet write + command). */
  lastChangeMs: number | null;
  /** Configuration pushes (snippet + configure) since start: the first, and one per daemon return. */
  pushes: number;
  /** Times the daemon was found gone (socket closed or refused). */
  daemonLosses: number;
  lastError: string | null;
  peers: BgpPeerStatus[];
}

/** Options of {@link BirdSpeaker}. */
export interface SpeakerOptions {
  log: Pick<Log, 'info' | 'warn' | 'error'>;
  /** How often the daemon is asked for its status, ms (default 1000). */
  pollMs?: number;
  /** The control socket client (tests inject one; default: a {@link BirdControl} on bgp.socket). */
  control?: BirdControl;
}

/** Drives BIRD's announcement of the VIPs of one family. */
export class BirdSpeaker {
  readonly #bgp: BgpConfig;
  readonly #family: AddressFamily;
  readonly #vips: readonly string[];
  readonly #log: Pick<Log, 'info' | 'warn' | 'error'>;
  readonly #pollMs: number;
  readonly #ctl: BirdControl;
  #wanted = false;
  #reason = 'starting';
  #announced = false;
  #since: string | null = null;
  #lastChangeMs: number | null = null;
  #daemonUp = false;
  #daemonSince: string | null = null;
  /** The control connection was closed by the daemon (it exited) since the last push. */
  #closed = false;
  #version: string | null = null;
  #routerId: string | null = null;
  #pushes = 0;
  #losses = 0;
  #lastError: string | null = null;
  #peers = new Map<string, { state: string; info: string }>();
  #timer: NodeJS.Timeout | null = null;
  #queue: Promise<void> = Promise.resolve();
  #stopped = false;

  /**
   * @param bgp the bgp section; `family` and `vips` the VIPs announced.
   */
  constructor(bgp: BgpConfig, family: AddressFamily, vips: readonly string[], o: SpeakerOptions) {
    this.#bgp = bgp;
    this.#family = family;
    this.#vips = vips;
    this.#log = o.log;
    this.#pollMs = o.pollMs ?? 1000;
    this.#ctl = o.control ?? new BirdControl(bgp.socket);
    this.#ctl.onClose = () => {
      // BIRD stopped (or restarts): look again soon rather than at the next poll
      this.#closed = true;
      if (!this.#stopped) this.#schedule(100);
    };
  }

  /** The snippet for the wanted state. */
  #desired(): BirdDesired {
    return { bgp: this.#bgp, family: this.#family, vips: this.#vips, announced: this.#wanted };
  }

  /** Writes the snippet (atomically: a temporary file renamed over it). @returns whether its bytes changed. */
  #write(): boolean {
    const path = this.#bgp.configFile;
    return writeSnippet(path, renderBirdConfig(this.#desired(), path));
  }

  /**
   * Writes the snippet (not announced unless `adopt` says the static protocol is up now and should
   * stay so until the first decision) and pushes it when the daemon answers. A daemon that does
   * not answer is not an error: it is reported, and the push follows when it does.
   * @throws BirdError when BIRD answers but refuses the configuration (a parse error, a
   *   conflicting protocol name): nothing was announced.
   */
  async start(): Promise<void> {
    this.#write();
    try {
      await this.#push();
    } catch (err) {
      if (err instanceof BirdError && err.code !== null) throw err;
      this.#down(err);
    }
    this.#schedule(this.#pollMs);
  }

  /**
   * Announce (`want` true) or withdraw. Applied in order; resolves once BIRD did it (or, with the
   * daemon down, once the snippet says so: the daemon's return pushes it). Never rejects.
   * @param reason why, for the log and /status.
   */
  set(want: boolean, reason: string): Promise<void> {
    const run = async (): Promise<void> => {
      const changed = want !== this.#wanted;
      this.#wanted = want;
      this.#reason = reason;
      if (!changed && want === this.#announced) return;
      const t0 = performance.now();
      this.#write();
      if (!this.#daemonUp) {
        this.#log.warn(
          { want, reason },
          want
            ? 'would announce the VIPs, but the routing daemon does not answer; announcing when it is back'
            : 'would withdraw the VIPs, but the routing daemon does not answer; withdrawing when it is back',
        );
        return;
      }
      try {
        await this.#apply();
        this.#lastChangeMs = Math.round((performance.now() - t0) * 10) / 10;
        this.#log.info({ vips: this.#vips, reason, durationMs: this.#lastChangeMs }, want ? 'announcing the VIPs (BGP)' : 'withdrew the VIPs (BGP)');
      } catch (err) {
        this.#fail(err);
      }
    };
    const p = this.#queue.then(run, run);
    this.#queue = p.catch(() => undefined);
    return p;
  }

  /** `enable|disable` the static protocol to match the wanted state. */
  async #apply(): Promise<void> {
    await this.#ctl.command(announceCommand(this.#family, this.#wanted));
    if (this.#announced !== this.#wanted) this.#since = new Date().toISOString();
    this.#announced = this.#wanted;
  }

  /** Snippet + configure, then the static protocol to the wanted state, then a status read. */
  async #push(): Promise<void> {
    // a close from here on is of the connection this push opens (or of one it finds gone)
    this.#closed = false;
    this.#write();
    await configure(this.#ctl);
    this.#pushes++;
    await this.#apply();
    await this.#read();
    if (!this.#daemonUp) {
      this.#daemonUp = true;
      this.#daemonSince = new Date().toISOString();
    }
    this.#lastError = null;
  }

  /** `show status` and `show protocols`: the daemon's identity and the sessions' states. */
  async #read(): Promise<void> {
    const st = parseStatus(await this.#ctl.command('show status'));
    const rows = parseProtocols(await this.#ctl.command('show protocols'));
    this.#version = st.version;
    this.#routerId = st.routerId;
    const prev = this.#peers;
    this.#peers = new Map(rows.map((r) => [r.name, { state: r.state, info: r.info }]));
    this.#bgp.peers.forEach((p, i) => {
      const name = peerProtocol(this.#family, i);
      const before = prev.get(name)?.info.split(' ')[0];
      const now = this.#peers.get(name)?.info.split(' ')[0];
      if (before !== undefined && now !== before && (now === 'Established' || before === 'Established')) {
        this.#log[now === 'Established' ? 'info' : 'warn']({ peer: p.address, asn: p.asn, from: before, to: now ?? 'absent' }, 'BGP session state');
      }
    });
    const vip = this.#peers.get(vipProtocol(this.#family));
    if (vip !== undefined && (vip.state === 'up') !== this.#announced) {
      // someone changed it behind ballast's back (birdc by hand): put it back
      this.#log.warn(
        { protocol: vipProtocol(this.#family), state: vip.state, wanted: this.#wanted },
        "the VIPs' static protocol is not in the state ballast set; setting it again",
      );
      await this.#apply();
    }
  }

  #schedule(ms: number): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = setTimeout(() => void this.#tick(), ms);
    this.#timer.unref?.();
  }

  /** One look at the daemon (queued behind set()): read, or push when it came back. */
  #tick(): Promise<void> {
    const run = async (): Promise<void> => {
      if (this.#stopped) return;
      if (this.#daemonUp && this.#closed) {
        // it exited (a later command reaches its successor, if any): one loss, then a push
        this.#log.warn(
          { socket: this.#bgp.socket },
          'the routing daemon closed its control connection (it stopped or restarted); pushing the configuration again when it answers',
        );
        this.#losses++;
        this.#daemonUp = false;
        this.#announced = false;
        this.#peers.clear();
        this.#daemonSince = new Date().toISOString();
      }
      try {
        if (this.#daemonUp) await this.#read();
        else
          await this.#push().then(() =>
            this.#log.info({ socket: this.#bgp.socket, version: this.#version, announced: this.#announced }, 'routing daemon answers; configuration pushed'),
          );
      } catch (err) {
        if (this.#daemonUp || this.#lastError === null) this.#down(err);
        else this.#lastError = err instanceof Error ? err.message : String(err);
      }
      if (!this.#stopped) this.#schedule(this.#daemonUp ? this.#pollMs : Math.min(this.#pollMs, 250));
    };
    const p = this.#queue.then(run, run);
    this.#queue = p.catch(() => undefined);
    return p;
  }

  /** The daemon does not answer (or refused): reported once per loss. */
  #down(err: unknown): void {
    const msg = err instanceof Error ? err.message : String(err);
    if (this.#daemonUp || this.#daemonSince === null) {
      this.#losses += this.#daemonUp ? 1 : 0;
      this.#daemonSince = new Date().toISOString();
    }
    this.#daemonUp = false;
    this.#announced = false;
    this.#peers.clear();
    this.#lastError = msg;
    this.#log.error({ socket: this.#bgp.socket, err: msg }, 'the routing daemon does not answer; the VIPs are announced again when it does');
  }

  #fail(err: unknown): void {
    const msg = err instanceof Error ? err.message : String(err);
    this.#lastError = msg;
    if (err instanceof BirdError && err.code === null) return this.#down(err);
    this.#log.error({ err: msg }, 'the routing daemon refused a command');
  }

  /**
   * Stops watching. With `withdraw`, the VIPs are withdrawn first (the snippet says so too, so a
   * later BIRD restart keeps them withdrawn); without, BIRD keeps announcing whatever it does now.
   */
  async stop(withdraw: boolean): Promise<void> {
    if (withdraw) await this.set(false, 'ballast stops');
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    await this.#queue;
    this.#ctl.close();
  }

  /** /status's `bgp` (a copy). */
  status(): BgpStatus {
    return {
      daemon: 'bird',
      socket: this.#bgp.socket,
      configFile: this.#bgp.configFile,
      daemonUp: this.#daemonUp,
      daemonSince: this.#daemonSince,
      version: this.#daemonUp ? this.#version : null,
      routerId: this.#daemonUp ? this.#routerId : null,
      announce: this.#bgp.announce,
      balance: this.#bgp.balance,
      wanted: this.#wanted,
      reason: this.#reason,
      announced: this.#announced,
      since: this.#since,
      lastChangeMs: this.#lastChangeMs,
      pushes: this.#pushes,
      daemonLosses: this.#losses,
      lastError: this.#lastError,
      peers: this.#bgp.peers.map((p, i) => {
        const protocol = peerProtocol(this.#family, i);
        const row = this.#daemonUp ? this.#peers.get(protocol) : undefined;
        return { address: p.address, asn: p.asn, protocol, state: row?.state ?? null, session: row ? (row.info.split(' ')[0] ?? null) : null, bfd: p.bfd };
      }),
    };
  }
}
