/**
 * The discovery thread's entry as shipped (dist/bundle/discovery-worker.js, scripts/bundle.ts) for
 * tests that run src/ through vitest, where no worker sits beside src/discovery/thread.ts. `npm
 * test` builds it first; a bundle older than any file of src/ would test old code, so it is refused.
 * @throws Error naming the command that rebuilds it when it is missing or older than src/.
 */
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** The newest modification time (ms) of the .ts files under `dir`. */
function newestTs(dir: string): number {
  let newest = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) newest = Math.max(newest, newestTs(p));
    else if (e.name.endsWith('.ts')) newest = Math.max(newest, statSync(p).mtimeMs);
  }
  return newest;
}

/** The built discovery-worker.js, checked to be newer than src/. */
export function builtDiscoveryWorker(): URL {
  const path = join(ROOT, 'dist', 'bundle', 'discovery-worker.js');
  const built = statSync(path, { throwIfNoEntry: false });
  if (built === undefined) throw new Error(`${path} is missing: run npm run build:ts (npm test builds it)`);
  if (built.mtimeMs < newestTs(join(ROOT, 'src'))) throw new Error(`${path} is older than src/: run npm run build:ts (npm test builds it)`);
  return pathToFileURL(path);
}
