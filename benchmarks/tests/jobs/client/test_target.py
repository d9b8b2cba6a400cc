"""SSRF guard: which server URLs kvlab may contact, and that it connects where it checked."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from benchmarks.jobs import execution
from benchmarks.jobs.client.stream import FixedResolver, Outcome, session_for, stream_completion
from benchmarks.jobs.client.target import Target, TargetRefused, resolve_target
from benchmarks.models import Job, Server

from ...fake_server import FakeServer

ELSEWHERE = ["10.9.0.0/16"]  # an allowlist that holds no loopback address


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    with FakeServer(max_hold_s=5) as server:
        yield server


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("ftp://127.0.0.1/models", "'ftp'"),
        ("file:///etc/passwd", "'file'"),
        ("gopher://127.0.0.1:70/_GET", "'gopher'"),
        ("127.0.0.1:8080", "'no scheme'"),
        ("//127.0.0.1:8080/", "'no scheme'"),
        ("localhost:8080", "'localhost'"),  # parsed as the scheme "localhost"
    ],
)
def test_only_http_and_https_urls_are_accepted(url, named):
    with pytest.raises(TargetRefused, match="only http and https") as refused:
        resolve_target(url)
    assert str(refused.value).endswith(f"not {named}")


@pytest.mark.parametrize(
    "url", ["http://user:secret@127.0.0.1:8080/", "http://user@127.0.0.1/", "https://:pw@localhost/"]
)
def test_credentials_in_the_url_are_refused(url):
    with pytest.raises(TargetRefused, match="credentials in the URL are not allowed"):
        resolve_target(url)


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("127.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),  # octal
        ("2130706433", "127.0.0.1"),  # one decimal number
        ("0x7f000001", "127.0.0.1"),  # hexadecimal
        ("[::1]", "::1"),
        ("[::ffff:127.0.0.1]", "::ffff:127.0.0.1"),  # IPv4-mapped IPv6
        ("localhost", "127.0.0.1"),
        ("0.0.0.0", "0.0.0.0"),  # reaches this host on Linux
    ],
)
def test_every_spelling_of_loopback_is_refused_when_loopback_is_not_allowed(settings, host, address):
    settings.KVLAB_SERVER_ALLOWLIST = ELSEWHERE
    with pytest.raises(TargetRefused) as refused:
        resolve_target(f"http://{host}:8080/")
    message = str(refused.value)
    assert f"resolves to {address}, which is outside KVLAB_SERVER_ALLOWLIST (10.9.0.0/16)" in message
    assert message.startswith(host.strip("[]"))


def test_the_default_allowlist_refuses_the_any_address():
    with pytest.raises(TargetRefused, match="0.0.0.0 resolves to 0.0.0.0, which is outside"):
        resolve_target("http://0.0.0.0:8080/")


def test_a_name_that_does_not_resolve_is_refused():
    with pytest.raises(TargetRefused, match=r"'kvlab-no-such-host\.invalid' does not resolve"):
        resolve_target("http://kvlab-no-such-host.invalid:8080/")


@pytest.mark.parametrize("port", ["99999", "-1", "abc", "65536"])
def test_a_bad_port_is_refused(port):
    with pytest.raises(TargetRefused, match="the URL's port is not a number from 1 to 65535"):
        resolve_target(f"http://127.0.0.1:{port}/")


def test_port_zero_is_refused():
    with pytest.raises(TargetRefused, match="port"):
        resolve_target("http://127.0.0.1:0/")


def test_an_unparseable_url_is_refused_not_crashed():
    with pytest.raises(TargetRefused):
        resolve_target("http://[::1:8080/")


@pytest.mark.django_db
def test_a_job_for_an_unparseable_stored_url_fails_at_once():
    server = Server.objects.create(name="broken", base_url="http://[::1:8080/")
    params = {"prompts": ["a"], "requests": 1, "concurrency": 1, "n_predict": 1}
    job = Job.objects.create(server=server, base_url=server.base_url, params=params)
    assert execution.execute_job(job.pk) == "failed"
    job.refresh_from_db()
    assert job.state == "failed" and "may not be contacted" in job.error


@pytest.mark.parametrize(
    ("url", "host", "address"),
    [
        ("http://127.0.0.1:8080", "127.0.0.1", "127.0.0.1"),
        ("http://localhost:8080/", "localhost", "127.0.0.1"),
        ("http://127.1:8080", "127.1", "127.0.0.1"),
        ("http://[::1]:8080", "::1", "::1"),
    ],
)
def test_the_default_allowlist_accepts_loopback_and_keeps_the_checked_address(url, host, address):
    target = resolve_target(url)
    assert target == Target("http", host, 8080, address, "")
    assert target.url("/completion") == url.rstrip("/") + "/completion"


def test_a_base_path_and_the_default_ports_are_kept():
    assert resolve_target("https://localhost/llama/") == Target("https", "localhost", 443, "127.0.0.1", "/llama")
    assert resolve_target("http://localhost").port == 80


def test_an_allowlisted_network_is_accepted(settings):
    settings.KVLAB_SERVER_ALLOWLIST = ["127.0.0.0/8", "10.9.0.0/16"]
    assert resolve_target("http://10.9.3.4:8080/").address == "10.9.3.4"
    assert resolve_target("http://[::ffff:10.9.3.4]:8080/").address == "::ffff:10.9.3.4"


def test_the_client_connects_to_the_checked_address_not_a_new_lookup(fake):
    # A name no resolver knows: only FixedResolver can turn it into the checked address.
    target = Target("http", "kvlab-checked.invalid", fake.port, "127.0.0.1", "/normal")

    async def go() -> Outcome:
        async with session_for(target, limit=1) as session:
            return await stream_completion(session, target, {"prompt": "a b", "n_predict": 2}, deadline_s=3)

    outcome = asyncio.run(go())
    assert outcome.ok and outcome.output_tokens == 2, outcome.error
    [hit] = fake.completions
    assert hit.path == "/normal/completion"
    assert hit.host == f"kvlab-checked.invalid:{fake.port}"  # the Host header is the name as written


def test_the_fixed_resolver_answers_only_for_the_targets_own_host():
    target = Target("http", "kvlab-checked.invalid", 8080, "127.0.0.1", "")
    resolver = FixedResolver(target)
    [answer] = asyncio.run(resolver.resolve("kvlab-checked.invalid", 8080))
    assert (answer["host"], answer["port"], answer["hostname"]) == ("127.0.0.1", 8080, "kvlab-checked.invalid")
    with pytest.raises(OSError, match="only connects to kvlab-checked.invalid"):
        asyncio.run(resolver.resolve("169.254.169.254.nip.io", 80))


def test_a_session_for_one_target_cannot_reach_another_host(fake):
    target = Target("http", "kvlab-checked.invalid", fake.port, "127.0.0.1", "")
    other = Target("http", "kvlab-other.invalid", fake.port, "127.0.0.1", "")

    async def go() -> Outcome:
        async with session_for(target, limit=1) as session:
            return await stream_completion(session, other, {"prompt": "a"}, deadline_s=3)

    outcome = asyncio.run(go())
    assert (outcome.ok, outcome.error_type) == (False, "disconnect")
    assert "only connects to kvlab-checked.invalid" in outcome.error
    assert fake.completions == []
