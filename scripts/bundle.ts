/**
 * The agent's runtime bundle, dist/bundle/, made with esbuild after tsc (`npm run build:ts`,
 * `npm run build`, scripts/setup.sh; scripts/package.sh ships it):
 *
 *   dist/bundle/commands.js   src/commands/index.ts and everything it imports, ballast's modules and the
 *                             npm packages alike, minified; each dynamic `import()` (the agent's
 *                             modules for `ballast run`, the check, cleanup and manifest commands)
 *                             is a chunk of its own beside it, loaded only by the command that
 *                             takes that path
 *   dist/bundle/discovery-worker.js
 *                             the discovery thread (src/discovery/discovery-worker.ts), with the
 *                             parts of @kubernetes/client-node it uses (k8s-client.ts), tree-shaken
 *
 * dist/src/cli.js (tsc's, which every launcher runs: /usr/bin/ballast, the systemd unit, the
 * image's entrypoint, the lab's cliPath) sets the V8 flags and the signal handlers and imports
 * dist/bundle/commands.js.
 * Why: V8 keeps every module's source on the heap for lazy compilation, and a minified bundle is
 * a fraction of the sources it replaces (docs/performance.md, "What was done").
 *
 * Kept out of commands.js: @kubernetes/client-node (only the discovery thread loads it, from its
 * own bundle; `ballast check` and the commands never need it) and whatever is loaded through
 * createRequire at run time (node:http, netlink's parts, the addon). Identifiers are minified, function and class names too (esbuild's
 * `keepNames` would keep them at 0.8 MiB of heap; ballast's errors set their `name` themselves,
 * so messages and `code`s are unchanged, only stack frames name minified functions); zod gets
 * English only (zodEnglishOnly). The heap these save is measured in docs/performance.md.
 *
 *   node scripts/bundle.ts [--outdir DIR (relative to the tree; default dist/bundle)] [--metafile FILE]
 *
 * @throws exits 1 with esbuild's messages when the build fails.
 */
import { rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build, type BuildOptions, type Plugin } from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

/**
 * zod's `locales` namespace with English only. zod 4 re-exports all of its 64 locales from its
 * index (`z.locales`, `core.locales`: 267 kB of the bundle, minified); its default error map is
 * English, installed by classic/schemas.js from locales/en.js, which is bundled as it is.
 * ballast never calls `z.config(z.locales.xx())`, so every message stays what it was.
 */
const zodEnglishOnly: Plugin = {
  name: 'zod-english-only',
  setup(b) {
    b.onResolve({ filter: /^\.\.\/locales\/index\.js$/ }, (args) =>
      /[\\/]node_modules[\\/]zod[\\/]v4[\\/](classic|core)[\\/]/.test(args.importer)
        ? { path: join(dirname(args.importer), '..', 'locales', 'index.js'), namespace: 'zod-locales' }
        : undefined,
    );
    b.onLoad({ filter: /.*/, namespace: 'zod-locales' }, (args) => ({
      contents: `export { default as en } from ${JSON.stringify(join(dirname(args.path), 'en.js'))};`,
      loader: 'js',
      resolveDir: dirname(args.path),
    }));
  },
};

/** CommonJS packages in an ES module bundle call require() for Node's modules: give them one. */
const REQUIRE_SHIM = "import{createRequire as __ballastRequire}from'node:module';const require=__ballastRequire(import.meta.url);";

const COMMON: BuildOptions = {
  absWorkingDir: root,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node24',
  minify: true,
  legalComments: 'none',
  external: ['@kubernetes/client-node'],
  banner: { js: REQUIRE_SHIM },
  plugins: [zodEnglishOnly],
  metafile: true,
  logLevel: 'warning',
};

async function main(): Promise<void> {
  const metaOut = process.argv.indexOf('--metafile');
  const outOpt = process.argv.indexOf('--outdir');
  const outdir = outOpt > 0 ? join(root, process.argv[outOpt + 1]!) : join(root, 'dist', 'bundle');
  const common: BuildOptions = { ...COMMON, outdir };
  rmSync(outdir, { recursive: true, force: true });
  const cmds = await build({ ...common, entryPoints: { commands: 'src/commands/index.ts' }, splitting: true, chunkNames: 'chunk-[hash]' });
  if (metaOut > 0) writeFileSync(process.argv[metaOut + 1]!, JSON.stringify(cmds.metafile!));
  // the discovery thread's entry, beside the chunk that starts it (src/discovery/thread.ts), with
  // the parts of @kubernetes/client-node it uses (src/discovery/k8s-client.ts) in it
  await build({ ...common, entryPoints: { 'discovery-worker': 'src/discovery/discovery-worker.ts' }, external: [] });
}

main().catch((err: unknown) => {
  process.stderr.write(`bundle: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
