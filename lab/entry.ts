/**
 * The scripts' common entry point: run `main` only when the module is the process's entry
 * script (`node dist/lab/clients/prober.js …`), never when a test or another script imports it for
 * its helpers.
 */
import { pathToFileURL } from 'node:url';

/**
 * Runs `main(argv)` (argv = process.argv after the script path) if `moduleUrl` (the caller's
 * `import.meta.url`) is the entry script, and exits with the status it resolves with. A rejection
 * prints `<name>: <message>` (the stack too with `stack: true`) on stderr and exits with
 * `failStatus` (default 1).
 */
export function runIfMain(moduleUrl: string, name: string, main: (argv: string[]) => Promise<number>, o: { failStatus?: number; stack?: boolean } = {}): void {
  if (process.argv[1] === undefined || moduleUrl !== pathToFileURL(process.argv[1]).href) return;
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err: unknown) => {
      const text = err instanceof Error ? (o.stack ? (err.stack ?? err.message) : err.message) : String(err);
      process.stderr.write(`${name}: ${text}\n`);
      process.exit(o.failStatus ?? 1);
    },
  );
}

/** `--name`'s value as an integer min..max, `dflt` when absent. @throws TypeError naming the option otherwise. */
export function intArg(name: string, v: string | undefined, dflt: number, min: number, max: number): number {
  const n = v === undefined ? dflt : Number(v);
  if (!Number.isInteger(n) || n < min || n > max) throw new TypeError(`--${name} must be an integer ${min}..${max}, got ${v}`);
  return n;
}
