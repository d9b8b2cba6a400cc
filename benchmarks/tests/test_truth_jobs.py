"""Servers and jobs tell the truth (issue 11, items 7-11): the pool as the server has it, a
warning before a job fails, honest outcomes, a live job page, runs that show what they measured."""

from __future__ import annotations

import html
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from django.urls import reverse

from benchmarks.models import Job, Server

pytestmark = pytest.mark.django_db

SHARED = {"reachable": True, "props": {"total_slots": 4, "n_ctx_slot": 1024, "model_path": "/m/tiny.gguf"}}
PER_SLOT = {"reachable": True, "props": {"total_slots": 3, "n_ctx_slot": 768, "model_path": "/m/tiny.gguf"}}


def text(response) -> str:
    """The page's text: tags dropped, entities decoded, whitespace collapsed."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", response.content.decode())))


def make_server(name: str, launch: str, probe: dict | None) -> Server:
    return Server.objects.create(name=name, base_url="http://127.0.0.1:9", launch_command=launch, last_probe=probe)


# -- 7. slots and pools, as the server has them ------------------------------------------


def test_a_server_without_np_shows_four_slots_sharing_one_pool(user_client):
    server = make_server("auto", "llama-server -m tiny.gguf -c 1024", SHARED)
    page = text(user_client.get(reverse("server-detail", args=[server.pk])))
    assert "KV pool 4 slots sharing one pool of 1,024 cells" in page
    assert "every slot may use it, all together may not" in page
    listing = text(user_client.get(reverse("server-list")))
    assert "4 slots sharing one pool of 1,024 cells" in listing and "4 × 1024" not in listing


def test_a_server_with_np_shows_cells_per_slot(user_client):
    server = make_server("per-slot", "llama-server -c 2048 -np 3 --no-kv-unified", PER_SLOT)
    page = text(user_client.get(reverse("server-detail", args=[server.pk])))
    assert "KV pool 3 slots × 768 cells each (2,304 in all)" in page
    assert "3 slots × 768 cells each" in text(user_client.get(reverse("server-list")))


def test_without_a_launch_command_the_page_says_props_cannot_tell(user_client):
    server = make_server("unknown", "", SHARED)
    page = text(user_client.get(reverse("server-detail", args=[server.pk])))
    assert "either one pool of 1,024 they share or 1,024 each" in page
    assert "/props cannot tell one shared pool" in page and "register the server's launch command" in page
    assert "sharing one pool" not in page


def test_a_launch_command_that_disagrees_with_the_server_is_not_trusted(user_client):
    server = make_server("stale", "llama-server -c 2048 -np 3", SHARED)  # the server reports 4 slots
    page = text(user_client.get(reverse("server-detail", args=[server.pk])))
    assert "the launch command gives 3 slots but the server reports 4" in page
    assert "× 1,024 cells each" not in page and "sharing one pool" not in page


def test_an_unprobed_server_shows_the_pool_its_command_gives(user_client):
    server = make_server("new", "llama-server -c 2048 -np 3", None)
    page = text(user_client.get(reverse("server-detail", args=[server.pk])))
    assert "3 slots × 768 cells each" in page and "from the launch command" in page


# -- 8. warn before the job fails ---------------------------------------------------------


def job_data(server: Server, **overrides: object) -> dict[str, object]:
    data = {
        "server": server.pk,
        "label": "repro",
        "prompt_source": "synthetic",
        "prompt_tokens": 300,
        "n_predict": 300,
        "concurrency": 3,
        "requests": 3,
        "repeats": 1,
        "timeout_s": 120,
    }
    return {**data, **overrides}


@pytest.fixture
def worker_up(monkeypatch):
    monkeypatch.setattr("benchmarks.jobs.views.worker_available", lambda: "")


def test_the_job_form_warns_that_a_shared_pool_will_fail_every_request_in_flight(user_client, worker_up):
    server = make_server("auto", "llama-server -c 1024", SHARED)
    response = user_client.post(reverse("job-new"), job_data(server))
    assert response.status_code == 200 and not Job.objects.exists()  # nothing submitted yet
    page = text(response)
    assert "This job will not run as asked: 4 slots sharing one pool of 1,024 cells" in page
    assert "3 concurrent requests of 300 + 300 tokens need 1,800 cells; the unified pool has 1,024" in page
    assert "HTTP 500 'Context size has been exceeded'" in page and "all in-flight requests" in page
    link = re.search(r'href="(/sizing/\?[^"]+)">Size this server for this workload', response.content.decode())
    assert link, "no link to the sizing page"
    query = parse_qs(urlsplit(html.unescape(link.group(1))).query)
    assert query == {
        "prompt_tokens": ["300"],
        "output_tokens": ["300"],
        "concurrency": ["3"],
        "command": ["llama-server -c 1024"],
    }
    # The user wants to reproduce the failure: ticked, the same form submits the job.
    response = user_client.post(reverse("job-new"), job_data(server, run_anyway="on"))
    assert response.status_code == 302
    job = Job.objects.get()
    assert job.params["prompt_tokens"] == 300 and "run_anyway" not in job.params


def test_the_job_form_warns_that_a_prompt_longer_than_its_slot_gets_a_400(user_client, worker_up):
    server = make_server("per-slot", "llama-server -c 2048 -np 3", PER_SLOT)
    response = user_client.post(reverse("job-new"), job_data(server, prompt_tokens=900, n_predict=10))
    page = text(response)
    assert response.status_code == 200 and not Job.objects.exists()
    assert "3 slots × 768 cells each" in page and "the synthetic prompt has 900 tokens" in page
    assert "HTTP 400 exceed_context_size_error for that request only" in page


def test_a_job_that_fits_its_pool_is_submitted_without_a_warning(user_client, worker_up):
    server = make_server("per-slot", "llama-server -c 2048 -np 3", PER_SLOT)
    response = user_client.post(reverse("job-new"), job_data(server, prompt_tokens=300, n_predict=300))
    assert response.status_code == 302 and Job.objects.count() == 1


def test_without_a_launch_command_the_warning_says_it_depends_on_the_pool(user_client, worker_up):
    server = make_server("unknown", "", SHARED)
    page = text(user_client.post(reverse("job-new"), job_data(server)))
    assert "This job may fail" in page and "If the slots share one pool:" in page
    assert "/props cannot tell" in page and not Job.objects.exists()


def test_the_run_anyway_box_is_shown_only_with_a_warning(user_client):
    server = make_server("auto", "llama-server -c 1024", SHARED)
    assert "run_anyway" not in user_client.get(reverse("job-new") + f"?server={server.pk}").content.decode()
