/**
 * Unknown keys: say which, and suggest the key that was probably meant ("did you mean …?"):
 * the same name in another spelling, a keepalived / haproxy / kubeconfig name, or the nearest
 * known key by edit distance, this section first.
 */
import type { SectionKeys } from './issues.js';

/** Names from keepalived.conf and other spellings people bring with them, normalized. */
const ALIASES: Readonly<Record<string, string>> = {
  virtualrouterid: 'vrrp.vrid',
  advertint: 'vrrp.advertisementInterval',
  nopreempt: 'vrrp.preempt',
  unicastpeer: 'vrrp.peers',
  unicastpeers: 'vrrp.peers',
  virtualipaddress: 'vips',
  virtualipaddresses: 'vips',
  addresses: 'vips',
  // a VIP list, not dataplane.vip, when written at the top level
  vip: 'vips',
  garpmasterrepeat: 'announce.count',
  garpmasterdelay: 'announce.repeatAfter',
  garpinterval: 'announce.spacing',
  loglevel: 'log.level',
  // haproxy, keepalived (real_server, delay_loop, track_script weight) and kubeconfig spellings
  inter: 'apiserver.health.interval',
  delayloop: 'apiserver.health.interval',
  realserver: 'apiserver.backends',
  servers: 'apiserver.backends',
  endpoints: 'apiserver.backends',
  weight: 'policy.unhealthyPriorityWeight',
  ca: 'apiserver.health.caFile',
  cacert: 'apiserver.health.caFile',
  certificateauthority: 'apiserver.health.caFile',
  clientcertificate: 'apiserver.health.clientCertFile',
  clientkey: 'apiserver.health.clientKeyFile',
  token: 'apiserver.health.tokenFile',
  tlsservername: 'apiserver.health.serverName',
  sni: 'apiserver.health.serverName',
  insecure: 'apiserver.health.insecureSkipVerify',
  insecureskiptlsverify: 'apiserver.health.insecureSkipVerify',
};

const normalizeKey = (k: string): string => k.toLowerCase().replace(/[-_\s]/g, '');

/** Optimal string alignment distance (Levenshtein plus adjacent transpositions). */
function editDistance(a: string, b: string): number {
  const rows: number[][] = [];
  for (let i = 0; i <= a.length; i++) {
    const row: number[] = [i];
    for (let j = 1; j <= b.length; j++) {
      if (i === 0) {
        row.push(j);
        continue;
      }
      const prev = rows[i - 1] ?? [];
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min((prev[j] ?? 0) + 1, (row[j - 1] ?? 0) + 1, (prev[j - 1] ?? 0) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        d = Math.min(d, (rows[i - 2]?.[j - 2] ?? 0) + 1);
      }
      row.push(d);
    }
    rows.push(row);
  }
  return rows[a.length]?.[b.length] ?? 0;
}

/** A known key: its section's dotted path ('' = top level) and its name. */
interface Known {
  section: string;
  key: string;
}

/** The known key nearest to `norm` by edit distance, within a limit that grows with its length. */
function nearest(norm: string, list: readonly Known[]): Known | undefined {
  const limit = norm.length <= 4 ? 1 : norm.length <= 10 ? 2 : 3;
  let best: Known | undefined;
  let bestD = limit + 1;
  for (const t of list) {
    const d = editDistance(norm, normalizeKey(t.key));
    if (d < bestD) {
      best = t;
      bestD = d;
    }
  }
  return best;
}

/** The key `key` (in `section`) probably meant, in order: same name here, an alias, same name elsewhere, nearest here, nearest elsewhere. */
function guess(sections: SectionKeys, section: string, key: string): Known | undefined {
  const all = Object.entries(sections).flatMap(([s, keys]) => keys.map((k): Known => ({ section: s, key: k })));
  const norm = normalizeKey(key);
  const local = all.filter((t) => t.section === section);
  const elsewhere = all.filter((t) => t.section !== section);
  const byName = (list: readonly Known[]) => list.find((t) => normalizeKey(t.key) === norm);
  // own keys only: `constructor` or `__proto__` in a file must not find Object.prototype's
  const alias = Object.hasOwn(ALIASES, norm) ? ALIASES[norm] : undefined;
  const cut = alias?.lastIndexOf('.') ?? -1;
  const aliasTarget = alias === undefined ? undefined : { section: cut < 0 ? '' : alias.slice(0, cut), key: alias.slice(cut + 1) };
  return byName(local) ?? aliasTarget ?? byName(elsewhere) ?? nearest(norm, local) ?? nearest(norm, elsewhere);
}

/**
 * The message for an unknown `key` in `section` ('' = top level): `unknown key (did you mean
 * 'priority'?)`, or the section's keys when nothing is close.
 */
export function unknownKeyMessage(sections: SectionKeys, section: string, key: string): string {
  const g = guess(sections, section, key);
  if (g === undefined) return `unknown key (expected one of: ${(sections[section] ?? []).join(', ')})`;
  const shown = g.section === section ? `'${g.key}'` : g.section === '' ? `the top-level key '${g.key}'` : `'${g.section}.${g.key}'`;
  return `unknown key (did you mean ${shown}?)`;
}
