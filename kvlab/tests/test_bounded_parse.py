"""Outside JSON and YAML within bounds (kvlab.bounded_parse): refused with the reason, at a cost that
follows the bytes sent, never the structure they describe."""

from __future__ import annotations

import contextlib
import io
import json
import math
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import orjson
import pytest
import yaml

from kvlab import bounded_parse
from kvlab.bounded_parse import MAX_DEPTH, Refused

BUDGET_CPU_S = 1.0
BUDGET_PEAK_MIB = 256


def alias_bomb(levels: int = 8) -> bytes:
    """The reported YAML bomb: eight levels of anchors, each a list of ten aliases of the last (10**8 nodes)."""
    lines = [b"lol: &a0 [" + b", ".join([b"lol"] * 10) + b"]"]
    for level in range(1, levels + 1):
        lines.append(b"a%d: &a%d [" % (level, level) + b", ".join([b"*a%d" % (level - 1)] * 10) + b"]")
    return b"\n".join(lines) + b"\n"


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def cost(call: Callable[[], Any]) -> tuple[float, float]:
    """(CPU seconds, peak MiB of Python allocations) of a call, whatever it raises: the peak in a second,
    traced pass, so that tracing does not inflate the CPU figure."""
    start = time.process_time()
    with contextlib.suppress(Exception):
        call()
    spent = time.process_time() - start
    tracemalloc.start()
    try:
        with contextlib.suppress(Exception):
            call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return spent, peak / 2**20


# -- YAML -------------------------------------------------------------------------------------


def test_the_alias_bomb_is_refused_before_anything_is_built() -> None:
    bomb = alias_bomb()
    assert len(bomb) < 600
    with pytest.raises(Refused, match=r"a YAML alias \(\*a0\) at line 2: kvlab reads YAML without aliases"):
        bounded_parse.load_yaml(bomb)
    spent, peak = cost(lambda: bounded_parse.load_yaml(bomb))
    assert spent < 0.1 and peak < 4


def test_a_merge_key_naming_an_anchor_is_an_alias_and_refused() -> None:
    with pytest.raises(Refused, match="alias"):
        bounded_parse.load_yaml(b"base: &b {x: 1}\nmore:\n  <<: *b\n  y: 2\n")


def test_an_anchor_no_alias_names_is_read() -> None:
    assert bounded_parse.load_yaml(b"a: &x [1, 2]\nb: 3\n") == {"a": [1, 2], "b": 3}


def test_yaml_within_the_bounds_reads_as_the_safe_loader_reads_it() -> None:
    document = {"benchmarks": [{"metrics": {"ttft": [0.5, 1.5]}, "ok": True, "n": None}], "version": 1}
    text = yaml.dump(document).encode()
    assert bounded_parse.load_yaml(text) == yaml.safe_load(text) == document


def test_yaml_past_the_node_cap_is_refused_from_its_events() -> None:
    flood = b"benchmarks: [" + b"a," * bounded_parse.MAX_YAML_NODES + b"a]\n"
    with pytest.raises(Refused, match=r"more than 100,000 YAML nodes.*save it as JSON"):
        bounded_parse.load_yaml(flood)
    spent, peak = cost(lambda: bounded_parse.load_yaml(flood))
    assert spent < BUDGET_CPU_S and peak < 16  # counted from events: the nodes are never built


def test_yaml_nested_past_max_depth_is_refused() -> None:
    deep = b"a: " + nested(MAX_DEPTH + 1) + b"\n"
    with pytest.raises(Refused, match="nested more than 64 levels deep"):
        bounded_parse.load_yaml(deep)
    assert bounded_parse.load_yaml(b"a: " + nested(MAX_DEPTH - 1) + b"\n") is not None


def test_a_python_tag_is_still_refused_by_the_safe_loader() -> None:
    with pytest.raises(yaml.YAMLError):
        bounded_parse.load_yaml(b"!!python/object/apply:os.system ['true']\n")


# -- JSON -------------------------------------------------------------------------------------


@pytest.mark.parametrize("parse", [bounded_parse.loads, bounded_parse.python_loads], ids=["orjson", "json"])
@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1_025, 200_000])
def test_json_nested_past_max_depth_is_refused_by_both_parsers(parse: Callable[..., Any], depth: int) -> None:
    with pytest.raises(Refused, match="nested more than 64 levels deep"):
        parse(nested(depth))
    spent, peak = cost(lambda: parse(nested(depth)))
    assert spent < 0.2 and peak < 16


def test_json_nested_max_depth_levels_is_read() -> None:
    value = bounded_parse.loads(b'{"a":' * (MAX_DEPTH - 1) + b"[1]" + b"}" * (MAX_DEPTH - 1))
    for _ in range(MAX_DEPTH - 1):
        value = value["a"]
    assert value == [1]


def test_depth_counts_objects_and_lists_alike_in_every_branch() -> None:
    wide_then_deep = [1, {"x": 2}, [[3]], {"deep": json.loads(nested(MAX_DEPTH - 1))}]  # 1 + 1 + 63 levels
    with pytest.raises(Refused):
        bounded_parse.check_depth(wide_then_deep)
    bounded_parse.check_depth(wide_then_deep[:3])


def test_a_flood_of_short_values_is_refused_before_it_is_built() -> None:
    flood = b"[" + b"{}," * (bounded_parse.MAX_VALUES // 2) + b"{}]"  # 6 MB that would build 2 M dicts
    with pytest.raises(Refused, match=r"may hold 4,000,003 values .* more than the 4,000,000 kvlab parses"):
        bounded_parse.loads(flood)
    spent, peak = cost(lambda: bounded_parse.loads(flood))
    assert spent < 0.2 and peak < 1


def test_text_full_of_commas_counts_against_the_cap_only_when_long() -> None:
    assert bounded_parse.loads(b'["' + b"," * 1000 + b'"]') == ["," * 1000]
    bounded_parse.check_values(b"," * 99, max_values=100)
    with pytest.raises(Refused):
        bounded_parse.check_values(b"," * 100, max_values=100)


def test_loads_raises_orjsons_error_for_what_is_not_json_unless_it_falls_back() -> None:
    with pytest.raises(orjson.JSONDecodeError):
        bounded_parse.loads(b"[NaN]")
    [nan, inf] = bounded_parse.loads(b"[NaN, 1e400]", fallback=True)
    assert math.isnan(nan) and inf == math.inf
    assert bounded_parse.loads(b"[NaN]", fallback=True, parse_constant=lambda word: None) == [None]
    with pytest.raises(json.JSONDecodeError):
        bounded_parse.loads(b"{nope", fallback=True)


def test_python_loads_keeps_pythons_integers_and_hooks() -> None:
    assert bounded_parse.python_loads("[18446744073709551616]") == [2**64]  # orjson would make it a float
    with pytest.raises(ValueError, match="refused"):
        bounded_parse.python_loads(
            "[Infinity]", parse_constant=lambda word: (_ for _ in ()).throw(ValueError("refused"))
        )


def test_raw_decode_reads_appended_values_within_the_bound() -> None:
    decoder = json.JSONDecoder()
    assert bounded_parse.raw_decode(decoder, '{"a": 1} {"b": 2}', 0) == ({"a": 1}, 8)
    with pytest.raises(Refused, match="nested"):
        bounded_parse.raw_decode(decoder, "[" * 100_000 + "]" * 100_000, 0)


# -- bytes ------------------------------------------------------------------------------------


def test_read_capped_reads_at_most_one_byte_past_the_cap() -> None:
    handle = io.BytesIO(b"x" * 2048)
    with pytest.raises(Refused, match=r"larger than 1 KiB, the most kvlab reads of one document"):
        bounded_parse.read_capped(handle, 1024)
    assert handle.tell() == 2048  # one chunk past the cap at most
    assert bounded_parse.read_capped(io.BytesIO(b"x" * 1024), 1024) == b"x" * 1024
