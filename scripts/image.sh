#!/usr/bin/env bash
# The OCI image, built from nothing (no base image, no registry), the way distroless images are made:
#
#   dist-pkg/stage/ (the package's files, scripts/package.sh), minus DEBIAN/, lib/systemd/ and
#     usr/bin/ballast (a #!/bin/sh wrapper: the image has no shell)
#     + the shared libraries they load (ldd)
#     + the programs ballast execs: nft, conntrack, conntrackd (connection sync), and their libraries
#   each library and program traced to its Debian package (dpkg -S), and each of those packages
#   copied whole from the machine's installed files (dpkg -L) except what is not needed at run
#   time: docs (the copyright file is kept), man/info pages, lintian overrides, locales, systemd
#   units, iconv modules; the package's dpkg record goes to /var/lib/dpkg/status.d/ (as distroless
#   does, so image scanners see the packages)
#   -> buildah from scratch, config (labels, entrypoint node cli.js, cmd run --config, user root, env MALLOC_ARENA_MAX=1),
#      commit to an oci-archive; buildah's storage is a temp dir, removed at the end: nothing is
#      left in the machine's containers-storage
#   -> dist-pkg/ballast_<version>.oci.tar and dist-pkg/ballast_<version>.spdx.json (SPDX 2.3:
#      the Debian packages, npm's own `npm sbom` of the production node_modules, the Node runtime)
#
# Usage (root: buildah mounts the container's root filesystem): bash scripts/image.sh
# Called by `npm run package` after scripts/package.sh; needs dist-pkg/stage/ (and dist-pkg/VERSION).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=node-env.sh
source "$root/scripts/node-env.sh"
out=$root/dist-pkg
stage=$out/stage
log() { echo "[image] ${SECONDS}s $*" >&2; }

[ "$(id -u)" = 0 ] || { log "needs root (buildah mounts the image's root filesystem)"; exit 1; }
[ -x "$stage/usr/lib/ballast/bin/node" ] || { log "no package stage at $stage: run scripts/package.sh first"; exit 1; }
for tool in buildah dpkg-query ldd ldconfig; do
  command -v "$tool" >/dev/null || { log "$tool is missing (apt-get install buildah dpkg libc-bin)"; exit 1; }
done
version=$(cat "$out/VERSION" 2>/dev/null || node -p 'require(process.argv[1]).version' "$stage/usr/lib/ballast/package.json")
revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
# the commit's time (reproducible), else now
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)}
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
archive=$out/ballast_${version}.oci.tar
sbom=$out/ballast_${version}.spdx.json
ref=localhost/ballast:$version

work=$(mktemp -d /tmp/ballast-image.XXXXXX)
bh=(buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs)
ctr=
# containers/image keeps a blob-info cache in /var/lib/containers/cache for root whatever the
# storage root: made by this build, it goes with it
[ -e /var/lib/containers ] && had_containers_dir=1 || had_containers_dir=
cleanup() {
  if [ -n "$ctr" ]; then "${bh[@]}" rm "$ctr" >/dev/null 2>&1 || true; fi
  # vfs layers are plain directories; the storage is this build's alone
  rm -rf "$work"
  [ -n "$had_containers_dir" ] || rm -rf /var/lib/containers
}
trap cleanup EXIT

# 1. an empty image, mounted (vfs: a plain directory in this build's storage), and the package's
# files in it (hard links when the stage is on the same file system: nothing changes them in place)
ctr=$("${bh[@]}" from --quiet scratch)
rootfs=$("${bh[@]}" mount "$ctr")
cp -al "$stage/." "$rootfs/" 2>/dev/null || cp -a "$stage/." "$rootfs/"
rm -rf "$rootfs/usr/bin/ballast" "$rootfs/lib/systemd" "$rootfs/DEBIAN"
# as for the Debian packages below: of the package's docs only its copyright file, no lintian overrides
find "$rootfs/usr/share/doc/ballast" -mindepth 1 ! -name copyright -delete 2>/dev/null || true
rm -rf "$rootfs/usr/share/lintian"
rmdir --ignore-fail-on-non-empty "$rootfs/usr/bin" "$rootfs/lib" 2>/dev/null || true

log "the package's files: $(du -sh "$rootfs" | cut -f1)"

# 2. the programs ballast execs, and every x86-64 ELF object that can be loaded (of a package's
# prebuilds/<platform>/ only linux-x64: android-x64 ones are x86-64 too but link against bionic)
programs=(/usr/sbin/nft /usr/sbin/conntrack /usr/sbin/conntrackd)
# (ELF header, elf(5): magic, ELFCLASS64, e_type EXEC or DYN, e_machine EM_X86_64 = 62)
mapfile -t elves < <(find "$rootfs" -type f -size +1k -print0 | node -e '
  const fs = require("node:fs");
  const b = Buffer.alloc(20);
  for (const f of fs.readFileSync(0, "utf8").split("\0")) {
    if (!f || (/\/prebuilds\//.test(f) && !/\/prebuilds\/linux-x64[^/]*\//.test(f))) continue;
    const fd = fs.openSync(f, "r");
    const n = fs.readSync(fd, b, 0, 20, 0);
    fs.closeSync(fd);
    if (n === 20 && b.readUInt32BE(0) === 0x7f454c46 && b[4] === 2 && [2, 3].includes(b.readUInt16LE(16)) && b.readUInt16LE(18) === 62) console.log(f);
  }')
libs=()
for f in "${elves[@]}" "${programs[@]}"; do
  if ! listing=$(ldd "$f" 2>&1); then
    # a static executable or a library without dependencies loads nothing more
    if grep -q 'not a dynamic executable' <<<"$listing"; then continue; fi
    log "ldd $f failed: $listing"; exit 1
  fi
  if grep -q 'not found' <<<"$listing"; then
    log "$f needs a library this machine does not have:"; grep 'not found' <<<"$listing" >&2; exit 1
  fi
  while read -r lib; do libs+=("$lib"); done < <(awk '/=> \//{print $3} /^\s*\/[^ ]+ \(0x/{print $1}' <<<"$listing")
done

# 3. their Debian packages, in one dpkg-query (dpkg -S knows a file by the path its package ships
# it under; on a merged-/usr machine the loader may report the other spelling)
mapfile -t needed < <(printf '%s\n' "${libs[@]}" "${programs[@]}" | sort -u)
spellings() {
  case $1 in /usr/*) echo "$1" "${1#/usr}" ;; *) echo "$1" "/usr$1" ;; esac
  readlink -f "$1"
}
declare -A owner_of=()
while IFS= read -r line; do
  # "pkg[:arch][, pkg2[:arch]…]: /path" (and "diversion by …" lines, not owners)
  case $line in diversion*) continue ;; esac
  pkgs_of=${line%: /*}
  owner_of[${line##*: }]=${pkgs_of%%,*}
done < <(dpkg-query -S $(for f in "${needed[@]}"; do spellings "$f"; done | tr ' ' '\n' | sort -u) 2>/dev/null || true)
declare -A packages=()
for f in "${needed[@]}"; do
  o=
  for q in $(spellings "$f"); do [ -z "${owner_of[$q]:-}" ] || { o=${owner_of[$q]}; break; }; done
  [ -n "$o" ] || { log "no Debian package owns $f"; exit 1; }
  packages[$o]=1
done
pkgs=$(printf '%s\n' "${!packages[@]}" | sort -u)
log "Debian packages: $(tr '\n' ' ' <<<"$pkgs")"

# 4. their runtime files, and their dpkg records
keep() {
  # what a running ballast never reads
  grep -Ev '^/usr/share/(man|info|lintian|bug|locale|gdb|gcc)/|^/lib/systemd/|^/usr/lib/systemd/|^/usr/lib/x86_64-linux-gnu/gconv/' \
    | grep -Ev '^/usr/share/doc/' || true
}
mkdir -p "$rootfs/var/lib/dpkg/status.d"
filelist=$work/files
: >"$filelist"
for p in $pkgs; do
  name=${p%%:*}
  while IFS= read -r f; do
    # directories are made as needed (a listed /lib is a symlink on a merged-/usr machine)
    if [ ! -d "$f" ] && { [ -L "$f" ] || [ -e "$f" ]; }; then echo "${f#/}" >>"$filelist"; fi
  done < <({ dpkg-query -L "$p" | keep; dpkg-query -L "$p" | grep -E "^/usr/share/doc/$name/copyright$" || true; })
  dpkg-query -s "$p" | grep -v '^Status:' >"$rootfs/var/lib/dpkg/status.d/$name"
  md5=$(dpkg-query --control-path "$p" md5sums 2>/dev/null || true)
  if [ -n "$md5" ] && [ -f "$md5" ]; then cp "$md5" "$rootfs/var/lib/dpkg/status.d/$name.md5sums"; fi
done
tar -C / -cf - --no-recursion -T "$filelist" | tar -C "$rootfs" -xf -
# the distribution, for scanners: base-files' os-release (and copyright) only
mkdir -p "$rootfs/usr/lib" "$rootfs/etc" "$rootfs/usr/share/doc/base-files"
cp -a /usr/lib/os-release "$rootfs/usr/lib/os-release"
ln -sf ../usr/lib/os-release "$rootfs/etc/os-release"
cp /usr/share/doc/base-files/copyright "$rootfs/usr/share/doc/base-files/"
dpkg-query -s base-files | grep -v '^Status:' >"$rootfs/var/lib/dpkg/status.d/base-files"
grep -E ' (usr/lib/os-release|usr/share/doc/base-files/copyright)$' "$(dpkg-query --control-path base-files md5sums)" \
  >"$rootfs/var/lib/dpkg/status.d/base-files.md5sums"

# 5. what the runtime needs besides files of packages: root by name (podman resolves --user
# against /etc/passwd), the loader cache, the directories the static pod mounts over
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\n' >"$rootfs/etc/group"
printf 'include /etc/ld.so.conf.d/*.conf\n' >"$rootfs/etc/ld.so.conf"
ldconfig -X -r "$rootfs"
mkdir -p "$rootfs/tmp" "$rootfs/root" "$rootfs/run/ballast" "$rootfs/var/lib/ballast" "$rootfs/sys/fs/bpf" "$rootfs/etc/ballast"
chmod 1777 "$rootfs/tmp"
chmod 0700 "$rootfs/root"
for sh in bin/sh usr/bin/sh bin/bash usr/bin/bash bin/dash usr/bin/dash; do
  [ ! -e "$rootfs/$sh" ] || { log "a shell got into the image: /$sh"; exit 1; }
done

log "with the packages' files: $(du -sh "$rootfs" | cut -f1)"

# 6. the SBOM (before the image: the build fails on a package it cannot describe)
node "$root/scripts/image-sbom.ts" --rootfs "$rootfs" --app "$rootfs/usr/lib/ballast" \
  --name ballast --version "$version" --created "$created" --out "$sbom"

log "SBOM written"

# 7. the image
layer_size=$(du -sb "$rootfs" | cut -f1)
"${bh[@]}" umount "$ctr" >/dev/null
description=$(node -p 'require(process.argv[1]).description' "$root/package.json")
license=$(node -p 'require(process.argv[1]).license' "$root/package.json")
# where the source is: the checkout's origin when it is a URL (a clone of a local path is not one),
# else package.json's repository, else unknown
source_url=$(git -C "$root" remote get-url origin 2>/dev/null || true)
case "$source_url" in
  https://* | http://* | ssh://* | git@*) ;;
  *) source_url=$(node -p 'const r = require(process.argv[1]).repository; (typeof r === "string" ? r : r?.url) ?? "unknown"' "$root/package.json") ;;
esac
"${bh[@]}" config \
  --os linux --arch amd64 \
  --user root \
  --workingdir / \
  --env PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  --env MALLOC_ARENA_MAX=1 \
  --entrypoint '["/usr/lib/ballast/bin/node","/usr/lib/ballast/dist/src/cli.js"]' \
  --cmd '["run","--config","/etc/ballast/ballast.yaml"]' \
  --stop-signal SIGTERM \
  --label org.opencontainers.image.title=ballast \
  --label "org.opencontainers.image.description=$description" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$revision" \
  --label "org.opencontainers.image.created=$created" \
  --label "org.opencontainers.image.source=$source_url" \
  --label "org.opencontainers.image.licenses=$license" \
  --label org.opencontainers.image.vendor=ballast \
  --created-by "scripts/image.sh (from scratch: the package's files and $(($(wc -w <<<"$pkgs") + 1)) Debian packages)" \
  "$ctr"
log "committing"
rm -f "$archive"
"${bh[@]}" commit --quiet --rm --format oci --timestamp "$epoch" \
  "$ctr" "oci-archive:$archive:$ref" >/dev/null
ctr=

log "$archive ($(du -b "$archive" | cut -f1) bytes; root filesystem $layer_size bytes), $ref inside"
log "$sbom"
