"""How far is kvlab's speed estimate from what llama.cpp measures? Public llama-bench results, held out.

What is measured
----------------
Every row of ``bench/data/speed_validation*.jsonl`` (public llama-bench tables, each with its source URL:
bench/data/speed_validation.md) whose GPU the catalogue has and whose model's shape bench/speed_models.py
knows, against kvlab's estimate for the same test, computed by the product's own functions:

* decode (``tg N``, ``tg N @ dD``): sizing.placement.speed.decode_speed over one location holding the active
  weight bytes a token reads (llama-bench's size column less an untied input embedding; of a MoE the
  card's active share) and the KV at D + N/2 cells, on the catalogue's peak bandwidth, with the backend's
  factors (sizing.placement.efficiency) and the graph's nodes;
* prefill (``pp P``, ``pp P @ dD``): sizing.placement.prefill over 2 FLOP per active weight per token plus the
  attention, the catalogue's FP32 peak and bandwidth, in ubatches of ``-ub`` (512 when not printed).

The backend factors are derived from the rows of one GPU per backend (DERIVATION: the catalogue GPU with the
most estimable rows of that backend); those rows are reported apart, as in-sample, and the headline is over
every other GPU's rows: held out. ``--derive`` prints the factors the derivation rows give (what
sizing/placement/efficiency.py must hold; benchmarks/tests/test_speed_accuracy_bench.py checks it).
Rows kvlab cannot estimate are counted with their reason. ``--json`` writes the rows with their estimates
to bench/out/.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import common  # noqa: F401  (bench/ is on sys.path when a script runs; it puts the repository root there too)
from speed_models import Shape, shape_of

from sizing import catalogue
from sizing.placement import efficiency, prefill, speed
from sizing.placement.types import Device

DATA = Path(__file__).resolve().parent / "data"
GiB = 2**30
TEST = re.compile(r"^(pp|tg)\s*(\d+)(?:\s*@\s*d(\d+))?$")
BACKENDS = {"CUDA": "cuda", "ROCm": "rocm", "Vulkan": "vulkan", "Metal": "metal", "SYCL": "sycl", "CPU": "cpu"}
IN_SAMPLE = {"https://github.com/ggml-org/llama.cpp/pull/4812"}  # HANDOFF_S comes from this page's rows

# Names as llama-bench or a post prints them that the normalised match below does not find.
GPU_IDS = {
    "Radeon 8060S Graphics (gfx1151)": "radeon-8060s-strix-halo-128gb",
    "Radeon 8060S Graphics": "radeon-8060s-strix-halo-128gb",
    "Radeon 8060S Graphics, gfx1151": "radeon-8060s-strix-halo-128gb",
    "AMD Radeon Graphics, gfx1151": "radeon-8060s-strix-halo-128gb",
    "Apple M1 Ultra (64-core GPU)": "apple-m1-ultra-128gb",  # every M1 Ultra: 800 GB/s
    "Apple M2 Ultra": "apple-m2-ultra-192gb",  # every M2 Ultra: 800 GB/s
    "NVIDIA GeForce RTX 3060 12GB": "rtx-3060-12gb",
    "NVIDIA GeForce RTX 3080": "rtx-3080",
    "Intel Arc A770": "arc-a770-16gb",
    "Intel Arc A770 (16gb)": "arc-a770-16gb",
    "NVIDIA GB10": "dgx-spark-gb10-128gb",
    "Orin": "jetson-agx-orin-64gb",  # the AGX Orin 64GB devkit (the source's heading); its power mode: below
    "NVIDIA GeForce RTX 3060": "rtx-3060-12gb",  # the 12 GB card is the 3060 that prints no size (the 8 GB is rare)
}
SBC = re.compile(r"raspberry|\bpi 5\b|\bcm5\b|hifive|risc-v", re.I)
_NOISE = re.compile(r"\b(nvidia|geforce|amd|radeon|intel|tesla|\(tm\)|\(r\)|graphics|series)\b|[(),]", re.I)


def _norm(name: str) -> str:
    return " ".join(_NOISE.sub(" ", name.lower()).split())


APPLE = re.compile(r"^Apple (M\d)(?: (Pro|Max|Ultra))?(?: \((\d+)-core GPU\))?$")


def gpu_of(name: str) -> catalogue.CatalogueGpu | None:
    gpus = catalogue.gpus()
    if name in GPU_IDS:
        return gpus[GPU_IDS[name]]
    apple = APPLE.match(name.strip())
    if apple:  # the family's entry: the row's own bandwidth (the scoreboard's column) and cores say the rest
        chip, tier = apple.group(1).lower(), (apple.group(2) or "").lower()
        pattern = re.compile(rf"^apple-{chip}-{tier + '-' if tier else ''}\d+gb$")
        found = [g for g in gpus.values() if pattern.match(g.id)]
        return found[0] if len(found) == 1 else None
    wanted = _norm(name)
    matches = [g for g in gpus.values() if _norm(g.name) == wanted]
    return matches[0] if len(matches) == 1 else None


def load_rows() -> list[dict[str, Any]]:
    rows = []
    for path in sorted(DATA.glob("speed_validation*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


def active_bytes(row: dict[str, Any], shape: Shape) -> float:
    """The bytes of the file a generated token reads: all but an untied input embedding (one row is read);
    of a MoE, the card's active share."""
    params = (row["params_b"] or shape.total_b) * 1e9
    embedding = 0 if shape.tied else shape.n_vocab * shape.n_embd
    active = (shape.active_b * 1e9 if shape.active_b else params) - embedding
    return row["size_gib"] * GiB * active / params


def flop_per_token(row: dict[str, Any], shape: Shape) -> float:
    params = (shape.active_b or row["params_b"] or shape.total_b) * 1e9
    return 2.0 * (params - (0 if shape.tied else shape.n_vocab * shape.n_embd))


def activations_per_token(row: dict[str, Any], shape: Shape) -> float:
    """prefill.activation_bytes over the layers, the FFN's width from the parameter count the row gives (a
    MoE's routed rows, n_expert_used × n_ff_exp, from its active parameters): what is left after the
    embedding and the attention's products, over the FFN's three products a layer."""
    embd, layers = shape.n_embd, shape.n_layer
    q_rows, kv_rows = shape.n_head * shape.head, shape.n_head_kv * shape.head
    embedding = shape.n_vocab * embd * (1 if shape.tied else 2)
    attention = embd * (2 * q_rows + 2 * kv_rows)
    params = (shape.active_b if shape.n_expert and shape.active_b else row["params_b"] or shape.total_b) * 1e9
    ffn_rows = max(0.0, (params - embedding - layers * attention) / (3 * layers * embd))
    per_layer = prefill.activation_bytes(
        embd, q_rows, kv_rows, ffn_rows, n_expert=shape.n_expert, n_expert_used=shape.n_expert_used
    )
    return layers * per_layer


def kv_bytes_per_cell(shape: Shape) -> int:
    return shape.kv_layers * 2 * shape.n_head_kv * shape.head * 2  # f16 K and V


class Case:
    """One row made ready for the estimate, or the reason it cannot be."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.row = row
        self.why = ""
        test = TEST.match(row["test"].strip())
        self.kind = "other" if not test else "decode" if test.group(1) == "tg" else "prefill"
        self.tokens = int(test.group(2)) if test else 0
        self.depth = int(test.group(3) or 0) if test else 0
        self.backend = BACKENDS.get(row["backend"], row["backend"].lower())
        self.placement = "KV in RAM" if row.get("nkvo") == 1 else "CPU" if row["backend"] == "CPU" else "GPU"
        if row.get("ngl") == 0 and row["backend"] != "CPU":
            self.placement = "weights in RAM"
        self.gpu = gpu_of(row["gpu"]) if row["backend"] != "CPU" else None
        self.backend = efficiency.key(self.backend, self.gpu.vendor if self.gpu else "")
        self.shape = shape_of(row["model"], row.get("params_b"))
        self.why = self._why_not()

    def _why_not(self) -> str:
        row = self.row
        if self.kind == "other":
            return f"test {row['test']!r} is neither pp nor tg"
        if row["source"] in IN_SAMPLE:
            return "in sample (HANDOFF_S comes from it)"
        if self.shape is None:
            return "the model's shape is not in bench/speed_models.py"
        if row.get("size_gib") is None:
            return "the row does not give the model's size"
        if re.search(r"\b(15|30|50) ?W\b", row.get("note") or ""):
            return "a power-limited mode (the catalogue's bandwidth is the full-power figure)"
        if SBC.search(f"{row.get('cpu') or ''} {row.get('note') or ''}"):
            return "the host is a single-board computer (PCIe ×1, a slow CPU): bound by the host, not modelled"
        partial = (
            row.get("ngl") is not None
            and row["ngl"] <= self.shape.n_layer
            and not (
                row["backend"] == "Metal" and row["ngl"] == 1  # 2023 Metal builds: -ngl 1 was the whole model
            )
        )
        if self.placement in ("weights in RAM", "KV in RAM") or row.get("n_cpu_moe") or partial:
            return "part of the model or its KV is in RAM: the host's RAM bandwidth is not in the row"
        if self.placement == "CPU":
            if not row.get("ram_gbps"):
                return "CPU only: the row does not give the RAM's bandwidth"
            if self.kind == "prefill":
                return "CPU only: the CPU's FLOP rate is not in the row"
            return ""
        if self.gpu is None:
            return "no catalogue GPU"
        if row["gpu_count"] != 1 and self.kind == "prefill":
            return "several GPUs: prefill over a layer split is not estimated here"
        if row["size_gib"] * GiB > self.gpu.memory_mib * 2**20 * max(1, row["gpu_count"]):
            return "the model is larger than the GPUs: part of it ran from RAM"
        if not self.bandwidth:
            return "no cited bandwidth"
        if self.kind == "prefill" and self.fp32_flops is None and self.fp16_flops is None:
            return "no cited compute figure (FP16 matrix or FP32)"
        return ""

    @property
    def gpu_id(self) -> str:
        return self.gpu.id if self.gpu else "CPU"

    @property
    def bandwidth(self) -> float:
        """Bytes/s: the row's own (an Apple chip's configuration, a CPU's RAM) where it states one, else the
        catalogue's."""
        if self.row.get("ram_gbps"):
            return float(self.row["ram_gbps"]) * 1e9
        return self.gpu.bandwidth if self.gpu and self.gpu.bandwidth else 0.0

    @property
    def fp32_flops(self) -> float | None:
        """The catalogue's FP32 peak; of an Apple chip with fewer GPU cores than the catalogue's, in proportion
        to its cores (the same clock, 128 FP32 lanes a core)."""
        if not self.gpu or self.gpu.fp32_tflops is None:
            return None
        if APPLE.match(self.row["gpu"].strip()) and not self.gpu.cu_count:
            return None  # which configuration of the chip: its cores are not known
        cores = APPLE.match(self.row["gpu"].strip())
        if cores and cores.group(3) and self.gpu.cu_count:
            return self.gpu.fp32_tflops * 1e12 * int(cores.group(3)) / self.gpu.cu_count
        return self.gpu.fp32_tflops * 1e12

    @property
    def nodes(self) -> int:
        assert self.shape
        return self.shape.n_layer * efficiency.nodes_per_layer(self.shape.n_expert, self.shape.n_expert_used)

    @property
    def ubatch(self) -> int:
        return int(self.row.get("n_ubatch") or 512)

    @property
    def fp16_flops(self) -> float | None:
        """The catalogue's dense FP16 matrix peak (GPUs with matrix units whose figure is cited)."""
        return None if not self.gpu or self.gpu.fp16_tflops is None else self.gpu.fp16_tflops * 1e12

    def observation(self) -> efficiency.Observation:
        """The row at peak: what `efficiency.derive` fits the backend's factors on."""
        assert self.shape
        if self.kind == "decode":
            read = active_bytes(self.row, self.shape) + kv_bytes_per_cell(self.shape) * (self.depth + self.tokens / 2)
            return efficiency.Observation(
                self.backend, "decode", 1 / self.row["tok_s"], read / self.bandwidth, self.nodes
            )
        n_ubatches = -(-self.tokens // min(self.ubatch, self.tokens))
        flop = flop_per_token(self.row, self.shape) * self.tokens + self._attention()
        return efficiency.Observation(
            self.backend,
            "prefill",
            self.tokens / self.row["tok_s"],
            (n_ubatches * self.row["size_gib"] * GiB + self.tokens * activations_per_token(self.row, self.shape))
            / self.bandwidth,
            n_ubatches * self.nodes,
            flop / self.fp32_flops if self.gpu and self.fp32_flops else 0.0,
            flop / self.fp16_flops if self.fp16_flops else 0.0,
        )

    def _attention(self) -> float:
        assert self.shape
        hh = [self.shape.n_head * self.shape.head] * self.shape.kv_layers
        return prefill.attention_flop(self.tokens, self.depth, hh, [0] * len(hh))

    def estimate(self) -> float | None:
        """The product's estimate of this row's tok/s."""
        assert self.shape
        if self.kind == "decode":
            context = self.depth + self.tokens // 2
            n = max(1, self.row["gpu_count"])  # -sm layer: each GPU holds 1/n of the layers, run one after the other
            locations = [
                speed.Location(
                    "CPU" if self.placement == "CPU" else f"GPU{i}",
                    self.bandwidth,
                    int(active_bytes(self.row, self.shape)) // n,
                    kv_bytes_per_cell(self.shape) * context // n,
                    backend=self.backend,
                    nodes=self.nodes // n,
                )
                for i in range(n)
            ]
            return speed.decode_speed(locations).tok_s
        assert self.gpu
        device = Device("GPU0", self.gpu.name, self.gpu.memory_mib * 2**20, 0, self.bandwidth,
                        BACKENDS[self.row["backend"]], self.fp32_flops, self.fp16_flops, self.gpu.vendor)  # fmt: skip
        work = prefill.DeviceWork(
            device, flop_per_token(self.row, self.shape), self._attention(), int(self.row["size_gib"] * GiB),
            self.nodes, activations_per_token(self.row, self.shape),
        )  # fmt: skip
        return prefill.estimate([work], prompt_tokens=self.tokens, n_ubatch=self.ubatch, cpu_flops=1.0).tok_s


def derivation_gpus(cases: list[Case]) -> dict[str, set[str]]:
    """Per backend, half its GPUs: ranked by estimable rows (most first, ties by id), the 1st, 3rd, 5th, …
    derive the factors and the 2nd, 4th, … are held out (a backend with one GPU derives from it)."""
    counts: Counter[tuple[str, str]] = Counter((c.backend, c.gpu_id) for c in cases if not c.why)
    by_backend: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for (backend, gpu), n in counts.items():
        by_backend[backend].append((-n, gpu))
    return {backend: {gpu for _, gpu in sorted(ranked)[::2]} for backend, ranked in by_backend.items()}


def derived(cases: list[Case]) -> dict[str, efficiency.Efficiency]:
    chosen = derivation_gpus(cases)
    usable = [c for c in cases if not c.why and c.gpu_id in chosen.get(c.backend, set())]
    names = {backend: tuple(sorted(gpus)) for backend, gpus in chosen.items()}
    observations = [c.observation() for c in usable]
    # a backend kept per vendor (Vulkan) also gets figures over all its vendors, for a vendor without rows
    for backend in efficiency.PER_VENDOR:
        observations += [replace(o, backend=backend) for o in observations if o.backend.startswith(backend + "-")]
        names[backend] = tuple(sorted({g for k, gpus in chosen.items() if k.startswith(backend + "-") for g in gpus}))
    return efficiency.derive(observations, names)


def summary(errors: list[float]) -> str:
    ordered = sorted(errors)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    within = sum(e <= 0.3 for e in ordered) / len(ordered)
    worst = ordered[-1]
    return (
        f"{len(ordered):>4} rows  median {statistics.median(ordered):6.1%}  p90 {p90:7.1%}  "
        f"within ±30 % {within:5.0%}  worst {worst:7.1%}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="write the rows and their estimates to bench/out/")
    parser.add_argument("--derive", action="store_true", help="print the backend factors the derivation rows give")
    args = parser.parse_args()
    rows = load_rows()
    cases = [Case(row) for row in rows]
    chosen = derivation_gpus(cases)
    if args.derive:
        for eff in derived(cases).values():
            print(f"    {eff!r},")
        return
    held: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    in_sample: dict[str, list[float]] = defaultdict(list)
    skipped: Counter[str] = Counter()
    worst: list[tuple[float, str]] = []
    out = []
    for case in cases:
        tok_s = None if case.why else case.estimate()
        why = case.why or ("" if tok_s else "no efficiency figures for its backend")
        row = case.row
        sample = "derivation" if not why and case.gpu_id in chosen.get(case.backend, set()) else "held out"
        out.append({**row, "kind": case.kind, "estimate_tok_s": tok_s, "why_not": why, "sample": sample})
        if why or tok_s is None:
            skipped[why] += 1
            continue
        ratio = tok_s / row["tok_s"]
        error = max(ratio, 1 / ratio) - 1 if ratio > 0 else float("inf")  # symmetric: 2× over or under is 100 %
        if sample == "derivation":
            in_sample[case.kind].append(error)
            continue
        held[(case.kind, row["backend"], case.placement)].append(error)
        held[(case.kind, "all", "all")].append(error)
        worst.append((error, f"{case.kind} {row['gpu']} {row['backend']} {row['model']} {row['test']}: "
                             f"{tok_s:,.1f} est. vs {row['tok_s']:,.1f} measured ({row['source']})"))  # fmt: skip
    held_gpus = {o["gpu"] for o in out if o["sample"] == "held out" and not o["why_not"]}
    print(
        f"{len(rows)} public llama-bench rows ({len({r['gpu'] for r in rows})} GPU names); "
        f"held out {len(worst)} rows on {len(held_gpus)} GPUs, derivation {sum(map(len, in_sample.values()))}, "
        f"not estimated {sum(skipped.values())}"
    )
    print(
        "derivation GPUs (in sample): " + "; ".join(f"{b}: {', '.join(sorted(g))}" for b, g in sorted(chosen.items()))
    )
    print("error = max(est/measured, measured/est) - 1, over the held-out rows:")
    for key in sorted(held, key=lambda k: (k[0], k[1] != "all", k)):
        print(f"  {key[0]:<8} {key[1]:<7} {key[2]:<15} {summary(held[key])}")
    for kind, errors in sorted(in_sample.items()):
        print(f"  {kind:<8} in sample (derivation GPUs)   {summary(errors)}")
    print("not estimated:")
    for why, n in skipped.most_common():
        print(f"  {n:>4}  {why}")
    print("worst held-out rows:")
    for error, text in sorted(worst, reverse=True)[:10]:
        print(f"  {error:7.1%}  {text}")
    if args.json:
        common.OUT.mkdir(parents=True, exist_ok=True)
        (common.OUT / "speed_accuracy.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
