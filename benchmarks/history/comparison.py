"""Side-by-side comparison rows for runs, with the rows that differ marked."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..models import Run


@dataclass(frozen=True, slots=True)
class CompareRow:
    section: str
    name: str
    values: list[str]

    @property
    def differs(self) -> bool:
        return len(set(self.values)) > 1


def fmt(value: Any, digits: int = 2, unit: str = "") -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.{digits}f}{unit}"
    if isinstance(value, int):
        return f"{value:,}{unit}"
    return str(value)


def _rate(run: Run) -> str:
    return "—" if run.success_rate is None else f"{run.success_rate:.0%}"


FIELDS: list[tuple[str, str, Callable[[Run], str]]] = [
    ("Run", "label", lambda r: fmt(r.label)),
    ("Run", "model", lambda r: fmt(r.model)),
    ("Run", "GPU", lambda r: fmt(r.gpu)),
    ("Run", "VRAM total / used (MiB)", lambda r: f"{fmt(r.vram_total_mib)} / {fmt(r.vram_used_mib)}"),
    ("Run", "started", lambda r: r.started_at.strftime("%Y-%m-%d %H:%M:%S") if r.started_at else "—"),
    ("Server", "ctx size (-c)", lambda r: fmt(r.ctx_size)),
    ("Server", "parallel (-np)", lambda r: fmt(r.parallel)),
    ("Server", "unified KV", lambda r: fmt(r.kv_unified)),
    ("Server", "K / V cache type", lambda r: f"{fmt(r.cache_type_k)} / {fmt(r.cache_type_v)}"),
    ("Server", "KV on GPU", lambda r: fmt(r.kv_offload)),
    ("Server", "flash attention", lambda r: fmt(r.flash_attn)),
    ("Workload", "concurrency", lambda r: fmt(r.concurrency)),
    ("Workload", "prompt tokens (max)", lambda r: fmt(r.prompt_tokens_max)),
    ("Workload", "n_predict (max)", lambda r: fmt(r.n_predict_max)),
    ("Outcome", "ok / total", lambda r: f"{r.n_ok} / {r.n_requests}"),
    ("Outcome", "success rate", _rate),
    ("Speed", "tok/s per request, mean", lambda r: fmt(r.tok_s_mean, 2, " tok/s")),
    ("Speed", "tok/s per request, min – max", lambda r: f"{fmt(r.tok_s_min)} – {fmt(r.tok_s_max, 2, ' tok/s')}"),
    ("Speed", "TTFT p50 / p95", lambda r: f"{fmt(r.ttft_p50, 3, ' s')} / {fmt(r.ttft_p95, 3, ' s')}"),
    ("Speed", "E2E p95", lambda r: fmt(r.e2e_p95, 3, " s")),
    ("Speed", "wall time", lambda r: fmt(r.effective_wall_s, 1, " s")),
    ("Speed", "aggregate throughput", lambda r: fmt(r.throughput_tok_s, 2, " tok/s")),
]


def compare_rows(runs: Sequence[Run], failures: dict[int, dict[str, int]]) -> list[CompareRow]:
    rows = [CompareRow(section, name, [get(run) for run in runs]) for section, name, get in FIELDS]
    kinds = sorted({kind for run in runs for kind in failures.get(run.pk, {})})
    for kind in kinds:
        rows.append(CompareRow("Failures", kind, [fmt(failures.get(run.pk, {}).get(kind, 0)) for run in runs]))
    return rows
