"""Infrastructure faults during a job: Redis stopped and restarted, the web process restarted."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

from benchmarks.models import RequestResult
from kvlab.celery import app as celery_app
from kvlab.tests.processes import free_port, stop_process

from ..real_parts import database_url_for_workers, live_llama_server, register, start_worker, submit, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.llama_server]


def start_redis(port: int, workdir: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir), "--save", ""],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}", timeout=0.2):
                pass
        except Exception as exc:  # Redis answers HTTP with a protocol error: it is up
            if "refused" not in str(exc).lower():
                return proc
        time.sleep(0.05)
    proc.kill()
    pytest.fail("redis-server did not start")


def test_a_job_survives_redis_stopping_and_restarting(llama_server_binary, tiny_models, tmp_path):
    port = free_port()
    redis = start_redis(port, tmp_path)
    url = f"redis://127.0.0.1:{port}/0"
    celery_app.conf.broker_url = url
    celery_app._after_fork()
    own_worker = start_worker(url, f"redis-fault-{os.getpid()}@test")
    try:
        with live_llama_server(llama_server_binary, tiny_models["llama"], ["-c", "2048", "-np", "1"]) as base:
            server = register(base, "llama-server -c 2048 -np 1")
            job = submit(server, prompt_tokens=50, n_predict=200, requests=16, concurrency=1)
            wait_for(job, finished=False, done=2)
            stop_process(redis, timeout=20)  # the broker goes away mid-job
            time.sleep(2)
            redis = start_redis(port, tmp_path)
            job = wait_for(job, timeout=240)
            assert job.state == "succeeded" and (job.n_done, job.n_total) == (16, 16)
            seqs = list(RequestResult.objects.filter(run__job=job).values_list("seq", flat=True))
            assert sorted(seqs) == list(range(16))  # none lost, none duplicated
            celery_app._after_fork()  # this process reconnects too
            again = wait_for(submit(server, prompt_tokens=20, n_predict=5, requests=1, concurrency=1), timeout=120)
            assert again.state == "succeeded"  # the worker came back to the restarted broker
    finally:
        stop_process(own_worker, timeout=20)
        stop_process(redis, timeout=20)
        celery_app._after_fork()


def test_restarting_the_web_process_loses_nothing_of_a_running_job(llama_server_binary, tiny_models, broker, worker):  # noqa: F811
    env = {**os.environ, "DATABASE_URL": database_url_for_workers(), "KVLAB_ALLOWED_HOSTS": "127.0.0.1"}

    def web(port: int) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
            cwd=settings.BASE_DIR,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/runs/", timeout=1)
                return proc
            except OSError:
                time.sleep(0.2)
        proc.kill()
        pytest.fail("the web process did not start")

    port = free_port()
    with live_llama_server(llama_server_binary, tiny_models["llama"], ["-c", "2048", "-np", "1"]) as base:
        job = submit(
            register(base, "llama-server -c 2048 -np 1"), prompt_tokens=50, n_predict=200, requests=12, concurrency=1
        )
        first = web(port)
        wait_for(job, finished=False, done=2)
        stop_process(first, timeout=20)  # the web process restarts mid-job
        second = web(port)
        try:
            job = wait_for(job, timeout=240)
            page = urllib.request.urlopen(f"http://127.0.0.1:{port}{reverse('job-detail', args=[job.pk])}", timeout=5)
            body = page.read().decode()
        finally:
            stop_process(second, timeout=20)
    assert job.state == "succeeded" and job.n_done == 12
    assert "12 of 12 done, 0 failed" in body and "succeeded" in body, body[body.find("Errors as") :][:800]
