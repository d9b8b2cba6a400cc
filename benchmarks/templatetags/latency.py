"""Latency figures stored in seconds, shown in milliseconds (ITL and TPOT are a few ms)."""

from __future__ import annotations

from typing import Any

from django import template

from kvlab.number_formats import ms

register = template.Library()


@register.filter
def s_as_ms(value: Any) -> str:
    """Seconds shown as milliseconds, one decimal (0.00185 → "1.9 ms")."""
    return ms(None if value is None else value * 1000)
