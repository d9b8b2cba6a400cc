"""How many bytes does compression save on kvlab's pages and downloads, and what does it cost?

What is measured
----------------
A fresh, migrated SQLite database (in a temporary KVLAB_VAR_DIR) gets N runs (default
20,000) of bench/synthetic.py's lab, the first 100 with their requests. Then
django.test.Client requests, in-process through the whole middleware stack:

* the run list ``/runs/`` (50 rows)
* the timeline ``/charts/timeline/`` as HTML, ``?format=json`` and ``?format=csv``
* the compare page ``/compare/`` of 4 runs with requests
* a run page ``/runs/1/`` (100 requests) and its streamed ``export.jsonl``
* ``/vendor/plotly.min.js`` (a view: it goes through the middleware like a page)
* the static files ``css/kvlab.css`` and ``js/charts.js`` (WhiteNoise answers them)

each with no Accept-Encoding, with ``Accept-Encoding: gzip`` and with
``Accept-Encoding: br``: once to check (the plain body byte for byte, the gzip one
decompressed to the plain one, CSRF tokens aside, no Content-Encoding unless gzip was
asked), then ``--requests`` times (default 10) each, alternating: median server time,
streamed bodies read to their end. Bytes on the wire: the body as sent. The cost of
compressing alone (CPU time of Django's compress_string on the plain body, best of 3)
is measured apart, where the machine's noise cannot hide it.

kvlab compresses with Django's GZipMiddleware, which only speaks gzip: a client that
asks for br alone gets plain bytes (checked). The "br" column is what brotli (quality
5, the usual on-the-fly level) would give for the same body, computed here, not served.

Static files: the test client runs without collectstatic (WHITENOISE_USE_FINDERS),
where WhiteNoise serves the files as they are (checked: no Content-Encoding). In
production ``collectstatic`` writes .gz and .br copies with WhiteNoise's Compressor
and WhiteNoise serves those as they are; the "static (production)" rows give their
sizes, made by that same Compressor here.

Usage (from the repository root)::

    .venv/bin/python bench/compression.py [--runs N] [--requests N] [--smoke] [--out DIR]

``--smoke``: 1,000 runs and 2 timed requests per case (results in bench/out/smoke/).
"""

from __future__ import annotations

import argparse
import gzip
import math
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import brotli
import common  # bench/ is on sys.path when a script runs
import synthetic

ENCODINGS = {"plain": None, "gzip": "gzip", "br-only": "br"}
# A masked CSRF token is new in every response: compare bodies without them.
CSRF_TOKEN = re.compile(rb"[A-Za-z0-9]{64}")
STATIC = ["css/kvlab.css", "js/charts.js"]


def body_of(response: Any) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def fetch(client: Any, url: str, encoding: str | None) -> tuple[Any, bytes, float]:
    """One request, its body read to the end; the response, the body and the server time in ms."""
    headers = {"HTTP_ACCEPT_ENCODING": encoding} if encoding else {}
    start = time.perf_counter()
    response = client.get(url, **headers)
    body = body_of(response)
    elapsed = (time.perf_counter() - start) * 1000
    assert response.status_code == 200, f"{url}: status {response.status_code}"
    return response, body, elapsed


def check(name: str, client: Any, url: str) -> dict[str, Any]:
    """Fetch once each way and check what each client gets; the sizes on the wire."""
    plain_response, plain, _ = fetch(client, url, None)
    assert not plain_response.has_header("Content-Encoding"), f"{name}: compressed without Accept-Encoding"
    br_response, br_body, _ = fetch(client, url, "br")
    assert not br_response.has_header("Content-Encoding"), f"{name}: br is not served, yet got an encoding"
    assert CSRF_TOKEN.sub(b"", br_body) == CSRF_TOKEN.sub(b"", plain), f"{name}: br-only differs from plain"
    gz_response, gz_body, _ = fetch(client, url, "gzip")
    encoding = gz_response.get("Content-Encoding")
    if encoding == "gzip":
        assert CSRF_TOKEN.sub(b"", gzip.decompress(gz_body)) == CSRF_TOKEN.sub(b"", plain), f"{name}: gzip differs"
        assert "Accept-Encoding" in gz_response.get("Vary", ""), f"{name}: no Vary: Accept-Encoding"
    else:
        assert gz_body == plain, f"{name}: not compressed, yet not the plain body"
    return {
        "case": name,
        "url": url,
        "streaming": plain_response.streaming,
        "content_type": plain_response.get("Content-Type", ""),
        "plain_bytes": len(plain),
        "gzip_bytes": len(gz_body),
        "gzip_served": encoding == "gzip",
        "br_only_bytes": len(br_body),
        "br_q5_bytes_not_served": len(brotli.compress(plain, quality=5)),
        "gzip_cpu_ms": round(gzip_cpu_ms(plain), 2),
    }


def gzip_cpu_ms(body: bytes, repeats: int = 3) -> float:
    """The compression alone, as GZipMiddleware does it (level 6, random filename): best of `repeats`, in ms."""
    from django.utils.text import compress_string

    best = math.inf
    for _ in range(repeats):
        start = time.process_time()
        compress_string(body, max_random_bytes=100)
        best = min(best, time.process_time() - start)
    return best * 1000


def time_case(client: Any, url: str, n: int) -> dict[str, float]:
    """Median server time per encoding; the encodings alternate so load changes hit each alike."""
    times: dict[str, list[float]] = {name: [] for name in ENCODINGS}
    for _ in range(n):
        for name, encoding in ENCODINGS.items():
            times[name].append(fetch(client, url, encoding)[2])
    return {f"{name}_median_ms": round(statistics.median(values), 2) for name, values in times.items()}


def production_static(tmp: Path) -> list[dict[str, Any]]:
    """What collectstatic's WhiteNoise Compressor writes for kvlab's static files: the sizes it serves."""
    from whitenoise.compress import Compressor

    compressor = Compressor(quiet=True)
    rows = []
    for name in STATIC:
        copy = tmp / Path(name).name
        shutil.copyfile(common.ROOT / "static" / name, copy)
        written = {Path(path).suffix: Path(path).stat().st_size for path in compressor.compress(str(copy))}
        plain = copy.stat().st_size
        rows.append(
            {
                "case": f"static (production) {name}",
                "plain_bytes": plain,
                "gzip_bytes": written.get(".gz", plain),  # the Compressor skips a copy that saves too little
                "br_bytes": written.get(".br", plain),
            }
        )
    return rows


def ratio(plain: int, packed: int) -> float:
    return round(plain / packed, 2) if packed else 0.0


def print_table(results: dict[str, Any]) -> None:
    print(
        f"\nCompression with {results['runs']:,} runs, {results['timed_requests']} timed requests per case "
        "and encoding (server time: median ms, body read to its end)"
    )
    header = (
        f"{'case':<33} {'plain B':>10} {'gzip B':>9} {'ratio':>6} {'br B*':>9} {'ratio':>6}  "
        f"{'plain ms':>8} {'gzip ms':>8} {'+ms':>7} {'gzip CPU ms':>11}"
    )
    common.print_header(header)
    for r in results["cases"]:
        plain, gz, br = r["plain_bytes"], r["gzip_bytes"], r["br_q5_bytes_not_served"]
        extra = r["gzip_median_ms"] - r["plain_median_ms"]
        print(
            f"{r['case']:<33} {plain:>10,} {gz:>9,} {ratio(plain, gz):>5.1f}x {br:>9,} {ratio(plain, br):>5.1f}x  "
            f"{r['plain_median_ms']:>8.1f} {r['gzip_median_ms']:>8.1f} {extra:>+7.1f} {r['gzip_cpu_ms']:>11.1f}"
        )
    for r in results["static_production"]:
        plain, gz, br = r["plain_bytes"], r["gzip_bytes"], r["br_bytes"]
        print(f"{r['case']:<33} {plain:>10,} {gz:>9,} {ratio(plain, gz):>5.1f}x {br:>9,} {ratio(plain, br):>5.1f}x")
    print("(gzip CPU ms: compressing the plain body alone as GZipMiddleware does, CPU time, best of 3;")
    print(" +ms is the same cost seen end to end, and carries the machine's noise)")
    print("(* br: brotli quality 5 of the same body, computed here; kvlab's GZipMiddleware serves gzip only,")
    print("   and a client asking for br alone got the plain bytes. Static (production): the .gz/.br files that")
    print("   collectstatic writes and WhiteNoise serves as they are, made by WhiteNoise's Compressor.)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20_000, help="runs in the database")
    parser.add_argument("--requests", type=int, default=10, help="timed requests per case and encoding")
    args = common.parse_args(parser, argv, smoke={"runs": 1_000, "requests": 2})
    if args.runs < 5 or args.requests < 1:
        parser.error("--runs must be at least 5 and --requests positive")

    with tempfile.TemporaryDirectory(prefix="kvlab-compression-bench-") as tmp:
        common.setup_migrated_django(Path(tmp))
        from django.test import Client
        from django.urls import reverse

        start = time.perf_counter()
        data = synthetic.insert_lab(args.runs, requests_of_first=100)
        print(f"inserted {args.runs:,} runs (+{data['requests']:,} requests) in {time.perf_counter() - start:.1f} s")

        timeline = reverse("chart-timeline")
        compare = reverse("run-compare") + "?" + "&".join(f"run={i}" for i in (1, 2, 3, 4))
        urls = [
            ("run list", reverse("run-list")),
            ("timeline HTML", timeline),
            ("timeline ?format=json", timeline + "?format=json"),
            ("timeline ?format=csv", timeline + "?format=csv"),
            ("compare (4 runs)", compare),
            ("run page", reverse("run-detail", args=[1])),
            ("run export.jsonl", reverse("run-export", args=[1])),
            ("plotly.min.js", reverse("plotly-js")),
            *((f"static {name}", f"/static/{name}") for name in STATIC),
        ]
        client = Client()
        measured = []
        for name, url in urls:
            row = check(name, client, url)
            row.update(time_case(client, url, args.requests))
            measured.append(row)
            print(f"  {name:<33} {row['plain_bytes']:>10,} B -> {row['gzip_bytes']:>9,} B gzip")
        static_rows = [r for r in measured if r["case"].startswith("static")]
        assert not any(r["gzip_served"] for r in static_rows), (
            "WhiteNoise compressed a static file without collectstatic"
        )
        assert all(r["gzip_served"] for r in measured if r["plain_bytes"] >= 200 and r not in static_rows), (
            "a response of 200 bytes or more went out uncompressed to a gzip client"
        )
        production = production_static(Path(tmp))
        from django.db import connections

        connections.close_all()

    results = {
        "runs": args.runs,
        "timed_requests": args.requests,
        "cases": measured,
        "static_production": production,
        **common.machine(),
    }
    print_table(results)
    common.write_results(args.out, "compression", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
