/**
 * The nftables ruleset of ballast's data plane, rendered as text for `nft -f` (nft(8)). Pure: no
 * I/O, no clock; src/dataplane/apply.ts runs `nft`. Golden files in test/unit/golden/ pin the text.
 *
 * One table per address family (`table ip ballast`, `table ip6 ballast`), replaced whole by every
 * apply in ONE `nft -f` transaction (the kernel commits a batch atomically or not at all):
 *
 *   table ip ballast {}        create it when missing, so that the delete below cannot fail
 *   delete table ip ballast    drop every chain, set, counter of ours (and nothing of anyone else)
 *   table ip ballast { … }     the new contents
 *
 * Packet path (hook / priority; the nat chains see only the FIRST packet of each connection:
 * conntrack applies the recorded binding to every later packet, in both directions):
 *
 *   from outside   prerouting  nat  -100 (dstnat)  ┐ daddr ∈ @vips, tcp dport = port
 *   from the node  output      nat  -100           ┘   → goto spread
 *   spread:  jhash saddr . sport . daddr . dport mod N seed SPREAD_SEED vmap { i : goto be_<addr>_<port> }
 *   be_…:    counter name "be_…"  dnat to <addr>:<port>
 *   leaving        postrouting nat  100 (srcnat)   ct status dnat, original daddr ∈ @vips,
 *                                                  original dport = port, (daddr . dport) ∈
 *                                                  @remote_backends → masquerade
 *                  (sourceNat 'vip' instead: every flow DNATed by us, remote or local backend,
 *                  → snat to ct original daddr, in postrouting and in an input nat chain, 100)
 *   not the holder prerouting / output filter -300 (raw, before conntrack; sourceNat 'vip' only):
 *                  saddr ∈ @vips → (daddr . dport) ∈ @local_backends → notrack;
 *                  daddr ∈ @vips, not a local address (fib), (saddr . sport) ∈ @local_backends → notrack
 *                  (prerouting) daddr ∈ @vips, dport ≠ port, not a local address → notrack
 *   probes         output filter -300 (raw): mark PROBE_MARK, saddr ∈ @vips, tcp sport = port →
 *                  notrack, mark cleared (the TCP probes to a dead backend's clients, probe.ts)
 *   strays         prerouting / output filter -150 (mangle, after conntrack, before the nat
 *                  chains): daddr ∈ @vips, tcp dport = port, ct state new, neither SYN nor RST,
 *                  (saddr . sport . daddr) ∈ @evict → reject with tcp reset
 *
 * Why this shape:
 * - Spread: a hash of the connection's tuple (`jhash`, nft(8) "HASH EXPRESSIONS"), with a fixed
 *   seed ({@link SPREAD_SEED}), not `numgen random`. For a flow that conntrack already tracks the
 *   two are the same: the nat chains never see its later packets. They differ when the node
 *   loses the flow's conntrack state while both ends keep their sockets (`conntrack -F`,
 *   `conntrack -D`, an entry evicted from a full table): the client's next segment is picked up
 *   mid-stream as a new flow (nf_conntrack_tcp_loose=1, the default) and runs through the nat
 *   chains again. `numgen random` then sends it to another backend with probability (N−1)/N —
 *   that backend has no such connection and answers with a RST (the client's watch is reset),
 *   while the original backend keeps an orphaned ESTABLISHED socket on that 4-tuple until its
 *   idle timeout (kube-apiserver: 90 s); masquerade keeps the client's source port, so a later
 *   connection from the same port that lands there is answered with a challenge ACK and costs
 *   the client a SYN retransmission (1 s; the chaos soak measured 4 such connects in 30 min).
 *   The hash of the unchanged tuple picks the same backend as before (same backend set, same
 *   seed; the seed is explicit because nft_hash otherwise draws a random one per rule load, and
 *   every apply reloads the table), masquerade picks the same source port again, and the flow
 *   simply continues (test/integration/conntrack-flush.test.ts: 36 watch-like connections across
 *   a `conntrack -F` on the holder, 0 reset; the previous ruleset reset 36 of 36 through its
 *   blanket strays rule, `numgen` alone 26 of 36). What the hash cannot save: a flow whose
 *   backend left the set since (another backend RSTs it, as before), and a flow whose first
 *   segment after the loss comes from the backend (the reply no longer maps to a client: the
 *   node answers it with a RST). With masquerade a flow the VIP brings from another holder is
 *   not saved either (the backend knows it by the other node's masquerade address): the backend
 *   RSTs it, where the former blanket strays rule did so from this node one round trip earlier;
 *   with the source NAT to the VIP (below) the pickup reaches the backend with the same tuple.
 *   New connections still spread evenly: the tuple includes the client's ephemeral source port,
 *   so many connections from ONE client hash uniformly; only a client that pins its source port
 *   lands on one backend every time.
 *   The pick dispatches through a verdict map to one chain per backend (the shape of kube-proxy's
 *   nftables mode) rather than `dnat to jhash … map { i : addr . port }`, so that each backend's
 *   chain can count its connections in the same place it NATs them.
 * - Counters count in the nat path, not in a filter chain: a nat chain runs exactly once per
 *   connection (per conntrack entry), on every path (forwarded to a remote backend, delivered to
 *   this node's own apiserver via input, opened locally via output), and costs nothing for
 *   established packets or for unrelated traffic. A postrouting filter chain would miss flows
 *   DNATed to the local apiserver (they go prerouting → input) and, matching `ct state new`,
 *   would count every retransmitted SYN (a flow stays "new" until a reply is seen).
 * - Masquerade matches on conntrack (`ct status dnat` + the ORIGINAL destination being a VIP and
 *   port), not on a packet mark: no fwmark bits are claimed (kube-proxy, Calico, Cilium own some),
 *   and flows DNATed to the same apiserver by someone else (kube-proxy's `kubernetes` Service)
 *   are left alone. Only remote backends are masqueraded: a client on the same L2 as the backend
 *   would otherwise get the reply straight from the backend's address and reset it; the local
 *   apiserver keeps seeing the real client address.
 * - Source NAT to the VIP (`sourceNat: 'vip'`, with connection sync): masquerade names the node,
 *   so a flow that the VIP brings to another holder arrives at its backend from another address
 *   and is reset. With the VIP as the source (and the client's port, which the kernel keeps unless
 *   two clients' flows to one backend share it), the 4-tuple at the backend — VIP:client port ↔
 *   backend:port — is the same on every holder; the backend's replies go to the VIP, i.e. to
 *   whichever node holds it now (ARP/NDP, refreshed by the new holder's gratuitous ARP / NA).
 *   Flows to the holder's own apiserver get the same source (an input nat chain: delivered
 *   locally, they never pass postrouting), or after a move they would reach that apiserver from
 *   the new holder with a tuple it does not know. The cost: every apiserver sees the VIP, not the
 *   client, as the peer of connections through the VIP.
 *   On a node that does not hold the VIP the backend side of such a flow (from VIP:client port to
 *   its apiserver, and the replies) is left untracked (`notrack`): as a former holder it may keep
 *   the flow's old conntrack entry (client → VIP, NATed to VIP → its apiserver), whose reply tuple
 *   equals the new tuple — the kernel would drop every packet of the moved flow as a clash — and
 *   as the next holder it would otherwise hold an entry whose reply tuple claims VIP:client port,
 *   so that the NAT of the committed or picked-up flow had to choose another port. Replies are
 *   left untracked only where the VIP is not a local address (`fib daddr type != local`): the
 *   holder's own apiserver answers through its NAT entry. For the same reason a backend's reply
 *   to VIP:client port that reaches a node before it holds the VIP (a former holder forwards it
 *   by a stale neighbour entry, in the moment between its release and the new holder's commit)
 *   is left untracked: tracked, it would make an entry whose tuple the committed one needs, the
 *   commit of that flow would fail and the client's next segment be NATed to another port.
 * - Strays: a mid-stream segment to VIP:port that conntrack has no entry for is left to the
 *   hash (above), except the flows the rebalancer reset (rebalance.ts): it deletes their
 *   conntrack entries and puts (client address . client port . VIP) into the `evict` set
 *   (elements expire after {@link EVICT_TIMEOUT_S}); their next segment is answered with a TCP
 *   RST from the VIP, so the client reconnects and is spread anew — without the RST the hash
 *   would send the pickup straight back to the same backend and nothing would move. The backend's
 *   side gets a RST from this node on its next segment (no socket, no entry). The set is
 *   dynamic: a table replacement empties it, and {@link evictElements} renders the additions.
 * - Probes: when a backend dies, its flows' conntrack entries are deleted and the node sends
 *   each of their clients a bare ACK from VIP:port that lies outside the client's window
 *   (probe.ts); the client answers with an ACK carrying its real sequence numbers, which, with no
 *   entry left, is picked up and answered with a RST like any next segment of such a flow. The
 *   probe itself must stay untracked: tracked, it would make an entry VIP:port → client:port
 *   whose reply tuple is the flow's own tuple, so the client's answer would match it, miss the
 *   nat chains and be delivered to this node (which resets it too, but leaves the entry behind to
 *   capture that tuple and be replicated by conntrackd as an established flow). Raw (-300) runs
 *   before conntrack; the probe is recognised by its mark, the VIP as source and the port.
 * - No healthy backend: no DNAT rule at all. The VIP then behaves as a plain local address: the
 *   connection reaches a local socket or gets a RST, never a silent drop. The chains stay.
 * - Weights (`Backend.weight`) are ignored for now: every backend gets one slot of the vmap.
 *   (They could become interval keys: `jhash … mod W vmap { 0-2 : goto a, 3 : goto b }`.)
 */
import { addressFamily, canonicalAddress, compareAddresses, hostPort } from '../net/address.js';

/** One apiserver to balance to. */
export interface Backend {
  /** IPv4 or IPv6 address of the apiserver (of the ruleset's family). */
  address: string;
  /** TCP port it listens on, 1..65535. */
  port: number;
  /** True for this node's own apiserver: flows to it are DNATed but never masqueraded. */
  local: boolean;
  /** Relative weight; accepted but IGNORED for now (every backend gets an equal share). */
  weight?: number;
}

/** What the data plane of one address family should be. */
export interface DesiredDataplane {
  /** One table per family: `table ip ballast` (4) or `table ip6 ballast` (6). */
  family: 4 | 6;
  /** Destination addresses to balance (the VIPs of this family); at least one. */
  vips: string[];
  /** The VIP's TCP port (6443). */
  port: number;
  /** The healthy set; may be empty (then there is no DNAT rule). The renderer sorts it. */
  backends: Backend[];
  /**
   * Unready-but-alive backends: they get no new connections (they are not in the spread) and
   * their established flows keep their conntrack NAT binding. Rendered as counters only.
   */
  draining?: Backend[];
  /** Source-NAT the flows we DNAT, so that replies come back through us (see {@link sourceNat}). */
  masqueradeRemote: boolean;
  /**
   * Which source address the flows we DNAT get (with `masqueradeRemote`):
   * - `'node'` (default): flows to a remote backend are masqueraded to this node's address; the
   *   local apiserver sees the client's own address.
   * - `'vip'`: every flow, to a remote or the local backend, is source-NATed to the VIP it was sent
   *   to (`snat to ct original daddr`; the kernel keeps the client's source port when that tuple is
   *   free), so the backend sees the same 4-tuple whichever node holds the VIP; and a node that
   *   does not hold the VIP leaves the backend side of such flows untracked (see the file comment).
   */
  sourceNat?: 'node' | 'vip';
}

/** Options of {@link renderRuleset}. */
export interface RenderOptions {
  /**
   * Starting values of the per-backend counter objects, keyed by {@link backendKey} (`host:port`,
   * `[v6]:port`). A table replacement creates the counters anew, so the applier seeds them with
   * the values it read just before, to keep them monotonic. Keys of no rendered backend are ignored.
   */
  counters?: Readonly<Record<string, { packets: number; bytes: number }>>;
}

/** Format marker written in the header and the table comment; bump it when the shape changes. */
export const RULESET_FORMAT = 'ballast-nft/3';

/**
 * The seed of the spread's `jhash`, fixed (any constant does; this one is "bals" in ASCII) so that
 * every apply and every node map a tuple to the same slot: with no `seed`, nft_hash draws a random
 * one each time the rule is loaded, and every apply reloads the table.
 */
export const SPREAD_SEED = 0x62616c73;

/**
 * The packet mark (SO_MARK, socket(7)) of the TCP probes this node sends to the clients of a dead
 * backend's flows (probe.ts): the `probes` chain leaves exactly these packets untracked and
 * clears the mark again at once, so no later chain, ours or another tool's, sees it. 0xba keeps
 * clear of the bits kube-proxy (0x4000, 0x8000), Cilium (0x0f00) and Calico (0xffff0000) use.
 */
export const PROBE_MARK = 0xba;

/** Seconds an element of the `evict` set lives (the flows the rebalancer reset; see the file comment). */
export const EVICT_TIMEOUT_S = 120;

/** The table name in both families. */
export const TABLE_NAME = 'ballast';

/** The nft(8) family keyword of an address family: `ip` or `ip6`. */
export function nftFamily(family: 4 | 6): 'ip' | 'ip6' {
  return family === 4 ? 'ip' : 'ip6';
}

/**
 * The key of a backend in counter maps: `10.0.0.11:6443`, `[fd00::11]:6443` (canonical text, RFC 5952).
 * @throws TypeError when `address` is not an IP address.
 */
export function backendKey(b: Pick<Backend, 'address' | 'port'>): string {
  return hostPort(b.address, b.port);
}

/**
 * The name of a backend's counter object and of its chain: `be_10_0_0_11_6443`,
 * `be_fd00__11_6443` (canonical address, `.` and `:` turned into `_`, then `_<port>`).
 * The map is one-to-one: {@link parseCounterName} inverts it.
 * @throws TypeError when `address` is not an IP address.
 */
export function counterName(b: Pick<Backend, 'address' | 'port'>): string {
  return `be_${canonicalAddress(b.address).replace(/[.:]/g, '_')}_${b.port}`;
}

/**
 * Inverse of {@link counterName}: `be_10_0_0_11_6443` → `{ address: '10.0.0.11', port: 6443 }`.
 * @returns null for a name that is not a backend counter name.
 */
export function parseCounterName(name: string): { address: string; port: number } | null {
  const m = /^be_([0-9a-f_]+)_(\d{1,5})$/.exec(name);
  if (!m) return null;
  const body = m[1]!;
  const port = Number(m[2]);
  // IPv4 is exactly four non-empty decimal groups; an IPv6 name has 8 groups or an empty one (::)
  const parts = body.split('_');
  const address = parts.length === 4 && parts.every((p) => /^\d{1,3}$/.test(p)) ? parts.join('.') : parts.join(':');
  if (addressFamily(address) === null || port < 1 || port > 65535) return null;
  return { address: canonicalAddress(address), port };
}

// ---------------------------------------------------------------------------------------------

interface Item {
  address: string;
  port: number;
  local: boolean;
  key: string;
  name: string;
}

function checkPort(what: string, port: number): void {
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new TypeError(`${what}: port must be an integer from 1 to 65535, got ${String(port)}`);
  }
}

function checkAddress(what: string, address: string, family: 4 | 6): string {
  const f = typeof address === 'string' ? addressFamily(address) : null;
  if (f === null) throw new TypeError(`${what}: not an IP address: ${JSON.stringify(address)}`);
  if (f !== family) throw new TypeError(`${what}: ${address} is IPv${f}, the ruleset is IPv${family}`);
  return canonicalAddress(address);
}

function items(what: string, list: readonly Backend[], family: 4 | 6): Item[] {
  return list
    .map((b, i) => {
      const address = checkAddress(`${what}[${i}]`, b.address, family);
      checkPort(`${what}[${i}]`, b.port);
      return { address, port: b.port, local: b.local === true, key: backendKey({ address, port: b.port }), name: counterName({ address, port: b.port }) };
    })
    .sort((x, y) => compareAddresses(x.address, y.address) || x.port - y.port);
}

/** `10.0.0.11:6443` / `[fd00::11]:6443`: the `dnat to` operand nft(8) wants per family. */
const dnatTarget = (it: Item, family: 4 | 6): string => (family === 6 ? `[${it.address}]:${it.port}` : `${it.address}:${it.port}`);

/** A set's `elements = { … }` line, wrapped so 500 backends do not make one huge line. */
function elementsLine(values: readonly string[], indent: string): string[] {
  if (values.length === 0) return [];
  const perLine = 8;
  if (values.length <= perLine) return [`${indent}elements = { ${values.join(', ')} }`];
  const out = [`${indent}elements = {`];
  for (let i = 0; i < values.length; i += perLine) {
    const last = i + perLine >= values.length;
    out.push(`${indent}\t${values.slice(i, i + perLine).join(', ')}${last ? '' : ','}`);
  }
  out.push(`${indent}}`);
  return out;
}

/**
 * The complete `nft -f` input that replaces ballast's table of family `d.family` in one
 * transaction and touches nothing else (nft(8): "table", "delete table", "CHAINS", "SETS",
 * "STATEFUL OBJECTS" → counter, "NAT STATEMENTS", "HASH EXPRESSIONS", "CONNTRACK EXPRESSIONS").
 * Deterministic: the same desired state gives the same text byte for byte (backends are sorted
 * by address then port; VIPs keep their order, de-duplicated), so a caller can skip an apply when
 * the text did not change. Ends with a newline.
 *
 * @param d the desired state; see {@link DesiredDataplane}.
 * @param opts.counters starting counter values (see {@link RenderOptions}); omit for zeros.
 * @throws TypeError when `d` is malformed: no VIP, an address that is not of `d.family`, a port
 *   outside 1..65535, or a backend listed twice (in `backends` and/or `draining`).
 */
export function renderRuleset(d: DesiredDataplane, opts: RenderOptions = {}): string {
  const family = d.family;
  if (family !== 4 && family !== 6) throw new TypeError(`family must be 4 or 6, got ${String(family)}`);
  const fam = nftFamily(family);
  const addrType = family === 4 ? 'ipv4_addr' : 'ipv6_addr';
  const l3 = family === 4 ? 'ip' : 'ip6';
  checkPort('port', d.port);
  if (!Array.isArray(d.vips) || d.vips.length === 0) throw new TypeError('vips: at least one VIP is needed');
  const vips = [...new Set(d.vips.map((v, i) => checkAddress(`vips[${i}]`, v, family)))];
  const backends = items('backends', d.backends, family);
  const draining = items('draining', d.draining ?? [], family);
  const seen = new Set<string>();
  for (const it of [...backends, ...draining]) {
    if (seen.has(it.key)) throw new TypeError(`backend ${it.key} is listed twice (backends and draining must not overlap)`);
    seen.add(it.key);
  }
  const remote = backends.filter((b) => !b.local);
  const toVip = d.masqueradeRemote && d.sourceNat === 'vip';
  const locals = [...backends, ...draining].filter((b) => b.local);
  const seed = (key: string): string => {
    const c = opts.counters?.[key];
    if (!c) return '';
    const n = (v: number): number => (Number.isSafeInteger(v) && v >= 0 ? v : 0);
    return `\t\tpackets ${n(c.packets)} bytes ${n(c.bytes)}\n`;
  };
  const match = `${l3} daddr @vips tcp dport ${d.port}`;

  let s = '';
  s += `# ${RULESET_FORMAT}: ballast's data plane for IPv${family}, rendered by src/dataplane/nftables.ts; do not edit.\n`;
  s += `# vips ${vips.join(' ')} port ${d.port}; backends ${backends.length} (${backends.length - remote.length} local); `;
  s += `draining ${draining.length}; ${toVip ? 'source NAT to the VIP' : `masquerade remote ${d.masqueradeRemote ? 'on' : 'off'}`}\n`;
  s += `# one transaction (nft -f): create the table if missing, delete it, recreate it whole.\n`;
  s += `table ${fam} ${TABLE_NAME} {}\n`;
  s += `delete table ${fam} ${TABLE_NAME}\n`;
  s += `table ${fam} ${TABLE_NAME} {\n`;
  s += `\tcomment "${RULESET_FORMAT}: Kubernetes API VIP load balancing, replaced whole on each apply"\n`;

  s += `\n\tset vips {\n\t\ttype ${addrType}\n\t\tcomment "VIPs: rules match these destinations, inert where no VIP is held"\n`;
  s += elementsLine(vips, '\t\t')
    .map((l) => `${l}\n`)
    .join('');
  s += `\t}\n`;

  s += `\n\tset evict {\n\t\ttype ${addrType} . inet_service . ${addrType}\n\t\tflags timeout\n\t\ttimeout ${EVICT_TIMEOUT_S}s\n`;
  s += `\t\tcomment "client address . port . VIP of flows the rebalancer reset: their next segment gets a RST"\n\t}\n`;

  /** A set of backends' address . port, with its comment. */
  const backendSet = (name: string, comment: string, members: readonly Backend[]): string =>
    `\n\tset ${name} {\n\t\ttype ${addrType} . inet_service\n\t\tcomment "${comment}"\n` +
    elementsLine(
      members.map((b) => `${b.address} . ${b.port}`),
      '\t\t',
    )
      .map((l) => `${l}\n`)
      .join('') +
    `\t}\n`;
  if (toVip) s += backendSet('local_backends', "this node's apiserver: the backend side of flows through a VIP held elsewhere is untracked", locals);
  else s += backendSet('remote_backends', 'backends on other nodes: flows DNATed to them are masqueraded', remote);

  // one counter object per backend: packets = connections DNATed to it (see the file comment)
  for (const b of backends) {
    s += `\n\tcounter ${b.name} {\n\t\tcomment "${b.key}${b.local ? ' (this node)' : ''}: new connections DNATed here"\n${seed(b.key)}\t}\n`;
  }
  for (const b of draining) {
    s += `\n\tcounter ${b.name} {\n\t\tcomment "${b.key}${b.local ? ' (this node)' : ''}: draining, no new connections"\n${seed(b.key)}\t}\n`;
  }

  const none = backends.length === 0;
  // nft 1.0.6 accepts the name `dstnat` only at the prerouting hook: -100 is its value
  s += `\n\tchain prerouting {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n`;
  s += `\t\tcomment "${none ? 'no healthy backend: no DNAT, the VIP port gets a local socket or a RST' : 'connections arriving from outside for a VIP'}"\n`;
  if (!none) s += `\t\t${match} goto spread comment "VIP:${d.port} from outside"\n`;
  s += `\t}\n`;

  s += `\n\tchain output {\n\t\ttype nat hook output priority -100; policy accept;\n`;
  s += `\t\tcomment "${none ? 'no healthy backend: no DNAT' : 'connections this node opens to a VIP'}"\n`;
  if (!none) s += `\t\t${match} goto spread comment "VIP:${d.port} from this node"\n`;
  s += `\t}\n`;

  s += `\n\tchain spread {\n`;
  s += `\t\tcomment "one backend per new connection: a hash of its tuple, the same backend again when conntrack lost the flow"\n`;
  if (!none) {
    const arms = backends.map((b, i) => `${i} : goto ${b.name}`);
    const hash = `jhash ${l3} saddr . tcp sport . ${l3} daddr . tcp dport mod ${arms.length} seed 0x${SPREAD_SEED.toString(16)}`;
    if (arms.length <= 4) {
      s += `\t\t${hash} vmap { ${arms.join(', ')} } comment "spread over ${arms.length}"\n`;
    } else {
      s += `\t\t${hash} vmap {\n`;
      arms.forEach((a, i) => (s += `\t\t\t${a}${i === arms.length - 1 ? '' : ','}\n`));
      s += `\t\t} comment "spread over ${arms.length}"\n`;
    }
  }
  s += `\t}\n`;

  for (const b of backends) {
    // `meta l4proto tcp` gives `dnat to addr:port` its transport protocol (nft requires one)
    s += `\n\tchain ${b.name} {\n`;
    s += `\t\tmeta l4proto tcp counter name "${b.name}" dnat to ${dnatTarget(b, family)} comment "${b.local ? 'this node' : 'remote'}"\n`;
    s += `\t}\n`;
  }

  s += `\n\tchain probes {\n\t\ttype filter hook output priority raw; policy accept;\n`;
  s += `\t\tcomment "TCP probes to a dead backend's clients: no conntrack entry, and the mark cleared for every later chain"\n`;
  s += `\t\tmeta mark 0x${PROBE_MARK.toString(16)} ${l3} saddr @vips tcp sport ${d.port} notrack meta mark set 0x0 comment "from VIP:${d.port}"\n`;
  s += `\t}\n`;

  // a filter chain: reject is not allowed in a nat chain; mangle (-150) runs after conntrack
  // (-200), so `ct state` is known, and before the nat chains (-100) pick a backend for it
  const stray = `${match} ct state new tcp flags & (syn | rst) == 0 ${l3} saddr . tcp sport . ${l3} daddr @evict reject with tcp reset`;
  s += `\n\tchain strays {\n\t\ttype filter hook prerouting priority mangle; policy accept;\n`;
  s += `\t\tcomment "a mid-stream segment of a flow the rebalancer reset (conntrack entry deleted): RST, the client reconnects"\n`;
  s += `\t\t${stray} comment "VIP:${d.port} from outside"\n`;
  s += `\t}\n`;
  s += `\n\tchain strays_out {\n\t\ttype filter hook output priority mangle; policy accept;\n`;
  s += `\t\tcomment "the same for connections this node opened to a VIP"\n`;
  s += `\t\t${stray} comment "VIP:${d.port} from this node"\n`;
  s += `\t}\n`;

  if (toVip) {
    // raw (-300): before conntrack looks the packet up, so that no entry is made or matched
    s += `\n\tchain untracked {\n\t\ttype filter hook prerouting priority raw; policy accept;\n`;
    s += `\t\tcomment "flows through a VIP that reach this node's apiserver from the VIP's holder: no conntrack entry here"\n`;
    s += `\t\t${l3} saddr @vips ${l3} daddr . tcp dport @local_backends notrack comment "from VIP:client port"\n`;
    s += `\t\t${l3} daddr @vips tcp dport != ${d.port} fib daddr type != local notrack comment "replies to a VIP not held here"\n`;
    s += `\t}\n`;
    s += `\n\tchain untracked_out {\n\t\ttype filter hook output priority raw; policy accept;\n`;
    s += `\t\tcomment "their replies, unless this node holds the VIP (its own flows are NATed here)"\n`;
    s += `\t\t${l3} daddr @vips fib daddr type != local ${l3} saddr . tcp sport @local_backends notrack comment "to VIP:client port"\n`;
    s += `\t}\n`;
    const snat = `meta l4proto tcp ct status dnat ct original ${l3} daddr @vips ct original proto-dst ${d.port} snat ${l3} to ct original ${l3} daddr`;
    s += `\n\tchain input {\n\t\ttype nat hook input priority 100; policy accept;\n`;
    s += `\t\tcomment "flows DNATed to this node's apiserver: the VIP as their source too"\n`;
    s += `\t\t${snat} comment "DNATed by us to this node"\n`;
    s += `\t}\n`;
    s += `\n\tchain postrouting {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n`;
    s += `\t\tcomment "SNAT flows DNATed by us to the VIP: the same 4-tuple at the backend whichever node holds the VIP"\n`;
    s += `\t\t${snat} comment "DNATed by us to another node"\n`;
    s += `\t}\n`;
    s += `}\n`;
    return s;
  }
  s += `\n\tchain postrouting {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n`;
  s += `\t\tcomment "${d.masqueradeRemote ? 'SNAT flows DNATed to another node, so replies come back through us' : 'masquerade is off'}"\n`;
  if (d.masqueradeRemote) {
    // `meta l4proto tcp` gives `ct original proto-dst` its type (nft cannot parse the port otherwise)
    s += `\t\tmeta l4proto tcp ct status dnat ct original ${l3} daddr @vips ct original proto-dst ${d.port} `;
    s += `${l3} daddr . tcp dport @remote_backends masquerade comment "DNATed by us to a remote backend"\n`;
  }
  s += `\t}\n`;
  s += `}\n`;
  return s;
}

/**
 * The `nft -f` input that deletes ballast's table of `family`, whether or not it exists
 * (one transaction: create-if-missing, delete). Touches no other table.
 */
export function renderRemoval(family: 4 | 6): string {
  const fam = nftFamily(family);
  return `table ${fam} ${TABLE_NAME} {}\ndelete table ${fam} ${TABLE_NAME}\n`;
}

/** A flow the rebalancer reset, as conntrack's original tuple names it (see the file comment). */
export interface EvictedFlow {
  /** the client's address as this node sees it (original source), of the family */
  source: string;
  /** the client's port (original source port), 1..65535 */
  sourcePort: number;
  /** the VIP it connected to (original destination) */
  vip: string;
}

/**
 * The `nft -f` input that adds `flows` to the `evict` set of ballast's table of `family`, one
 * transaction, one element a line: `add element ip ballast evict {\n\t10.0.0.5 . 40000 .
 * 10.0.0.100,\n…}`. Each element expires after the set's {@link EVICT_TIMEOUT_S}; adding one that
 * is already there is not an error (nft(8) `add` vs `create`).
 * @returns '' when `flows` is empty (nothing to run).
 * @throws TypeError for an address not of `family` or a port outside 1..65535.
 */
export function evictElements(family: 4 | 6, flows: readonly EvictedFlow[]): string {
  if (flows.length === 0) return '';
  const values = flows.map((f, i) => {
    checkPort(`flows[${i}].sourcePort`, f.sourcePort);
    return `${checkAddress(`flows[${i}].source`, f.source, family)} . ${f.sourcePort} . ${checkAddress(`flows[${i}].vip`, f.vip, family)}`;
  });
  return `add element ${nftFamily(family)} ${TABLE_NAME} evict {\n${values.map((v) => `\t${v}`).join(',\n')}\n}\n`;
}
