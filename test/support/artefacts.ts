/**
 * The release artefacts for the tests that install or run them (package.test.ts, image.test.ts):
 * `ensureArtefacts()` builds them with scripts/package.sh (which runs scripts/image.sh when it
 * exists) unless dist-pkg/ already holds a build of the same inputs. A stamp (dist-pkg/.inputs,
 * a SHA-256 over the inputs' paths and contents) says which; the build runs under a file lock
 * (/tmp/ballast-package.lock), so two test files never build at once and the second one reuses
 * the first one's build. Call it from `beforeAll` of a test that already holds the lab lock.
 */
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { packageRoot } from '../../lab/lab.js';

/** Where the artefacts are (absolute paths; `image` and `sbom` exist only when image.sh does). */
export interface Artefacts {
  /** package.json's version, e.g. "0.1.0" */
  version: string;
  /** dist-pkg/ballast_<version>_amd64.deb */
  deb: string;
  /** dist-pkg/stage: the package's root file system */
  stage: string;
  /** dist-pkg/ballast_<version>.oci.tar (scripts/image.sh) */
  image: string;
  /** dist-pkg/ballast_<version>.spdx.json (scripts/image.sh) */
  sbom: string;
  /** whether this call built them (false: a current build was reused) */
  built: boolean;
  /** the build's wall time, ms (0 when reused) */
  buildMs: number;
}

/** The files and directories whose contents make the artefacts, relative to the package root. */
const INPUTS = [
  'dist/src',
  'dist/bundle',
  'build/Release/ballast.node',
  'build/Release/ballast_sock_lb.bpf.o',
  'package.json',
  'package-lock.json',
  'examples/ballast.yaml',
  'scripts/package.sh',
  'scripts/package-copyright.ts',
  'packaging/changelog',
  // /usr/share/doc/ballast: the README and the docs the agent names
  'README.md',
  'docs',
  'scripts/node-runtime.sh',
  'scripts/image.sh',
  'scripts/image-sbom.ts',
];

/** SHA-256 (hex) over every input file's path and contents; a missing input counts as such. */
export function inputsDigest(root = packageRoot()): string {
  const h = createHash('sha256');
  const add = (abs: string): void => {
    const st = statSync(abs, { throwIfNoEntry: false });
    const rel = relative(root, abs);
    if (st === undefined) h.update(`missing ${rel}\n`);
    else if (st.isDirectory()) for (const n of readdirSync(abs).sort()) add(join(abs, n));
    else h.update(`file ${rel} ${st.size}\n`).update(readFileSync(abs));
  };
  for (const p of INPUTS) add(join(root, p));
  return h.digest('hex');
}

/**
 * Builds the artefacts unless a build of the current inputs is there (see the file comment).
 * Needs what scripts/package.sh needs (dist/ and build/Release from scripts/setup.sh, dpkg-dev).
 * @param opts.timeoutMs the build's limit (default 180 000 ms)
 * @throws Error with the script's output when the build fails or times out.
 */
export function ensureArtefacts(opts: { timeoutMs?: number } = {}): Artefacts {
  const root = packageRoot();
  const version = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string }).version;
  const out = join(root, 'dist-pkg');
  const deb = join(out, `ballast_${version}_amd64.deb`);
  const digest = inputsDigest(root);
  const stamp = join(out, '.inputs');
  const current = (): boolean => existsSync(deb) && existsSync(stamp) && readFileSync(stamp, 'utf8').trim() === digest;
  let built = false;
  let buildMs = 0;
  if (!current()) {
    const t0 = performance.now();
    // under the lock: check again (another test file may have built it meanwhile), build, stamp
    const script =
      '[ -f "$2" ] && [ -f dist-pkg/.inputs ] && [ "$(cat dist-pkg/.inputs)" = "$1" ] && exit 0; bash scripts/package.sh && printf "%s\\n" "$1" > dist-pkg/.inputs && echo built';
    try {
      const said = execFileSync('flock', ['/tmp/ballast-package.lock', 'sh', '-c', script, 'sh', digest, deb], {
        cwd: root,
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
        timeout: opts.timeoutMs ?? 180_000,
      });
      built = said.includes('built');
    } catch (err) {
      const e = err as { stdout?: string; stderr?: string; message: string };
      throw new Error(`scripts/package.sh failed: ${e.message}\n${e.stdout ?? ''}${e.stderr ?? ''}`, { cause: err });
    }
    buildMs = built ? performance.now() - t0 : 0;
    if (!current()) throw new Error(`scripts/package.sh ran but ${deb} or its stamp is missing`);
  }
  return {
    version,
    deb,
    stage: join(out, 'stage'),
    image: join(out, `ballast_${version}.oci.tar`),
    sbom: join(out, `ballast_${version}.spdx.json`),
    built,
    buildMs,
  };
}

/**
 * A second package of this tree labelled `version` (an upgrade test installs one over the other):
 * scripts/package.sh with BALLAST_PKG_VERSION=version and BALLAST_PKG_OUT=dist-pkg-<version>,
 * under the same lock as ensureArtefacts, rebuilt each call (about 5 s; no OCI image). Its
 * `ballast --version` says `version` too (the staged package.json carries it).
 * @param version a Debian version, e.g. "0.1.0+upgrade1" (sorts after "0.1.0")
 * @returns the absolute path of dist-pkg-<version>/ballast_<version>_amd64.deb
 * @throws Error with the script's output when the build fails.
 */
export function buildPackageVersion(version: string, opts: { timeoutMs?: number } = {}): string {
  if (!/^[0-9][A-Za-z0-9.+~-]*$/.test(version)) throw new TypeError(`buildPackageVersion: not a Debian version: ${JSON.stringify(version)}`);
  const root = packageRoot();
  const outName = `dist-pkg-${version.replace(/[^A-Za-z0-9._-]/g, '_')}`;
  try {
    execFileSync('flock', ['/tmp/ballast-package.lock', 'bash', 'scripts/package.sh'], {
      cwd: root,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: opts.timeoutMs ?? 180_000,
      env: { ...process.env, BALLAST_PKG_VERSION: version, BALLAST_PKG_OUT: outName },
    });
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string; message: string };
    throw new Error(`scripts/package.sh (BALLAST_PKG_VERSION=${version}) failed: ${e.message}\n${e.stdout ?? ''}${e.stderr ?? ''}`, { cause: err });
  }
  const deb = join(root, outName, `ballast_${version}_amd64.deb`);
  if (!existsSync(deb)) throw new Error(`scripts/package.sh ran but ${deb} is missing`);
  return deb;
}
