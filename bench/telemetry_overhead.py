"""Does sampling a llama-server's /slots and /metrics during a job slow the benchmark down?

What is measured
----------------
One real llama-server (``--server``, else $KVLAB_LLAMA_SERVER, else what
scripts/build-llama-server.sh built) on the tiny generated llama model, started once
with ``-np C --no-kv-unified -c C x (prompt + n_predict + 64) -t 1 --metrics`` (one
thread: the second core is left to this client). A prompt of exactly
``--prompt-tokens`` token ids from the server's own tokenizer.

One measurement = one wave of ``--requests`` streamed /completion requests
(``ignore_eos``, ``cache_prompt: false``, ``--n-predict`` tokens each) at
``--concurrency``, sent by kvlab's own client (``stream_completion``, as a job sends
them), either alone ("off") or with kvlab's telemetry sampler beside it in the same
event loop ("on": ``benchmarks.jobs.telemetry.sampler.sample`` every ``--period`` s,
/slots and /metrics, NVML where there is a GPU; exactly as a job runs it). The
measurements alternate off, on, off, on ... ``--rounds`` times each, after one
unrecorded warm-up wave of each.

Per measurement: decode tok/s = the mean over the wave's requests of the server's own
``timings.predicted_per_second`` (the figure kvlab stores as a run's tok/s), and
output tok/s = output tokens / the wave's wall time (the client's view). The result:
the median of each over the rounds, off and on, and their difference in % (on / off - 1).
Rounds go off-on, then on-off, and so on, and each round's pair is compared: the median
of the pairs' differences is the figure held to the aim (a slowdown under 2 %), as it is the one
a drifting machine moves least; their range [min, max] is printed beside it, and when
it holds zero (some pairs faster with the sampler, some slower) the table says the
difference is within the noise of the machine.

A shared machine's load can move a round by tens of percent, far more than the aim, so
the sampler's cost is also measured directly, where noise cannot hide it: with the server
idle after the waves (its slots still holding their last task, so /slots answers at full
size), the server's CPU time (/proc/PID/stat, every thread) and this process's, over
``--cost-seconds`` without and with the sampler (every ``--cost-period`` s, for many
samples), alternating twice. The extra CPU divided by the samples taken is the cost of
one sample on each side; at a job's period it is the share of one core the sampler
takes, a bound on what it can take from a CPU-bound decode.

Usage
-----
    python bench/telemetry_overhead.py [--server PATH] [--concurrency 4] [--requests 8]
        [--prompt-tokens 128] [--n-predict 256] [--rounds 10] [--period 0.25] [--smoke] [--out DIR]

``--smoke`` (make test): 2 requests of 32 tokens, one round of each, a sample every 0.01 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common

AIM_PCT = 2.0


def server_binary(given: str | None) -> Path:
    path = given or os.environ.get("KVLAB_LLAMA_SERVER")
    if not path:
        built = subprocess.run(
            ["bash", str(common.ROOT / "scripts" / "build-llama-server.sh")],
            capture_output=True,
            text=True,
            check=False,
        )
        lines = built.stdout.strip().splitlines()
        path = lines[-1] if built.returncode == 0 and lines else None
    if not path or not os.access(path, os.X_OK):
        sys.exit(f"no llama-server: give --server or set KVLAB_LLAMA_SERVER (got {path!r})")
    return Path(path)


def start_server(binary: Path, model: Path, flags: list[str], log: Any) -> tuple[subprocess.Popen[bytes], str]:
    port = common.free_port()
    args = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "--no-webui", *flags]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    import urllib.request

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"llama-server exited during start-up (status {proc.returncode})")
        try:
            if urllib.request.urlopen(f"{url}/health", timeout=1).status == 200:
                return proc, url
        except OSError:
            pass
        time.sleep(0.1)
    common.stop(proc)
    sys.exit("llama-server did not become healthy within 60 s")


async def wave(target: Any, prompt: list[int], args: argparse.Namespace, sampled: bool) -> dict[str, Any]:
    """One measurement: --requests streams at --concurrency, with or without the sampler beside them."""
    from benchmarks.jobs.client.stream import Progress, session_for, stream_completion
    from benchmarks.jobs.telemetry.sampler import sample
    from benchmarks.jobs.telemetry.series import Series

    payload = {"prompt": prompt, "n_predict": args.n_predict, "ignore_eos": True, "cache_prompt": False}
    progress = [Progress() for _ in range(args.requests)]
    series = Series(args.period, None, {})
    stop = asyncio.Event()
    gate = asyncio.Semaphore(args.concurrency)
    t0 = time.perf_counter()
    sampler = None
    if sampled:
        sampler = asyncio.create_task(
            sample(
                target,
                "",
                series,
                stop,
                t0=t0,
                period_s=args.period,
                endpoints={"slots": True, "metrics": True},
                tokens_out=lambda: sum(p.tokens for p in progress),
            )
        )

    async def one(session: Any, p: Any) -> Any:
        async with gate:
            return await stream_completion(session, target, payload, deadline_s=300, progress=p)

    async with session_for(target, limit=args.concurrency) as session:
        outcomes = await asyncio.gather(*(one(session, p) for p in progress))
    wall_s = time.perf_counter() - t0
    stop.set()
    if sampler is not None:
        await sampler
    bad = [o.error for o in outcomes if not o.ok]
    assert not bad, f"requests failed: {bad[:3]}"
    assert all(o.output_tokens == args.n_predict for o in outcomes), [o.output_tokens for o in outcomes]
    rates = [o.tok_s for o in outcomes if o.tok_s]
    assert len(rates) == len(outcomes), "the server did not report timings.predicted_per_second"
    data = series.snapshot()
    if sampled and data["samples"]:  # a sample holds both answers: both were read
        assert data["sources"].get("slots") == "ok" and data["sources"].get("metrics") == "ok", data["sources"]
    return {
        "sampler": "on" if sampled else "off",
        "wall_s": round(wall_s, 4),
        "decode_tok_s": round(statistics.fmean(rates), 2),
        "output_tok_s": round(sum(o.output_tokens for o in outcomes) / wall_s, 2),
        "samples": data["samples"],
        "gpu": data["sources"].get("gpu", ""),
    }


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, every thread) a process has used: /proc/PID/stat fields 14 and 15."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def sampler_alone(target: Any, pid: int, seconds: float, period: float, sampled: bool) -> dict[str, float]:
    """The server's and this process's CPU time over `seconds` with the sampler running alone
    (every `period` s) or not at all: what one sample costs, with no decode to blur it."""
    from benchmarks.jobs.telemetry.sampler import sample
    from benchmarks.jobs.telemetry.series import Series

    series = Series(period, None, {})
    stop = asyncio.Event()
    server0, client0 = cpu_seconds(pid), time.process_time()
    task = None
    if sampled:
        endpoints = {"slots": True, "metrics": True}
        task = asyncio.create_task(
            sample(target, "", series, stop, t0=time.perf_counter(), period_s=period, endpoints=endpoints)
        )
    await asyncio.sleep(seconds)
    stop.set()
    if task is not None:
        await task
    return {
        "server_cpu_s": cpu_seconds(pid) - server0,
        "client_cpu_s": time.process_time() - client0,
        "samples": series.snapshot()["samples"],
    }


def sample_cost(target: Any, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    """CPU per sample on each side, from --cost-seconds without and with the sampler (twice each,
    alternating), sampling every --cost-period s to have many samples to divide by."""
    runs = []
    for sampled in (False, True, False, True):
        runs.append(
            {"sampler": "on" if sampled else "off"}
            | asyncio.run(sampler_alone(target, pid, args.cost_seconds, args.cost_period, sampled))
        )
    on = [r for r in runs if r["sampler"] == "on"]
    off = [r for r in runs if r["sampler"] == "off"]
    samples = sum(r["samples"] for r in on)
    assert samples > 0, "the sampler took no sample"
    cost: dict[str, Any] = {"seconds": args.cost_seconds, "period_s": args.cost_period, "samples": samples}
    for side in ("server", "client"):
        extra_s = sum(r[f"{side}_cpu_s"] for r in on) - sum(r[f"{side}_cpu_s"] for r in off)
        per_sample_ms = max(0.0, 1000.0 * extra_s / samples)
        cost[f"{side}_ms_per_sample"] = round(per_sample_ms, 3)
        # at a job's period, the share of one core it takes
        cost[f"{side}_core_pct_at_period"] = round(100.0 * per_sample_ms / 1000.0 / args.period, 3)
    cost["runs"] = runs
    return cost


def spread_pct(values: list[float]) -> float:
    return 100.0 * (max(values) - min(values)) / statistics.median(values)


def summarize(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Medians off and on, and the difference of each round's pair (neighbours in time, so a
    machine whose speed drifts, as a shared one does, moves both alike)."""
    off = [r[key] for r in runs if r["sampler"] == "off"]
    on = [r[key] for r in runs if r["sampler"] == "on"]
    median_off, median_on = statistics.median(off), statistics.median(on)
    diff = 100.0 * (median_on / median_off - 1.0)
    paired = [100.0 * (b / a - 1.0) for a, b in zip(off, on, strict=True)]
    paired_median = statistics.median(paired)
    return {
        "off": off,
        "on": on,
        "median_off": round(median_off, 2),
        "median_on": round(median_on, 2),
        "diff_pct": round(diff, 2),
        "paired_diff_pct": [round(d, 2) for d in paired],
        "paired_median_pct": round(paired_median, 2),
        "paired_min_pct": round(min(paired), 2),
        "paired_max_pct": round(max(paired), 2),
        "off_spread_pct": round(spread_pct(off), 2),
        "on_spread_pct": round(spread_pct(on), 2),
        "within_aim": -paired_median < AIM_PCT,  # the aim bounds a slowdown; faster with the sampler is noise
        # zero inside the pairs' range: some rounds faster with the sampler, some slower
        "within_noise": min(paired) <= 0.0 <= max(paired),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", help="the llama-server binary (default $KVLAB_LLAMA_SERVER, else the build)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--requests", type=int, default=8, help="streams per measurement")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--n-predict", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=10, help="measurements with the sampler off, and as many on")
    parser.add_argument("--period", type=float, default=0.25, help="the sampler's period in seconds (a job's: 0.25)")
    parser.add_argument("--cost-seconds", type=float, default=10.0, help="each of the 4 CPU-cost measurements")
    parser.add_argument(
        "--cost-period", type=float, default=0.02, help="the sampler's period while its cost is measured"
    )
    args = common.parse_args(
        parser,
        argv,
        smoke={
            "concurrency": 2,
            "requests": 2,
            "prompt_tokens": 16,
            "n_predict": 32,
            "rounds": 1,
            "period": 0.01,
            "cost_seconds": 0.3,
        },
    )
    if min(args.concurrency, args.requests, args.prompt_tokens, args.n_predict, args.rounds) < 1 or args.period <= 0:
        parser.error("sizes must be positive")
    binary = server_binary(args.server)
    with (
        tempfile.TemporaryDirectory(prefix="kvlab-telemetry-bench-") as tmp,
        open(Path(tmp) / "server.log", "wb") as log,
    ):
        common.setup_django(Path(tmp))
        from benchmarks.jobs.client.probe import synthetic_prompt
        from benchmarks.jobs.client.target import resolve_target
        from sizing.tiny_gguf import write_llama

        model = write_llama(Path(tmp) / "tiny-llama.gguf")
        ctx = args.concurrency * (args.prompt_tokens + args.n_predict + 64)
        flags = ["-np", str(args.concurrency), "--no-kv-unified", "-c", str(ctx), "-t", "1", "--metrics"]
        proc, url = start_server(binary, model, flags, log)
        server_desc = f"llama-server {' '.join(flags)} (tiny llama, {model.stat().st_size / 1e6:.1f} MB)"
        print(f"Telemetry overhead: {server_desc}")
        print(
            f"{args.requests} requests x ({args.prompt_tokens} prompt + {args.n_predict} out) at concurrency "
            f"{args.concurrency}, sampler every {args.period:g} s; off/on alternating, {args.rounds} rounds each"
        )
        try:
            target = resolve_target(url)
            prompt = synthetic_prompt(target, args.prompt_tokens)
            for sampled in (False, True):  # warm-up, not recorded
                asyncio.run(wave(target, prompt, args, sampled))
            runs = []
            for i in range(args.rounds):
                # off-on, then on-off: a steady drift of the machine's speed favours neither
                for sampled in (False, True) if i % 2 == 0 else (True, False):
                    r = asyncio.run(wave(target, prompt, args, sampled))
                    runs.append(r)
                    print(
                        f"  round {i + 1}/{args.rounds} sampler {r['sampler']:<3} {r['wall_s']:6.2f} s  "
                        f"decode {r['decode_tok_s']:8.1f} tok/s  output {r['output_tok_s']:8.1f} tok/s  "
                        f"samples {r['samples']}"
                    )
            cost = sample_cost(target, proc.pid, args)
            print(
                f"  sampler alone ({cost['samples']} samples, every {args.cost_period:g} s): server "
                f"{cost['server_ms_per_sample']:.3f} ms CPU per sample, client {cost['client_ms_per_sample']:.3f} ms"
            )
        finally:
            common.stop(proc)
    results: dict[str, Any] = {
        "server": server_desc,
        "concurrency": args.concurrency,
        "requests": args.requests,
        "prompt_tokens": args.prompt_tokens,
        "n_predict": args.n_predict,
        "rounds": args.rounds,
        "period_s": args.period,
        "gpu": next(r["gpu"] for r in runs if r["sampler"] == "on"),
        "aim_pct": AIM_PCT,
        "runs": runs,
        "cost": cost,
        "decode_tok_s": summarize(runs, "decode_tok_s"),
        "output_tok_s": summarize(runs, "output_tok_s"),
        **common.machine(),
    }
    print()
    common.print_header(
        f"{'':<14} {'off (median)':>13} {'on (median)':>12} {'on/off':>8} {'pairs: median [min, max]':>27}  verdict"
    )
    for key, label in (("decode_tok_s", "decode tok/s"), ("output_tok_s", "output tok/s")):
        s = results[key]
        verdict = f"slowdown under the {AIM_PCT:g} % aim" if s["within_aim"] else f"slower: OVER the {AIM_PCT:g} % aim"
        if s["within_noise"]:
            verdict += "; within noise (the pairs differ both ways)"
        pairs = f"{s['paired_median_pct']:+.2f}% [{s['paired_min_pct']:+.1f}, {s['paired_max_pct']:+.1f}]"
        print(
            f"{label:<14} {s['median_off']:>13,.1f} {s['median_on']:>12,.1f} {s['diff_pct']:>+7.2f}% "
            f"{pairs:>27}  {verdict}"
        )
    print(
        f"CPU per sample: server {cost['server_ms_per_sample']:.3f} ms, client {cost['client_ms_per_sample']:.3f} ms; "
        f"at the job's {args.period:g} s period: {cost['server_core_pct_at_period']:.3f} % of a core on the server, "
        f"{cost['client_core_pct_at_period']:.3f} % on the client"
    )
    print(f"GPU: {results['gpu']}")
    common.write_results(args.out, "telemetry_overhead", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
