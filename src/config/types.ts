/**
 * The normalized, deep-frozen configuration every other module receives ({@link Config}), and
 * the types of its sections. Only types (and the list of log levels): what a file may say is in
 * fields.ts and schema.ts, the defaults and limits in limits.ts. See docs/config.md.
 */
import type { AddressFamily } from '../net/address.js';
import type { BgpConfig } from './bgp.js';
import type { BackendAddress, ListenAddress } from './addresses.js';

export type { BackendAddress, ListenAddress };

export type { BgpConfig, BgpPeerConfig } from './bgp.js';

export type { AddressFamily };

/** Which VRRPv3 checksum rule adverts use; see docs/config.md (`vrrp.checksum`). */
export type ChecksumMode = 'rfc5798' | 'rfc9568';

/** Log levels, lowest first. */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error'] as const;
/** One of {@link LOG_LEVELS}. */
export type LogLevel = (typeof LOG_LEVELS)[number];

/** The `vrrp` section, normalized. Names follow RFC 9568. */
export interface VrrpConfig {
  /** Virtual Router ID, 1..255. */
  readonly vrid: number;
  /** Priority, 1..255; 255 = this node owns the VIPs as interface addresses. */
  readonly priority: number;
  /** Advertisement_Interval in milliseconds: 10..40950, a multiple of 10. */
  readonly advertisementIntervalMs: number;
  /** Advertisement_Interval in centiseconds (what the Max Adver Int field carries): 1..4095. */
  readonly advertisementIntervalCs: number;
  /** Preempt_Mode. */
  readonly preempt: boolean;
  /** How long a higher-priority Backup waits before preempting, in milliseconds: 0..3600000. */
  readonly preemptDelayMs: number;
  /** The election thread's SCHED_FIFO priority, 1..99; 0 = normal scheduling (SCHED_OTHER). Needs CAP_SYS_NICE. */
  readonly realtimePriority: number;
  /**
   * A master that stops for a restart in place (SIGUSR2, or a systemd restart job) tells the
   * Backups to wait at most this long for its next process, in milliseconds: 1000..120000.
   */
  readonly restartHoldMs: number;
  /**
   * Unicast mode: `vrrp.peers` was given (or `singleNode`). Adverts go to the peers only and
   * adverts from anyone else are dropped. False = multicast (224.0.0.18 / ff02::12).
   */
  readonly unicast: boolean;
  /**
   * Unicast peers as listed (canonical text, same family as the VIPs), without the word
   * `discovered`; empty in multicast mode and for a single node.
   */
  readonly peers: readonly string[];
  /**
   * `vrrp.peers` contains (or is) `discovered`: the peers are also the node addresses of the
   * apiservers (the seed backends' hosts until discovery answers), this node's own excluded.
   */
  readonly discoveredPeers: boolean;
  /**
   * Whose adverts are heard: `members` (default) = only the known nodes (the backends' hosts,
   * the peers, discovered members; any source when none is known), `any` = every source.
   * A source-address filter, not authentication (docs/auth.md).
   */
  readonly acceptFrom: 'members' | 'any';
  /** Checksum rule for adverts. */
  readonly checksum: ChecksumMode;
  /** Priority 255: this node owns the VIPs as its own addresses (RFC 9568 §1.6). Derived once here. */
  readonly owner: boolean;
  /** Authenticated adverts (docs/auth.md): the shared key's file, or null (off, the default). */
  readonly auth: { readonly keyFile: string } | null;
}

/** The `announce` section (gratuitous ARP / unsolicited NA on becoming Active), normalized. */
export interface AnnounceConfig {
  /** Packets per burst (per VIP), 1..100. */
  readonly count: number;
  /** Gap between the packets of a burst, in milliseconds: 0..1000. */
  readonly spacingMs: number;
  /** Delay from the first burst to a second one, in milliseconds: 0..3600000; 0 = no second burst. */
  readonly repeatAfterMs: number;
  /** While Active, a burst this often (ms) so switches that age their tables keep the right port; 0 = off. */
  readonly refreshMs: number;
}

/** The `admin` section, normalized. */
export interface AdminConfig {
  /** Where GET /status and /healthz are served. */
  readonly listen: ListenAddress;
}

/** The `log` section, normalized. */
export interface LogConfig {
  readonly level: LogLevel;
}

/** The `apiserver.health` section, normalized: how a backend's readiness is checked. */
export interface HealthConfig {
  /** Request path of the check, starting with "/" (may carry a query): "/readyz". */
  readonly path: string;
  /** PEM file of the CA(s) that verify the apiservers' serving certificates; absent when not set. */
  readonly caFile?: string;
  /** Name (or IP) to send as SNI and to verify in the certificate instead of the backend's IP; absent when not set. */
  readonly serverName?: string;
  /** Skip certificate verification (never for production). */
  readonly insecureSkipVerify: boolean;
  /** PEM client certificate presented to the apiservers; set together with `clientKeyFile`. */
  readonly clientCertFile?: string;
  /** PEM private key of `clientCertFile`. */
  readonly clientKeyFile?: string;
  /** File holding a bearer token sent as `Authorization: Bearer …`; re-read when it changes. */
  readonly tokenFile?: string;
  /** Time between two checks of one backend, in milliseconds: 100..60000. */
  readonly intervalMs: number;
  /** Deadline of one check (connect + TLS + response), in milliseconds: 50..60000, at most `intervalMs`. */
  readonly timeoutMs: number;
  /** Consecutive passes that make a backend up: 1..10. */
  readonly rise: number;
  /** Consecutive failures that take an up backend down: 1..10. */
  readonly fall: number;
  /**
   * How long, ms, until every backend has had its first verdict: (max(rise, fall) + 1) × interval +
   * timeout. The election policy waits this long before it judges the backends. Derived once here.
   */
  readonly settleMs: number;
  /** Keep the last ready set when every backend turned unready together (docs/health.md). */
  readonly failOpen: boolean;
  /** Flap damping (docs/health.md), from `damping` and the `damping…` settings; null when `damping: false`. */
  readonly damping: DampingConfig | null;
  /**
   * How long a backend that left the set (seed, EndpointSlices, last-known) keeps its state,
   * counts and metric series, in milliseconds: 0..3600000 (0: forgotten at once); default 300000.
   */
  readonly rememberDepartedMs: number;
}

/** Flap damping, normalized (apiserver.health.damping…; src/health/damping.ts). */
export interface DampingConfig {
  /** More than this many transitions (in or out of the ready set) within `windowMs` damp a backend: 1..100. */
  readonly transitions: number;
  /** The window, ms: 1 s..1 h. */
  readonly windowMs: number;
  /** The first hold, ms: 1 s..1 h; doubled for each damping soon after a release. */
  readonly holdMs: number;
  /** The longest hold, ms: holdMs..1 h; no backend is held longer than this after its last transition. */
  readonly maxHoldMs: number;
}

/** The `apiserver` section, normalized. */
export interface ApiserverConfig {
  /** The port clients use on the VIP: 1..65535. */
  readonly port: number;
  /** Seed list of apiservers, 0..64, same family as the VIPs, no duplicates; empty = no load balancing. */
  readonly backends: readonly BackendAddress[];
  readonly health: HealthConfig;
}

/** How traffic to the VIP is handled: `nftables` load-balances VIP:port to healthy backends; `none` holds the VIP only. */
export type DataplaneVipMode = 'nftables' | 'none';

/** The `dataplane` section, normalized. */
export interface DataplaneConfig {
  readonly vip: DataplaneVipMode;
  /**
   * How the node-local endpoint is served: `ebpf` (cgroup connect() rewrite, no process on the
   * data path), `proxy` (a TCP proxy in the agent, the slower fallback), `off`.
   */
  readonly local: DataplaneLocalMode;
  /**
   * What a clean stop leaves in place (a stop is a restart; `ballast cleanup` is the uninstall):
   * `localEndpoint` (default) the eBPF local endpoint's pinned programs and maps, still
   * balancing this node's clients to the last ready set, adopted by the next start; `all` also
   * the nftables table; `none` nothing. The VIPs are always removed (a stopped agent must not hold them).
   */
  readonly keepOnStop: KeepOnStop;
  /**
   * How long one `nft` or `conntrack` run of the VIP data plane (applies, the table's removal,
   * conntrack flushes) may take before it is killed (its process group), ms; default 5000.
   */
  readonly commandTimeoutMs: number;
  /** Resetting the oldest flows of a backend that holds too many of the VIP's connections (opt-in). */
  readonly rebalance: RebalanceConfig;
  /** Connections through the VIP outlive a move of the VIP (on by default; docs/connection-sync.md). */
  readonly connectionSync: ConnectionSyncConfig;
}

/**
 * The `dataplane.connectionSync` section, normalized (docs/connection-sync.md,
 * src/agent/phases/connection-sync.ts): flows through the VIP are source-NATed to the VIP, and a
 * conntrackd (conntrack-tools, FTFW mode) per node replicates their conntrack entries to the
 * other nodes; a node commits them into its kernel before it adds the VIP.
 */
export interface ConnectionSyncConfig {
  /** On by default; off: masquerade to the node's address and no conntrackd (connections through the VIP end at each move). */
  readonly enabled: boolean;
  /** The longest a takeover waits for `conntrackd -c` before it adds the VIP anyway, ms (100..10000; default 1000). */
  readonly commitTimeoutMs: number;
  /** The longest a node that would preempt waits for the replicated state first, ms (0..60000; default 5000). */
  readonly resyncTimeoutMs: number;
}

/**
 * The `dataplane.rebalance` section, normalized (docs/config.md, src/dataplane/rebalance.ts):
 * when one ready backend holds more than `factor` × its fair share (established flows / ready
 * backends) for longer than `afterMs`, up to `resetsPerSecond` of its oldest flows are reset per
 * second, never more than `maxFractionPerMinute` of all flows per minute, never with one ready backend.
 */
export interface RebalanceConfig {
  /** Off by default. */
  readonly enabled: boolean;
  /** > 1: how many times its fair share a backend may hold. */
  readonly factor: number;
  /** How long a backend must be over before its flows are reset, ms. */
  readonly afterMs: number;
  /** Flows reset per second at most (1..1000). */
  readonly resetsPerSecond: number;
  /** Fraction of the established flows (0..1] that may be reset in any 60 s. */
  readonly maxFractionPerMinute: number;
}

/** See {@link DataplaneConfig.keepOnStop}. */
export type KeepOnStop = 'none' | 'localEndpoint' | 'all';

/** How the node-local endpoint is served: see {@link DataplaneConfig.local}. */
export type DataplaneLocalMode = 'ebpf' | 'proxy' | 'off';

/** The `localEndpoint` section, normalized. */
export interface LocalEndpointConfig {
  /** Where local clients connect: 1..4 host:port, loopback or this node's address (default 127.0.0.1:7443). */
  readonly addresses: readonly BackendAddress[];
  /** Start even if something on the node already listens on an endpoint's port (it would be shadowed). */
  readonly force: boolean;
  /** cgroup-v2 directory the ebpf programs attach to; absent = the host's cgroup-v2 root. */
  readonly cgroup?: string;
}

/** The `policy` section, normalized: how health feeds the election. */
export interface PolicyConfig {
  /**
   * Subtracted from `vrrp.priority` while no backend is healthy (`dataplane.vip: nftables`) or
   * while the local apiserver is unhealthy (`dataplane.vip: none`): 0..254. The effective
   * priority never goes below 1.
   */
  readonly unhealthyPriorityWeight: number;
  /**
   * This node's own apiserver. Absent when not configured: the agent then uses the backend
   * whose address is on this node, resolved at run time.
   */
  readonly localBackend?: BackendAddress;
}

/**
 * The `discovery` section, normalized: the `kubernetes` Service's EndpointSlices (namespace
 * default) feed the backend set, merged with `apiserver.backends` (the seed) and the last-known file.
 */
export interface DiscoveryConfig {
  /** kubeconfig to read the EndpointSlices with (kubeadm's /etc/kubernetes/admin.conf, or the kubelet's); absent with inCluster. A missing file is waited for. */
  readonly kubeconfig?: string;
  /** Use the pod's service account (KUBERNETES_SERVICE_HOST and /var/run/secrets/kubernetes.io/serviceaccount). */
  readonly inCluster: boolean;
  /** Where the last discovered set is kept across restarts (default /var/lib/ballast/backends.json). */
  readonly lastKnownFile: string;
}

/** The validated, normalized, deep-frozen configuration. */
export interface Config {
  /** `vrrp`: an election holds the VIPs (when `vrrp` is set); `bgp`: every ready node announces them (docs/bgp.md). */
  readonly mode: 'vrrp' | 'bgp';
  /**
   * Interface to run VRRP on. Absent (undefined) when not configured: the agent then uses the
   * interface whose subnet holds vips[0], resolved at run time.
   */
  readonly interface?: string;
  /**
   * Address family of the VIPs (and of the peers and the VRRP group). Without an election: the
   * family of the first backend (4 when there is none).
   */
  readonly family: AddressFamily;
  /** The election; null when `vrrp` is absent (a node that only runs the local endpoint, e.g. a worker). */
  readonly vrrp: VrrpConfig | null;
  /** Virtual IP addresses, 1..16, one family, canonical text (IPv6 per RFC 5952), no duplicates; empty without `vrrp`. */
  readonly vips: readonly string[];
  /**
   * Valid lifetime of the VIPs on the interface, ms (0 = permanent). The Active agent keeps
   * renewing it, so a VIP left by an agent killed with SIGKILL disappears by itself.
   */
  readonly vipLifetimeMs: number;
  readonly announce: AnnounceConfig;
  /** Always present: without the section, no backends and the defaults. */
  readonly apiserver: ApiserverConfig;
  readonly dataplane: DataplaneConfig;
  /** The node-local API endpoint; null when `localEndpoint` is absent. */
  readonly localEndpoint: LocalEndpointConfig | null;
  /** Backend discovery; null when the section is absent (the backends are `apiserver.backends` only). */
  readonly discovery: DiscoveryConfig | null;
  readonly policy: PolicyConfig;
  readonly admin: AdminConfig;
  readonly log: LogConfig;
  /** BGP mode's section; null unless `mode: bgp`. */
  readonly bgp: BgpConfig | null;
}
