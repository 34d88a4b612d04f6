/**
 * Issues before they become a ConfigError: a path of segments and a message; how a path is
 * written (`vrrp.peers[0]`) and the order issues are reported in (the order the settings are
 * declared).
 */
import { DOCUMENT_PATH } from '../errors.js';

/** One step of a setting's path: a key, or a list index. */
export type Segment = string | number;

/** A problem with one setting, found by a field parser or a cross-field check. */
export interface RawIssue {
  path: Segment[];
  message: string;
  /** the problem is the key itself (unknown key), not its value */
  atKey?: boolean;
}

/** Finds where a path is in the source text; used to add line numbers to issues. */
export type Locator = (path: readonly Segment[], atKey: boolean) => { readonly line: number; readonly column: number } | undefined;

/** The known keys of each section, by the section's dotted path ('' = top level), in declaration order. */
export type SectionKeys = Readonly<Record<string, readonly string[]>>;

/** A mapping (not a list, not null). */
export const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Renders a path the way it looks in the file: `vrrp.peers[0]`, `vips`, `(document)`. */
export function formatPath(path: readonly Segment[]): string {
  if (path.length === 0) return DOCUMENT_PATH;
  let out = '';
  for (const seg of path) {
    if (typeof seg === 'number') out += `[${seg}]`;
    else if (/^[A-Za-z_][\w-]*$/.test(seg)) out += out === '' ? seg : `.${seg}`;
    else out += `[${JSON.stringify(seg)}]`;
  }
  return out;
}

/** A comparator of issues: declaration order of the settings, then list index; unknown keys after known ones. */
export function issueOrder(sections: SectionKeys): (a: RawIssue, b: RawIssue) => number {
  return (a, b) => {
    const n = Math.min(a.path.length, b.path.length);
    for (let i = 0; i < n; i++) {
      const x = a.path[i];
      const y = b.path[i];
      if (x === y) continue;
      if (typeof x === 'number' && typeof y === 'number') return x - y;
      const keys = sections[a.path.slice(0, i).join('.')] ?? [];
      const rank = (s: Segment | undefined): number => {
        const r = keys.indexOf(String(s));
        return r < 0 ? keys.length : r;
      };
      return rank(x) - rank(y);
    }
    return a.path.length - b.path.length;
  };
}
