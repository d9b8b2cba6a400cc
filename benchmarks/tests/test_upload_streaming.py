"""Uploads stop at their limit while they stream in, on every form that takes files.

A spy handler, placed where Django's temporary-file handler sits, counts what would reach the disk:
the job form's prompt file and dataset used to be written whole to the temporary directory and
refused after (a 300 MiB prompt file: 300 MiB written); now what passes the limit stops within one
chunk of it, as /imports/new/ does, through the one mechanism (kvlab.uploads.uploads_capped).
"""

from __future__ import annotations

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.files.uploadhandler import TemporaryFileUploadHandler
from django.urls import reverse

from benchmarks.jobs import views as job_views
from benchmarks.models import FileImport, Job, Server

pytestmark = pytest.mark.django_db

CHUNK = 64 * 1024  # Django's upload chunk: what may pass the limit before the handler stops it
RECEIVED: list[int] = []


class SpyingTemporaryFileHandler(TemporaryFileUploadHandler):
    """Django's temporary-file handler, counting the bytes it is handed to write."""

    def new_file(self, *args, **kwargs):
        RECEIVED.append(0)
        return super().new_file(*args, **kwargs)

    def receive_data_chunk(self, raw_data, start):
        RECEIVED[-1] += len(raw_data)
        return super().receive_data_chunk(raw_data, start)


@pytest.fixture(autouse=True)
def spy(settings):
    settings.FILE_UPLOAD_HANDLERS = [f"{__name__}.SpyingTemporaryFileHandler"]
    RECEIVED.clear()
    return RECEIVED


@pytest.fixture
def server():
    return Server.objects.create(name="local", base_url="http://127.0.0.1:9", launch_command="llama-server -c 1024")


def job_post(server: Server, **fields: object) -> dict[str, object]:
    return {
        "server": server.pk,
        "n_predict": 8,
        "concurrency": 1,
        "requests": 1,
        "repeats": 1,
        "timeout_s": 5,
        "submit": "1",
        **fields,
    }


def body(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def test_a_prompt_file_over_its_limit_stops_streaming_at_the_limit(user_client, server, spy, monkeypatch):
    monkeypatch.setitem(job_views.UPLOAD_LIMITS, "prompt_file", 1024 * 1024)
    upload = SimpleUploadedFile("prompts.txt", b"a prompt\n" * (600 * 1024))  # 5.3 MiB
    response = user_client.post(
        reverse("job-new"), job_post(server, prompt_source="file", prompt_file=upload, label="kept?")
    )
    assert response.status_code == 413
    assert "The prompt file is larger than 1 MiB: kvlab stopped reading it there, and nothing was submitted." in body(
        response
    )
    assert sum(spy) <= 1024 * 1024 + CHUNK  # not the 5.3 MiB
    assert Job.objects.count() == 0


def test_the_real_limits_are_the_forms(server):
    from benchmarks.jobs.datasets import MAX_DATASET_BYTES
    from benchmarks.jobs.forms import MAX_PROMPT_FILE_BYTES

    assert job_views.UPLOAD_LIMITS == {"prompt_file": MAX_PROMPT_FILE_BYTES, "dataset_file": MAX_DATASET_BYTES}


def test_a_prompt_file_past_sixteen_mib_is_not_written_whole(user_client, server, spy):
    upload = SimpleUploadedFile("prompts.txt", b"p\n" * (9 * 1024 * 1024))  # 18 MiB, over MAX_PROMPT_FILE_BYTES
    response = user_client.post(reverse("job-new"), job_post(server, prompt_source="file", prompt_file=upload))
    assert response.status_code == 413 and "The prompt file is larger than 16 MiB" in body(response)
    assert sum(spy) <= 16 * 1024 * 1024 + CHUNK


def test_a_dataset_over_its_limit_stops_streaming_at_the_limit(user_client, server, spy, monkeypatch):
    monkeypatch.setitem(job_views.UPLOAD_LIMITS, "dataset_file", 2 * 1024 * 1024)
    upload = SimpleUploadedFile("data.jsonl", b'{"prompt": "a prompt"}\n' * (300 * 1024))  # 6.6 MiB
    response = user_client.post(reverse("job-new"), job_post(server, prompt_source="dataset", dataset_file=upload))
    assert response.status_code == 413 and "The dataset is larger than 2 MiB" in body(response)
    assert sum(spy) <= 2 * 1024 * 1024 + CHUNK


def test_a_body_declared_beyond_every_limit_is_refused_before_a_byte_is_read(user_client, server, spy, monkeypatch):
    monkeypatch.setitem(job_views.UPLOAD_LIMITS, "prompt_file", 1024)
    monkeypatch.setitem(job_views.UPLOAD_LIMITS, "dataset_file", 1024)
    upload = SimpleUploadedFile("prompts.txt", b"x" * (4 * 1024 * 1024))  # beyond 1 KiB + the other fields' room
    response = user_client.post(reverse("job-new"), job_post(server, prompt_source="file", prompt_file=upload))
    assert response.status_code == 413
    assert "The upload is larger than 1 KiB: kvlab stopped reading it there" in body(response) and spy == []


def test_files_within_their_limits_still_reach_the_form(user_client, server, spy):
    upload = SimpleUploadedFile("p.jsonl", b'{"prompt": "ok"}\n{"text": "no prompt"}\n')
    response = user_client.post(reverse("job-new"), job_post(server, prompt_source="file", prompt_file=upload))
    assert response.status_code == 400 and "Line 2 of the prompt file has no" in body(response)
    assert spy == [len(b'{"prompt": "ok"}\n{"text": "no prompt"}\n')]


def test_the_job_form_still_checks_its_csrf_token(csrf_client, server, spy):
    upload = SimpleUploadedFile("p.txt", b"hello\n")
    response = csrf_client.post(reverse("job-new"), job_post(server, prompt_source="file", prompt_file=upload))
    assert response.status_code == 403 and Job.objects.count() == 0


def test_an_anonymous_upload_is_sent_to_the_login_unread(client, server, spy):
    upload = SimpleUploadedFile("p.txt", b"x" * (1024 * 1024))
    response = client.post(reverse("job-new"), job_post(server, prompt_source="file", prompt_file=upload))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"] and spy == []


def test_an_import_declared_over_its_limit_is_refused_before_a_byte_is_read(user_client, settings, spy):
    settings.KVLAB_UPLOAD_MAX_BYTES = 1024 * 1024
    upload = SimpleUploadedFile("big.jsonl", b"{}\n" * (600 * 1024))
    response = user_client.post(reverse("import-upload"), {"file": upload})
    assert response.status_code == 413 and "larger than the limit of 1.0" in body(response)
    assert spy == [] and FileImport.objects.count() == 0


def test_an_import_stops_streaming_at_its_limit(rf, settings, spy):
    """The Content-Length a client declares may be a lie (chunked, or cut): the handler counts what comes."""
    from kvlab.uploads import SizeLimitUploadHandler

    request = rf.post(reverse("import-upload"), {"file": SimpleUploadedFile("x.jsonl", b"{}\n" * (600 * 1024))})
    request.upload_handlers = [SizeLimitUploadHandler(request, 1024 * 1024), SpyingTemporaryFileHandler(request)]
    assert request.FILES.get("file") is None and request.upload_refused.limit == 1024 * 1024
    assert sum(spy) <= 1024 * 1024 + CHUNK


def test_the_import_form_still_checks_its_csrf_token(csrf_client, spy):
    upload = SimpleUploadedFile("x.jsonl", b"{}\n")
    assert csrf_client.post(reverse("import-upload"), {"file": upload}).status_code == 403
    assert FileImport.objects.count() == 0
