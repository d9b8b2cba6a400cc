#!/usr/bin/env bash
# What a failure on another machine depends on, printed first: the CPU's model and flags, cores and
# memory, and llama.cpp's own report of the CPU features it uses (its system_info line, which decides
# the AMX / CPU_REPACK buffer types the sizing oracle tests predict). Builds llama-server if needed.
set -uo pipefail
cd "$(dirname "$0")/.."
echo "kvlab machine facts:"
grep -m1 -E '^(model name|Model|cpu model)' /proc/cpuinfo 2>/dev/null | sed 's/^/  /' || echo "  CPU model: unknown"
grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null | sed 's/^/  /' || echo "  CPU flags: unknown"
echo "  cores: $(nproc) usable of $(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?')"
grep -E '^(MemTotal|MemAvailable):' /proc/meminfo 2>/dev/null | sed 's/^/  /'
make --no-print-directory .venv/.installed >/dev/null
if server="$(scripts/build-llama-server.sh)"; then
  info="$(timeout 60 "$server" -lv 4 -m /nonexistent/kvlab-cpu-probe.gguf --port 0 2>&1 | grep -o 'system_info: .*' | head -n 1)"
  echo "  llama.cpp ${info:-system_info: not printed}"
else
  echo "  llama.cpp system_info: llama-server did not build"
fi
exit 0
