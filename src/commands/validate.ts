/**
 * `ballast validate`: checks a configuration file and its files; exit 0 valid, 2 invalid.
 */
import type { ConfigNote } from '../config/index.js';

/**
 * Loads `o.config` as the agent would, and prints `FILE: ok` with the files still to wait for.
 * @throws ConfigError (exit 2) listing every problem.
 */
export async function validate(o: { config: string }): Promise<number> {
  const { loadConfig, formatNote } = await import('../config/index.js');
  const notes: ConfigNote[] = [];
  loadConfig(o.config, { notes });
  for (const n of notes) process.stdout.write(`${o.config}: ${formatNote(n)}\n`);
  process.stdout.write(`${o.config}: ok${notes.length > 0 ? ` (${notes.length} ${notes.length === 1 ? 'file' : 'files'} to wait for)` : ''}\n`);
  return 0;
}
