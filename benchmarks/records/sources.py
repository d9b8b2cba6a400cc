"""Where a run's figures come from: the tool's own summary, derived from it, or kvlab's requests. Pure.

One rule for the run page, the compare table and the charts (the import pipeline writes
`Run.provenance`; this module only reads it):

* a figure whose provenance is "file" is the tool's own value (converted to kvlab's units);
* "derived" is computed by kvlab from the tool's values (decode tok/s = 1000 / mean TPOT);
* a figure without provenance was computed by kvlab from the run's stored requests.

A run field's provenance ("file", "declared", "derived") says the same of its configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TOOL = "tool"  # the tool's own figure, from its file
DERIVED = "derived"  # computed by kvlab from the tool's figures
REQUESTS = "requests"  # computed by kvlab from the stored requests
DECLARED = "declared"  # a run field the user declared on import

# provenance value -> source of a figure
_FIGURE_SOURCE = {"file": TOOL, "derived": DERIVED, "declared": DECLARED}
SOURCE_WORDS = {
    TOOL: "the tool's own figure, from its file",
    DERIVED: "derived by kvlab from the tool's figures",
    REQUESTS: "computed by kvlab from the stored requests",
    DECLARED: "declared on import",
}
SOURCE_TAGS = {TOOL: "tool", DERIVED: "derived", REQUESTS: "kvlab", DECLARED: "declared"}
# What a run field's provenance says, beside the field.
FIELD_WORDS = {"file": "from the file", "declared": "declared", "derived": "derived"}

# Run columns that hold a figure, and the one whose provenance stands for a computed one.
_STANDS_FOR = {"success_rate": "n_ok", "outcome": "n_ok"}


def provenance_key(column: str) -> str:
    """The provenance entry that says where a figure came from (a rate's is its count's)."""
    return _STANDS_FOR.get(column, column)


def kind_of(provenance_value: str | None) -> str:
    """TOOL, DERIVED or REQUESTS from one provenance value of a figure ("file", "derived", absent)."""
    return _FIGURE_SOURCE.get(provenance_value or "", REQUESTS)


def figure_source(provenance: Mapping[str, str] | None, column: str, *, has_summary: bool = False) -> str:
    """TOOL, DERIVED or REQUESTS for one of the run's figures (a Run column, or success_rate/outcome)."""
    given = (provenance or {}).get(_STANDS_FOR.get(column, column))
    if given in _FIGURE_SOURCE:
        return _FIGURE_SOURCE[given]
    if column in _STANDS_FOR and has_summary:
        return TOOL  # a summary's counts are always the tool's
    return REQUESTS


def source_note(source: str, tool: str) -> str:
    """A short phrase for a chart's hover: whose figure this is."""
    name = tool or "the tool"
    if source == TOOL:
        return f"{name}'s own figure"
    if source == DERIVED:
        return f"derived from {name}'s figures"
    return "kvlab, from the stored requests"


def requests_stored(n_stored: int, n_requests: int, *, has_summary: bool, sampled: bool) -> str:
    """What the run's stored request rows are: none (the tool's aggregates), a sample, or all of them."""
    if not has_summary:
        return f"all {n_stored:,} stored"
    if n_stored == 0:
        return "none stored — the tool's aggregates"
    if sampled or n_stored < n_requests:
        return f"sampled: {n_stored:,} of {n_requests:,} stored"
    return f"all {n_stored:,} stored"


def measured_by(tool: str, source: str) -> str:
    """The tool that measured a run: its own name, "kvlab" for a run kvlab executed, else "" (unknown)."""
    return tool or ("kvlab" if source == "executed" else "")


def tool_label(tool: str, engine: str) -> str:
    """ "vllm on vllm" reads badly: the tool, and the engine when it says something more."""
    if not tool:
        return engine
    return tool if not engine or engine == tool else f"{tool} · {engine}"


def row_sources(row: Mapping[str, Any], column: str) -> str:
    """figure_source for a query row holding provenance (and summary presence as has_summary)."""
    return figure_source(row.get("provenance"), column, has_summary=bool(row.get("has_summary")))
