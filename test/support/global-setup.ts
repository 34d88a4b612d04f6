import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * vitest globalSetup: says once, at the start of every run, which Node.js runs the tests (and so
 * every child process they start with process.execPath: agents, lab scripts, peers' clients).
 * Node 24 LTS is the tested runtime; on an older node it says so loudly (the runtime unit test
 * then fails): run through `npm test` or `bash scripts/node-env.sh npx vitest …`.
 *
 * It also turns on Node's module compile cache (NODE_COMPILE_CACHE, V8 code cache keyed by each
 * file's contents, so a rebuilt file is compiled afresh) for every process of the run: the test
 * workers inherit it, and so every agent, stand-in and client they start. A `ballast run` spends
 * about 1.5 s of CPU before it answers, most of it compiling modules; with the cache about 1.1 s.
 * The suite starts agents several hundred times, three at once on 2 cores. Where the cache lives:
 * node_modules/.cache/ (a build area), unless NODE_COMPILE_CACHE is already set.
 */
export default function setup(): void {
  process.env.NODE_COMPILE_CACHE ??= join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'node_modules', '.cache', 'ballast-node-compile');
  const major = Number(process.versions.node.split('.')[0]);
  const note =
    major >= 24 ? '' : ' — NOT the tested runtime (Node 24): run `bash scripts/setup.sh`, then `npm test` or `bash scripts/node-env.sh npx vitest …`';
  process.stdout.write(`[ballast tests] node ${process.version} (${process.execPath})${note}\n`);
}
