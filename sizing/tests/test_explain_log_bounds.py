# ruff: noqa: E501  (real log lines are long)
"""What a hostile start-up log costs: anyone may post one to /sizing/explain-log/.

Each line below is the worst kvlab could build for one of the parser's regular expressions as they
were: a pattern whose repetitions could retry each other (two lazy runs, a greedy word searched for at
every character, a lazy key followed by spaces) took 5 to 170 ms on one 4,096-character line, 510 such
lines 27 s or more. Now every pattern is linear in its line: each line costs well under a millisecond,
and a whole request of 2 MiB of them stays within the 1 s of CPU that any input may cost. The page says what
it read (lines, size, the lines it knew) instead of sending the log back.
"""

from __future__ import annotations

import contextlib
import time

import pytest

from sizing.server_log import MAX_ITEMS, MAX_LINE_CHARS, MAX_LOG_LINES, parse_startup_log
from sizing.tests.support import text

from .tiny_llama_log import TINY_LLAMA, TINY_WEIGHTS

URL = "/sizing/explain-log/"
LINE = 4096  # MAX_LINE_CHARS: a longer line is not read at all


def fill(head: str, unit: str, tail: str = "", length: int = LINE) -> str:
    """`head`, then `unit` repeated, then `tail`: one line of `length` characters at most."""
    return head + unit * ((length - len(head) - len(tail)) // len(unit)) + tail


# (the pattern a line was built against: its head, the unit repeated, its tail)
SHAPES = [
    ("_CUDA_DEVICE: (.+?), (?:…|.+?\\(0x…\\)), VMM", "Device 0: ", ", ", ""),
    ("_BUFFER: (\\S+)\\s+… searched", "load_tensors: ", "a", ""),
    ("_BUFFER under a KV function", "llama_kv_cache: ", "x", ""),
    ("_KEY_VALUE: (\\w[\\w ]*?)\\s*=", "print_info: a", " ", "b"),
    ("_BREAKDOWN_ROW: (?: \\((.*?)\\))? searched", "common_memory_breakdown_print: ", "| - a (", ""),
    ("_USING_DEVICE: \\((.*)\\) searched", "llama_model_load_from_file_impl: ", "using device a (", ""),
]
WORST_LINES = [(pattern, fill(head, unit, tail)) for pattern, head, unit, tail in SHAPES]
IDS = [pattern for pattern, *_ in SHAPES]


def cpu_of(action) -> float:
    start = time.process_time()
    action()
    return time.process_time() - start


def parse_quietly(log: str) -> None:
    with contextlib.suppress(ValueError):  # a line of bait alone is no start-up log: refused, which is timed
        parse_startup_log(log)


def test_every_worst_line_is_its_own_length_long():
    assert all(len(line) <= MAX_LINE_CHARS == LINE for _, line in WORST_LINES)


@pytest.mark.parametrize(("pattern", "line"), WORST_LINES, ids=IDS)
def test_the_worst_line_for_each_pattern_costs_about_as_much_as_reading_it(pattern, line):
    # best of five: the machine is shared; a quadratic pattern cost 5-170 ms here, linear ones under 1 ms
    assert min(cpu_of(lambda: parse_quietly(line)) for _ in range(5)) < 0.004, pattern


@pytest.mark.parametrize(("pattern", "head", "unit", "tail"), SHAPES, ids=IDS)
def test_a_line_four_times_longer_costs_about_four_times_as_much(pattern, head, unit, tail):
    """Linear, not merely fast at this size: 80 lines of a quarter the length cost more than half what 20
    whole ones cost (a quadratic pattern: a quarter)."""
    line, quarter = fill(head, unit, tail), fill(head, unit, tail, LINE // 4)
    full = min(cpu_of(lambda: [parse_quietly(line) for _ in range(20)]) for _ in range(3))
    short = min(cpu_of(lambda: [parse_quietly(quarter) for _ in range(80)]) for _ in range(3))
    assert short > full / 2, pattern


@pytest.mark.django_db
@pytest.mark.parametrize(("pattern", "line"), WORST_LINES, ids=IDS)
def test_a_request_of_510_worst_lines_costs_under_a_second_and_is_explained(client, pattern, line):
    log = TINY_LLAMA + "\n".join([line] * 510)
    assert len(log) > 2_000_000  # what the hostile pass sent: 510 lines of 4,096 characters
    elapsed = min(cpu_of(lambda: client.post(URL, {"log": log, "weights": str(TINY_WEIGHTS)})) for _ in range(2))
    response = client.post(URL, {"log": log, "weights": str(TINY_WEIGHTS)})
    page = text(response)
    assert response.status_code == 200 and "kvlab tiny llama" in page
    assert elapsed < 1.0, f"{pattern}: {elapsed:.2f} s of CPU"
    assert len(response.content) < 200_000  # the 2 MB log is not sent back
    assert line[100:200] not in page


@pytest.mark.django_db
def test_the_page_says_what_it_read_and_does_not_send_the_log_back(client):
    marker = "a line only the sender has seen 7f3a"
    response = client.post(URL, {"log": TINY_LLAMA + marker + "\n", "weights": str(TINY_WEIGHTS)})
    page = text(response)
    n_lines = TINY_LLAMA.count("\n") + 2  # the marker's line and the empty one after it
    assert response.status_code == 200
    assert f"Read from the log you sent: {n_lines} lines" in page and "of them a line kvlab knows" in page
    assert marker not in page  # neither in the textarea nor anywhere else
    assert "The lines kvlab read (" in page
    assert "llama_kv_cache: size = 2.25 MiB ( 768 cells" in page  # a line that mattered, shown
    assert "the log is not sent back: paste it again" in page


@pytest.mark.django_db
def test_lines_past_the_line_bound_are_counted_not_read(client):
    log = TINY_LLAMA + "\n".join(["print_info: n_vocab = 1"] * (MAX_LOG_LINES + 500))
    started = time.process_time()
    response = client.post(URL, {"log": log})
    assert time.process_time() - started < 1.0
    page = text(response)
    assert response.status_code == 200
    unread = TINY_LLAMA.count("\n") + MAX_LOG_LINES + 500 - MAX_LOG_LINES
    assert f"Only the first {MAX_LOG_LINES:,} lines were read; the {unread:,} after them were not" in page


@pytest.mark.django_db
def test_an_overlong_line_is_counted_not_read(client):
    log = TINY_LLAMA + "llama_context: n_ctx = 99" + " " * LINE + "\n"
    page = text(client.post(URL, {"log": log}))
    assert (
        "1 line longer than 4,096 characters (a template or vocabulary dump, not configuration) were not read" in page
    )
    assert "n_ctx 2304" in page  # the long line's n_ctx was not taken


def test_repeated_lines_are_kept_to_what_a_start_up_log_holds():
    devices = "\n".join(f"cmn common_param:   - DEV{i} : a device (1024 MiB, 1000 MiB free)" for i in range(5000))
    slots = "\n".join(f"slot load_model: id {i} | task -1 | new slot, n_ctx = 768" for i in range(5000))
    kv = "\n".join(f"llama_model_loader: - kv {i}: key.{i} u32 = {i}" for i in range(9000))
    started = time.process_time()
    log = parse_startup_log(TINY_LLAMA + "\n".join([devices, slots, kv]))
    assert time.process_time() - started < 1.0  # the device list was searched once a line: 5,000² before
    assert len(log.devices) == MAX_ITEMS["devices"] and len(log.slots) == MAX_ITEMS["slots"]
    assert len(log.metadata) + len(log.metadata_truncated) == MAX_ITEMS["metadata"]
    assert len(log.lines_read) == MAX_ITEMS["lines_read"]
    assert log.n_over_bounds > 0 and "repeated lines past what a start-up log holds" in " ".join(log.reading_notes)
    assert log.metadata["general.name"] == "kvlab tiny llama"  # the real lines, first, are all kept


@pytest.mark.django_db
def test_an_array_nested_past_the_json_readers_depth_is_a_cut_value_not_a_500(client):
    deep = "llama_model_loader: - kv 5: tokenizer.ggml.merges arr[str,1] = " + "[" * 2000 + "]" * 2000
    log = parse_startup_log(TINY_LLAMA + deep + "\n")
    assert "tokenizer.ggml.merges" in log.metadata_truncated
    assert client.post(URL, {"log": TINY_LLAMA + deep}).status_code == 200


def test_the_rewritten_patterns_read_what_the_old_ones_read():
    log = parse_startup_log(
        "\n".join(
            [
                "  Device 0: NVIDIA GeForce RTX 4090, compute capability 8.9, VMM: yes, VRAM: 24080 MiB",
                "  Device 1: AMD Radeon RX 7900 XTX, gfx1100 (0x1100), VMM: no, Wave Size: 32",
                "  Device 2: A, B, compute capability 7.5, VMM: yes",
                "  Device 3: no capability here, VMM: yes",
                "llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 4090) (0000:01:00.0) - 23500 MiB free",
                "common_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |",
                "common_memory_breakdown_print: |   - CUDA0 (RTX 4090)   | 24080 = 1234 + (22000 = 20000 +    1500 +     500) +         846 |",
                "load_tensors:        CUDA0 model buffer size =  1234.50 MiB",
                "print_info: file type   = Q4_K - Medium",
                "llama_context: n_ctx                 = 4096",
            ]
        )
    )
    cuda = {d["name"]: d for d in log.devices}
    assert cuda["CUDA0"] | {} == {
        "name": "CUDA0",
        "description": "NVIDIA GeForce RTX 4090",
        "vmm": True,
        "compute_capability": 8.9,
        "total_mib": 24080,
        "free_mib": 23500,
    }
    assert cuda["CUDA1"] == {"name": "CUDA1", "description": "AMD Radeon RX 7900 XTX", "vmm": False}
    assert cuda["CUDA2"]["description"] == "A, B" and "CUDA3" not in cuda
    assert log.memory_breakdowns == [
        [
            {
                "name": "CUDA0",
                "description": "RTX 4090",
                "total": 24080,
                "free": 1234,
                "self": 22000,
                "model": 20000,
                "context": 1500,
                "compute": 500,
                "unaccounted": 846,
            }
        ]
    ]
    assert [(b.kind, b.device, b.mib) for b in log.buffers] == [("model", "CUDA0", "1234.50")]
    assert log.model_file_type == "Q4_K - Medium" and log.n_ctx == 4096
