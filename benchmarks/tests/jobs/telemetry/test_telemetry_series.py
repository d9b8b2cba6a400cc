"""The telemetry series: columns from samples, peaks kept through decimation, bounded size,
and whatever a server says never breaking a snapshot. Pure: no database, no server."""

from __future__ import annotations

import json
import threading

import orjson
import pytest

from benchmarks.jobs.telemetry.series import MAX_POINTS, MAX_SLOTS, Series
from benchmarks.records.storable import check_json

POOL = {"kind": "shared", "slots": 3, "slot_cells": 1024, "pool_cells": 1024, "from": "launch command"}


def slot(i: int, cells: int | None, busy: bool = True) -> dict:
    entry: dict = {"id": i, "n_ctx": 1024, "speculative": False, "is_processing": busy, "params": {"n_predict": 600}}
    if cells is not None:
        entry["n_prompt_tokens"] = cells
    return entry


def new_series() -> Series:
    return Series(0.25, POOL, {"slots": "ok", "metrics": "ok", "gpu": "none seen: no NVML"})


def stored(series: Series) -> dict:
    """The snapshot as the database will hold it: JSON, and storable on every engine."""
    data = series.snapshot()
    check_json(data, "telemetry")
    return json.loads(json.dumps(data, allow_nan=False))


def test_it_turns_samples_into_columns() -> None:
    series = new_series()
    series.add(0.0007, [slot(0, None, False), slot(1, None, False), slot(2, None, False)], None, None, tokens_out=0)
    metrics = {"requests_processing": 3.0, "requests_deferred": 0.0}
    series.add(0.0517, [slot(0, 217), slot(1, 217), slot(2, 216)], metrics, None, tokens_out=54)
    series.add(0.1020, [slot(0, 256), slot(1, 256, False), slot(2, 255)], metrics, None, tokens_out=168)
    data = stored(series)
    assert data["v"] == 1 and data["period_s"] == 0.25 and data["samples"] == 3
    assert data["pool"] == POOL
    assert data["sources"] == {"slots": "ok", "metrics": "ok", "gpu": "none seen: no NVML"}
    assert data["t"] == [0.0007, 0.0517, 0.102]
    assert data["cells"] == [[0, 217, 256], [0, 217, 256], [0, 216, 255]]
    assert data["busy"] == [0, 0b111, 0b101]
    assert data["processing"] == [None, 3, 3]
    assert data["deferred"] == [None, 0, 0]
    assert data["tokens_out"] == [0, 54, 168]
    assert "gpu" not in data
    assert data["peak"] == {"pool": 767, "pool_t": 0.102, "slots": [256, 256, 255], "from": "samples"}
    assert data["overflow"] is None


def test_metrics_columns_are_absent_when_metrics_were_never_read() -> None:
    series = new_series()
    series.add(0.1, [slot(0, 10)], None, None)
    series.add(0.2, [slot(0, 20)], None, None)
    data = stored(series)
    assert "processing" not in data and "deferred" not in data
    assert data["cells"] == [[10, 20]]
    series.add(0.3, [slot(0, 30)], {"unrelated": 1}, None)  # read, without these two: null entries
    data = stored(series)
    assert data["processing"] == data["deferred"] == [None, None, None]


def test_a_failed_poll_is_a_null_entry_not_a_zero() -> None:
    series = new_series()
    series.add(0.1, [slot(0, 10), slot(1, 12)], None, None)
    series.add(0.2, None, None, None)
    series.add(0.3, [slot(0, 30), slot(1, 31)], None, None)
    data = stored(series)
    assert data["cells"] == [[10, None, 30], [12, None, 31]]
    assert data["busy"] == [3, None, 3]
    assert data["samples"] == 3


def test_gpu_rows_become_per_gpu_columns() -> None:
    series = new_series()
    gpus = [
        {"name": "NVIDIA H200", "mem_total_mib": 143771, "mem_mib": 1200, "util_pct": 40.0, "power_w": 120.34},
        {"name": "NVIDIA H200", "mem_total_mib": 143771, "mem_mib": 900, "util_pct": 5, "power_w": 80},
    ]
    series.add(0.1, [slot(0, 5)], None, gpus)
    series.add(0.2, [slot(0, 6)], None, [{**gpus[0], "mem_mib": 1500}, gpus[1]])
    gpu = stored(series)["gpu"]
    assert gpu["names"] == ["NVIDIA H200", "NVIDIA H200"]
    assert gpu["mem_total_mib"] == [143771, 143771]
    assert gpu["mem_mib"] == [[1200, 1500], [900, 900]]
    assert gpu["util_pct"] == [[40, 40], [5, 5]]
    assert gpu["power_w"] == [[120.3, 120.3], [80.0, 80.0]]


def test_the_overflow_raises_the_peak_no_sample_saw() -> None:
    series = new_series()
    for k, t in enumerate([0.05, 0.10, 0.15, 0.20]):
        cells = 217 + 35 * k
        series.add(t, [slot(0, cells), slot(1, cells), slot(2, cells)], None, None)
    assert series.snapshot()["peak"]["from"] == "samples"
    overflow = {
        "t": 0.243,
        "pool_cells": 1024,
        "requests": [
            {"i": 0, "prompt": 200, "decoded": 142, "cells": 342},
            {"i": 1, "prompt": 200, "decoded": 142, "cells": 342},
            {"i": 2, "prompt": 200, "decoded": 141, "cells": 341},
        ],
    }
    series.set_overflow(overflow)
    overflow["requests"].clear()  # the series keeps its own copy
    data = stored(series)
    assert data["peak"]["pool"] == 1025 and data["peak"]["pool_t"] == 0.243
    assert data["peak"]["from"] == "overflow"
    assert data["peak"]["slots"] == [322, 322, 322]  # per slot: what samples saw (requests are not slots)
    assert len(data["overflow"]["requests"]) == 3


def test_a_smaller_overflow_leaves_the_sampled_peak() -> None:
    series = new_series()
    series.add(0.1, [slot(0, 900), slot(1, 100)], None, None)
    series.set_overflow({"t": 0.3, "requests": [{"i": 0, "cells": 400}, {"i": 1, "cells": "junk"}]})
    peak = stored(series)["peak"]
    assert peak == {"pool": 1000, "pool_t": 0.1, "slots": [900, 100], "from": "samples"}
    series.set_overflow(None)
    assert stored(series)["overflow"] is None


def test_decimation_keeps_every_peak_and_its_moment() -> None:
    series = new_series()
    n = MAX_POINTS * 5 + 3
    spikes = {137: 900, 4321: 1000, n - 2: 777}
    for k in range(n):
        c = spikes.get(k, k % 50)
        busy = k == 5555
        series.add(k * 0.01, [slot(0, c, busy), slot(1, 1)], {"requests_deferred": 9 if k == 7777 else 0}, None)
    data = stored(series)
    assert len(data["t"]) <= MAX_POINTS
    assert len(data["t"]) > MAX_POINTS // 2  # halved, not collapsed
    assert data["samples"] == n
    assert data["t"] == sorted(data["t"])
    assert data["t"][0] < 0.08 and data["t"][-1] >= (n - 5) * 0.01  # buckets of 8 samples, 0.01 s apart
    column = data["cells"][0]
    for k, c in spikes.items():
        assert c in column
        assert data["t"][column.index(c)] == round(k * 0.01, 4)  # the moment of the peak survives
    assert max(data["deferred"]) == 9
    assert any(b & 1 for b in data["busy"])
    assert data["peak"] == {"pool": 1001, "pool_t": 43.21, "slots": [1000, 1], "from": "samples"}


def test_points_stay_evenly_spaced_after_halving() -> None:
    series = new_series()
    for k in range(MAX_POINTS * 3):
        series.add(k * 0.25, [slot(0, k)], None, None)
    t = stored(series)["t"]
    gaps = {round(b - a, 4) for a, b in zip(t[:-1], t[1:], strict=True)}
    assert gaps == {1.0}  # four samples per point throughout (each at its maximum: the later one)


def test_sixty_four_slots_over_a_long_job_stay_bounded_in_bytes() -> None:
    series = new_series()
    gpus = [{"name": "G", "mem_total_mib": 81920, "mem_mib": 80000, "util_pct": 99, "power_w": 699.9}] * 8
    for k in range(4 * 3600):  # an hour at 4 Hz
        cells = [slot(i, 100_000 + k + i, k % 2 == 0) for i in range(64)]
        series.add(k * 0.25, cells, {"requests_processing": 64, "requests_deferred": 1000}, gpus, tokens_out=10**8)
    size = len(orjson.dumps(series.snapshot()))
    assert size < 2_500_000, size
    assert len(series.snapshot()["t"]) <= MAX_POINTS


def test_slots_beyond_the_cap_are_left_out() -> None:
    series = new_series()
    series.add(0.1, [slot(i, 1) for i in range(MAX_SLOTS + 50)], None, None)
    data = stored(series)
    assert len(data["cells"]) == MAX_SLOTS


JUNK = [
    -5,
    2**70,
    -(2**70),
    1e308,
    float("nan"),
    float("inf"),
    "342",
    "\x00",
    True,
    None,
    [1, 2],
    {"a": {"b": {"c": [1]}}},
    b"bytes",
    3.5,
]


@pytest.mark.parametrize("junk", JUNK, ids=repr)
def test_junk_from_the_server_never_breaks_a_snapshot(junk: object) -> None:
    series = new_series()
    series.add(0.1, [slot(0, 10)], None, None)
    series.add(
        0.2,
        [
            {"id": junk, "n_prompt_tokens": junk, "is_processing": junk},
            {"id": 1, "n_prompt_tokens": junk},
            junk,
        ],
        {"requests_processing": junk, "requests_deferred": junk},
        [{"name": junk, "mem_total_mib": junk, "mem_mib": junk, "util_pct": junk, "power_w": junk}, junk],
        tokens_out=junk,  # type: ignore[arg-type]
    )
    series.add(0.3, junk, junk, junk)  # type: ignore[arg-type]
    series.add(junk, [slot(0, 5)], None, None)  # type: ignore[arg-type]
    series.set_source("slots", junk)  # type: ignore[arg-type]
    data = stored(series)
    assert data["cells"][0][0] == 10
    assert data["peak"]["pool"] >= 10
    for column in data["cells"]:
        assert all(c is None or (type(c) is int and 0 <= c < 2**31) for c in column)
    assert all(v is None or (type(v) is int and v >= 0) for v in data["tokens_out"])
    assert "\x00" not in json.dumps(data)


def test_a_slot_list_that_is_not_a_list_is_an_unread_sample() -> None:
    series = new_series()
    series.add(0.1, {"id": 0, "n_prompt_tokens": 5}, None, None)  # type: ignore[arg-type]
    series.add(0.2, "not slots", None, None)  # type: ignore[arg-type]
    series.add(0.3, [], None, None)
    data = stored(series)
    assert data["busy"] == [None, None, 0]
    assert data["cells"] == []


def test_adding_and_snapshotting_from_two_threads_is_safe() -> None:
    series = new_series()
    done = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not done.is_set():
                data = series.snapshot()
                assert all(len(column) == len(data["t"]) for column in data["cells"])
                assert len(data["busy"]) == len(data["t"]) == len(data["tokens_out"])
        except BaseException as exc:  # noqa: BLE001 — surfaced below
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    for k in range(MAX_POINTS * 3):
        series.add(k * 0.01, [slot(0, k), slot(1, k // 2)], None, None, tokens_out=k)
    done.set()
    thread.join()
    assert errors == []
    assert series.snapshot()["samples"] == MAX_POINTS * 3


def test_busy_covers_the_first_53_slots_and_stays_storable() -> None:
    series = new_series()
    series.add(0.1, [slot(i, 1, True) for i in range(64)], None, None)
    data = stored(series)
    assert data["busy"] == [2**53 - 1]
    assert len(data["cells"]) == 64
