"""A server whose JSON answers nest 200,000 deep is refused with the reason, never an HTTP 500, and a
probe that fails leaves no half-saved server. The server is a fault-injecting stand-in
(FakeServer): the real llama-server never answers so."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import pytest
from aiohttp import web
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from benchmarks.jobs import execution
from benchmarks.jobs.client.probe import ProbeError, probe, tokenize
from benchmarks.jobs.client.stream import Outcome, session_for, stream_completion
from benchmarks.jobs.client.target import resolve_target
from benchmarks.models import Job, Server

from ...fake_server import FakeServer

pytestmark = pytest.mark.django_db

DEEP = b"[" * 200_000 + b"]" * 200_000  # 400 KB: under every size cap, past every parser's depth
REASON = "nested more than 64 levels deep"


class NestedServer(FakeServer):
    """Answers every JSON endpoint with DEEP; /completion streams one DEEP event, or (error_text) an
    HTTP 500 whose body is DEEP."""

    def deep(self, request: web.Request, status: int = 200) -> web.Response:
        self.hits[request.path] += 1
        return web.Response(body=DEEP, status=status, content_type="application/json")

    async def _health(self, request: web.Request) -> web.Response:
        return self.deep(request)

    async def _props(self, request: web.Request) -> web.Response:
        return self.deep(request)

    async def _slots(self, request: web.Request) -> web.Response:
        return self.deep(request)

    async def _tokenize(self, request: web.Request) -> web.Response:
        return self.deep(request)

    async def _do_normal(self, request: web.Request, body: dict[str, object]) -> web.StreamResponse:
        response = await self._event_stream(request)
        await response.write(b"data: " + DEEP[:30_000] + DEEP[-30_000:] + b"\n\n")  # under aiohttp's line cap
        await response.write_eof()
        return response

    async def _do_error_text(self, request: web.Request, body: dict[str, object]) -> web.Response:
        return web.Response(body=DEEP, status=500, content_type="application/json")


@pytest.fixture
def nested() -> Iterator[NestedServer]:
    with NestedServer(max_hold_s=10) as server:
        yield server


@pytest.fixture
def staff_client() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("root", password="a-long-test-password", is_staff=True))
    return client


def complete(url: str) -> Outcome:
    target = resolve_target(url)

    async def go() -> Outcome:
        async with session_for(target, limit=1) as session:
            return await stream_completion(session, target, {"prompt": "x", "n_predict": 2}, deadline_s=5)

    return asyncio.run(go())


def test_the_probe_records_why_an_answer_was_refused(nested: NestedServer) -> None:
    result = probe(resolve_target(nested.url))
    assert result["reachable"] is True  # it answered /health; what it answered is refused, with the reason
    assert result["error"] == f"/health: the answer is {REASON} (kvlab reads 64 at most)"
    assert "props" not in result and "slots" not in result


def test_registering_the_server_saves_it_once_with_the_reason_shown(nested: NestedServer, staff_client) -> None:
    response = staff_client.post(reverse("server-new"), {"name": "deep", "base_url": nested.url})
    server = Server.objects.get()
    assert response.status_code == 302 and response.url == reverse("server-detail", args=[server.pk])
    assert REASON in server.last_probe["error"] and server.last_probed_at is not None
    page = re.sub(r"\s+", " ", staff_client.get(response.url).content.decode())
    assert f"/health: the answer is {REASON}" in page


def test_probe_now_records_the_reason(nested: NestedServer, staff_client) -> None:
    server = Server.objects.create(name="deep", base_url=nested.url)
    assert staff_client.post(reverse("server-probe", args=[server.pk])).status_code == 302
    server.refresh_from_db()
    assert REASON in server.last_probe["error"]


def test_a_probe_that_fails_unexpectedly_saves_no_server(
    monkeypatch: pytest.MonkeyPatch, nested: NestedServer, staff_client
) -> None:
    def broken(*args: object, **kwargs: object) -> dict[str, object]:
        raise RuntimeError("a bug in the probe")

    monkeypatch.setattr("benchmarks.jobs.views.probe", broken)
    staff_client.raise_request_exception = False
    response = staff_client.post(reverse("server-new"), {"name": "deep", "base_url": nested.url})
    assert response.status_code == 500
    assert not Server.objects.exists()  # the probe runs before the one save: nothing half-registered


def test_measuring_prompts_on_the_server_says_why_it_could_not(nested: NestedServer, user_client) -> None:
    server = Server.objects.create(name="deep", base_url=nested.url)
    form = {"server": server.pk, "prompt_source": "text", "prompt_text": "one two three", "n_predict": 4}
    form |= {"concurrency": 1, "requests": 1, "repeats": 1, "timeout_s": 5, "measure": "1"}
    response = user_client.post(reverse("job-new"), form)
    assert response.status_code == 502
    assert f"Could not tokenize on deep: /tokenize: the answer is {REASON}" in response.content.decode()
    assert not Job.objects.exists()


def test_tokenize_raises_a_probe_error_with_the_reason(nested: NestedServer) -> None:
    with pytest.raises(ProbeError, match=f"/tokenize: the answer is {REASON}"):
        tokenize(resolve_target(nested.url), ["one two"])


def test_a_stream_event_nested_too_deep_is_a_failed_request_with_the_reason(nested: NestedServer) -> None:
    outcome = complete(nested.url_for("normal"))
    assert (outcome.ok, outcome.error_type) == (False, "other")
    assert outcome.error == f"a stream event is refused: {REASON} (kvlab reads 64 at most)"


def test_an_error_body_nested_too_deep_is_recorded_with_its_status(nested: NestedServer) -> None:
    outcome = complete(nested.url_for("error_text"))
    assert (outcome.ok, outcome.http_status) == (False, 500)
    assert outcome.error == f"HTTP 500: the error body is refused: {REASON} (kvlab reads 64 at most)"


def test_a_job_on_the_server_ends_with_its_requests_failed_for_the_reason(nested: NestedServer) -> None:
    server = Server.objects.create(name="deep", base_url=nested.url)
    params = {"prompts": ["normal", "error_text"], "requests": 2, "concurrency": 1, "n_predict": 2, "timeout_s": 5}
    job = Job.objects.create(server=server, base_url=server.base_url, label="deep", params=params)

    execution.execute_job(job.pk, worker="test")

    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED, job.error
    errors = sorted(job.runs.get().requests.values_list("error", flat=True))
    assert errors == [
        f"HTTP 500: the error body is refused: {REASON} (kvlab reads 64 at most)",
        f"a stream event is refused: {REASON} (kvlab reads 64 at most)",
    ]
    server.refresh_from_db()
    assert REASON in server.last_probe["error"]
