"""The -kvu twins: a configuration recommended with one unified KV pool and with a pool per slot, the
same in every other flag, is one idea. The better ranked stands for both and names the other's flags.

For a workload that fits, both pools hold every request (the unified one holds concurrency × need, each
slot's own holds need); they differ in what happens past the workload — a longer request borrows from a
unified pool, and a crowd of them overflows it together (HTTP 500 for all in flight), while a pool per slot
stops that one request (HTTP 400 or a truncated output).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .recommend import Recommendation

FLAG = re.compile(r"-[A-Za-z-]")  # a flag, not a value such as -1
TWIN_REASON = (
    "both pools hold this workload: -kvu shares one pool among the slots (a longer request can borrow, and too "
    "many long ones overflow it together: HTTP 500 for all in flight); without it each slot has its own "
    "(a request past its slot fails alone: HTTP 400, or a truncated output)"
)


def merge_twins(ranked: Sequence[Recommendation]) -> list[Recommendation]:
    """`ranked` (best first) with each configuration's lower-ranked twin folded into it."""
    kept: list[Recommendation] = []
    at: dict[object, int] = {}
    for r in ranked:
        if (r.flags.parallel or 1) < 2:
            kept.append(r)
            continue
        key = (replace(r.flags, kv_unified=None, ctx_size=None), r.placement)
        if key not in at:
            at[key] = len(kept)
            kept.append(r)
            continue
        first = kept[at[key]]
        if first.twin:
            continue  # a third alike (none today): the first twin says it
        kept[at[key]] = replace(
            first,
            twin=" ".join(_differing(first.command, r.command)),
            reasons=[*first.reasons[:2], ("-kvu or not", TWIN_REASON), *first.reasons[2:]],  # after -c, -np
        )
    return kept


def _differing(kept: list[str], twin: list[str]) -> list[str]:
    """The twin's flags (with their values) that the kept command lacks or sets otherwise, and the ones it drops."""

    def pairs(command: list[str]) -> dict[str, str]:
        out, i = {}, 3  # after llama-server -m MODEL
        while i < len(command):
            value = command[i + 1] if i + 1 < len(command) and not FLAG.match(command[i + 1]) else ""
            out[command[i]] = value
            i += 2 if value else 1
        return out

    a, b = pairs(kept), pairs(twin)
    words = [f"{flag} {value}".strip() for flag, value in b.items() if a.get(flag) != value]
    words += [f"without {flag}" for flag in a if flag not in b]
    return words
