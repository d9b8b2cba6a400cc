"""What a job will run into on a registered server's KV pool, said before it is submitted: the web form
warns and asks "run it anyway"; `manage.py bench` prints the same and refuses without --allow-failures."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.urls import reverse

from ..models import Server
from .client.probe import ProbeError, tokenize
from .client.target import TargetRefused, resolve_target
from .pool import job_warning, server_pool


def prompts_sent(params: dict[str, Any]) -> list[str]:
    """The prompts the job will send: request i sends prompt i modulo their number."""
    prompts: list[str] = params["prompts"]
    return prompts[: int(params["requests"])]


def sizing_url(server: Server, prompt_tokens: int, params: dict[str, Any]) -> str:
    """The sizing page for this server's command line and this workload (the sizing form's own fields)."""
    workload = {
        "prompt_tokens": prompt_tokens,
        "output_tokens": params["n_predict"],
        "concurrency": params["concurrency"],
        "command": server.launch_command,
    }
    return reverse("sizing") + "?" + urlencode({k: v for k, v in workload.items() if v not in ("", None)})


def pool_warning(params: dict[str, Any], server: Server) -> dict[str, object] | None:
    """What the job will run into on this server's pool, before it is submitted (None: nothing known to fear)."""
    if server_pool(server.launch_command, server.last_probe) is None:
        return None
    if "prompt_tokens" in params:
        return warning_for(server, params["prompt_tokens"], "the synthetic prompt", params)
    try:  # the prompts' real length, as the server will count them
        counts = tokenize(resolve_target(server.base_url), prompts_sent(params), server.api_key, timeout_s=15)
    except (TargetRefused, ProbeError, OSError, TimeoutError):
        return None  # cannot be measured now: the job itself will say what the server does
    return warning_for(server, max(counts), "the longest prompt, measured on the server", params)


def warning_for(
    server: Server, prompt_tokens: int, prompt_source: str, params: dict[str, Any]
) -> dict[str, object] | None:
    pool = server_pool(server.launch_command, server.last_probe)
    if pool is None:
        return None
    warning = job_warning(pool, prompt_tokens, int(params["n_predict"]), int(params["concurrency"]))
    if warning is None:
        return None
    return {
        "warning": warning,
        "pool": pool,
        "prompt_tokens": prompt_tokens,
        "prompt_source": prompt_source,
        "sizing_url": sizing_url(server, prompt_tokens, params),
    }
