/**
 * Checks that span settings: peers and backends against the VIPs, the local endpoint against the
 * backends and the apiserver's port, the health timeout against its interval, caFile required by
 * backends, the damping holds against each other, the checksum rule against the family, addresses that can only be local on the Active
 * node. They run on the raw input rather than inside zod, so they report even when an unrelated
 * setting is wrong (zod skips refinements once a field has failed); a malformed value has its own
 * issue from its field parser and is skipped here.
 */
import type { AddressFamily } from '../net/address.js';
import { formatHostPort, type HostPort } from '../net/hostport.js';
import { formatDuration, parseDuration } from './duration.js';
import { BACKEND_RULE, checkAddress, LISTEN_RULE, LOCAL_ENDPOINT_RULE, LOCAL_RULE, parseRoleHostPort, type HostPortRule } from './addresses.js';
import { bgpIssues } from './bgp.js';
import { DAMPING_HOLD, DAMPING_MAX_HOLD, durationMs, HEALTH_INTERVAL, HEALTH_TIMEOUT } from './fields.js';
import { isRecord, type RawIssue, type Segment } from './issues.js';
import { DEFAULTS, DISCOVERED, MAX_VIPS } from './limits.js';

/** The VIPs of the raw input that parse: their family (of the first) and index by canonical text. */
interface RawVips {
  family: AddressFamily;
  index: Map<string, number>;
}

/**
 * Every cross-field issue of a raw configuration value (what YAML parsing gave).
 * @returns the issues, unsorted; empty when `raw` is not a mapping (the schema says so).
 */
export function crossFieldIssues(raw: unknown): RawIssue[] {
  if (!isRecord(raw)) return [];
  const vips = rawVips(raw);
  const withVips =
    vips === undefined
      ? []
      : [...peerIssues(raw, vips), ...discoveredIssues(raw, vips), ...backendIssues(raw, vips), ...checksumIssues(raw, vips), ...onVipIssues(raw, vips)];
  return [
    ...roleIssues(raw),
    ...localEndpointIssues(raw),
    ...unicastIssues(raw),
    ...authIssues(raw),
    ...withVips,
    ...healthIssues(raw),
    ...discoveryIssues(raw),
  ];
}

/** `raw[a][b]…`, or undefined where a step is not a mapping. */
function at(raw: unknown, ...keys: string[]): unknown {
  let v = raw;
  for (const k of keys) v = isRecord(v) ? v[k] : undefined;
  return v;
}

/** The value parsed as host:port in `rule`'s role; undefined when it does not parse (it has its own issue). */
function hostPortOf(v: unknown, rule: HostPortRule): HostPort | undefined {
  const r = parseRoleHostPort(v, rule);
  return typeof r === 'string' ? undefined : r;
}

/** apiserver.backends that parse, with their index. */
function rawBackends(raw: Record<string, unknown>): { index: number; text: unknown; hp: HostPort }[] {
  const list = at(raw, 'apiserver', 'backends');
  if (!Array.isArray(list)) return [];
  return list.flatMap((text, index) => {
    const hp = hostPortOf(text, BACKEND_RULE);
    return hp === undefined ? [] : [{ index, text, hp }];
  });
}

/** localEndpoint.address as a list of raw entries with their paths (the default when absent or empty). */
function rawEndpoints(raw: Record<string, unknown>): { path: Segment[]; text: unknown }[] {
  const address = at(raw, 'localEndpoint', 'address');
  if (Array.isArray(address)) return address.map((text, i) => ({ path: ['localEndpoint', 'address', i], text }));
  return [{ path: ['localEndpoint', 'address'], text: address ?? DEFAULTS.localEndpoint }];
}

/** The VIPs that parse; undefined when none does (or `vips` is not a list). */
function rawVips(raw: Record<string, unknown>): RawVips | undefined {
  if (!Array.isArray(raw.vips)) return undefined;
  const index = new Map<string, number>();
  let family: AddressFamily | undefined;
  raw.vips.forEach((v, i) => {
    const ip = checkAddress(v, 'vip');
    if (typeof ip === 'string') return;
    family ??= ip.family;
    if (!index.has(ip.text)) index.set(ip.text, i);
  });
  return family === undefined ? undefined : { family, index };
}

/** Peers against VIPs: same family, not a VIP. */
function peerIssues(raw: Record<string, unknown>, vips: RawVips): RawIssue[] {
  const peers = at(raw, 'vrrp', 'peers');
  if (!Array.isArray(peers)) return [];
  const fam = vips.family;
  const out: RawIssue[] = [];
  const seen = new Set<string>();
  peers.forEach((p, i) => {
    const ip = checkAddress(p, 'peer');
    // bad addresses and repeats already have their own issue from the peers list itself
    if (typeof ip === 'string' || seen.has(ip.text)) return;
    seen.add(ip.text);
    const path = ['vrrp', 'peers', i];
    if (ip.family !== fam) {
      out.push({ path, message: `${String(p)} is IPv${ip.family} but the VIPs are IPv${fam}: peers must be the same family as the VIPs` });
    } else if (vips.index.has(ip.text)) {
      out.push({ path, message: `${String(p)} is a VIP (vips[${vips.index.get(ip.text)}]); peers are the other nodes' own addresses` });
    }
  });
  return out;
}

/** Backends against VIPs: same family (DNAT does not translate families), not a VIP. */
function backendIssues(raw: Record<string, unknown>, vips: RawVips): RawIssue[] {
  const out: RawIssue[] = [];
  const seen = new Set<string>();
  // a local endpoint of the other family balances to that family's backends (the VIP's DNAT skips them)
  const endpointFamilies = new Set<AddressFamily>();
  if (raw.localEndpoint !== undefined) {
    for (const e of rawEndpoints(raw)) {
      const hp = hostPortOf(e.text, LOCAL_ENDPOINT_RULE);
      if (hp !== undefined) endpointFamilies.add(hp.family);
    }
  }
  for (const { index, text, hp } of rawBackends(raw)) {
    const key = formatHostPort(hp);
    // repeats already have their own issue from the list itself
    if (seen.has(key)) continue;
    seen.add(key);
    const path = ['apiserver', 'backends', index];
    if (hp.family !== vips.family && !endpointFamilies.has(hp.family)) {
      out.push({
        path,
        message: `${String(text)} is IPv${hp.family} but the VIPs are IPv${vips.family}: backends must be the same family as the VIPs (the VIP's traffic is forwarded without translating families), unless a localEndpoint address of that family uses them`,
      });
    } else if (vips.index.has(hp.host)) {
      out.push({ path, message: `${hp.host} is a VIP (vips[${vips.index.get(hp.host)}]); backends are the apiservers' own node addresses` });
    }
  }
  return out;
}

/** `vrrp.checksum: rfc9568` chooses between two IPv4 rules; for IPv6 there is one (RFC 9568 §5.2.8). */
function checksumIssues(raw: Record<string, unknown>, vips: RawVips): RawIssue[] {
  if (vips.family !== 6 || at(raw, 'vrrp', 'checksum') !== 'rfc9568') return [];
  return [
    {
      path: ['vrrp', 'checksum'],
      message:
        'is "rfc9568" but the VIPs are IPv6: the rule has no meaning there, because an IPv6 VRRP checksum always covers the pseudo-header (RFC 9568 §5.2.8); remove vrrp.checksum',
    },
  ];
}

/**
 * Addresses that would be on this node only while it is Active: a VIP as the admin address or
 * as policy.localBackend (a local endpoint on a VIP is in {@link localEndpointIssues}).
 */
function onVipIssues(raw: Record<string, unknown>, vips: RawVips): RawIssue[] {
  const out: RawIssue[] = [];
  const listenText = at(raw, 'admin', 'listen');
  const listen = listenText === undefined ? undefined : hostPortOf(listenText, LISTEN_RULE);
  const li = listen === undefined ? undefined : vips.index.get(listen.host);
  if (listen !== undefined && li !== undefined) {
    out.push({
      path: ['admin', 'listen'],
      message: `${String(listenText)} is on a VIP (vips[${li}]): a VIP is on this node only while it is Active, so a Backup could not serve /status; use 127.0.0.1:${listen.port}, this node's own address, or 0.0.0.0:${listen.port}`,
    });
  }
  const localText = at(raw, 'policy', 'localBackend');
  const local = localText === undefined || localText === '' ? undefined : hostPortOf(localText, LOCAL_RULE);
  const bi = local === undefined ? undefined : vips.index.get(local.host);
  if (local !== undefined && bi !== undefined) {
    out.push({
      path: ['policy', 'localBackend'],
      message: `${String(localText)} is on a VIP (vips[${bi}]): the VIP moves between nodes, so it never names this node's own apiserver; use this node's address or 127.0.0.1:${local.port}`,
    });
  }
  return out;
}

/** A setting that is set to a non-empty value ("" and absence both mean "not set"). */
const isSet = (v: unknown): boolean => v !== undefined && v !== '';

/** Settings of apiserver.health that depend on each other or on the backends. */
function healthIssues(raw: Record<string, unknown>): RawIssue[] {
  const apiserver = isRecord(raw.apiserver) ? raw.apiserver : {};
  const health = isRecord(apiserver.health) ? apiserver.health : {};
  const setting = (key: string): Segment[] => ['apiserver', 'health', key];
  const out: RawIssue[] = [];

  if (health.timeout !== undefined) {
    const timeout = durationMs(health.timeout, HEALTH_TIMEOUT);
    const interval = health.interval === undefined ? parseDuration(DEFAULTS.healthInterval) : durationMs(health.interval, HEALTH_INTERVAL);
    // a bad value of either has its own issue
    if (typeof timeout === 'number' && typeof interval === 'number' && timeout > interval) {
      out.push({
        path: setting('timeout'),
        message: `must be at most apiserver.health.interval (${formatDuration(interval)}), got ${formatDuration(timeout)}: a check must end before the next one is due`,
      });
    }
  }

  if (health.dampingMaxHold !== undefined || health.dampingHold !== undefined) {
    const hold = health.dampingHold === undefined ? parseDuration(DEFAULTS.dampingHold) : durationMs(health.dampingHold, DAMPING_HOLD);
    const max = health.dampingMaxHold === undefined ? parseDuration(DEFAULTS.dampingMaxHold) : durationMs(health.dampingMaxHold, DAMPING_MAX_HOLD);
    // a bad value of either has its own issue
    if (typeof hold === 'number' && typeof max === 'number' && max < hold) {
      out.push({
        path: setting(health.dampingMaxHold === undefined ? 'dampingHold' : 'dampingMaxHold'),
        message:
          health.dampingMaxHold === undefined
            ? `must be at most apiserver.health.dampingMaxHold (${formatDuration(max)}, its default), got ${formatDuration(hold)}: holds grow from dampingHold up to dampingMaxHold`
            : `must be at least apiserver.health.dampingHold (${formatDuration(hold)}), got ${formatDuration(max)}: holds grow from dampingHold up to dampingMaxHold`,
      });
    }
  }

  const backends = Array.isArray(apiserver.backends) ? apiserver.backends.length : 0;
  if (backends > 0 && health.insecureSkipVerify !== true && !isSet(health.caFile)) {
    out.push({
      path: setting('caFile'),
      message:
        "required when apiserver.backends is not empty: the CA that signed the apiservers' serving certificates, e.g. /etc/kubernetes/pki/ca.crt (or set insecureSkipVerify: true, for tests only)",
    });
  }

  const cert = isSet(health.clientCertFile);
  const key = isSet(health.clientKeyFile);
  if (cert && !key) {
    out.push({ path: setting('clientKeyFile'), message: 'required when apiserver.health.clientCertFile is set: the private key of that certificate' });
  } else if (key && !cert) {
    out.push({ path: setting('clientCertFile'), message: 'required when apiserver.health.clientKeyFile is set: the certificate of that key' });
  }
  return out;
}

/**
 * What the node does: an election (`vrrp` with `vips`), a local endpoint, or both. `vips`
 * belongs to `vrrp`: one without the other is an error.
 */
function roleIssues(raw: Record<string, unknown>): RawIssue[] {
  // mode: bgp (or a bgp section) has its own roles (bgp.ts)
  const bgp = bgpIssues(raw);
  if (bgp !== null) return bgp;
  const election = raw.vrrp !== undefined;
  if (election && raw.vips === undefined) {
    return [
      {
        path: ['vips'],
        message: `required: a list of 1 to ${MAX_VIPS} IP addresses of one family, e.g. [10.0.0.100] (the addresses vrrp elects a holder for)`,
      },
    ];
  }
  if (!election && raw.vips !== undefined) {
    return [
      {
        path: ['vips'],
        message:
          'is set but vrrp is absent: VIPs need an election; add vrrp (at least vrrp.vrid), or remove vips on a node that only serves the local endpoint',
      },
    ];
  }
  if (!election && raw.localEndpoint === undefined) {
    return [
      {
        path: ['vrrp'],
        message: 'required: vrrp.vrid and vips (an election for the VIPs), or localEndpoint with apiserver.backends (a node-local API endpoint), or both',
      },
    ];
  }
  return [];
}

/** `discovery` needs exactly one source of credentials: a kubeconfig or inCluster. */
function discoveryIssues(raw: Record<string, unknown>): RawIssue[] {
  const d = raw.discovery;
  if (!isRecord(d)) return [];
  const kubeconfig = d.kubeconfig !== undefined && d.kubeconfig !== '' && d.kubeconfig !== null;
  if (kubeconfig && d.inCluster === true) {
    return [
      {
        path: ['discovery', 'inCluster'],
        message: "is true while discovery.kubeconfig is set: use one of them (the kubeconfig, or the pod's service account)",
      },
    ];
  }
  if (!kubeconfig && d.inCluster !== true && d.kubeconfig !== null) {
    return [
      {
        path: ['discovery', 'kubeconfig'],
        message:
          'is required: the kubeconfig to watch the EndpointSlices with, e.g. /etc/kubernetes/admin.conf (or inCluster: true in a pod; or remove the discovery section)',
      },
    ];
  }
  // discovery reads the slices from a backend the checks find ready: it needs one to start from
  const listed = at(raw, 'apiserver', 'backends');
  if (!Array.isArray(listed) || listed.length === 0) {
    return [
      {
        path: ['apiserver', 'backends'],
        message:
          'needs at least one apiserver with discovery: the seed that discovery first reads the EndpointSlices from (any one; the discovered set replaces it once the API answers)',
      },
    ];
  }
  return [];
}

/** `vrrp.auth` without a key file (a required setting inside an optional section). */
function authIssues(raw: Record<string, unknown>): RawIssue[] {
  if (!isRecord(raw.vrrp) || !isRecord(raw.vrrp.auth)) return [];
  const k = raw.vrrp.auth.keyFile;
  if (k !== undefined && k !== '') return [];
  return [{ path: ['vrrp', 'auth', 'keyFile'], message: 'is required: the file holding the shared key (or remove vrrp.auth to turn authentication off)' }];
}

/**
 * Unicast with nobody to send to: `peers: []` would hold the VIP alone without saying so, so it
 * must be asked for with `singleNode: true`; and a single node has no peers.
 */
function unicastIssues(raw: Record<string, unknown>): RawIssue[] {
  if (!isRecord(raw.vrrp)) return [];
  const { peers, singleNode } = raw.vrrp;
  if (Array.isArray(peers) && peers.length === 0 && singleNode !== true) {
    return [
      {
        path: ['vrrp', 'peers'],
        message:
          'is empty: unicast with no peers sends adverts to nobody and this node holds the VIP alone; list the other nodes, remove vrrp.peers for multicast, or set vrrp.singleNode: true if this group really has one node',
      },
    ];
  }
  if (singleNode === true && (peers === DISCOVERED || (Array.isArray(peers) && peers.includes(DISCOVERED)))) {
    return [{ path: ['vrrp', 'singleNode'], message: `is true but vrrp.peers is ${DISCOVERED}: a single node has no peers; remove one of the two` }];
  }
  if (singleNode === true && Array.isArray(peers) && peers.length > 0) {
    return [
      {
        path: ['vrrp', 'singleNode'],
        message: `is true but vrrp.peers lists ${peers.length} address${peers.length === 1 ? '' : 'es'}: a single node has no peers; remove one of the two`,
      },
    ];
  }
  return [];
}

/**
 * `vrrp.peers: discovered` needs someone to discover, and IPv4: IPv6 adverts come from link-local
 * addresses (RFC 9568 §5.1.2.1), which are not the apiservers' node addresses, so a discovered
 * IPv6 peer could never be told apart from a stranger.
 */
function discoveredIssues(raw: Record<string, unknown>, vips: RawVips): RawIssue[] {
  const peers = at(raw, 'vrrp', 'peers');
  const list = peers === DISCOVERED ? [DISCOVERED] : Array.isArray(peers) ? peers : [];
  const index = list.indexOf(DISCOVERED);
  if (index < 0) return [];
  const path = peers === DISCOVERED ? ['vrrp', 'peers'] : ['vrrp', 'peers', index];
  if (vips.family === 6) {
    return [
      {
        path,
        message: `${DISCOVERED} is for IPv4 groups: IPv6 adverts come from link-local addresses (RFC 9568 §5.1.2.1), not the apiservers' node addresses; list the other nodes' link-local addresses`,
      },
    ];
  }
  const listed = list.filter((p) => p !== DISCOVERED).length;
  if (listed === 0 && rawBackends(raw).length === 0 && raw.discovery === undefined) {
    return [
      {
        path,
        message: `${DISCOVERED} needs apiserver.backends (the seed) or discovery: with neither there is nobody to send adverts to; list the other nodes or add the backends`,
      },
    ];
  }
  return [];
}

/**
 * The local endpoint needs backends, backends of each endpoint's family, and a port the local
 * apiserver does not use: `apiserver.port`, `policy.localBackend`'s and every backend's (on a
 * control-plane node the local apiserver listens on its backend port). It is not a backend,
 * and not a VIP (on this node only while it is Active).
 */
function localEndpointIssues(raw: Record<string, unknown>): RawIssue[] {
  if (raw.localEndpoint === undefined) return [];
  const listed = at(raw, 'apiserver', 'backends');
  if (!Array.isArray(listed) || listed.length === 0) {
    return [{ path: ['localEndpoint'], message: 'needs apiserver.backends: the apiservers the endpoint balances to' }];
  }
  // `address:` with no value has its own issue (for the family of the backends it counts as the default)
  if (at(raw, 'localEndpoint', 'address') === null) return [];
  const backends = rawBackends(raw);
  const families = new Set(backends.map((b) => b.hp.family));
  const vips = rawVips(raw);
  const taken = apiserverPorts(raw, backends);
  const out: RawIssue[] = [];
  for (const { path, text } of rawEndpoints(raw)) {
    const hp = hostPortOf(text, LOCAL_ENDPOINT_RULE);
    // a malformed address has its own issue
    if (hp === undefined) continue;
    const a = String(text);
    const loopback = hp.family === 4 ? '127.0.0.1' : '[::1]';
    const vip = vips?.index.get(hp.host);
    const port = taken.get(hp.port);
    if (backends.some((b) => b.hp.host === hp.host && b.hp.port === hp.port)) {
      out.push({
        path,
        message: `${a} is one of apiserver.backends: connect()s to that apiserver (the health checks' too) would be balanced away from it; use a loopback address such as 127.0.0.1:7443`,
      });
    } else if (vip !== undefined) {
      out.push({
        path,
        message: `${a} is on a VIP (vips[${vip}]): a VIP is on this node only while it is Active, and the local endpoint must work on every node; use a loopback address such as ${loopback}:7443`,
      });
    } else if (port !== undefined) {
      out.push({
        path,
        message: `${a} has port ${hp.port}, which is ${port}: on a control-plane node the local apiserver listens there, so the endpoint would take its clients (or fail to bind); use another port, e.g. ${loopback}:${hp.port === 7443 ? 7444 : 7443}`,
      });
    }
    // no backend parsed: the backends have their own issues
    if (families.size > 0 && !families.has(hp.family)) {
      out.push({ path, message: `${a} is IPv${hp.family} but no apiserver.backends entry is: an endpoint balances to backends of its own family` });
    }
  }
  return out;
}

/** The ports a local apiserver may listen on, each with the setting that names it (the first one wins). */
function apiserverPorts(raw: Record<string, unknown>, backends: readonly { index: number; hp: HostPort }[]): Map<number, string> {
  const out = new Map<number, string>();
  const port = at(raw, 'apiserver', 'port') ?? DEFAULTS.apiserverPort;
  if (Number.isInteger(port)) out.set(port as number, 'apiserver.port');
  const localText = at(raw, 'policy', 'localBackend');
  const local = localText === undefined || localText === '' ? undefined : hostPortOf(localText, LOCAL_RULE);
  if (local !== undefined && !out.has(local.port)) out.set(local.port, "policy.localBackend's");
  for (const b of backends) if (!out.has(b.hp.port)) out.set(b.hp.port, `apiserver.backends[${b.index}]'s`);
  return out;
}
