"""The production settings pass Django's deployment checklist."""

import os
import subprocess
import sys

from django.conf import settings


def run_manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=settings.BASE_DIR,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_under_the_production_settings(tmp_path):
    result = run_manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        KVLAB_PRODUCTION="1",
        KVLAB_SECRET_KEY="x7-" + "kvlab-production-secret-for-the-test-" * 2,
        KVLAB_ALLOWED_HOSTS="kvlab.example.internal",
        KVLAB_VAR_DIR=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert "System check identified no issues" in result.stdout


def test_production_refuses_to_start_without_a_secret_key(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "KVLAB_SECRET_KEY"}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=settings.BASE_DIR,
        env={**env, "KVLAB_PRODUCTION": "1", "KVLAB_VAR_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and "KVLAB_PRODUCTION=1 needs KVLAB_SECRET_KEY" in result.stderr
