/**
 * vitest globalSetup: says once, at the start of every run, which Node.js runs the tests (and so
 * every child process they start with process.execPath: agents, lab scripts, peers' clients).
 * Node 24 LTS is the tested runtime; on an older node it says so loudly (the runtime unit test
 * then fails): run through `npm test` or `bash scripts/node-env.sh npx vitest …`.
 */
export default function setup(): void {
  const major = Number(process.versions.node.split('.')[0]);
  const note = major >= 24 ? '' : ' — NOT the tested runtime (Node 24): run `bash scripts/setup.sh`, then `npm test` or `bash scripts/node-env.sh npx vitest …`';
  process.stdout.write(`[ballast tests] node ${process.version} (${process.execPath})${note}\n`);
}
