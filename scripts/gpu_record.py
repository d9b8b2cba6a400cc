#!/usr/bin/env python3
"""Record what llama.cpp's own --fit decides on this machine's GPU, for kvlab's fit replica.

Run on a machine with an NVIDIA GPU and a CUDA build of llama-fit-params and llama-server
(scripts/build-llama-server.sh --cuda). Writes one directory: for each case the command, its
stdout (the fitted arguments) and its -v log (every TRACE line of common_fit_params); the GPU as
nvidia-smi reports it; and llama-server runs with nvidia-smi's memory before and after the load
and the decode speed of /completion. The models are real-size sparse GGUFs (sizing.sparse_gguf):
no weight data on disk, all-zero weights when loaded.

    python3 scripts/gpu_record.py OUT_DIR --fit-params PATH --server PATH
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sizing.sparse_gguf import write_sparse  # noqa: E402
from sizing.tests.fit_cases import FIT_CASES, MODELS, SERVER_CASES  # noqa: E402

FREE_RE = re.compile(r"vs\. (\d+) MiB of free device memory|vs\. (\d+) MiB of total host memory")


def smi(query: str) -> str:
    try:
        return subprocess.run(
            ["nvidia-smi", f"--query-{query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable: {exc}"


def run_fit(binary: str, model: Path, flags: str, out: Path, name: str) -> dict[str, object]:
    cmd = [binary, "-m", str(model), "-v", *flags.split()]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    (out / f"fit-{name}.log").write_text(proc.stderr)
    free = FREE_RE.search(proc.stderr)
    return {
        "name": name,
        "command": cmd[1:],
        "returncode": proc.returncode,
        "stdout": proc.stdout.strip(),
        "free_mib": int(free[1] or free[2]) if free else None,
        "seconds": round(time.monotonic() - t0, 2),
    }


def run_server(binary: str, model: Path, flags: str, out: Path, name: str, port: int) -> dict[str, object]:
    before = smi("gpu=memory.used,memory.total")
    log = (out / f"server-{name}.log").open("w")
    cmd = [binary, "-m", str(model), "--port", str(port), "--host", "127.0.0.1", *flags.split()]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    result: dict[str, object] = {"name": name, "command": cmd[1:], "before": before}
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        result["loaded"] = proc.poll() is None
        result["after_load"] = smi("gpu=memory.used,memory.total")
        result["apps"] = smi("compute-apps=pid,used_memory")
        if proc.poll() is None:
            for n_predict in (4, 48):  # the first warms up
                body = json.dumps({"prompt": "hello world " * 200, "n_predict": n_predict, "ignore_eos": True})
                req = urllib.request.Request(
                    f"http://127.0.0.1:{port}/completion", body.encode(), {"Content-Type": "application/json"}
                )
                with urllib.request.urlopen(req, timeout=120) as r:
                    timings = json.load(r).get("timings", {})
            result["timings"] = timings
            result["after_decode"] = smi("gpu=memory.used,memory.total")
            result["apps_after_decode"] = smi("compute-apps=pid,used_memory")
    except Exception as exc:  # noqa: BLE001 - a recording keeps what it has
        result["error"] = repr(exc)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--fit-params", required=True)
    parser.add_argument("--server")
    parser.add_argument("--models", type=Path, default=Path("/tmp/kvlab-gpu-models"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    args.models.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, (metadata, weight_type) in MODELS.items():
        paths[name] = write_sparse(args.models / f"{name}.gguf", metadata, weight_type=weight_type)
    report: dict[str, object] = {
        "gpu": smi("gpu=name,memory.total,memory.used,memory.free,driver_version"),
        "models": {name: {"metadata": m, "weight_type": t} for name, (m, t) in MODELS.items()},
        "fit": [],
        "server": [],
    }
    fit_runs: list[dict[str, object]] = []
    free_by_model: dict[str, int] = {}
    for name, model, flags, budget in FIT_CASES:
        if budget is not None:
            free = free_by_model.get(model)
            if free is None:
                continue
            flags = f"{flags} -fitt {max(0, free - budget)}"
        run = run_fit(args.fit_params, paths[model], flags, args.out, name)
        run["budget_mib"] = budget
        fit_runs.append(run)
        if budget is None and isinstance(run["free_mib"], int):
            free_by_model[model] = run["free_mib"]
            free_by_model.setdefault("dense-q8", run["free_mib"])
        print(json.dumps(run), flush=True)
    report["fit"] = fit_runs
    (args.out / "report.json").write_text(json.dumps(report, indent=1))
    if args.server:
        servers = []
        for i, (name, model, flags) in enumerate(SERVER_CASES):
            run = run_server(args.server, paths[model], flags, args.out, name, 18600 + i)
            servers.append(run)
            print(json.dumps(run), flush=True)
            report["server"] = servers
            (args.out / "report.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
