"""bench/speed_accuracy.py over the public llama-bench rows, so it cannot rot, and the rows themselves:
each with its source, a positive speed, a test llama-bench names, and none estimated from its own figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "bench" / "data" / "speed_validation.jsonl"


def test_every_validation_row_cites_its_source_and_reads_as_llama_bench_prints_it() -> None:
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    assert len(rows) >= 100
    assert len({r["gpu"] for r in rows}) >= 20 and {"CUDA", "ROCm", "Vulkan", "Metal", "CPU"} <= {
        r["backend"] for r in rows
    }
    for row in rows:
        assert row["source"].startswith("https://"), row
        assert row["tok_s"] > 0 and row["test"].strip()[:2] in ("pp", "tg"), row


def test_the_accuracy_script_scores_the_rows_it_can_and_says_why_not_for_the_rest() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "speed_accuracy.py"), "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "decode   all     all" in out and "prefill  all     all" in out and "not estimated:" in out
    rows = json.loads((ROOT / "bench" / "out" / "speed_accuracy.json").read_text())
    for row in rows:
        assert (row["estimate_tok_s"] is None) == bool(row["why_not"]), row
        if "pull/4812" in row["source"]:
            assert row["why_not"].startswith("in sample")  # HANDOFF_S comes from these rows
