"""The login back-off as deploy/ runs it: gunicorn with deploy/gunicorn.conf.py behind a proxy on
127.0.0.1 that appends the client's address to X-Forwarded-For (deploy/nginx.conf), and
KVLAB_TRUSTED_PROXIES=127.0.0.1 (deploy/kvlab.env.example). The requests here play the proxy."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from django.conf import settings

ROOT = Path(settings.BASE_DIR)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    var = tmp_path_factory.mktemp("gunicorn-var")
    port = free_port()
    env = {
        **os.environ,
        "KVLAB_VAR_DIR": str(var),
        "DATABASE_URL": f"sqlite:///{var / 'kvlab.sqlite3'}",
        "KVLAB_BIND": f"127.0.0.1:{port}",
        "KVLAB_WEB_WORKERS": "1",  # one process: its local-memory cache counts every attempt
        "KVLAB_TRUSTED_PROXIES": "127.0.0.1",
        "KVLAB_LOGIN_MAX_FAILURES": "5",
        "KVLAB_LOGIN_ADDRESS_MAX_FAILURES": "20",
        "KVLAB_LOG_LEVEL": "WARNING",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    subprocess.run([sys.executable, "manage.py", "migrate", "auth", "-v0"], cwd=ROOT, env=env, check=True, timeout=300)
    gunicorn = Path(sys.executable).with_name("gunicorn")
    log = var / "gunicorn.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(gunicorn), "-c", "deploy/gunicorn.conf.py", "kvlab.wsgi"], cwd=ROOT, env=env, stdout=out, stderr=out
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            requests.get(f"{base}/accounts/login/", timeout=5)
            break
        except requests.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"gunicorn did not start: {log.read_text()}") from None
            time.sleep(0.2)
    yield base
    proc.terminate()
    proc.wait(timeout=30)


def attempt(base: str, forwarded_for: str, username: str = "nobody") -> requests.Response:
    """One failed login from the client the proxy names in X-Forwarded-For."""
    headers = {"X-Forwarded-For": forwarded_for}
    with requests.Session() as session:
        page = session.get(f"{base}/accounts/login/", headers=headers, timeout=10)
        assert page.status_code == 200
        return session.post(
            f"{base}/accounts/login/",
            data={"username": username, "password": "wrong", "csrfmiddlewaretoken": session.cookies["csrftoken"]},
            headers={**headers, "Referer": f"{base}/accounts/login/"},
            timeout=10,
            allow_redirects=False,
        )


def test_under_gunicorn_one_clients_failures_pause_only_that_client(site):
    answers = [attempt(site, "203.0.113.66").status_code for _ in range(6)]
    assert answers == [200] * 5 + [429]
    # what the client itself put in the header before the proxy appended to it is not believed
    forged = attempt(site, "203.0.113.7, 203.0.113.66")
    assert forged.status_code == 429 and forged.headers["Retry-After"] == "1"
    other = attempt(site, "203.0.113.7")
    assert other.status_code == 200 and "Your username and password didn't match" in other.text
