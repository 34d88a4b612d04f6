/**
 * What to do when BIRD refuses ballast's snippet (BALLAST_E_BGP, docs/errors.md): the fix for
 * the message BIRD gave, appended to the error so the operator need not look it up.
 */

/**
 * A short fix for BIRD's refusal `message` (its words, e.g. from `configure`'s 8xxx/9xxx reply).
 * The common case is a name clash, BIRD's "Symbol 'ballast_vip4' already defined": another file
 * BIRD reads declares a `ballast_*` name, or bird.conf includes the snippet twice.
 * @param message BIRD's refusal (BirdError's message).
 * @param socket bgp.socket, for the `birdc` command that shows the same.
 * @returns one sentence starting with "fix:".
 */
export function birdRefusalFix(message: string, socket: string): string {
  const clash = /Symbol '([^']+)' already defined/.exec(message);
  if (clash) {
    return `fix: ${clash[1]} is declared twice: bird.conf includes ballast's snippet more than once (one include "…/ballast*.conf" line only), or another snippet or bird.conf itself declares ballast_* names (ballast owns them: rename those)`;
  }
  return `fix: correct what BIRD names above (birdc -s ${socket} configure check shows the same); docs/errors.md BALLAST_E_BGP`;
}
