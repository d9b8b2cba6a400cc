"""`-ot` patterns come from anyone who opens the sizing page: they are matched in linear time.

Python's backtracking `re` takes minutes on `(.*)*(.*)*Q` against one tensor name; kvlab matches the
whole override list as one RE2 set. What a pattern matches must not change: on patterns of the
constructs llama.cpp users write (literals, `\\.`, `\\d`, classes, groups, alternation,
quantifiers, anchors) the set's first match is Python's first match, tensor by tensor.
"""

from __future__ import annotations

import re
import resource
import time
from urllib.parse import urlencode

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sizing.placement import overrides as ot

NAMES = [
    f"blk.{layer}.{part}.weight"
    for layer in (0, 1, 9, 10, 31)
    for part in ("attn_q", "attn_k", "ffn_up", "ffn_down", "ffn_gate_exps", "ffn_up_exps", "ffn_gate_inp")
] + ["token_embd.weight", "output_norm.weight", "output.weight", "blk.3.ffn_up_chexps.weight"]

HOSTILE = r"(.*)*(.*)*(.*)*Q"  # catastrophic backtracking: 2^n paths over a name of n characters


def first_match_by_python(name: str, patterns: list[str]) -> int | None:
    return next((i for i, p in enumerate(patterns) if re.search(p, name, re.ASCII)), None)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def test_a_catastrophic_pattern_is_matched_in_linear_time() -> None:
    rules = ot.parse_ot(f"{HOSTILE}=CPU,exps=CPU", ["CUDA0"])
    start = cpu_seconds()
    assert [ot.match(name, rules) for name in NAMES] == ["CPU" if "exps" in n else None for n in NAMES]
    assert cpu_seconds() - start < 0.5  # Python's re: minutes for the first name alone


def test_the_sizing_page_with_a_catastrophic_pattern_costs_under_a_second(client) -> None:
    query = {
        "model": "llama-3.1-8b",
        "quant": "Q4_K_M",
        "gpu_mib": "8000",
        "format": "json",
        "command": f"llama-server -m x.gguf -ot '{HOSTILE}=CPU' -ot 'blk\\.0\\.=CPU'",
    }
    client.get("/sizing/?" + urlencode({**query, "command": "llama-server -m x.gguf"}))  # the catalogue, loaded once
    start, wall = cpu_seconds(), time.monotonic()
    answer = client.get("/sizing/?" + urlencode(query))
    spent = cpu_seconds() - start
    assert answer.status_code == 200
    assert answer.json()["fit"]["status"] == "success"  # sized, with the pattern applied (it matches nothing)
    assert spent < 1.0 and time.monotonic() - wall < 5, spent


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        (r"(blk)\.\1=CPU", "backtracking regex engine"),  # a backreference
        (r"(?!x)blk=CPU", "backtracking regex engine"),  # a lookahead
        (r"(?<!x)blk=CPU", "reads differently"),  # a lookbehind: Python's, not ECMAScript's
    ],
)
def test_a_pattern_that_needs_backtracking_is_refused_with_the_reason(pattern: str, words: str) -> None:
    with pytest.raises(ot.OverrideError, match=words):
        ot.parse_ot(pattern, ["CUDA0"])


def test_the_page_says_why_it_refused_a_backreference(client) -> None:
    query = {"model": "llama-3.1-8b", "quant": "Q4_K_M", "gpu_mib": "8000", "format": "json"}
    answer = client.get("/sizing/?" + urlencode({**query, "command": r"llama-server -ot '(a)\1=CPU'"}))
    assert "backtracking regex engine" in answer.content.decode()


def test_the_largest_override_list_llama_cpp_takes_still_matches() -> None:
    rules = ot.n_cpu_moe(4095)
    ot.validate(rules, ["CUDA0"])
    assert ot.match("blk.4094.ffn_up_exps.weight", rules) == "CPU"
    assert ot.match("blk.4095.ffn_up_exps.weight", rules) is None
    assert ot.match("blk.7.attn_q.weight", rules) is None


ATOMS = st.sampled_from(
    [r"blk", r"\.", r"\d", r"\d+", r"ffn", r"_", r"exps", r"up", r"[0-9]", r"[a-z]+", r".", r".*", r"weight", "1", "0"]
)


@st.composite
def patterns(draw: st.DrawFn) -> str:
    parts = draw(st.lists(ATOMS, min_size=1, max_size=5))
    if draw(st.booleans()):
        parts = ["(" + "|".join(draw(st.lists(ATOMS, min_size=2, max_size=3))) + ")", *parts]
    if draw(st.booleans()):  # a quantified group, possibly nested in another: where backtracking explodes
        parts = ["(" + "".join(parts) + ")" + draw(st.sampled_from(["?", "*", "+", "{1,2}"]))]
    return ("^" if draw(st.booleans()) else "") + "".join(parts) + ("$" if draw(st.booleans()) else "")


@settings(max_examples=300, deadline=None)
@given(st.lists(patterns(), min_size=1, max_size=6))
def test_the_set_picks_the_same_override_as_a_pattern_by_pattern_search(drawn: list[str]) -> None:
    rules = [(p, f"B{i}") for i, p in enumerate(drawn)]
    for name in NAMES:
        first = first_match_by_python(name, drawn)
        assert ot.match(name, rules) == (None if first is None else f"B{first}"), (name, drawn)
