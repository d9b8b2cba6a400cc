"""What do the prefill and first-token estimates add to a full sizing? The same sizing with and without them,
interleaved in one process.

What is measured
----------------
For every catalogue model at Q4_K_M, a full ``sizing.size.size(..., with_recommendations=True)`` for the
investigation's workload (3 × (4,362 + 1,738) tokens, ``-c 16384``) on the catalogue's RTX 5060 Ti 16 GB
(its bandwidth, FP32 peak and backend, so every estimate is made), ``--repeats`` times each way after a
warm-up, alternating: *with* the prefill estimate (the plan's and each recommendation's), and *without* it
(``sizing.placement.prefill.work_for`` stubbed to no work, which leaves the rest unchanged). Printed: the
median of each model's with/without ratio, and the largest model's medians both ways against the aim of
100 ms for a full sizing.
"""

from __future__ import annotations

import argparse
import statistics
import time
from unittest import mock

import common  # noqa: F401  (bench/ is on sys.path when a script runs; it puts the repository root there too)

from sizing import catalogue
from sizing.catalogue import models, weights_for
from sizing.hparams import ModelParams, model_params
from sizing.kv import ServerFlags
from sizing.placement import prefill
from sizing.size import size
from sizing.workload import Workload

WORKLOAD = Workload(prompt_tokens=4362, output_tokens=1738, concurrency=3)
FLAGS = ServerFlags(ctx_size=16384)
AIM_MS = 100.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--smoke", action="store_true", help="3 models, 2 repeats")
    args = parser.parse_args()
    gpu = catalogue.gpus()["rtx-5060-ti-16gb"]
    device = gpu.device()
    entries = list(models().items())[: 3 if args.smoke else None]
    repeats = 2 if args.smoke else args.repeats
    ratios, rows = [], []
    for model_id, entry in entries:
        params = model_params(entry.metadata)
        figure = weights_for(model_id, "Q4_K_M")

        def one(params: ModelParams = params, weights: int | None = figure.bytes if figure else None) -> float:
            start = time.perf_counter()
            size(params, FLAGS, workload=WORKLOAD, devices=[device], weights_bytes=weights,
                 weights_source="catalogue", with_recommendations=True)  # fmt: skip
            return (time.perf_counter() - start) * 1000

        one()
        with_, without = [], []
        for _ in range(repeats):
            with_.append(one())
            with mock.patch.object(prefill, "work_for", lambda *a, **k: []):
                without.append(one())
        ratios.append(statistics.median(with_) / statistics.median(without))
        rows.append((figure.bytes if figure else 0, model_id, statistics.median(with_), statistics.median(without)))
    _, largest, w, wo = max(rows)
    print(f"full sizing of {len(rows)} catalogue models (Q4_K_M, RTX 5060 Ti 16 GB, 3 x 6,100 tokens), "
          f"{repeats} repeats each way, interleaved")  # fmt: skip
    print(f"  with / without the prefill estimates: median ratio {statistics.median(ratios):.2f}x "
          f"(max {max(ratios):.2f}x)")  # fmt: skip
    print(f"  largest ({largest}): {w:.1f} ms with, {wo:.1f} ms without (aim {AIM_MS:.0f} ms: "
          f"{'met' if w <= AIM_MS else 'over'})")  # fmt: skip


if __name__ == "__main__":
    main()
