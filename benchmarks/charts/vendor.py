"""Plotly's JavaScript, served by kvlab itself (offline by design), compressed once per process.

plotly.min.js is 4.6 MB; GZipMiddleware would compress it again on every request (about 130 ms of
CPU each, on the shared 2-core test machine). It is compressed here once, the first time a browser
asks, and kept in memory (1.4 MB); a browser that cannot take gzip gets the file as it is. Either
way it is cached for a year (the URL changes only with kvlab's Plotly, which comes from the
installed package).
"""

from __future__ import annotations

import gzip
import re
from functools import cache
from pathlib import Path

import plotly
from django.http import FileResponse, HttpResponse
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET

from kvlab.http import HtmxHttpRequest

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
CACHE_CONTROL = "public, max-age=31536000, immutable"
ACCEPTS_GZIP = re.compile(r"\bgzip\b")  # as Django's GZipMiddleware reads Accept-Encoding


@cache
def plotly_gzip() -> bytes:
    """plotly.min.js gzipped (level 9: paid once per process), made the first time it is asked for."""
    return gzip.compress(PLOTLY_JS.read_bytes(), compresslevel=9, mtime=0)


@require_GET
def plotly_js(request: HtmxHttpRequest) -> HttpResponse:
    """Plotly's JavaScript from the installed package: gzipped once, then from memory."""
    response: HttpResponse
    if ACCEPTS_GZIP.search(request.headers.get("Accept-Encoding", "")):
        response = HttpResponse(plotly_gzip(), content_type="text/javascript")
        response["Content-Encoding"] = "gzip"  # GZipMiddleware leaves an encoded response alone
    else:
        response = FileResponse(PLOTLY_JS.open("rb"), content_type="text/javascript")
    patch_vary_headers(response, ("Accept-Encoding",))
    response["Cache-Control"] = CACHE_CONTROL
    return response
