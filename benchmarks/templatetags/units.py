"""Numbers as people read them, as template filters: kvlab.number_formats' formats, and a few more.

Every page that shows a TTFT, a latency, a rate or a count uses these filters, so a
TTFT is never `1.4075675379999666` on one page and `1.41 s` on another. A missing
value is "—".
"""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from kvlab.number_formats import MISSING, ms, seconds, thousands, tok_s

from ..models.jobs import RAN_WORDS
from ..records.outcomes import LABELS

register = template.Library()
register.filter("thousands", thousands)
register.filter("seconds", seconds)
register.filter("tok_s", tok_s)
register.filter("ms", ms)


# How the extra fields an executed run records are shown: a unit per known key.
_EXTRA_UNITS = {
    "prompt_ms": ms,
    "predicted_ms": ms,
    "prompt_per_second": tok_s,
    "predicted_per_second": tok_s,
    "client_tok_s": tok_s,
}


def _flatten(values: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            rows.extend(_flatten(value, f"{name}."))
        else:
            rows.append((name, value))
    return rows


def extra_value(key: str, value: Any) -> str:
    leaf = key.rsplit(".", 1)[-1]
    if leaf in _EXTRA_UNITS:
        return _EXTRA_UNITS[leaf](value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return thousands(value)
    if value is None or value == "":
        return MISSING
    return str(value)


@register.filter
def extra_table(values: Any) -> SafeString | str:
    """A record's extra fields as a small key / value table (nested objects as dotted keys)."""
    if not isinstance(values, dict) or not values:
        return MISSING
    rows = format_html_join(
        "", "<tr><th><code>{}</code></th><td>{}</td></tr>", ((k, extra_value(k, v)) for k, v in _flatten(values))
    )
    return format_html('<table class="extra">{}</table>', rows)


@register.filter
def outcome_words(outcome: str) -> str:
    """A run outcome (records.outcomes) in words: "all failed", not "failed"."""
    return LABELS.get(outcome, outcome)


@register.filter
def ran_words(state: str) -> str:
    """A job's or sweep's state as how it ran: "completed", never "succeeded" (that is for its findings)."""
    return RAN_WORDS.get(state, state)


@register.filter
def in_unit(value: Any, unit: str) -> str:
    """seconds or tok_s, chosen by the unit a table row names ("s" or "tok/s")."""
    return seconds(value) if unit == "s" else tok_s(value) if unit == "tok/s" else thousands(value)
