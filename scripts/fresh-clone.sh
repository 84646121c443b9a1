#!/usr/bin/env bash
# What a newcomer does, checked: a fresh clone of this checkout's commit in
# a new folder (no node_modules, no build, an empty model cache), then one
# of the README's commands, which must exit 0 and print a line that only
# the real model prints (a fallback that exits 0 or a silent success does
# not pass).
#
#   bash scripts/fresh-clone.sh PATTERN COMMAND...
#   bash scripts/fresh-clone.sh '^webnn-node demo: all-MiniLM-L6-v2 ' npm run demo
#
# PATTERN is an extended regular expression matched against the command's
# stdout. The clone builds the addon from scratch in its own ./target
# (CARGO_TARGET_DIR unset, as a newcomer has it) and fetches into an empty
# cache (XDG_CACHE_HOME pointed at an empty folder; the variables that
# take precedence over it, and WEBNN_DEMO_OFFLINE, unset). The npm and
# cargo caches are the machine's own. Only committed work is checked: the
# clone is of HEAD. Everything is removed afterwards; the command's time
# is printed.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: bash scripts/fresh-clone.sh PATTERN COMMAND..." >&2
  exit 2
fi
pattern=$1
shift
src=$(cd "$(dirname "$0")/.." && pwd)
commit=$(git -C "$src" rev-parse HEAD)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# (No hint about a default branch name where HEAD is detached.)
git -c advice.defaultBranchName=false clone --quiet --no-checkout "$src" "$work/webnn-node"
# A detached HEAD (as CI checks out) is on no branch the clone copies.
git -C "$work/webnn-node" cat-file -e "$commit^{commit}" 2>/dev/null ||
  git -C "$work/webnn-node" fetch --quiet "$src" HEAD
git -C "$work/webnn-node" checkout --quiet --detach "$commit"
mkdir "$work/cache"

echo "fresh-clone: $* in a fresh clone of $(git -C "$src" rev-parse --short HEAD)"
start=$SECONDS
set +e
(cd "$work/webnn-node" &&
  exec env -u CARGO_TARGET_DIR -u WEBNN_NODE_CACHE -u WEBNN_MINILM_DIR -u WEBNN_DEMO_OFFLINE -u WEBNN_LLM_MODEL \
    XDG_CACHE_HOME="$work/cache" "$@" </dev/null) | tee "$work/stdout"
status=${PIPESTATUS[0]}
set -e
took="$(((SECONDS - start) / 60)) min $(((SECONDS - start) % 60)) s"

if [ "$status" -ne 0 ]; then
  echo "fresh-clone: FAILED: $* exited $status after $took"
  exit 1
fi
if ! grep -Eq -- "$pattern" "$work/stdout"; then
  echo "fresh-clone: FAILED: $* exited 0 after $took, but printed no line matching /$pattern/ (not the real model)"
  exit 1
fi
echo "fresh-clone: $* ran the real model in a fresh clone in $took"
