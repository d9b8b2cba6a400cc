"""Numbers as people read them: thousands separators, a unit, a precision that suits the quantity.

Every page that shows a TTFT, a latency, a rate or a count formats it with these (the template
filters of benchmarks.templatetags.units, and the views that format a figure themselves), so a TTFT
is never `1.4075675379999666` on one page and `1.41 s` on another. A missing value is "—".
"""

from __future__ import annotations

import math
from typing import Any

MISSING = "—"


def number(value: Any) -> float | None:
    """The value as a finite float, or None (missing, not a number, a bool, an inf)."""
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        as_float = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return as_float if math.isfinite(as_float) else None  # an inf stored before imports refused it


def thousands(value: Any) -> str:
    """12345 → "12,345"; a float keeps up to its sensible digits."""
    n = number(value)
    if n is None:
        return MISSING
    return f"{n:,.0f}" if n == int(n) else f"{n:,.2f}"


def seconds(value: Any) -> str:
    """A duration in seconds: milliseconds shown under 10 s (1.408 s), tenths above (123.4 s)."""
    n = number(value)
    if n is None:
        return MISSING
    return f"{n:,.3f} s" if abs(n) < 10 else f"{n:,.1f} s"


def tok_s(value: Any) -> str:
    """A rate in tokens per second: two decimals under 100, one above."""
    n = number(value)
    if n is None:
        return MISSING
    return f"{n:,.2f} tok/s" if abs(n) < 100 else f"{n:,.1f} tok/s"


def ms(value: Any) -> str:
    """A duration in milliseconds, as llama-server's timings report it."""
    n = number(value)
    if n is None:
        return MISSING
    return f"{n:,.1f} ms"
