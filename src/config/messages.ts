/**
 * How configuration messages show values and phrase "expected …": shared by the field parsers
 * and the cross-field checks, so that every message reads the same way.
 */

/** A value as an operator would recognise it in a message: `"x"`, `0`, `a list`. */
export function show(v: unknown): string {
  if (v === undefined) return 'nothing';
  if (v === null) return 'an empty value';
  if (typeof v === 'string') return JSON.stringify(v.length > 64 ? `${v.slice(0, 61)}...` : v);
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'object') return 'a mapping';
  return String(v);
}

/** Options of {@link expect}. */
export interface ExpectOptions {
  /** Shown when the key is present with no value. */
  default?: string;
  /** Replaces the text after "required: " when the key is missing. */
  required?: string;
  /** Appended to "must be …, got …" for some inputs. */
  hint?: (input: unknown) => string;
}

/** An error function for zod: "required: …", "has no value: …" or "must be …, got …". */
export function expect(what: string, opts: ExpectOptions = {}): (iss: { readonly input?: unknown }) => string {
  return (iss) => {
    const input = iss.input;
    if (input === undefined) return `required: ${opts.required ?? what}`;
    if (input === null) {
      const dflt = opts.default === undefined ? '' : ` (or delete the key to get the default, ${opts.default})`;
      return `has no value: expected ${what}${dflt}`;
    }
    return `must be ${what}, got ${show(input)}${opts.hint?.(input) ?? ''}`;
  };
}

/** Hint for a number written in quotes. */
export const quotedNumberHint = (v: unknown): string =>
  typeof v === 'string' && /^\s*-?\d+(\.\d+)?\s*$/.test(v) ? ' (a string: write the number without quotes)' : '';

/** Hint for YAML 1.1 booleans, which YAML 1.2 reads as strings. */
export const yesNoHint = (v: unknown): string =>
  typeof v === 'string' && /^(yes|no|on|off|y|n)$/i.test(v) ? ' (YAML 1.2 reads yes/no/on/off as strings)' : '';
