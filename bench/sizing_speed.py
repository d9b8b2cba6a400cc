"""How fast is a full sizing, and how fast does kvlab read a GGUF head, next to the `gguf` package?

What is measured
----------------
* Sizing: for every catalogue model (sizing/catalogue/models.json) at Q4_K_M, a full
  ``sizing.size.size(..., with_recommendations=True)`` — KV layout, memory plan, failure
  prediction and every ranked recommendation — for the investigation's workload (3 x
  (4,362 + 1,738) tokens, -c 16384; for a 16 GB GPU and for none, when every candidate is
  ranked), ``--repeats`` times each (default 20) after
  one warm-up. The largest model (by its Q4_K_M weights) and the slowest are reported; the
  aim is under 100 ms for the largest.
* The --fit replay: for every catalogue model whose tensor table kvlab computes (Q4_K_M, or its
  first quantization), ``sizing.placement.server.plan_server`` — the server's pre-fit, the fit
  step by step over kvlab's measurement, the breakdown per device, the overhead and the speed —
  on one 16 GB GPU, two 24 GB GPUs and one 80 GB GPU, with ``-c`` unset (the context step) and
  with ``-c 32768 -np 1`` (the layer and expert steps), ``--repeats`` times each. The slowest is
  reported against an aim of 300 ms, with the number of measurements the fit made.
* GGUF head: a GGUF of ``--tensors`` tensors (default 10,000, llama-style names, 2-D f16,
  a ``--vocab`` of 32,000 tokens in the metadata; the data region is a sparse hole) written once
  with ``gguf.GGUFWriter``, then read alternately, ``--head-repeats`` times each (default 5), by
  - kvlab: ``sizing.gguf.read_gguf_head`` on the open file (metadata, tensor table, weights total);
  - gguf-parser style: ``gguf.GGUFReader(path)`` (the `gguf` package's reader, which parses
    every key and tensor info, as gguf-parser does), then the same weights total from its
    ``tensors``.
  Both must find the same number of tensors and the same weights total. The aim is kvlab
  under 200 ms; the ratio kvlab/gguf (medians) is printed beside it.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import common  # bench/ is on sys.path when a script runs; it puts the repository root there too
import gguf
import numpy as np

from sizing.catalogue import models, weights_for
from sizing.gguf import read_gguf_head
from sizing.hparams import ModelParams, model_params
from sizing.kv import ServerFlags
from sizing.placement import tensors as placement_tensors
from sizing.placement.server import plan_server
from sizing.placement.types import Device, Host, MiB
from sizing.size import size
from sizing.tiny_gguf import close_sparse
from sizing.workload import Workload

SIZING_AIM_MS = 100.0
HEAD_AIM_MS = 200.0
FIT_AIM_MS = 300.0
FIT_GPUS = {"1 x 16 GB": [16311], "2 x 24 GB": [24564, 24564], "1 x 80 GB": [81559]}
FIT_FLAGS = {"-c unset": ServerFlags(), "-c 32768 -np 1": ServerFlags(ctx_size=32768, parallel=1)}
WORKLOAD = Workload(prompt_tokens=4362, output_tokens=1738, concurrency=3)
FLAGS = ServerFlags(ctx_size=16384)
GPU_MIB = 16311  # an RTX 5060 Ti 16 GB


def time_ms(fn: Callable[[], object], repeats: int) -> list[float]:
    fn()  # warm-up: imports, caches
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return times


def bench_sizing(repeats: int) -> dict[str, object]:
    """Each catalogue model sized for a 16 GB GPU and for no GPU (then every candidate is listed)."""
    rows = []
    for model_id, entry in models().items():
        params = model_params(entry.metadata)
        figure = weights_for(model_id, "Q4_K_M")
        weights = figure.bytes if figure else None
        for gpu_mib in (GPU_MIB, None):

            def one(params: ModelParams = params, weights: int | None = weights, gpu_mib: int | None = gpu_mib) -> int:
                result = size(params, FLAGS, workload=WORKLOAD, gpu_mib=gpu_mib, weights_bytes=weights,
                              weights_source="catalogue", with_recommendations=True)  # fmt: skip
                assert result.prediction is not None  # recommendations may be none: a model too big for the GPU
                return len(result.recommendations)

            times = time_ms(one, repeats)
            rows.append({"model": model_id, "gpu_mib": gpu_mib, "weights": weights or 0, "recommendations": one(),
                         "median_ms": statistics.median(times), "max_ms": max(times)})  # fmt: skip
    biggest = max(r["weights"] for r in rows)
    largest = max((r for r in rows if r["weights"] == biggest), key=lambda r: r["median_ms"])
    slowest = max(rows, key=lambda r: r["median_ms"])
    return {"models": rows, "largest": largest, "slowest": slowest}


def bench_fit(repeats: int) -> dict[str, object]:
    """plan_server for each computed catalogue model × GPU set × flags."""
    rows = []
    host = Host(128 * 1024 * MiB, 128 * 1024 * MiB)
    for model_id, entry in models().items():
        quant = "Q4_K_M" if "Q4_K_M" in entry.weights else next(iter(entry.weights), None)
        if quant is None:
            continue
        try:
            tensors = placement_tensors.computed(entry.metadata, quant, imatrix=entry.imatrix, **entry.tensor_layout)
        except (KeyError, ValueError):
            continue
        params = model_params(entry.metadata)
        for gpus_label, gpus in FIT_GPUS.items():
            devices = [Device(f"CUDA{i}", "GPU", mib * MiB, 0, 1e12) for i, mib in enumerate(gpus)]
            for flags_label, flags in FIT_FLAGS.items():

                def one(
                    params: ModelParams = params,
                    flags: ServerFlags = flags,
                    devices: list[Device] = devices,
                    tensors: list[placement_tensors.WeightTensor] = tensors,
                ) -> int:
                    plan = plan_server(params, flags, devices=devices, host=host, tensors=tensors,
                                       prompt_tokens=4362, output_tokens=1738, concurrency=3)  # fmt: skip
                    return sum(1 for _, line in plan.fit.log if "memory breakdown [MiB]" in line)

                times = time_ms(one, repeats)
                row = {"model": f"{model_id} {quant}", "gpus": gpus_label, "flags": flags_label}
                row |= {"measurements": one(), "median_ms": statistics.median(times), "max_ms": max(times)}
                rows.append(row)
    slowest = max(rows, key=lambda r: r["median_ms"])
    return {"cases": rows, "slowest": slowest, "median_ms": statistics.median(r["median_ms"] for r in rows)}


def write_head(path: Path, n_tensors: int, n_vocab: int = 32000) -> int:
    """A GGUF of n_tensors 2-D f16 tensors (data region sparse); returns its weights total."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("bench head")
    w.add_token_list([f"t{i}" for i in range(n_vocab)])
    w.add_token_scores([0.0] * n_vocab)
    w.add_token_types([1] * n_vocab)
    w.add_block_count(n_tensors // 9)
    total = 0
    for i in range(n_tensors):
        ne = (256, 64 + i % 7)
        n_bytes = ne[0] * ne[1] * 2
        w.add_tensor_info(f"blk.{i // 9}.t{i % 9}.weight", tuple(reversed(ne)), np.float16, n_bytes,
                          raw_dtype=gguf.GGMLQuantizationType.F16)  # fmt: skip
        total += n_bytes
    close_sparse(w, path, total + 32 * n_tensors)
    return total


def bench_head(n_tensors: int, n_vocab: int, repeats: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "head.gguf"
        total = write_head(path, n_tensors, n_vocab)

        def kvlab() -> None:
            with path.open("rb") as f:
                head = read_gguf_head(f)
            assert len(head.tensors) == n_tensors and head.weights_bytes == total

        def gguf_reader() -> None:
            reader = gguf.GGUFReader(str(path))
            assert len(reader.tensors) == n_tensors and sum(int(t.n_bytes) for t in reader.tensors) == total

        kvlab_ms: list[float] = []
        gguf_ms: list[float] = []
        kvlab()
        gguf_reader()
        for _ in range(repeats):  # alternating, so both see the same machine
            kvlab_ms += time_ms(kvlab, 1)[-1:]
            gguf_ms += time_ms(gguf_reader, 1)[-1:]
    return {"tensors": n_tensors, "kvlab_ms": kvlab_ms, "gguf_ms": gguf_ms,
            "kvlab_median_ms": statistics.median(kvlab_ms), "gguf_median_ms": statistics.median(gguf_ms),
            "ratio_median": statistics.median(kvlab_ms) / statistics.median(gguf_ms)}  # fmt: skip


CPU_CASES = {"-nr": None, "CPU not given": None, "--cpu avx2": "avx2", "--cpu avx512+amx": "avx512+amx"}


def bench_cpu(repeats: int) -> dict[str, object]:
    """plan_server on the CPU alone (128 GiB of RAM) for each computed catalogue model at Q4_K_M, with
    the CPU's buffer types off (-nr), the CPU not given (what other CPUs would take is worked out too),
    and two CPUs given; each case's time as a ratio to -nr's, measured in turns."""
    from sizing.placement.cpu import parse_cpu

    rows = []
    for model_id, entry in models().items():
        if "Q4_K_M" not in entry.weights:
            continue
        try:
            tensors = placement_tensors.computed(entry.metadata, "Q4_K_M", imatrix=entry.imatrix, **entry.tensor_layout)
        except (KeyError, ValueError):
            continue
        params = model_params(entry.metadata)
        times: dict[str, list[float]] = {label: [] for label in CPU_CASES}
        for _ in range(repeats):
            for label, spec in CPU_CASES.items():
                flags = replace(FIT_FLAGS["-c 32768 -np 1"], repack=label != "-nr")
                host = Host(128 * 1024 * MiB, 128 * 1024 * MiB, cpu=parse_cpu(spec) if spec else None)
                start = time.perf_counter()
                plan_server(params, flags, devices=[], host=host, tensors=tensors)
                times[label].append((time.perf_counter() - start) * 1000)
        medians = {label: statistics.median(t) for label, t in times.items()}
        rows.append(
            {"model": model_id, "median_ms": medians, "ratio": {k: v / medians["-nr"] for k, v in medians.items()}}
        )
    return {"models": rows, "ratio_median": {k: statistics.median(r["ratio"][k] for r in rows) for k in CPU_CASES}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--tensors", type=int, default=10_000)
    parser.add_argument("--vocab", type=int, default=32_000, help="tokens in the head's metadata")
    parser.add_argument("--head-repeats", type=int, default=5, help="gguf.GGUFReader takes seconds per read")
    smoke = {"repeats": 2, "tensors": 1_000, "vocab": 2_000, "head_repeats": 1}
    args = common.parse_args(parser, argv, smoke=smoke)

    sizing = bench_sizing(args.repeats)
    largest, slowest = sizing["largest"], sizing["slowest"]
    assert isinstance(largest, dict) and isinstance(slowest, dict)
    n_models = len({row["model"] for row in sizing["models"]})  # type: ignore[attr-defined]
    print(f"Full sizing of {n_models} catalogue models (Q4_K_M, -c 16384, 3 x 6,100 tokens, a 16 GB GPU or none), "
          f"{args.repeats} repeats each")  # fmt: skip
    for label, row in (("largest", largest), ("slowest", slowest)):
        gpu = f"{row['gpu_mib']:,} MiB GPU" if row["gpu_mib"] else "no GPU"
        verdict = "met" if row["median_ms"] < SIZING_AIM_MS else "over"
        times = f"median {row['median_ms']:.1f} ms, max {row['max_ms']:.1f} ms"
        print(f"  {label}: {row['model']} ({gpu}, {row['recommendations']} recommendations) — {times} "
              f"(aim {SIZING_AIM_MS:.0f} ms: {verdict})")  # fmt: skip

    fit = bench_fit(max(1, args.repeats // 4))
    worst = fit["slowest"]
    assert isinstance(worst, dict)
    n_cases = len(fit["cases"])  # type: ignore[arg-type]
    verdict = "met" if worst["median_ms"] < FIT_AIM_MS else "over"
    print(f"--fit replayed (plan_server) on {n_cases} cases (computed tensors; 1 x 16 GB, 2 x 24 GB, 1 x 80 GB; "
          f"-c unset and -c 32768 -np 1): median of all {fit['median_ms']:.1f} ms")  # fmt: skip
    times = f"median {worst['median_ms']:.1f} ms, max {worst['max_ms']:.1f} ms"
    print(f"  slowest: {worst['model']} on {worst['gpus']}, {worst['flags']} ({worst['measurements']} measurements) — "
          f"{times} (aim {FIT_AIM_MS:.0f} ms: {verdict})")  # fmt: skip

    cpu = bench_cpu(max(1, args.repeats // 4))
    n_cpu = len(cpu["models"])  # type: ignore[arg-type]
    ratios = cpu["ratio_median"]
    assert isinstance(ratios, dict)
    print(f"--fit replayed on the CPU alone (128 GiB, -c 32768 -np 1) for {n_cpu} computed models at Q4_K_M, in turns; "
          "median of each model's ratio to -nr's time:")  # fmt: skip
    for label, ratio in ratios.items():
        print(f"  {label:18s} {ratio:.2f}x")

    head = bench_head(args.tensors, args.vocab, args.head_repeats)
    verdict = "met" if head["kvlab_median_ms"] < HEAD_AIM_MS else "over"  # type: ignore[operator]
    print(
        f"GGUF head of {args.tensors:,} tensors and {args.vocab:,} tokens, "
        f"{args.head_repeats} repeats each, alternating"
    )
    print(f"  kvlab read_gguf_head: median {head['kvlab_median_ms']:.1f} ms (aim {HEAD_AIM_MS:.0f} ms: {verdict})")
    print(f"  gguf.GGUFReader:      median {head['gguf_median_ms']:.1f} ms")
    print(f"  ratio kvlab/gguf (median time): {head['ratio_median']:.2f}")
    common.write_results(
        args.out, "sizing_speed", {"repeats": args.repeats, "sizing": sizing, "fit": fit, "cpu": cpu, "head": head}
    )


if __name__ == "__main__":
    main()
