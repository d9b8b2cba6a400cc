"""ITL, TPOT and E2E percentiles: nearest-rank, vLLM's definitions, a tool's figures kept, both import paths."""

from __future__ import annotations

import io
import random
from typing import Any

import pytest

from benchmarks.history import importer
from benchmarks.models import Run
from benchmarks.records.metrics import nearest_rank, summarize, tpot
from benchmarks.records.schema import SCHEMA_V2
from benchmarks.tests.builders import jsonl


def request(ok=True, output=None, elapsed=None, ttft=None):
    return (None, ok, 200 if ok else 500, None, None, 10, 100, output, None, elapsed, ttft)


def test_tpot_is_the_time_after_the_first_token_over_the_tokens_after_it():
    # vLLM calculate_metrics: (latency - ttft) / (output_len - 1), only when output_len > 1
    assert tpot(2.0, 0.5, 4) == 0.5  # 1.5 s for 3 tokens
    assert tpot(2.0, 0.5, 1) is None and tpot(2.0, 0.5, 0) is None and tpot(None, 0.5, 4) is None


def test_itl_pools_every_gap_of_the_ok_requests_and_takes_the_nearest_rank():
    rows = [request(output=3, elapsed=1.0, ttft=0.2), request(output=4, elapsed=2.0, ttft=0.5), request(ok=False)]
    itl = [[0.3, 0.5], [0.1, 0.2, 1.2], [9.0, 9.0]]  # the failed request's gaps are not counted
    summary = summarize(rows, None, itl)
    # gaps sorted: 0.1 0.2 0.3 0.5 1.2 (n=5): p50 rank ceil(2.5)=3 -> 0.3; p95 rank ceil(4.75)=5 -> 1.2
    assert (summary.itl_p50, summary.itl_p95) == (0.3, 1.2)
    # TPOT per request: (1.0-0.2)/2 = 0.4, (2.0-0.5)/3 = 0.5; p50 rank 1 -> 0.4, p95 rank 2 -> 0.5
    assert (summary.tpot_p50, summary.tpot_p95) == ((1.0 - 0.2) / 2, (2.0 - 0.5) / 3)
    # E2E over the ok requests: 1.0, 2.0 -> p50 1.0, p95 2.0
    assert (summary.e2e_p50, summary.e2e_p95) == (1.0, 2.0)


def test_a_request_of_one_token_has_no_tpot_and_requests_without_gaps_add_none():
    summary = summarize([request(output=1, elapsed=1.0, ttft=1.0), request(output=5, elapsed=2.0, ttft=1.0)], None,
                        [None, []])  # fmt: skip
    assert (summary.tpot_p50, summary.tpot_p95) == (0.25, 0.25)
    assert (summary.itl_p50, summary.itl_p95) == (None, None)
    assert summarize([request(output=5, elapsed=2.0, ttft=1.0)], None).itl_p50 is None  # no itl at all


def test_nearest_rank_is_exact_on_random_data():
    rng = random.Random(16)
    for n in (1, 2, 19, 20, 21, 100, 101, 997):
        gaps = [rng.random() for _ in range(n)]
        rows = [request(output=2, elapsed=1.0, ttft=0.5)] * n
        summary = summarize(rows, None, [[g] for g in gaps])
        ordered = sorted(gaps)
        for p, got in ((50, summary.itl_p50), (95, summary.itl_p95)):
            # the smallest value with at least p % of the values at or below it
            expected = next(v for i, v in enumerate(ordered, 1) if i * 100 >= p * n)
            assert got == expected == nearest_rank(ordered, p)


def test_itl_and_tpot_agree_on_a_request_whose_gaps_add_up_to_its_decode_time():
    # vLLM: tpot == mean of the request's gaps when every token came in its own event
    gaps = [0.01, 0.02, 0.03, 0.06]
    summary = summarize([request(output=5, elapsed=0.1 + sum(gaps), ttft=0.1)], None, [gaps])
    assert summary.tpot_p50 == pytest.approx(sum(gaps) / len(gaps))
    assert (summary.itl_p50, summary.itl_p95) == (0.02, 0.06)


# --- imports -------------------------------------------------------------------------------


def v2_request(run_id: str = "itl-1", **request: Any) -> dict[str, Any]:
    run = {"id": run_id, "model": "m", "tool": {"name": "vllm", "version": "0.9", "format": "vllm bench serve"}}
    return {"schema": SCHEMA_V2, "run": run, "request": {"ok": True, **request}}


def load(data: bytes) -> None:
    importer.import_bench_file(io.BytesIO(data), filename="t.jsonl", origin="command")


LATENCIES = ("e2e_p50", "e2e_p95", "itl_p50", "itl_p95", "tpot_p50", "tpot_p95")


@pytest.mark.django_db
def test_an_imported_v2_file_with_itl_fills_the_columns_and_refresh_summary_agrees():
    rng = random.Random(7)
    records = []
    for _ in range(40):
        gaps = [round(rng.uniform(0.001, 0.2), 6) for _ in range(rng.randint(0, 30))]
        ttft = round(rng.uniform(0.01, 1.0), 6)
        records.append(v2_request(ttft_s=ttft, elapsed_s=ttft + sum(gaps), output_tokens=len(gaps) + 1, itl_s=gaps))
    records.append(v2_request(ok=False, http_status=500, itl_s=[5.0, 5.0]))
    load(jsonl(*records))
    run = Run.objects.get(key="itl-1")
    imported = {name: getattr(run, name) for name in LATENCIES}

    ok = [r["request"] for r in records if r["request"]["ok"]]
    expected = summarize(
        [request(output=r["output_tokens"], elapsed=r["elapsed_s"], ttft=r["ttft_s"]) for r in ok],
        None,
        [r["itl_s"] for r in ok],
    )
    assert imported == {name: getattr(expected, name) for name in LATENCIES}
    assert run.itl_p95 is not None and run.itl_p95 < 5.0  # the failed request's gaps left out

    Run.objects.filter(pk=run.pk).update(**dict.fromkeys(LATENCIES))
    run.refresh_summary()  # the database's sort (models.itl_sql) and summarize() agree
    run.refresh_from_db()
    assert {name: getattr(run, name) for name in LATENCIES} == imported


@pytest.mark.django_db
def test_a_tool_summary_keeps_its_own_percentiles_over_a_sample_of_requests():
    run = {"id": "sampled", "model": "m", "tool": {"name": "vllm", "version": "0.9", "format": "vllm bench serve"}}
    stats = {"p50": 40.0, "p95": 90.0, "mean": 50.0}
    summary = {"schema": SCHEMA_V2, "run": run, "summary": {
        "n_requests": 100, "n_ok": 100, "requests_sampled": True,
        "itl_ms": stats, "tpot_ms": {"p50": 30.0, "p95": 60.0, "mean": 35.0}, "e2e_ms": {"p50": 900.0, "p95": 2000.0},
    }}  # fmt: skip
    sample = {"schema": SCHEMA_V2, "run": run, "request": {
        "ok": True, "ttft_s": 0.1, "elapsed_s": 0.5, "output_tokens": 3, "itl_s": [0.001, 0.002],
    }}  # fmt: skip
    load(jsonl(summary, sample))
    stored = Run.objects.get(key="sampled")
    assert (stored.itl_p50, stored.itl_p95) == (0.04, 0.09)
    assert (stored.tpot_p50, stored.tpot_p95, stored.e2e_p50, stored.e2e_p95) == (0.03, 0.06, 0.9, 2.0)
    assert stored.provenance["itl_p50"] == "file" and stored.provenance["tpot_p95"] == "file"
    stored.refresh_summary()  # the sample does not override them later either
    stored.refresh_from_db()
    assert (stored.itl_p50, stored.itl_p95, stored.tpot_p50) == (0.04, 0.09, 0.03)


# --- compare table and charts ------------------------------------------------------------------


@pytest.mark.django_db
def test_the_compare_table_shows_itl_tpot_and_e2e_side_by_side_with_their_source(client):
    from django.urls import reverse

    sampled_run = {"id": "tool", "model": "m", "tool": {"name": "vllm", "version": "0.9", "format": "vllm bench serve"}}
    tool_summary = {"n_requests": 10, "n_ok": 10, "itl_ms": {"p50": 12.5, "p95": 30.0}}
    load(jsonl(
        {"schema": SCHEMA_V2, "run": sampled_run, "summary": tool_summary},
        v2_request("kv", ttft_s=0.1, elapsed_s=0.4, output_tokens=4, itl_s=[0.1, 0.1, 0.1]),
    ))  # fmt: skip
    tool, kv = Run.objects.get(key="tool"), Run.objects.get(key="kv")
    page = client.get(reverse("run-compare"), {"run": [tool.pk, kv.pk]}).content.decode()
    row = page.split("<th>ITL p50</th>")[1].split("</tr>")[0]
    assert "12.50 ms" in row and "100.00 ms" in row
    assert "src-tool" in row  # the tool's own figure is tagged as such
    tpot_row = page.split("<th>TPOT p50</th>")[1].split("</tr>")[0]
    assert "100.00 ms" in tpot_row  # (0.4 - 0.1) / 3


@pytest.mark.django_db
def test_the_timeline_chart_plots_the_itl_percentile(client):
    from django.urls import reverse

    load(jsonl(
        v2_request("a", ts="2026-11-01T10:00:00Z", ttft_s=0.1, elapsed_s=0.4, output_tokens=4, itl_s=[0.05, 0.1, 0.15]),
        v2_request("b", ts="2026-11-02T10:00:00Z", ttft_s=0.1, elapsed_s=0.4, output_tokens=4, itl_s=[0.2, 0.2, 0.2]),
    ))  # fmt: skip
    response = client.get(reverse("chart-timeline"), {"metric": "itl_p95", "format": "json"})
    rows = {row["key"]: row["itl_p95"] for row in response.json()["rows"]}
    assert rows == {"a": 0.15, "b": 0.2}
    page = client.get(reverse("chart-timeline"), {"metric": "tpot_p50"}).content.decode()
    assert "TPOT p50 (s)" in page and "(E2E − TTFT) / (output tokens − 1)" in page
