"""AIPerf's CSV metric cells ('Request Latency (ms)') are split without a quadratic regex.

The old pattern, `^(?P<name>.*?)\\s*\\((?P<unit>[^()]*)\\)$`, retried its lazy name at every split: a
cell of 'a', 4,094 spaces and 'b' took 44 ms, a 64 KiB cell seconds. The split must read every cell as
that pattern did.
"""

from __future__ import annotations

import re
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.records.formats.aiperf import _metric_header

OLD = re.compile(r"^(?P<name>.*?)\s*\((?P<unit>[^()]*)\)$")


def by_the_old_pattern(cell: str) -> tuple[str, str] | None:
    match = OLD.match(cell)
    return (match["name"], match["unit"]) if match else None


def test_real_cells_split_into_name_and_unit() -> None:
    assert _metric_header("Request Latency (ms)") == ("Request Latency", "ms")
    assert _metric_header("Output Sequence Length (tokens)") == ("Output Sequence Length", "tokens")
    assert _metric_header("Request Count") is None
    assert _metric_header("Time (a) (s)") == ("Time (a)", "s")


@settings(max_examples=2_000, deadline=None)
@given(st.text(alphabet="ab ()\n\t\x0b\x1c\u2028", max_size=12))
def test_every_cell_splits_as_the_pattern_did(cell: str) -> None:
    assert _metric_header(cell) == by_the_old_pattern(cell)


def test_a_long_cell_costs_linear_time() -> None:
    start = time.process_time()
    for cell in ("a" + " " * 2**16 + "b", "a" + " " * 2**16 + "(b)", "(" * 2**16 + ")"):
        _metric_header(cell)
    assert time.process_time() - start < 0.05  # the old pattern: seconds for the first cell alone
