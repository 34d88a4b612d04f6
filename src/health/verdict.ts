/**
 * Health verdicts: what the health checker tells the data planes about one backend, typed.
 *
 *   probe result / passive signal / election ──► cause (typed) ──► hysteresis ──► verdict
 *                                                                               up | unready | dead
 *
 * The cause is decided where the result is produced (probe.ts classifies the socket or TLS
 * error, passive.ts the conntrack signal, the agent the election's Master_Down), and what a
 * cause means for established connections is one table ({@link failureState}) over its `kind`.
 * No decision ever reads the human message, so rewording a message cannot change whether
 * clients get reset.
 *
 *   kind          from                                         state when it took the backend down
 *   http          an HTTP answer (non-2xx: /readyz 500 …)      unready   a process answered: drain
 *   tls           handshake or verification failure            unready   a process answered
 *   localFile     this node cannot read its CA / cert / token  unready   says nothing about the backend
 *   waitingForFile  a file the checks need does not exist yet  unready   (the CA before kubeadm init)
 *   aborted       the checker aborted its own check            unready   nothing was learnt
 *   slow          the check's deadline, after the backend's     unready   its kernel accepted the
 *                 kernel accepted the TCP connection                      connection: the host is up and
 *                 (TLS or the answer did not come in time),               the port served; a slow (loaded)
 *                 or no SYN-ACK while its kernel answered other SYNs      apiserver's clients must not be reset
 *                 (a full accept queue; checker.ts noteAnswered)
 *   refused       ECONNREFUSED                                 dead      reset its flows
 *   reset         ECONNRESET / EPIPE, answer cut short         dead
 *   timeout       the check's deadline before any SYN-ACK,     dead
 *                 ETIMEDOUT
 *   unreachable   EHOSTUNREACH, ENETUNREACH, EHOSTDOWN, …      dead
 *   network       any other errno / socket error code          dead
 *   failed        an error without a code (the probe threw)    dead
 *   passive       conntrack: RST to a SYN, or no SYN-ACK       dead
 *   nodeDown      the election: its node's VRRP went silent    dead      (RFC 9568 §6.4.2 Master_Down)
 *                 and a connect to it got no SYN-ACK (confirm.ts)
 *   damped        the checker: up, but held out by flap         unready   it answers; its flows drain
 *                 damping (damping.ts) until `until`
 */
import type { HostPort } from '../net/hostport.js';

/** Why a check ended as it did, or why a backend was taken down. */
export type Cause =
  /** An HTTP answer with this status (2xx passes). */
  | { readonly kind: 'http'; readonly status: number }
  /** TLS failed; `code` is Node's / OpenSSL's error code when there is one. */
  | { readonly kind: 'tls'; readonly code: string | null }
  /** A file the check needs (`setting`: caFile, clientCertFile, clientKeyFile, tokenFile) cannot be used. */
  | { readonly kind: 'localFile'; readonly setting: string }
  /**
   * A file the check needs does not exist yet (ENOENT, also a missing directory): the CA before
   * `kubeadm init`, a token not yet issued. `setting` is the full one (`apiserver.health.caFile`),
   * `path` the file. The checks go on and use the file as soon as it appears.
   */
  | { readonly kind: 'waitingForFile'; readonly setting: string; readonly path: string }
  | { readonly kind: 'aborted' }
  | { readonly kind: 'refused' }
  | { readonly kind: 'reset' }
  /** No TCP connection within the deadline (no SYN-ACK), or ETIMEDOUT. */
  | { readonly kind: 'timeout' }
  /**
   * The deadline passed after the backend's kernel accepted the TCP connection: the TLS
   * handshake or the answer did not come in time (an overloaded or stalled process).
   */
  | { readonly kind: 'slow' }
  /** `code`: the errno name (EHOSTUNREACH, ENETUNREACH, EHOSTDOWN, ENETDOWN). */
  | { readonly kind: 'unreachable'; readonly code: string }
  /** Any other error code from the connection (`code`: errno name or Node's code). */
  | { readonly kind: 'network'; readonly code: string }
  /** A failure without any code (e.g. an injected probe that threw). */
  | { readonly kind: 'failed' }
  /** Passive detection (conntrack): the SYN was answered by a RST, or not at all. */
  | { readonly kind: 'passive'; readonly signal: 'refused' | 'unanswered' }
  /** The election saw the Active router `node` fall silent (Master_Down, not a resign). */
  | { readonly kind: 'nodeDown'; readonly node: string }
  /** Flap damping holds the backend out until `until` (ms since the epoch), though its checks pass (damping.ts). */
  | { readonly kind: 'damped'; readonly until: number };

/** The causes passive detection and the election report (markDead): all of them dead. */
export type DeadCause = Extract<Cause, { kind: 'passive' | 'nodeDown' }>;

/** What a backend is for the data planes. */
export type VerdictState = 'up' | 'unready' | 'dead';

/** A cause with the message shown to people (logs, /status `reason`). */
export interface Failure {
  readonly cause: Cause;
  /** e.g. `http 500`, `ECONNREFUSED`, `timeout`, `tls: CERT_HAS_EXPIRED: …`, `refused`, `unanswered SYN`. */
  readonly message: string;
}

/** The health checker's judgement of one backend, after rise/fall hysteresis. */
export interface Verdict extends Failure {
  readonly backend: HostPort;
  /**
   * `up`: receives new connections. `unready`: out of the set, established flows drain.
   * `dead`: out of the set, established flows are reset (conntrack entries deleted, sockets destroyed).
   */
  readonly state: VerdictState;
}

/** A backend before its first verdict (not yet `rise` passes nor `fall` failures). */
export interface Unjudged {
  readonly backend: HostPort;
  readonly state: 'unknown';
}

/** Every backend the checker follows: its verdict, or unknown. */
export type BackendVerdict = Verdict | Unjudged;

/**
 * What a failure of this kind says about the backend (the table in the file comment): `dead`
 * when nothing answered, `unready` when a process answered or when the failure is this node's own.
 * Pure; depends on `cause.kind` only.
 */
export function failureState(cause: Cause): 'unready' | 'dead' {
  switch (cause.kind) {
    case 'http':
    case 'tls':
    case 'localFile':
    case 'waitingForFile':
    case 'aborted':
    case 'slow':
    case 'damped':
      return 'unready';
    case 'refused':
    case 'reset':
    case 'timeout':
    case 'unreachable':
    case 'network':
    case 'failed':
    case 'passive':
    case 'nodeDown':
      return 'dead';
  }
}
