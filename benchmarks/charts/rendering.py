"""What every chart page shares: the render of the page or its chart part."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from django.shortcuts import render

from kvlab.http import HtmxHttpRequest


def render_chart(request: HtmxHttpRequest, template: str, context: dict[str, Any], status: int = 200) -> HttpResponse:
    """The whole page, or only its #chart partial for an htmx swap."""
    partial = f"{template}#chart" if request.htmx else template
    return render(request, partial, context, status=status)
