"""The -kvu twins: a configuration recommended with one unified KV pool and with a pool per slot, the
same in every other flag, is one idea. The better ranked stands for both and names the other's flags.

For a workload that fits, both pools hold every request (the unified one holds concurrency × need, each
slot's own holds need); they differ in what happens past the workload — a longer request borrows from a
unified pool, and a crowd of them overflows it together (HTTP 500 for all in flight), while a pool per slot
stops that one request (HTTP 400 or a truncated output).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .recommend import Recommendation

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
            twin=" ".join(_differing(first, r)),
            reasons=[*first.reasons[:2], ("-kvu or not", TWIN_REASON), *first.reasons[2:]],  # after -c, -np
        )
    return kept


def _differing(kept: Recommendation, twin: Recommendation) -> list[str]:
    """The twin's flags that the kept command lacks or sets otherwise: twins differ only in -c and -kvu."""
    words = [] if twin.flags.ctx_size == kept.flags.ctx_size else [f"-c {twin.flags.ctx_size}"]
    return [*words, "-kvu" if twin.flags.kv_unified else "without -kvu"]
