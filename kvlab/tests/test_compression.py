"""Compressed responses: gzip for the pages, downloads and streams of a client that asks for it,
plain bytes for one that does not (Django's GZipMiddleware, kvlab/settings.py)."""

from __future__ import annotations

import gzip
import re

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from benchmarks.models import FileImport

GZIP = {"HTTP_ACCEPT_ENCODING": "gzip, deflate, br"}  # what a browser sends
CSRF_TOKEN = re.compile(rb"[A-Za-z0-9]{64}")  # masked anew in every response


def body_of(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def test_gzip_sits_under_whitenoise_and_above_every_middleware_that_touches_the_body() -> None:
    assert settings.MIDDLEWARE[:3] == [
        "django.middleware.security.SecurityMiddleware",
        "whitenoise.middleware.WhiteNoiseMiddleware",
        "django.middleware.gzip.GZipMiddleware",
    ]


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_a_download_is_gzipped_when_asked_and_decompresses_to_the_plain_one(
    client: Client, investigation: FileImport, fmt: str
) -> None:
    url = reverse("chart-timeline") + f"?format={fmt}"
    plain = client.get(url)
    packed = client.get(url, **GZIP)

    assert packed["Content-Encoding"] == "gzip"
    assert gzip.decompress(packed.content) == plain.content
    assert len(packed.content) < len(plain.content)
    assert int(packed["Content-Length"]) == len(packed.content)
    assert packed["Content-Type"] == plain["Content-Type"]
    assert packed["Content-Disposition"] == plain["Content-Disposition"]


@pytest.mark.parametrize("name", ["run-list", "chart-timeline"])
def test_a_page_is_gzipped_when_asked_and_decompresses_to_the_plain_page(
    client: Client, investigation: FileImport, name: str
) -> None:
    plain = client.get(reverse(name))
    packed = client.get(reverse(name), **GZIP)

    assert packed.status_code == plain.status_code == 200
    assert packed["Content-Encoding"] == "gzip"
    page = gzip.decompress(packed.content)
    assert CSRF_TOKEN.sub(b"", page) == CSRF_TOKEN.sub(b"", plain.content)
    assert b"</html>" in page


def test_every_page_says_it_varies_by_accept_encoding_compressed_or_not(
    client: Client, investigation: FileImport
) -> None:
    for response in (client.get(reverse("run-list")), client.get(reverse("run-list"), **GZIP)):
        assert "Accept-Encoding" in response["Vary"]


def test_a_client_that_does_not_ask_gets_plain_bytes(client: Client, investigation: FileImport) -> None:
    url = reverse("chart-timeline") + "?format=json"
    for headers in ({}, {"HTTP_ACCEPT_ENCODING": "br"}, {"HTTP_ACCEPT_ENCODING": "identity"}):
        response = client.get(url, **headers)

        assert not response.has_header("Content-Encoding")
        assert response.json()["rows"]  # readable as it is


def test_plotly_js_is_gzipped_for_a_browser(client: Client) -> None:
    response = client.get(reverse("plotly-js"), **GZIP)

    assert response["Content-Encoding"] == "gzip"
    script = gzip.decompress(body_of(response))
    assert script.startswith(b"/**") and b"plotly.js" in script[:200]
    assert response["Cache-Control"] == "public, max-age=31536000, immutable"


def test_a_streamed_export_still_streams_and_decompresses_to_the_same_jsonl(
    client: Client, investigation: FileImport
) -> None:
    plain = body_of(client.get(reverse("export")))
    response = client.get(reverse("export"), **GZIP)

    assert response.streaming
    assert not response.has_header("Content-Length")  # unknown until the stream ends
    assert response["Content-Encoding"] == "gzip"
    assert response["Content-Type"] == "application/x-ndjson"
    chunks = list(response.streaming_content)
    assert len(chunks) > 1  # sent as it is compressed, not gathered first
    jsonl = gzip.decompress(b"".join(chunks))
    assert jsonl == plain
    assert len(jsonl.splitlines()) == len(plain.splitlines()) > 1


def test_a_response_under_200_bytes_is_left_alone(client: Client, investigation: FileImport) -> None:
    response = client.get(reverse("run-values"), {"model": "no-such-model"}, **GZIP)

    assert response.status_code == 200
    assert len(response.content) < 200
    assert not response.has_header("Content-Encoding")


def test_a_static_file_without_collectstatic_goes_out_as_it_is(client: Client) -> None:
    # WhiteNoise answers before GZipMiddleware and, serving from the finders, has no .gz copy to send;
    # in production collectstatic writes the .gz and .br copies that it sends instead.
    response = client.get("/static/css/kvlab.css", **GZIP)

    assert response.status_code == 200
    assert not response.has_header("Content-Encoding")
    assert body_of(response) == (settings.BASE_DIR / "static" / "css" / "kvlab.css").read_bytes()


def test_plotly_js_is_compressed_once_and_served_plain_to_a_client_that_cannot_take_gzip(client: Client) -> None:
    from benchmarks.charts import vendor

    vendor.plotly_gzip.cache_clear()
    first = client.get(reverse("plotly-js"), **GZIP)
    second = client.get(reverse("plotly-js"), **GZIP)
    plain = client.get(reverse("plotly-js"))

    assert vendor.plotly_gzip.cache_info().misses == 1  # compressed once, then from memory
    assert body_of(first) == body_of(second)
    assert gzip.decompress(body_of(first)) == body_of(plain) == vendor.PLOTLY_JS.read_bytes()
    assert not plain.has_header("Content-Encoding")
    for response in (first, plain):
        assert "Accept-Encoding" in response["Vary"]
        assert response["Cache-Control"] == "public, max-age=31536000, immutable"
