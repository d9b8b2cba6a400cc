"""Side-by-side comparison rows for runs, with the rows that differ marked and each figure's source.

Runs of different tools compare on the same figures: a summary-only run's are the tool's own
percentiles and counts, a kvlab run's are computed from its requests; when any compared run
holds a tool's summary, every figure says which it is (records.sources).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..models import Run
from ..records import outcomes, series_keys, sources
from ..records.catalogue import NOISE_FIGURES, NOISY_FACTOR


@dataclass(frozen=True, slots=True)
class CompareRow:
    section: str
    name: str
    values: list[str]
    sources: list[dict[str, str] | None] = field(default_factory=list)  # per run, when figures' sources are shown

    @property
    def differs(self) -> bool:
        return len(set(self.values)) > 1

    @property
    def cells(self) -> list[tuple[str, dict[str, str] | None]]:
        return list(zip(self.values, self.sources or [None] * len(self.values), strict=True))


NOT_RECORDED = series_keys.NOT_RECORDED  # a value the run does not hold: never "—", "— – —" or "?"


def fmt(value: Any, digits: int = 2, unit: str = "") -> str:
    if value is None or value == "":
        return NOT_RECORDED
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.{digits}f}{unit}"
    if isinstance(value, int):
        return f"{value:,}{unit}"
    return str(value)


def _pair(first: Any, second: Any, between: str, unit: str = "", digits: int = 2) -> str:
    """Two values of one row ("K / V", "min – max"): one "not recorded" where neither is."""
    if first in (None, "") and second in (None, ""):
        return NOT_RECORDED
    return f"{fmt(first, digits)}{between}{fmt(second, digits, unit)}"


def _ms(seconds: float | None) -> str:
    return fmt(None if seconds is None else seconds * 1000, 2, " ms")


def _rate(run: Run) -> str:
    return NOT_RECORDED if run.success_rate is None else f"{run.success_rate:.0%}"


def _tool(run: Run) -> str:
    name = sources.measured_by(run.tool, run.source)
    return fmt(f"{name} {run.tool_version}".strip() if name else "")


FIELDS: list[tuple[str, str, Callable[[Run], str]]] = [
    ("Run", "label", lambda r: fmt(r.label)),
    ("Run", "model", lambda r: fmt(r.model)),
    ("Run", "GPU", lambda r: fmt(r.gpu)),
    ("Run", "measured by", _tool),
    ("Run", "engine", lambda r: fmt(r.engine)),
    ("Run", "VRAM total / used (MiB)", lambda r: _pair(r.vram_total_mib, r.vram_used_mib, " / ")),
    ("Run", "started", lambda r: r.started_at.strftime("%Y-%m-%d %H:%M:%S") if r.started_at else NOT_RECORDED),
    ("Server", "ctx size (-c)", lambda r: fmt(r.ctx_size)),
    ("Server", "parallel (-np)", lambda r: fmt(r.parallel)),
    ("Server", "unified KV", lambda r: fmt(r.kv_unified)),
    ("Server", "K / V cache type", lambda r: _pair(r.cache_type_k, r.cache_type_v, " / ")),
    ("Server", "KV on GPU", lambda r: r.kv_on_gpu),
    ("Server", "flash attention", lambda r: fmt(r.flash_attn)),
    ("Server", "server flags", lambda r: fmt(r.server_flags)),
    ("Workload", "concurrency", lambda r: fmt(r.concurrency)),
    ("Workload", "request rate (configured)", lambda r: fmt(r.request_rate, 2, " req/s")),
    ("Workload", "prompt tokens (max)", lambda r: fmt(r.prompt_tokens_max)),
    ("Workload", "n_predict (max)", lambda r: fmt(r.n_predict_max)),
]
# Figures: (section, name, the Run column whose source it shows, how to show it)
FIGURES: list[tuple[str, str, str, Callable[[Run], str]]] = [
    ("Outcome", "outcome", "outcome", lambda r: outcomes.LABELS[r.outcome]),
    ("Outcome", "ok / total", "n_ok", lambda r: "—" if r.outcome == outcomes.UNKNOWN else f"{r.n_ok} / {r.n_requests}"),
    ("Outcome", "success rate", "success_rate", _rate),
    ("Speed", "tok/s per request, mean", "tok_s_mean", lambda r: fmt(r.tok_s_mean, 2, " tok/s")),
    (
        "Speed",
        "tok/s per request, min – max",
        "tok_s_min",
        lambda r: _pair(r.tok_s_min, r.tok_s_max, " – ", " tok/s"),
    ),
    ("Speed", "TTFT p50", "ttft_p50", lambda r: fmt(r.ttft_p50, 3, " s")),
    ("Speed", "TTFT p95", "ttft_p95", lambda r: fmt(r.ttft_p95, 3, " s")),
    ("Speed", "E2E p50", "e2e_p50", lambda r: fmt(r.e2e_p50, 3, " s")),
    ("Speed", "E2E p95", "e2e_p95", lambda r: fmt(r.e2e_p95, 3, " s")),
    ("Speed", "ITL p50", "itl_p50", lambda r: _ms(r.itl_p50)),
    ("Speed", "ITL p95", "itl_p95", lambda r: _ms(r.itl_p95)),
    ("Speed", "TPOT p50", "tpot_p50", lambda r: _ms(r.tpot_p50)),
    ("Speed", "TPOT p95", "tpot_p95", lambda r: _ms(r.tpot_p95)),
    ("Speed", "wall time", "effective_wall_s", lambda r: fmt(r.effective_wall_s, 1, " s")),
    ("Speed", "aggregate throughput", "throughput_tok_s", lambda r: fmt(r.throughput_tok_s, 2, " tok/s")),
]


def _source(run: Run, column: str, value: str) -> dict[str, str] | None:
    if value.replace(NOT_RECORDED, "").strip("—–/ ") == "":
        return None  # no figure, no source
    kind = sources.figure_source(run.provenance, column, has_summary=run.summary is not None)
    return {"tag": sources.SOURCE_TAGS[kind], "title": sources.SOURCE_WORDS[kind], "kind": kind}


def compare_rows(
    runs: Sequence[Run], failures: dict[int, dict[str, int]], stored: Mapping[int, int] | None = None
) -> list[CompareRow]:
    """The rows of the compare table. `stored`: the request rows stored per run that holds a tool's summary."""
    rows = [CompareRow(section, name, [get(run) for run in runs]) for section, name, get in FIELDS]
    show_sources = any(run.summary is not None for run in runs)
    for section, name, column, get in FIGURES:
        values = [get(run) for run in runs]
        kinds = [_source(run, column, v) for run, v in zip(runs, values, strict=True)] if show_sources else []
        rows.append(CompareRow(section, name, values, kinds))
    if show_sources:
        stored = stored or {}
        after_outcome = max(i for i, row in enumerate(rows) if row.section == "Outcome") + 1
        rows.insert(
            after_outcome,
            CompareRow(
                "Outcome",
                "requests",
                [
                    sources.requests_stored(
                        stored.get(run.pk, 0) if run.summary is not None else run.n_requests,
                        run.n_requests,
                        has_summary=run.summary is not None,
                        sampled=run.requests_sampled,
                    )
                    for run in runs
                ],
            ),
        )
        for key, name in (("n_failed", "failed (the tool's count)"), ("n_incomplete", "incomplete (the tool's count)")):
            if any((run.summary or {}).get(key) is not None for run in runs):
                rows.append(CompareRow("Failures", name, [fmt((run.summary or {}).get(key)) for run in runs]))
    kinds = sorted({kind for run in runs for kind in failures.get(run.pk, {})})
    for kind in kinds:
        rows.append(CompareRow("Failures", kind, [fmt(failures.get(run.pk, {}).get(kind, 0)) for run in runs]))
    return rows


def compare_warnings(runs: Sequence[Run]) -> list[str]:
    """Why these runs may not compare like with like: other tools, configurations or workloads."""
    rows = [{name: getattr(run, name) for name in (*series_keys.SERIES_FIELDS, "tool", "source")} for run in runs]
    return series_keys.like_with_like(rows)


def noisy_pairs(runs: Sequence[Run]) -> list[str]:
    """Runs of one configuration and workload, by one tool, whose figures differ by more than
    NOISY_FACTOR: one of them (or both) was measured on a disturbed machine."""
    found = []
    for i, first in enumerate(runs):
        for second in runs[i + 1 :]:
            same = series_keys.key(vars(first)) == series_keys.key(vars(second)) and (first.tool, first.source) == (
                second.tool,
                second.source,
            )
            if not same:
                continue
            for column, words, unit, _ in NOISE_FIGURES:
                a, b = getattr(first, column), getattr(second, column)
                if a is None or b is None or min(a, b) <= 0:
                    continue
                factor = max(a, b) / min(a, b)
                if factor > NOISY_FACTOR:
                    found.append(
                        f"{first.key} and {second.key} share their configuration and workload, yet their {words} "
                        f"differs {factor:.1f}× ({a:,.3g} vs {b:,.3g} {unit}, more than {NOISY_FACTOR:g}×): "
                        "noisy — a loaded machine, a cold start or another client on the server; rerun before "
                        "trusting either"
                    )
    return found
