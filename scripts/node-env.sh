#!/usr/bin/env bash
# Node.js 24 for the project's commands: puts .node/bin (where scripts/setup.sh installs Node 24
# when the machine's node is older) first on PATH, so `node`, and every `#!/usr/bin/env node`
# tool (npm, npx, vitest, tsc), run on it, and so do the child processes they start.
#   source scripts/node-env.sh           # this shell
#   bash scripts/node-env.sh CMD [ARG…]  # one command (package.json's scripts do this)
# Run as a command, it refuses to start CMD on a node older than 24 (exit 1).
_ballast_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -x "$_ballast_root/.node/bin/node" ]; then
  case ":$PATH:" in
    *":$_ballast_root/.node/bin:"*) ;;
    *) export PATH="$_ballast_root/.node/bin:$PATH" ;;
  esac
fi
unset _ballast_root
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  if [ "$major" -lt 24 ]; then
    echo "node-env: $(command -v node || echo node) is $(node --version 2>/dev/null || echo missing), older than 24: run bash scripts/setup.sh" >&2
    exit 1
  fi
  [ $# -gt 0 ] || { echo "usage: bash scripts/node-env.sh CMD [ARG…] (or source it)" >&2; exit 2; }
  exec "$@"
fi
