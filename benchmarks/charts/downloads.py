"""A chart's data as a download (`?format=csv|json`), its cells safe to open in a spreadsheet."""

from __future__ import annotations

import csv
import io
from typing import Any

from django.http import HttpResponse, JsonResponse

from kvlab.http import HtmxHttpRequest

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet may run as a formula
DOWNLOAD_FORMATS = ("json", "csv")


def csv_safe(value: Any) -> Any:
    """A cell a spreadsheet shows as text, never runs: text that could start a formula gets a leading quote.

    Only text: a number (a negative one too) stays a number.
    """
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def download(request: HtmxHttpRequest, rows: list[dict[str, Any]], name: str) -> HttpResponse | None:
    """The rows as the download the request asks for, or None when it asks for none."""
    fmt = request.GET.get("format")
    if fmt == "json":
        response = JsonResponse({"rows": rows}, json_dumps_params={"default": str})
    elif fmt == "csv":
        out = io.StringIO()
        if rows:
            writer = csv.DictWriter(out, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows({k: csv_safe(v) for k, v in row.items()} for row in rows)
        response = HttpResponse(out.getvalue(), content_type="text/csv")
    else:
        return None
    response["Content-Disposition"] = f'attachment; filename="kvlab-{name}.{fmt}"'
    return response
