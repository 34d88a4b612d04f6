/**
 * Other firewalls on the node: would a base chain that is not ballast's drop the first packet
 * (the SYN) of a connection to VIP:port or to a backend? Pure analysis of what
 * `nft -j list ruleset` prints (libnftables-json(5)) and of `iptables-legacy-save` /
 * `ip6tables-legacy-save` text (iptables-save(8)); the callers run the commands.
 *
 * Netfilter semantics kept (nft(8) "CHAINS", "VERDICT STATEMENT"): every base chain on a hook
 * sees the packet, in priority order, and an accept in one does not spare it the next one; a
 * drop (or reject) anywhere ends it. Inside a chain the first rule that matches with a verdict
 * decides; `jump` runs the target chain and comes back, `goto` does not come back, `return`
 * (or the end of a regular chain) goes back to the caller; the end of a base chain applies its
 * policy.
 *
 * Conservative on purpose: each match expression is judged true, false or UNKNOWN for the flow
 * (a source address, a mark, a rate limit, an `xt` match are unknown: the preflight cannot know
 * which client connects). A rule is proven only when all its matches are true. So:
 * - `drop`: a rule that provably matches the flow drops or rejects it (a fail);
 * - `policy-drop`: the chain's policy is drop and no rule provably accepts the flow (a warn:
 *   perhaps an unknown match accepts it, perhaps not);
 * - otherwise the chain lets it through.
 *
 * The flow: the first packet of a new TCP connection (ct state new) of one family, to one
 * address and port, arriving on the VRRP interface (prerouting, input, forward) or sent by this
 * node (output: interface unknown). Which hooks see which destination follows the data plane
 * (src/dataplane/nftables.ts): clients reach VIP:port through prerouting, and after the DNAT the
 * local backend through input or a remote one through forward; this node's own clients and
 * health checks go through output.
 */

/** Which chain families see a flow of an address family (nft(8) "ADDRESS FAMILIES"). */
const FAMILIES: Record<4 | 6, readonly string[]> = { 4: ['ip', 'inet'], 6: ['ip6', 'inet'] };

/** The first packet of one TCP connection, as the rules see it. */
export interface Flow {
  family: 4 | 6;
  /** destination address, canonical text */
  daddr: string;
  dport: number;
  /** the interface it arrives on; undefined when not known (output) */
  iif?: string;
  /** the interface it leaves by; undefined when not known */
  oif?: string;
  /** for the operator: "clients to the VIP 10.0.0.100:6443" */
  what: string;
}

/** A hook and the flows that cross it. */
export interface HookFlows {
  hook: 'prerouting' | 'input' | 'forward' | 'output';
  flows: Flow[];
}

/** One chain that would stop a flow. */
export interface FirewallFinding {
  /** fail: a rule provably drops it; warn: policy drop and no rule provably accepts it. */
  severity: 'fail' | 'warn';
  /** where: `nft` tables (iptables-nft's too) or `iptables-legacy` */
  source: 'nft' | 'iptables-legacy';
  /** ip, ip6, inet (nft); ip or ip6 for iptables-legacy (its tables are per family) */
  family: string;
  table: string;
  chain: string;
  hook: string;
  /** the rule's handle (nft) or its line in the save output (iptables-legacy); absent for a policy */
  handle?: number;
  /** the iptables-save line of the rule, when there is one */
  rule?: string;
  flow: string;
  /** one sentence naming all of the above */
  detail: string;
}

/** Stable identity of a finding, for "what changed" between two polls. */
export function findingKey(f: FirewallFinding): string {
  return `${f.source} ${f.family} ${f.table} ${f.chain} ${f.handle ?? 'policy'} ${f.flow}`;
}

type Tri = true | false | null;
type Verdict = { kind: 'accept' | 'drop' | 'return' | 'none' | 'unknown' } | { kind: 'jump' | 'goto'; target: string };

interface Rule {
  handle?: number;
  text?: string;
  match(flow: Flow): Tri;
  verdict: Verdict;
}

interface Chain {
  family: string;
  table: string;
  name: string;
  hook?: string;
  policy?: string;
  rules: Rule[];
}

/** A whole ruleset: chains by `family table name`, and the base chains in order. */
interface Ruleset {
  source: FirewallFinding['source'];
  chains: Map<string, Chain>;
}

const key = (family: string, table: string, name: string): string => `${family}\0${table}\0${name}`;

function and(values: readonly Tri[]): Tri {
  if (values.includes(false)) return false;
  if (values.includes(null)) return null;
  return true;
}

function not(v: Tri): Tri {
  return v === null ? null : !v;
}

// ---------------------------------------------------------------------------------------------
// value matching (addresses, ports, names)

function ipBytes(a: string): number[] | null {
  if (/^\d+\.\d+\.\d+\.\d+$/.test(a)) return a.split('.').map(Number);
  if (!a.includes(':')) return null;
  const [head = '', tail] = a.split('::') as [string, string | undefined];
  const parse = (s: string): number[] => (s === '' ? [] : s.split(':').map((h) => parseInt(h, 16)));
  const l = parse(head);
  const r = tail === undefined ? [] : parse(tail);
  const groups = [...l, ...new Array<number>(Math.max(0, 8 - l.length - r.length)).fill(0), ...r];
  if (groups.length !== 8 || groups.some((g) => !Number.isInteger(g) || g < 0 || g > 0xffff)) return null;
  return groups.flatMap((g) => [g >> 8, g & 0xff]);
}

function cmpBytes(a: number[], b: number[]): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return a.length - b.length;
}

function inPrefix(a: number[], net: number[], len: number): boolean {
  if (a.length !== net.length) return false;
  for (let bit = 0; bit < len; bit++) {
    const m = 0x80 >> (bit & 7);
    if ((a[bit >> 3]! & m) !== (net[bit >> 3]! & m)) return false;
  }
  return true;
}

/** Whether one nft JSON value (a literal, a prefix, a range, a set, a named set) holds `v`. */
type Elem = unknown;
type Lookup = (setName: string) => Elem[] | null;

function valueHolds(right: unknown, v: string | number, kind: 'addr' | 'port' | 'name' | 'word' | 'proto', sets: Lookup): Tri {
  if (typeof right === 'string' && right.startsWith('@')) {
    const elems = sets(right.slice(1));
    if (elems === null) return null;
    return anyOf(elems.map((e) => valueHolds(e, v, kind, sets)));
  }
  if (Array.isArray(right)) return anyOf(right.map((e) => valueHolds(e, v, kind, sets)));
  if (typeof right === 'object' && right !== null) {
    const o = right as Record<string, unknown>;
    if ('set' in o) return valueHolds(o.set, v, kind, sets);
    if ('elem' in o && typeof o.elem === 'object' && o.elem !== null) return valueHolds((o.elem as { val?: unknown }).val, v, kind, sets);
    if ('prefix' in o && kind === 'addr') {
      const p = o.prefix as { addr?: unknown; len?: unknown };
      const a = ipBytes(String(v));
      const n = typeof p.addr === 'string' ? ipBytes(p.addr) : null;
      if (!a || !n || typeof p.len !== 'number') return null;
      return inPrefix(a, n, p.len);
    }
    if ('range' in o && Array.isArray(o.range) && o.range.length === 2) {
      const [lo, hi] = o.range as [unknown, unknown];
      if (kind === 'port' && typeof lo === 'number' && typeof hi === 'number') return (v as number) >= lo && (v as number) <= hi;
      if (kind === 'addr' && typeof lo === 'string' && typeof hi === 'string') {
        const a = ipBytes(String(v));
        const l = ipBytes(lo);
        const h = ipBytes(hi);
        if (!a || !l || !h || a.length !== l.length) return a && l && a.length !== l.length ? false : null;
        return cmpBytes(a, l) >= 0 && cmpBytes(a, h) <= 0;
      }
      return null;
    }
    return null;
  }
  if (kind === 'port') return typeof right === 'number' ? right === v : null;
  // a transport protocol by name or number (TCP: `tcp`, 6)
  if (kind === 'proto') return typeof right === 'string' ? right === 'tcp' : typeof right === 'number' ? right === 6 : null;
  if (kind === 'addr') {
    if (typeof right !== 'string') return null;
    const a = ipBytes(String(v));
    const b = ipBytes(right);
    if (!a || !b) return null;
    return a.length === b.length && cmpBytes(a, b) === 0;
  }
  if (kind === 'name') {
    if (typeof right !== 'string') return null;
    // nft(8): a trailing `*` in an interface name is a wildcard
    return right.endsWith('*') ? String(v).startsWith(right.slice(0, -1)) : right === v;
  }
  return typeof right === 'string' || typeof right === 'number' ? String(right) === String(v) : null;
}

function anyOf(values: readonly Tri[]): Tri {
  if (values.includes(true)) return true;
  if (values.includes(null)) return null;
  return false;
}

// ---------------------------------------------------------------------------------------------
// nft JSON

/** One `match` expression of libnftables-json(5) judged for `flow`. */
function nftMatch(m: { op?: unknown; left?: unknown; right?: unknown }, flow: Flow, sets: Lookup): Tri {
  const op = typeof m.op === 'string' ? m.op : '==';
  const left = m.left as Record<string, Record<string, unknown>> | undefined;
  if (typeof left !== 'object' || left === null) return null;
  let value: Tri;
  if (left.payload) {
    const { protocol, field } = left.payload as { protocol?: string; field?: string };
    if (protocol === 'ip' || protocol === 'ip6') {
      // the match carries its own family: an ip match never matches an IPv6 packet
      if ((protocol === 'ip') !== (flow.family === 4)) return false;
      if (field === 'daddr') value = valueHolds(m.right, flow.daddr, 'addr', sets);
      else if (field === 'protocol' || field === 'nexthdr') value = valueHolds(m.right, 'tcp', 'proto', sets);
      else return null;
    } else if (protocol === 'tcp' || protocol === 'th') {
      if (field === 'dport') value = valueHolds(m.right, flow.dport, 'port', sets);
      else return null;
    } else if (protocol === 'udp' || protocol === 'icmp' || protocol === 'icmpv6' || protocol === 'sctp' || protocol === 'udplite') {
      // a match on another transport header implies that protocol: never true for TCP
      return false;
    } else {
      return null;
    }
  } else if (left.meta) {
    const k = (left.meta as { key?: string }).key;
    if (k === 'l4proto') value = valueHolds(m.right, 'tcp', 'proto', sets);
    else if (k === 'nfproto') value = valueHolds(m.right, flow.family === 4 ? 'ipv4' : 'ipv6', 'word', sets);
    else if (k === 'iifname' && flow.iif !== undefined) value = valueHolds(m.right, flow.iif, 'name', sets);
    else if (k === 'oifname' && flow.oif !== undefined) value = valueHolds(m.right, flow.oif, 'name', sets);
    else return null;
  } else if (left.ct) {
    const k = (left.ct as { key?: string }).key;
    // the first packet of a connection is `new` (and not established, related, invalid, untracked)
    if (k === 'state') value = valueHolds(m.right, 'new', 'word', sets);
    else return null;
  } else {
    return null;
  }
  if (op === '==' || op === 'in') return value;
  if (op === '!=') return not(value);
  return null;
}

function nftVerdict(stmt: Record<string, unknown>): Verdict | null {
  if ('accept' in stmt) return { kind: 'accept' };
  if ('drop' in stmt || 'reject' in stmt) return { kind: 'drop' };
  if ('return' in stmt) return { kind: 'return' };
  if ('jump' in stmt) return { kind: 'jump', target: String((stmt.jump as { target?: unknown }).target) };
  if ('goto' in stmt) return { kind: 'goto', target: String((stmt.goto as { target?: unknown }).target) };
  // queue, a verdict map, dnat/snat/masquerade/redirect (these terminate in a nat chain): not judged
  if ('queue' in stmt || 'vmap' in stmt || 'dnat' in stmt || 'snat' in stmt || 'masquerade' in stmt || 'redirect' in stmt) return { kind: 'unknown' };
  return null;
}

/** Statements that do not decide and do not filter (nft(8) "STATEMENTS"). */
const PASSIVE = new Set(['counter', 'log', 'mangle', 'meta', 'ct', 'notrack', 'flow', 'set', 'quota', 'xt_target', 'tproxy', 'synproxy', 'dup', 'fwd']);

/**
 * The chains of a `nft -j list ruleset` document, without the tables `skip` names
 * (`family table`, e.g. "ip ballast").
 * @throws TypeError when `doc` is not such a document.
 */
function parseNftRuleset(doc: unknown, skip: ReadonlySet<string>): Ruleset {
  const items = (doc as { nftables?: unknown })?.nftables;
  if (!Array.isArray(items)) throw new TypeError('not an `nft -j list ruleset` document (no "nftables" array)');
  const chains = new Map<string, Chain>();
  const sets = new Map<string, Elem[]>();
  for (const item of items as Record<string, Record<string, unknown>>[]) {
    const c = item.chain;
    if (c && !skip.has(`${c.family} ${c.table}`)) {
      chains.set(key(String(c.family), String(c.table), String(c.name)), {
        family: String(c.family),
        table: String(c.table),
        name: String(c.name),
        ...(typeof c.hook === 'string' ? { hook: c.hook } : {}),
        ...(typeof c.policy === 'string' ? { policy: c.policy } : {}),
        rules: [],
      });
    }
    const s = item.set ?? item.map;
    if (s) sets.set(key(String(s.family), String(s.table), String(s.name)), Array.isArray(s.elem) ? (s.elem as Elem[]) : []);
  }
  for (const item of items as Record<string, Record<string, unknown>>[]) {
    const r = item.rule;
    if (!r) continue;
    const chain = chains.get(key(String(r.family), String(r.table), String(r.chain)));
    if (!chain) continue;
    const lookup: Lookup = (name) => sets.get(key(chain.family, chain.table, name)) ?? null;
    const exprs = Array.isArray(r.expr) ? (r.expr as Record<string, unknown>[]) : [];
    const matches: ((f: Flow) => Tri)[] = [];
    let verdict: Verdict = { kind: 'none' };
    for (const e of exprs) {
      if (typeof e !== 'object' || e === null) continue;
      if ('match' in e) {
        const m = e.match as { op?: unknown; left?: unknown; right?: unknown };
        matches.push((f) => nftMatch(m, f, lookup));
        continue;
      }
      const v = nftVerdict(e);
      if (v) {
        verdict = v;
        break;
      }
      // limit, xt (an iptables match nft cannot express), anything unrecognised: may or may not match
      if (!Object.keys(e).every((k) => PASSIVE.has(k))) matches.push(() => null);
    }
    chain.rules.push({ ...(typeof r.handle === 'number' ? { handle: r.handle } : {}), match: (f) => and(matches.map((m) => m(f))), verdict });
  }
  return { source: 'nft', chains };
}

// ---------------------------------------------------------------------------------------------
// iptables-legacy-save

/** One iptables-save rule's matches, judged for `flow` (iptables(8), iptables-extensions(8)). */
function iptablesMatch(args: readonly string[], flow: Flow): Tri {
  const out: Tri[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    const negated = a === '!';
    const opt = negated ? args[++i]! : a;
    const val = args[i + 1];
    let v: Tri;
    switch (opt) {
      case '-p':
        v = val === 'tcp' || val === '6' || val === 'all';
        i++;
        break;
      case '-d': {
        const [addr = '', len] = (val ?? '').split('/');
        const ab = ipBytes(flow.daddr);
        const nb = ipBytes(addr);
        v = ab && nb ? ab.length === nb.length && inPrefix(ab, nb, len === undefined ? nb.length * 8 : Number(len)) : null;
        i++;
        break;
      }
      case '--dport':
      case '--destination-port': {
        const [lo = '', hi] = (val ?? '').split(':');
        v = hi === undefined ? Number(lo) === flow.dport : flow.dport >= Number(lo || 0) && flow.dport <= Number(hi || 65535);
        i++;
        break;
      }
      case '-i':
      case '-o': {
        const iface = opt === '-i' ? flow.iif : flow.oif;
        v = iface === undefined ? null : (val ?? '').endsWith('+') ? iface.startsWith((val ?? '').slice(0, -1)) : iface === val;
        i++;
        break;
      }
      case '--ctstate':
      case '--state':
        v = (val ?? '').split(',').includes('NEW');
        i++;
        break;
      case '-m':
        // the module name; its options follow and are judged one by one
        if (val === 'tcp' || val === 'conntrack' || val === 'state' || val === 'comment') {
          i++;
          continue;
        }
        v = null;
        i++;
        break;
      case '--comment':
        i++;
        continue;
      default:
        // -s, --sport, marks, limits, sets, other modules' options: not known for a client
        v = null;
        if (val !== undefined && !val.startsWith('-')) i++;
    }
    out.push(negated ? not(v) : v);
  }
  return and(out);
}

function splitArgs(line: string): string[] {
  const out: string[] = [];
  const re = /"((?:[^"\\]|\\.)*)"|(\S+)/g;
  for (let m = re.exec(line); m; m = re.exec(line)) out.push(m[1] ?? m[2]!);
  return out;
}

const LEGACY_HOOKS: Record<string, string> = { PREROUTING: 'prerouting', INPUT: 'input', FORWARD: 'forward', OUTPUT: 'output', POSTROUTING: 'postrouting' };

/** The chains of `iptables-legacy-save` (family ip) or `ip6tables-legacy-save` (ip6) output. */
function parseIptablesSave(text: string, family: 'ip' | 'ip6'): Ruleset {
  const chains = new Map<string, Chain>();
  let table = '';
  text.split('\n').forEach((raw, index) => {
    const line = raw.trim();
    if (line.startsWith('*')) table = line.slice(1);
    else if (line.startsWith(':')) {
      const [name = '', policy = '-'] = line.slice(1).split(/\s+/);
      const hook = LEGACY_HOOKS[name];
      chains.set(key(family, table, name), { family, table, name, ...(hook && policy !== '-' ? { hook, policy: policy.toLowerCase() } : {}), rules: [] });
    } else if (line.startsWith('-A ')) {
      const args = splitArgs(line);
      const chain = chains.get(key(family, table, args[1] ?? ''));
      if (!chain) return;
      const j = args.findIndex((a) => a === '-j' || a === '-g');
      const target = j >= 0 ? args[j + 1] : undefined;
      const matchArgs = args.slice(2, j >= 0 ? j : undefined);
      let verdict: Verdict;
      if (target === undefined) verdict = { kind: 'none' };
      else if (target === 'ACCEPT') verdict = { kind: 'accept' };
      else if (target === 'DROP' || target === 'REJECT') verdict = { kind: 'drop' };
      else if (target === 'RETURN') verdict = { kind: 'return' };
      else if (chains.has(key(family, table, target))) verdict = { kind: args[j] === '-g' ? 'goto' : 'jump', target };
      else if (['LOG', 'MARK', 'CONNMARK', 'NFLOG', 'TRACE'].includes(target)) verdict = { kind: 'none' };
      else verdict = { kind: 'unknown' };
      chain.rules.push({ handle: index + 1, text: line, match: (f) => iptablesMatch(matchArgs, f), verdict });
    }
  });
  return { source: 'iptables-legacy', chains };
}

// ---------------------------------------------------------------------------------------------
// evaluation

interface Outcome {
  /** accept / drop: proven by `rule`; fallthrough: the chain ended (base chain: the policy applies) */
  verdict: 'accept' | 'drop' | 'fallthrough';
  rule?: Rule;
  /** a rule that might have accepted (unknown matches) was passed */
  maybeAccepted: boolean;
}

function evalChain(rs: Ruleset, chain: Chain, flow: Flow, depth: number): Outcome {
  let maybeAccepted = false;
  for (const rule of chain.rules) {
    const m = rule.match(flow);
    if (m === false) continue;
    const v = rule.verdict;
    if (v.kind === 'none') continue;
    if (v.kind === 'jump' || v.kind === 'goto') {
      const target = rs.chains.get(key(chain.family, chain.table, v.target));
      if (!target || depth > 16) {
        maybeAccepted = true;
        continue;
      }
      const sub = evalChain(rs, target, flow, depth + 1);
      maybeAccepted ||= sub.maybeAccepted;
      if (m === true && sub.verdict !== 'fallthrough') return { ...sub, maybeAccepted };
      if (m === null && sub.verdict === 'accept') maybeAccepted = true;
      if (m === true && v.kind === 'goto') return { verdict: 'fallthrough', maybeAccepted };
      continue;
    }
    if (m === null) {
      if (v.kind === 'accept' || v.kind === 'unknown' || v.kind === 'return') maybeAccepted = true;
      continue;
    }
    if (v.kind === 'accept') return { verdict: 'accept', rule, maybeAccepted };
    if (v.kind === 'drop') return { verdict: 'drop', rule, maybeAccepted };
    if (v.kind === 'return') return { verdict: 'fallthrough', maybeAccepted };
    // unknown verdict (queue, a verdict map, NAT): cannot say
    maybeAccepted = true;
  }
  return { verdict: 'fallthrough', maybeAccepted };
}

function analyse(rs: Ruleset, hooks: readonly HookFlows[]): FirewallFinding[] {
  const out: FirewallFinding[] = [];
  for (const chain of rs.chains.values()) {
    if (chain.hook === undefined) continue;
    for (const h of hooks) {
      if (h.hook !== chain.hook) continue;
      for (const flow of h.flows) {
        if (!FAMILIES[flow.family].includes(chain.family)) continue;
        const o = evalChain(rs, chain, flow, 0);
        const base = {
          source: rs.source,
          family: chain.family,
          table: chain.table,
          chain: chain.name,
          hook: chain.hook,
          flow: flow.what,
        };
        const where =
          rs.source === 'nft'
            ? `nft table ${chain.family} ${chain.table}, chain ${chain.name} (hook ${chain.hook})`
            : `iptables-legacy (${chain.family === 'ip' ? 'iptables' : 'ip6tables'}) table ${chain.table}, chain ${chain.name}`;
        if (o.verdict === 'drop') {
          const r = o.rule!;
          const which = rs.source === 'nft' ? `rule handle ${r.handle}` : `rule "${r.text}"`;
          out.push({
            ...base,
            severity: 'fail',
            ...(r.handle !== undefined ? { handle: r.handle } : {}),
            ...(r.text !== undefined ? { rule: r.text } : {}),
            detail: `${where}: ${which} drops ${flow.what}`,
          });
        } else if (o.verdict === 'fallthrough' && chain.policy === 'drop') {
          out.push({
            ...base,
            severity: 'warn',
            detail: `${where}: policy drop, and no rule provably accepts ${flow.what}${o.maybeAccepted ? ' (a rule with matches the preflight cannot judge might)' : ''}`,
          });
        }
      }
    }
  }
  return out;
}

/**
 * What the foreign nft tables (not `skip`) would do to the flows.
 * @param doc the parsed JSON of `nft -j list ruleset`.
 * @param skip tables to leave out, as "family name" (ballast's own: "ip ballast", "ip6 ballast").
 * @throws TypeError when `doc` is not an `nft -j list ruleset` document.
 */
export function analyseNftRuleset(
  doc: unknown,
  hooks: readonly HookFlows[],
  skip: ReadonlySet<string> = new Set(['ip ballast', 'ip6 ballast']),
): FirewallFinding[] {
  return analyse(parseNftRuleset(doc, skip), hooks);
}

/**
 * What iptables-legacy's rules would do to the flows of `family`.
 * @param text `iptables-legacy-save` (family 4) or `ip6tables-legacy-save` (6) output; empty when
 *   the legacy tables are not loaded.
 */
export function analyseIptablesSave(text: string, family: 4 | 6, hooks: readonly HookFlows[]): FirewallFinding[] {
  const only = hooks.map((h) => ({ hook: h.hook, flows: h.flows.filter((f) => f.family === family) }));
  return analyse(parseIptablesSave(text, family === 4 ? 'ip' : 'ip6'), only);
}

/** The number of chains a `nft -j list ruleset` document has outside `skip` (for "checked N chains"). */
export function countForeignChains(doc: unknown, skip: ReadonlySet<string> = new Set(['ip ballast', 'ip6 ballast'])): number {
  return [...parseNftRuleset(doc, skip).chains.values()].filter((c) => c.hook !== undefined).length;
}

/** What {@link flowsFor} needs to know of the node. */
export interface FlowInputs {
  family: 4 | 6;
  vips: readonly string[];
  /** the VIP's TCP port */
  port: number;
  /** the apiservers (host canonical) */
  backends: readonly { host: string; port: number }[];
  /** this node's addresses (canonical), to tell the local backend from remote ones */
  nodeAddresses: ReadonlySet<string>;
  /** the interface clients arrive on (VRRP's) */
  ifname?: string;
}

/**
 * The flows each hook sees (see the file comment): prerouting VIP:port; input VIP:port and the
 * local backends; forward the remote backends; output VIP:port and every backend (this node's
 * clients and health checks).
 */
export function flowsFor(n: FlowInputs): HookFlows[] {
  const iif = n.ifname;
  const vip = n.vips.map((v): Flow => ({
    family: n.family,
    daddr: v,
    dport: n.port,
    ...(iif ? { iif } : {}),
    what: `TCP to the VIP ${n.family === 6 ? `[${v}]` : v}:${n.port}`,
  }));
  const be = (b: { host: string; port: number }, local: boolean): Flow => ({
    family: n.family,
    daddr: b.host,
    dport: b.port,
    ...(iif ? { iif } : {}),
    what: `TCP to the ${local ? 'local' : 'remote'} backend ${n.family === 6 ? `[${b.host}]` : b.host}:${b.port}`,
  });
  const local = n.backends.filter((b) => n.nodeAddresses.has(b.host)).map((b) => be(b, true));
  const remote = n.backends.filter((b) => !n.nodeAddresses.has(b.host)).map((b) => be(b, false));
  // this node's own connections: no input interface, the output one unknown
  const own = (f: Flow): Flow => ({ family: f.family, daddr: f.daddr, dport: f.dport, what: `${f.what} from this node` });
  return [
    { hook: 'prerouting', flows: vip },
    { hook: 'input', flows: [...vip, ...local] },
    { hook: 'forward', flows: remote },
    { hook: 'output', flows: [...vip, ...local, ...remote].map(own) },
  ];
}
