"""Hostile and careless input stays a rejected line or a stored value, never a crash.

JSONL lines whose extra fields no database column can hold, extra keys that look
like template attributes, and a target llama-server that reports absurd numbers
or NUL characters.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from django.urls import reverse

from benchmarks.jobs import execution
from benchmarks.models import FileImport, Job, RequestResult, Run, Server
from benchmarks.records.metrics import summarize
from benchmarks.templatetags.units import seconds, thousands, tok_s
from benchmarks.tests.builders import flat, jsonl

from ..fake_server import CONTEXT_EXCEEDED, FakeServer

pytestmark = pytest.mark.django_db


def rejection(file_import: FileImport) -> list[tuple[int, str]]:
    assert file_import.status == FileImport.Status.REJECTED
    assert not Run.objects.exists() and not RequestResult.objects.exists()
    return list(file_import.rejected_lines.order_by("line_no").values_list("line_no", "reason"))


# -- JSONL extra values no database can hold ------------------------------------------


def test_it_rejects_a_number_past_the_float_range_in_extra(import_bytes):
    file_import = import_bytes(b'{"run":"x","model":"m","ok":true,"x":1e400}\n')
    [(line_no, reason)] = rejection(file_import)
    assert line_no == 1
    assert reason == "a value cannot be stored: 'extra.x' must be a finite number (it is past the float range)"


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (b"1e400", "finite"),
        (b"-1e400", "finite"),
        (b'{"a":[1,{"b":1e999}]}', "finite"),
        (b"18446744073709551616", "64-bit"),
        (b"-9223372036854775809", "64-bit"),
        (b'"a\\u0000b"', "NUL"),
        (b'{"k\\u0000":1}', "NUL"),
        (b"[" * 40 + b"1" + b"]" * 40, "nested"),
    ],
)
def test_it_rejects_the_whole_file_for_an_unstorable_extra_value_with_its_line(import_bytes, value, words):
    good = jsonl(flat(run="a"), flat(run="a", ts="2026-10-01T12:00:01Z"))
    bad = b'{"run":"b","model":"m","ok":true,"x":' + value + b"}\n"
    [(line_no, reason)] = rejection(import_bytes(good + bad))
    assert line_no == 3
    assert reason.startswith("a value cannot be stored: ") and words in reason and "extra.x" in reason


def test_it_rejects_a_nul_in_an_extra_key_at_the_top(import_bytes):
    [(line_no, reason)] = rejection(import_bytes(b'{"run":"b","model":"m","ok":true,"\\u0000":1}\n'))
    assert line_no == 1 and "NUL" in reason


def test_it_rejects_a_nul_in_canonical_extra(import_bytes):
    line = b'{"schema":"kvlab.bench/1","run":{"id":"c","model":"m"},"request":{"ok":true},"extra":{"s":"\\u0000"}}\n'
    [(line_no, reason)] = rejection(import_bytes(line))
    assert line_no == 1 and "NUL" in reason


@pytest.mark.parametrize("field", ["run", "model", "label", "gpu", "error"])
def test_it_rejects_a_nul_in_a_records_own_text_fields(import_bytes, field):
    [(line_no, reason)] = rejection(import_bytes(jsonl(flat(**{field: "a\x00b"}))))
    assert line_no == 1 and "NUL" in reason and repr(field) in reason


def test_storable_extra_values_are_kept_as_given(import_bytes):
    extra = {"big": 2**63 - 1, "small": -(2**63), "f": 1.5e308, "deep": [[[[["ok"]]]]], "u": "é"}
    file_import = import_bytes(jsonl(flat(**extra)))
    assert file_import.status == FileImport.Status.IMPORTED
    stored = RequestResult.objects.get().extra
    assert float(stored.pop("f")) == extra.pop("f")  # PostgreSQL's jsonb gives 1.5e308 back as an integer
    assert stored == extra


def test_it_rejects_a_token_rate_that_is_not_a_measurement(import_bytes):
    [(line_no, reason)] = rejection(import_bytes(jsonl(flat(), flat(tok_s=1.79e308))))
    assert (line_no, reason) == (2, "'tok_s' is 1.79e+308: not a measurement (at most 10,000,000 tok/s)")


# -- extra keys rendered on the run page -------------------------------------------------


def test_a_run_whose_extra_has_a_key_named_items_renders(import_bytes, client):
    import_bytes(jsonl(flat(items=3, values=["ab"], keys={"items": "x"})))
    run = Run.objects.get()
    response = client.get(reverse("run-detail", args=[run.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    assert "<code>items</code></th><td>3</td>" in html
    assert "<code>keys.items</code></th><td>x</td>" in html
    assert "<code>values</code></th><td>[&#x27;ab&#x27;]</td>" in html
    assert "a: b" not in html


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 10**400, "1e999"])
def test_numbers_that_are_not_finite_render_as_missing(value):
    assert (thousands(value), tok_s(value), seconds(value)) == ("—", "—", "—")


# -- a target server's values are input too ----------------------------------------------

ABSURD_RATE = 1.79e308


class HostileServer(FakeServer):
    """Answers with values no real llama-server sends: huge, infinite, NUL-laden."""

    async def _props(self, request: web.Request) -> web.Response:
        self.hits[request.path] += 1
        return web.json_response(
            {
                "build_info": "b0\x00hostile",
                "model_path": "/models/ho\x00stile.gguf",
                "total_slots": 10**30,
                "default_generation_settings": {"n_ctx": 10**30},
            }
        )

    async def _do_normal(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        response = await self._event_stream(request)
        await response.write(self._event(self._token(0)))
        await response.write(self._event(self._token(1)))
        timings = {
            "prompt_n": 10**30,
            "predicted_n": 2,
            "predicted_per_second": ABSURD_RATE,
            "prompt_per_second": float("inf"),  # json.dumps writes Infinity, which Python reads back
            "note\x00": "nul\x00",
        }
        await response.write(self._event({"content": "", "stop": True, "stop_type": "li\x00mit", "timings": timings}))
        await response.write_eof()
        return response

    async def _do_ctx500(self, request: web.Request, body: dict[str, Any]) -> web.Response:
        return web.json_response(
            {"error": {**CONTEXT_EXCEEDED, "message": "Context size has been exceeded.\x00"}}, status=500
        )


@pytest.fixture
def hostile() -> Iterator[HostileServer]:
    with HostileServer(max_hold_s=10) as server:
        yield server


def test_a_servers_absurd_values_are_refused_and_the_job_completes(hostile):
    server = Server.objects.create(name="hostile", base_url=hostile.url)
    params = {
        "prompts": ["normal", "normal", "ctx500"],
        "requests": 3,
        "concurrency": 1,
        "n_predict": 2,
        "timeout_s": 5,
    }
    job = Job.objects.create(server=server, base_url=server.base_url, label="hostile", params=params)

    execution.execute_job(job.pk, worker="test")

    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED, job.error
    run = job.runs.get()
    assert run.parallel is None  # 10**30 slots is not a slot count
    assert "\x00" not in run.model and run.model.endswith(".gguf")
    assert run.tok_s_mean is None and run.n_ok == 2  # 1.79e308 tok/s is not a measurement
    rows = sorted(run.requests.all(), key=lambda r: r.extra["index"])
    assert [r.tok_s for r in rows] == [None, None, None]
    timings = rows[0].extra["timings"]
    assert (timings["prompt_n"], timings["prompt_per_second"]) == (None, None)  # 10**30, inf
    assert timings["note\ufffd"] == "nul\ufffd" and rows[0].extra["stop_type"] == "li\ufffdmit"
    failed = rows[2]
    assert (failed.ok, failed.error_type) == (False, "context_exceeded")
    assert "\x00" not in failed.error and "size has been exceeded" in failed.error
    assert all("\x00" not in e["error"] for e in job.recent_errors)


def test_a_mean_of_rates_near_the_float_limit_is_finite():
    rows = [(None, True, 200, None, None, None, None, 2, 1.7e308, 1.0, 0.1)] * 2
    assert summarize(rows, None).tok_s_mean == 1.7e308


def test_probing_a_server_stores_what_the_database_can_hold(hostile, client):
    """Registering or probing a server (not only running a job on it) stores its answers cleaned."""
    from django.contrib.auth.models import User
    from django.urls import reverse

    server = Server.objects.create(name="hostile", base_url=hostile.url)
    client.force_login(User.objects.create_user("root", password="a-long-test-password", is_staff=True))
    assert client.post(reverse("server-probe", args=[server.pk])).status_code == 302
    server.refresh_from_db()
    props = server.last_probe["props"]
    assert props["model_path"] == "/models/ho\ufffdstile.gguf" and props["build_info"] == "b0\ufffdhostile"
    assert props["total_slots"] is None  # 10**30 does not fit a 64-bit integer column
    page = client.get(reverse("server-detail", args=[server.pk])).content.decode()
    assert "ho\ufffdstile.gguf" in page
