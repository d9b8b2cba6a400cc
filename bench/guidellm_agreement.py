"""Do kvlab's figures agree with GuideLLM's on the same llama-server? (opt-in: `make crosscheck`)

What is measured
----------------
A real llama-server (the build kvlab's tests use) serves a tiny generated model on
127.0.0.1 with per-slot KV (``-np C --no-kv-unified``), ``-t 1`` (the server keeps to
one core, the clients have the other) and ``--no-cache-prompt`` (GuideLLM's synthetic
prompts repeat from round to round, and a cached prompt's TTFT is a tenth of a fresh
one's; kvlab's jobs send ``cache_prompt: false``). Against it, alternating on the same
server (kvlab, GuideLLM, kvlab, GuideLLM, kvlab by default):

* kvlab: a benchmark job (``--requests`` requests, ``--concurrency`` in flight, a
  ``--prompt-tokens`` synthetic prompt, ``--n-predict`` tokens, ``ignore_eos``) run by
  ``benchmarks.jobs.execution.execute_job`` — the body of the Celery task, here called
  in-process on a scratch database;
* GuideLLM 0.8.1 (``guidellm run``): the same concurrency and count, synthetic text of
  the same prompt and output token counts, against ``/v1/completions``; its
  ``benchmarks.json`` is imported with kvlab's own GuideLLM importer, so both sides are
  kvlab runs read from the same columns.

Compared, per round: TTFT median; TPOT median — GuideLLM's inter_token_latency_ms is
(last token − first token) / (output − 1) per request (guidellm's
schemas/request_stats.py), which is TPOT as vLLM and kvlab define it, and kvlab's
importer stores it so; and output tokens/s (GuideLLM's mean output_tokens_per_second;
kvlab's throughput, output tokens / wall time). Agreement:
each GuideLLM figure must lie within the range of the kvlab runs around it, widened
by ``--bound`` (default 25 %) — on this shared 2-core machine GuideLLM's own client
(worker processes, torch import) takes CPU from the server, and kvlab's repeats move
by 15 % or more; on a GPU server the client's cost vanishes.

GuideLLM needs torch (about 6 GB with its CUDA wheels), so it is installed on first
use into its own virtual environment under ~/.cache/kvlab (``--venv``), never into
kvlab's; its tokenizer for the tiny model is converted from the GGUF by transformers.

Usage (from the repository root)::

    .venv/bin/python bench/guidellm_agreement.py [--requests 30] [--rounds 2] [--bound 0.25]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common  # bench/ is on sys.path when a script runs

GUIDELLM = "guidellm==0.8.1"
DEFAULT_VENV = Path.home() / ".cache" / "kvlab" / "guidellm-0.8.1"


def ensure_guidellm(venv: Path) -> Path:
    """The guidellm executable of its own virtual environment, installed from PyPI on first use."""
    exe = venv / "bin" / "guidellm"
    if exe.exists():
        return exe
    print(f"installing {GUIDELLM} into {venv} (about 6 GB with torch; once)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    gguf = next(
        line.strip() for line in (common.ROOT / "requirements.txt").read_text().splitlines() if line.startswith("gguf")
    )
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", GUIDELLM, gguf], check=True)
    return exe


def tokenizer_for(model: Path, venv: Path, out: Path) -> Path:
    """A Hugging Face tokenizer directory converted from the GGUF (GuideLLM counts tokens with it)."""
    script = (
        "import sys; from transformers import AutoTokenizer; "
        "AutoTokenizer.from_pretrained(sys.argv[1], gguf_file=sys.argv[2]).save_pretrained(sys.argv[3])"
    )
    subprocess.run([str(venv / "bin" / "python"), "-c", script, str(model.parent), model.name, str(out)], check=True)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(binary: str, model: Path, port: int, flags: list[str], log: Path) -> subprocess.Popen[bytes]:
    args = [binary, "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "--no-webui", *flags]
    proc = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                import urllib.request

                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        return proc
        except OSError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"llama-server exited: see {log}")
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"llama-server did not become healthy: see {log}")


def kvlab_round(base_url: str, launch: str, args: argparse.Namespace, label: str) -> dict[str, Any]:
    from benchmarks.jobs.execution import execute_job
    from benchmarks.models import Job, Server

    server, _ = Server.objects.get_or_create(
        name="agreement", defaults={"base_url": base_url, "launch_command": launch}
    )
    job = Job.objects.create(
        server=server,
        base_url=base_url,
        launch_command=launch,
        label=label,
        params={
            "prompt_tokens": args.prompt_tokens,
            "n_predict": args.n_predict,
            "concurrency": args.concurrency,
            "requests": args.requests,
            "repeats": 1,
            "cache_prompt": False,
            "timeout_s": 300,
        },
    )
    state = execute_job(job.pk)
    run = job.runs.get()
    assert state == "succeeded" and run.n_ok == args.requests, f"kvlab job {job.pk}: {state}, {run.n_ok} ok"
    return {
        "source": "kvlab",
        "run": run.key,
        "ttft_ms": run.ttft_p50 * 1000 if run.ttft_p50 is not None else None,
        "tpot_ms": run.tpot_p50 * 1000 if run.tpot_p50 is not None else None,
        "output_tok_s": run.throughput_tok_s,
    }


def guidellm_round(exe: Path, base_url: str, tokenizer: Path, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from benchmarks.history.importer import import_path
    from benchmarks.records.formats import Declared

    out.mkdir(parents=True, exist_ok=True)
    report = out / "benchmarks.json"
    cmd = [
        str(exe),
        "run",
        "--backend",
        f"kind=openai_http,target={base_url},request_format=/v1/completions",
        "--tokenizer",
        f"kind=huggingface_auto,model={tokenizer}",
        "--profile",
        f"kind=concurrent,streams={args.concurrency}",
        "--constraint",
        f"kind=max_requests,count={args.requests}",
        "--data",
        f"kind=synthetic_text,prompt_tokens={args.prompt_tokens},output_tokens={args.n_predict}",
        "--output",
        f"kind=json,path={report}",
        "--disable-console-interactive",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0 or not report.exists():
        raise SystemExit(f"guidellm failed (rc {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    imported = import_path(report, origin="command", declared=Declared(gpu="cpu (tiny model)"))
    assert imported.status == "imported", f"kvlab could not import guidellm's report: {imported.status}"
    from benchmarks.models import Run
    from benchmarks.records.summaries import median_of

    run = Run.objects.filter(first_import=imported).get()
    summary = run.summary or {}
    return {
        "source": "guidellm",
        "run": run.key,
        "ttft_ms": median_of(summary.get("ttft_ms") or {}),
        "tpot_ms": median_of(summary.get("tpot_ms") or {}),
        "output_tok_s": summary.get("output_tok_s"),
    }


def agreement(rounds: list[dict[str, Any]], bound: float) -> list[dict[str, Any]]:
    """Each GuideLLM figure against the kvlab runs before and after it, widened by bound."""
    verdicts = []
    for i, row in enumerate(rounds):
        if row["source"] != "guidellm":
            continue
        around = [r for r in (rounds[i - 1], rounds[i + 1]) if r["source"] == "kvlab"]
        for metric in ("ttft_ms", "tpot_ms", "output_tok_s"):
            values = [r[metric] for r in around if r[metric] is not None]
            theirs = row[metric]
            if theirs is None or not values:
                verdicts.append({"round": i, "metric": metric, "verdict": "not measured by both"})
                continue
            low, high = min(values) * (1 - bound), max(values) * (1 + bound)
            verdicts.append(
                {
                    "round": i,
                    "metric": metric,
                    "guidellm": round(theirs, 3),
                    "kvlab": [round(v, 3) for v in values],
                    "ratio_to_kvlab_mean": round(theirs / (sum(values) / len(values)), 3),
                    "verdict": "agrees" if low <= theirs <= high else "differs",
                }
            )
    return verdicts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--concurrency", type=int, default=3)
    parser.add_argument("--prompt-tokens", type=int, default=200)
    parser.add_argument("--n-predict", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2, help="GuideLLM runs, each between two kvlab runs")
    parser.add_argument("--bound", type=float, default=0.25)
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    args = common.parse_args(parser, argv, smoke={"requests": 6, "rounds": 1, "n_predict": 32})
    binary = (
        os.environ.get("KVLAB_LLAMA_SERVER")
        or subprocess.run(
            [str(common.ROOT / "scripts" / "build-llama-server.sh")], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    exe = ensure_guidellm(args.venv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kvlab-guidellm-") as tmp:
        work = Path(tmp)
        common.setup_migrated_django(work)
        from sizing.tiny_gguf import write_llama

        model = work / "model" / "tiny-llama.gguf"
        model.parent.mkdir()
        write_llama(model)
        tokenizer = tokenizer_for(model, args.venv, work / "tokenizer")
        port = free_port()
        # --no-cache-prompt: GuideLLM's synthetic prompts repeat from round to round (its seed), and a
        # cached prompt's TTFT is a tenth of a fresh one's; kvlab's jobs send cache_prompt false.
        flags = ["-np", str(args.concurrency), "--no-kv-unified", "-c", str(args.concurrency * 1024), "-t", "1"]
        flags.append("--no-cache-prompt")
        launch = " ".join(["llama-server", "-m", str(model), *flags])
        server = start_server(binary, model, port, flags, work / "server.log")
        base_url = f"http://127.0.0.1:{port}"
        rounds: list[dict[str, Any]] = []
        try:
            rounds.append(kvlab_round(base_url, launch, args, "kvlab-0"))
            for i in range(args.rounds):
                rounds.append(guidellm_round(exe, base_url, tokenizer, args, work / f"guidellm-{i}"))
                rounds.append(kvlab_round(base_url, launch, args, f"kvlab-{i + 1}"))
        finally:
            server.terminate()
            server.wait(timeout=30)
        shutil.copy(work / "server.log", args.out / "guidellm_agreement_server.log")
    verdicts = agreement(rounds, args.bound)
    print(f"\n{'round':<6} {'source':<9} {'TTFT p50 ms':>12} {'TPOT p50 ms':>12} {'output tok/s':>13}")
    for i, r in enumerate(rounds):
        cells = [f"{r[m]:.2f}" if r[m] is not None else "—" for m in ("ttft_ms", "tpot_ms", "output_tok_s")]
        print(f"{i:<6} {r['source']:<9} {cells[0]:>12} {cells[1]:>12} {cells[2]:>13}")
    print()
    for v in verdicts:
        figures = {k: v[k] for k in v if k not in {"round", "metric", "verdict"}}
        print(f"round {v['round']} {v['metric']:<13} {v['verdict']}  {json.dumps(figures)}")
    results = {"rounds": rounds, "verdicts": verdicts, "bound": args.bound, **vars(args), **common.machine()}
    results = {k: (str(v) if isinstance(v, Path) else v) for k, v in results.items()}
    common.write_results(args.out, "guidellm_agreement", results)
    return 0 if all(v["verdict"] == "agrees" for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
