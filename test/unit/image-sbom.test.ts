/**
 * scripts/image-sbom.ts: the SBOM merge and the completeness check, on a small root filesystem
 * made here (a Debian record with md5sums and a conffile, a library, npm packages, nested too).
 * The real image's SBOM is checked against the real root filesystem in test/integration/image.test.ts.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  debianCopyrightLicenses,
  debianPackagesIn,
  debianPurl,
  imageSbom,
  npmPackagesIn,
  parseControl,
  sbomGaps,
  spdxOfDebianLicense,
  type SpdxDocument,
} from '../../scripts/image-sbom.js';

const md5 = (s: string): string => createHash('md5').update(s).digest('hex');

const ZLIB_STATUS = `Package: zlib1g
Priority: optional
Architecture: amd64
Multi-Arch: same
Source: zlib
Version: 1:1.2.13.dfsg-1
Maintainer: Mark Brown <broonie@debian.org>
Conffiles:
 /etc/zlib.conf ${md5('conf\n')}
Description: compression library - runtime
 zlib is a library implementing the deflate compression method found
 in gzip and PKZIP.
Homepage: http://zlib.net/
`;

const COPYRIGHT = `Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: zlib

Files: *
Copyright: 1995-2013 Jean-loup Gailly and Mark Adler
License: Zlib

Files: debian/*
Copyright: Mark Brown
License: Zlib
 This software is provided 'as-is' …
`;

/** The npm part, as `npm sbom --sbom-format spdx` shapes it. */
function npmDoc(deps: [string, string][]): SpdxDocument {
  const id = (n: string, v: string): string => `SPDXRef-Package-${n.replace(/^@/, '').replace('/', '.')}-${v}`;
  return {
    spdxVersion: 'SPDX-2.3',
    dataLicense: 'CC0-1.0',
    SPDXID: 'SPDXRef-DOCUMENT',
    name: 'ballast@0.1.0',
    documentNamespace: 'http://spdx.org/spdxdocs/ballast-0.1.0-x',
    creationInfo: { created: '2026-01-01T00:00:00.000Z', creators: ['Tool: npm/cli-11.0.0'] },
    documentDescribes: ['SPDXRef-Package-ballast-0.1.0'],
    packages: [['ballast', '0.1.0'] as [string, string], ...deps].map(([n, v]) => ({
      name: n,
      SPDXID: id(n, v),
      versionInfo: v,
      downloadLocation: 'NOASSERTION',
      filesAnalyzed: false,
      externalRefs: [{ referenceCategory: 'PACKAGE-MANAGER', referenceType: 'purl', referenceLocator: `pkg:npm/${n.replace('@', '%40')}@${v}` }],
    })),
    relationships: [
      { spdxElementId: 'SPDXRef-DOCUMENT', relatedSpdxElement: 'SPDXRef-Package-ballast-0.1.0', relationshipType: 'DESCRIBES' },
      ...deps.map(([n, v]) => ({ spdxElementId: id(n, v), relatedSpdxElement: 'SPDXRef-Package-ballast-0.1.0', relationshipType: 'DEPENDENCY_OF' })),
    ],
  };
}

describe('image SBOM', () => {
  let rootfs: string;
  const app = (): string => join(rootfs, 'usr/lib/ballast');
  const put = (rel: string, text: string): void => {
    mkdirSync(dirname(join(rootfs, rel)), { recursive: true });
    writeFileSync(join(rootfs, rel), text);
  };

  beforeAll(() => {
    rootfs = mkdtempSync(join(tmpdir(), 'ballast-sbom-unit-'));
    put('var/lib/dpkg/status.d/zlib1g', ZLIB_STATUS);
    put('var/lib/dpkg/status.d/zlib1g.md5sums', `${md5('lib\n')}  lib/x86_64-linux-gnu/libz.so.1.2.13\n${md5(COPYRIGHT)}  usr/share/doc/zlib1g/copyright\n`);
    put('lib/x86_64-linux-gnu/libz.so.1.2.13', 'lib\n');
    put('etc/zlib.conf', 'conf\n');
    put('usr/share/doc/zlib1g/copyright', COPYRIGHT);
    put('etc/passwd', 'root:x:0:0::/root:/usr/sbin/nologin\n');
    put('usr/lib/ballast/package.json', '{"name":"ballast","version":"0.1.0"}');
    put('usr/lib/ballast/node_modules/yaml/package.json', '{"name":"yaml","version":"2.8.1"}');
    put('usr/lib/ballast/node_modules/@scope/a/package.json', '{"name":"@scope/a","version":"1.0.0"}');
    put('usr/lib/ballast/node_modules/@scope/a/node_modules/yaml/package.json', '{"name":"yaml","version":"1.10.2"}');
  });
  afterAll(() => rmSync(rootfs, { recursive: true, force: true }));

  const doc = (
    deps: [string, string][] = [
      ['yaml', '2.8.1'],
      ['@scope/a', '1.0.0'],
      ['yaml', '1.10.2'],
    ],
  ): SpdxDocument =>
    imageSbom({
      name: 'ballast',
      version: '0.1.0',
      created: '2026-01-01T00:00:00Z',
      npm: npmDoc(deps),
      debian: debianPackagesIn(rootfs),
      nodeVersion: '24.22.3',
    });
  const gaps = (d: SpdxDocument): string[] => sbomGaps(d, rootfs, { app: app(), ownFiles: ['etc/passwd'], nodeVersion: '24.22.3' });

  it('parses dpkg records (continuation lines joined) and names the package with its purl', () => {
    const c = parseControl(ZLIB_STATUS);
    expect(c.get('Version')).toBe('1:1.2.13.dfsg-1');
    expect(c.get('Description')).toBe('compression library - runtime\nzlib is a library implementing the deflate compression method found\nin gzip and PKZIP.');
    expect(debianPurl({ name: 'zlib1g', version: '1:1.2.13.dfsg-1', architecture: 'amd64' })).toBe('pkg:deb/debian/zlib1g@1:1.2.13.dfsg-1?arch=amd64');
    expect(debianPackagesIn(rootfs)).toEqual([
      {
        name: 'zlib1g',
        version: '1:1.2.13.dfsg-1',
        architecture: 'amd64',
        maintainer: 'Mark Brown <broonie@debian.org>',
        homepage: 'http://zlib.net/',
        license: 'Zlib',
      },
    ]);
    expect(npmPackagesIn(app())).toEqual(['@scope/a@1.0.0', 'yaml@1.10.2', 'yaml@2.8.1']);
  });

  it('maps Debian licence names to SPDX, or says it cannot', () => {
    expect(spdxOfDebianLicense('GPL-2+')).toBe('GPL-2.0-or-later');
    expect(spdxOfDebianLicense('GPL-2')).toBe('GPL-2.0-only');
    expect(spdxOfDebianLicense('LGPL-2.1 or BSD-2-Clause')).toBe('(LGPL-2.1-only OR BSD-2-Clause)');
    expect(spdxOfDebianLicense('GPL-2 with Linux-syscall-note exception')).toBe('GPL-2.0-only WITH Linux-syscall-note');
    expect(spdxOfDebianLicense('public-domain')).toBeUndefined();
    expect(debianCopyrightLicenses(COPYRIGHT)).toEqual({ spdx: 'Zlib', names: ['Zlib'] });
    expect(debianCopyrightLicenses('not a DEP-5 file\n')).toBeUndefined();
  });

  it('one document: the image DESCRIBED, CONTAINING the Debian packages, the Node runtime and the npm root', () => {
    const d = doc();
    expect(d.documentDescribes).toEqual(['SPDXRef-Image']);
    const contains = d.relationships
      .filter((r) => r.spdxElementId === 'SPDXRef-Image' && r.relationshipType === 'CONTAINS')
      .map((r) => r.relatedSpdxElement)
      .sort();
    expect(contains).toEqual(['SPDXRef-Package-ballast-0.1.0', 'SPDXRef-Package-deb-zlib1g-1-1.2.13.dfsg-1', 'SPDXRef-Package-node-runtime-24.22.3']);
    expect(d.relationships.filter((r) => r.relationshipType === 'DESCRIBES')).toEqual([
      { spdxElementId: 'SPDXRef-DOCUMENT', relatedSpdxElement: 'SPDXRef-Image', relationshipType: 'DESCRIBES' },
    ]);
    expect(d.relationships.filter((r) => r.relationshipType === 'DEPENDENCY_OF')).toHaveLength(3);
    const zlib = d.packages.find((p) => p.name === 'zlib1g')!;
    expect(zlib).toMatchObject({
      versionInfo: '1:1.2.13.dfsg-1',
      licenseDeclared: 'Zlib',
      externalRefs: [{ referenceType: 'purl', referenceLocator: 'pkg:deb/debian/zlib1g@1:1.2.13.dfsg-1?arch=amd64' }],
    });
    expect(doc()).toEqual(d);
  });

  it('finds nothing missing in a complete SBOM, and names every kind of gap', () => {
    expect(gaps(doc())).toEqual([]);
    expect(
      gaps(
        doc([
          ['yaml', '2.8.1'],
          ['@scope/a', '1.0.0'],
        ]),
      ),
    ).toEqual(['npm package yaml@1.10.2: not in the SBOM']);
    const noDeb = doc();
    noDeb.packages = noDeb.packages.filter((p) => p.name !== 'zlib1g');
    expect(gaps(noDeb)).toEqual(['Debian package zlib1g 1:1.2.13.dfsg-1: not in the SBOM (pkg:deb/debian/zlib1g@1:1.2.13.dfsg-1?arch=amd64)']);
    put('usr/lib/x86_64-linux-gnu/libstray.so.1', 'stray\n');
    put('etc/zlib.conf', 'edited\n');
    try {
      expect(gaps(doc())).toEqual([
        "/etc/zlib.conf: content differs from its package's md5sums",
        "/usr/lib/x86_64-linux-gnu/libstray.so.1: in no Debian package's md5sums",
      ]);
    } finally {
      rmSync(join(rootfs, 'usr/lib/x86_64-linux-gnu'), { recursive: true });
      put('etc/zlib.conf', 'conf\n');
    }
    expect(sbomGaps(doc(), rootfs, { app: app(), ownFiles: ['etc/passwd'], nodeVersion: '24.22.4' })).toEqual([
      'the Node runtime: the SBOM says 24.22.3, the image has 24.22.4',
    ]);
  });
});
