/**
 * The release artefacts for the tests that need them (dist-pkg/, see /work/coord/CONTRACTS.md).
 *
 * STAND-IN owned by `pkg`, written by `image` until pkg's version lands: it builds the package
 * stage the way CONTRACTS.md lays it out when there is none, then runs scripts/image.sh when the
 * image or its SBOM is missing or older than the stage. Callers hold the lab lock (heavy build).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../../lab/lab.js';

/** Paths of the artefacts in dist-pkg/. */
export interface Artefacts {
  version: string;
  /** dist-pkg/stage/ (the package's root filesystem) */
  stage: string;
  /** dist-pkg/ballast_<version>.oci.tar */
  image: string;
  /** dist-pkg/ballast_<version>.spdx.json */
  sbom: string;
}

const STAND_IN_STAGE = String.raw`
set -euo pipefail
S=dist-pkg/stage L=dist-pkg/stage/usr/lib/ballast
rm -rf "$S"; mkdir -p "$L/bin" "$L/dist" "$L/build/Release" "$S/usr/bin" "$S/etc/ballast"
cp .node/bin/node "$L/bin/"; cp -r dist/src "$L/dist/"
cp build/Release/ballast.node build/Release/ballast_sock_lb.bpf.o "$L/build/Release/"
cp package.json package-lock.json "$L/"; cp examples/ballast.yaml "$S/etc/ballast/"
printf '#!/bin/sh\nexec /usr/lib/ballast/bin/node /usr/lib/ballast/dist/src/cli.js "$@"\n' > "$S/usr/bin/ballast"
(cd "$L" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund >/dev/null) && rm "$L/package-lock.json"
node -p 'require("./package.json").version' > dist-pkg/VERSION
`;

const mtime = (p: string): number => statSync(p).mtimeMs;

/**
 * Builds what is missing or stale and returns the paths.
 * @throws when a build step fails (its output is in the error).
 */
export async function ensureArtefacts(): Promise<Artefacts> {
  const root = packageRoot();
  const out = join(root, 'dist-pkg');
  const stage = join(out, 'stage');
  const env = { ...process.env, PATH: `${join(root, '.node', 'bin')}:${process.env.PATH ?? ''}` };
  if (!existsSync(join(stage, 'usr/lib/ballast/bin/node'))) execFileSync('bash', ['-c', STAND_IN_STAGE], { cwd: root, env, stdio: 'inherit' });
  const version = readFileSync(join(out, 'VERSION'), 'utf8').trim();
  const image = join(out, `ballast_${version}.oci.tar`);
  const sbom = join(out, `ballast_${version}.spdx.json`);
  const stageTime = mtime(join(stage, 'usr/lib/ballast/dist/src/cli.js'));
  if (!existsSync(image) || !existsSync(sbom) || mtime(image) < stageTime || mtime(sbom) < stageTime) {
    execFileSync('bash', [join(root, 'scripts/image.sh')], { cwd: root, env, stdio: 'inherit' });
  }
  return { version, stage, image, sbom };
}
