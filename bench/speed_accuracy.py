"""How far is kvlab's speed estimate from what llama.cpp measures? Public llama-bench results, not fitted.

What is measured
----------------
Every row of ``bench/data/speed_validation.jsonl`` (public llama-bench tables, each with its source URL:
bench/data/speed_validation.md) whose GPU kvlab's catalogue has, against kvlab's first-principles
estimate for the same test — nothing in the estimate is fitted to these rows:

* decode (``tg N``, ``tg N @ dD``): the active weight bytes a token reads (llama-bench's size column; of a
  MoE the active share, ACTIVE below, each from the model's card) over the catalogue's peak memory
  bandwidth (sizing.placement.speed's rule for weights on one GPU), plus with ``nkvo 1`` the hand-off per
  layer (sizing.placement.speed.HANDOFF_S) — the rows that figure comes from (llama.cpp PR 4812) are left
  out as in-sample;
* prefill (``pp P``): 2 × active parameters × P FLOP over the catalogue's dense FP16 matrix throughput, or
  its FP32 vector throughput where it has none (GPUs without matrix units, and cards whose matrix figure
  is not cited).

Rows kvlab cannot estimate are counted with their reason (no catalogue GPU, no bandwidth or compute figure,
weights on the CPU without a RAM bandwidth, a model larger than its GPU, several GPUs). Printed: per kind
(decode, prefill), backend and placement the rows, the median and 90th-percentile absolute error
(|estimate / measured - 1|), the share within ±30 % and the worst rows. ``--json`` writes the rows with
their estimates to bench/out/.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import common  # noqa: F401  (bench/ is on sys.path when a script runs; it puts the repository root there too)

from sizing import catalogue

DATA = Path(__file__).resolve().parent / "data" / "speed_validation.jsonl"
GiB = 2**30

# The validation rows' GPU names (as llama-bench or the post gives them) to catalogue ids; a name that is not
# here has no catalogue entry (the A100 80GB PCIe: the catalogue's A100 80GB is the SXM card).
GPU_IDS = {
    "NVIDIA GeForce RTX 4090": "rtx-4090",
    "NVIDIA GeForce RTX 3090 Ti": "rtx-3090-ti",
    "NVIDIA GeForce RTX 3060 12GB": "rtx-3060-12gb",
    "NVIDIA GeForce RTX 3070": "rtx-3070",
    "NVIDIA GeForce RTX 2070": "rtx-2070",
    "NVIDIA GeForce RTX 2080 Ti": "rtx-2080-ti",
    "NVIDIA GeForce RTX 5070": "rtx-5070",
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": "rtx-pro-6000-blackwell",
    "AMD RX 6800 XT": "rx-6800-xt",
    "AMD Radeon RX 7900 XT": "rx-7900-xt",
    "AMD Radeon RX 9070 XT": "rx-9070-xt",
    "Radeon 8060S Graphics (gfx1151)": "radeon-8060s-strix-halo-128gb",
    "Intel Arc B580": "arc-b580",
    "Apple M1 Ultra (64-core GPU)": "apple-m1-ultra-128gb",  # every M1 Ultra: 800 GB/s
    "Apple M2 Ultra": "apple-m2-ultra-192gb",  # every M2 Ultra: 800 GB/s
}
# A MoE's active parameters of its total, as its card states them: the share of the weights a token reads.
ACTIVE = {
    "gpt-oss 20B": (3.6, 21.0, "https://openai.com/index/introducing-gpt-oss/"),
    "qwen3moe 30B.A3B": (3.3, 30.5, "https://huggingface.co/Qwen/Qwen3-30B-A3B"),
    "qwen35moe 35B.A3B": (3.0, 35.0, "the model's name: 35B total, A3B = 3B active"),
    "qwen3next 80B.A3B": (3.0, 80.0, "https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct"),
    "deepseek2 16B": (2.4, 15.7, "https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite"),
    "llama4 17Bx16E (Scout)": (17.0, 109.0, "https://huggingface.co/meta-llama/Llama-4-Scout-17B-16E-Instruct"),
}
IN_SAMPLE = {"https://github.com/ggml-org/llama.cpp/pull/4812"}  # HANDOFF_S comes from this page's rows
TEST = re.compile(r"^(pp|tg)\s*(\d+)(?:\s*@\s*d(\d+))?$")


def active_share(row: dict[str, Any]) -> float:
    if not row["moe"]:
        return 1.0
    for prefix, (active, total, _) in ACTIVE.items():
        if row["model"].startswith(prefix):
            return active / total
    raise LookupError(f"no active share for {row['model']}")


def estimate(row: dict[str, Any]) -> tuple[str, str, float | None, str]:
    """(kind, placement, estimated tok/s or None, why not)."""
    test = TEST.match(row["test"].strip())
    if not test:
        return "other", "", None, f"test {row['test']!r} is neither pp nor tg"
    kind = "decode" if test.group(1) == "tg" else "prefill"
    placement = "nkvo" if row.get("nkvo") == 1 else "CPU" if row["backend"] == "CPU" else "GPU"
    if row["ngl"] == 0 and row["backend"] != "CPU":
        placement = "weights in RAM"
    if row["source"] in IN_SAMPLE:
        return kind, placement, None, "in sample (HANDOFF_S comes from it)"
    if placement in ("CPU", "weights in RAM"):
        return kind, placement, None, "the weights are read from RAM, whose bandwidth the row does not give"
    if row["gpu_count"] != 1:
        return kind, placement, None, "several GPUs"
    gpu_id = GPU_IDS.get(row["gpu"])
    if gpu_id is None:
        return kind, placement, None, "no catalogue GPU"
    gpu = catalogue.gpus()[gpu_id]
    if row["size_gib"] * GiB > gpu.memory_mib * 2**20:
        return kind, placement, None, "the model is larger than the GPU: part of it ran from RAM"
    share = active_share(row)
    if kind == "decode":
        if gpu.bandwidth is None:
            return kind, placement, None, "no cited bandwidth"
        seconds = row["size_gib"] * GiB * share / gpu.bandwidth
        if placement == "nkvo":
            return kind, placement, None, "the model's layer count is not in the row"
        return kind, placement, 1 / seconds, ""
    tflops = gpu.fp16_tflops or gpu.fp32_tflops
    if tflops is None or row["params_b"] is None:
        return kind, placement, None, "no cited compute figure" if tflops is None else "no parameter count"
    flops_per_token = 2 * row["params_b"] * 1e9 * share
    return kind, placement, tflops * 1e12 / flops_per_token, ""


def summary(errors: list[float]) -> str:
    ordered = sorted(errors)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    within = sum(e <= 0.3 for e in ordered) / len(ordered)
    return (
        f"{len(ordered):>4} rows  median {statistics.median(ordered):6.1%}  p90 {p90:7.1%}  within ±30 % {within:5.0%}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="write the rows and their estimates to bench/out/")
    args = parser.parse_args()
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    scored: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    skipped: Counter[str] = Counter()
    worst: list[tuple[float, str]] = []
    out = []
    for row in rows:
        kind, placement, tok_s, why = estimate(row)
        out.append({**row, "kind": kind, "estimate_tok_s": tok_s, "why_not": why})
        if tok_s is None:
            skipped[why] += 1
            continue
        error = abs(tok_s / row["tok_s"] - 1)
        scored[(kind, row["backend"], placement)].append(error)
        scored[(kind, "all", "all")].append(error)
        worst.append(
            (
                error,
                f"{kind} {row['gpu']} {row['backend']} {row['model']} {row['test']}: "
                f"{tok_s:,.1f} est. vs {row['tok_s']:,.1f} measured ({row['source']})",
            )
        )
    print(
        f"{len(rows)} public llama-bench rows ({DATA.name}); "
        f"estimated {len(worst)}, not estimated {sum(skipped.values())}"
    )
    for key in sorted(scored, key=lambda k: (k[0], k[1] != "all", k)):
        print(f"  {key[0]:<8} {key[1]:<7} {key[2]:<15} {summary(scored[key])}")
    print("not estimated:")
    for why, n in skipped.most_common():
        print(f"  {n:>4}  {why}")
    print("worst rows:")
    for error, text in sorted(worst, reverse=True)[:8]:
        print(f"  {error:7.1%}  {text}")
    if args.json:
        common.OUT.mkdir(parents=True, exist_ok=True)
        (common.OUT / "speed_accuracy.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
