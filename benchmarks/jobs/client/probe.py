"""Short, capped calls to a llama-server: health, props, slots, metrics, tokenize."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from .stream import session_for
from .target import Target

PROBE_TIMEOUT_S = 5.0
MAX_PROBE_BYTES = 4 * 1024 * 1024


class ProbeError(RuntimeError):
    pass


async def _get(session: aiohttp.ClientSession, target: Target, path: str) -> tuple[int, bytes]:
    async with session.get(target.url(path), allow_redirects=False) as response:
        body = await response.content.read(MAX_PROBE_BYTES + 1)
        if len(body) > MAX_PROBE_BYTES:
            raise ProbeError(f"{path}: the response passed the {MAX_PROBE_BYTES // 1048576} MiB cap")
        return response.status, body


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


async def probe_async(target: Target, api_key: str = "") -> dict[str, Any]:
    """What the server says about itself; "reachable" False with the reason when it cannot be asked."""
    result: dict[str, Any] = {"reachable": False}
    timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
    try:
        async with session_for(target, limit=4, api_key=api_key, timeout=timeout) as session:
            status, body = await _get(session, target, "/health")
            result["reachable"] = True
            result["health"] = {"status": status, "body": _json(body)}
            status, body = await _get(session, target, "/props")
            props = _json(body) if status == 200 else None
            if isinstance(props, dict):
                settings = props.get("default_generation_settings") or {}
                result["props"] = {
                    "build_info": props.get("build_info"),
                    "model_path": props.get("model_path"),
                    "total_slots": props.get("total_slots"),
                    "n_ctx_slot": settings.get("n_ctx") if isinstance(settings, dict) else None,
                }
            status, body = await _get(session, target, "/slots")
            slots = _json(body) if status == 200 else None
            if isinstance(slots, list):
                result["slots"] = [
                    {"id": s.get("id"), "n_ctx": s.get("n_ctx"), "is_processing": s.get("is_processing")}
                    for s in slots
                    if isinstance(s, dict)
                ]
            status, body = await _get(session, target, "/metrics")
            result["metrics_enabled"] = status == 200
    except (aiohttp.ClientError, TimeoutError, OSError, ProbeError) as exc:
        result["error"] = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return result


def probe(target: Target, api_key: str = "") -> dict[str, Any]:
    return asyncio.run(probe_async(target, api_key))


async def tokenize_async(target: Target, texts: list[str], api_key: str = "") -> list[int]:
    """Token counts of texts as /completion will see them (add_special: true)."""
    counts: list[int] = []
    async with session_for(target, limit=4, api_key=api_key) as session:
        for text in texts:
            async with session.post(
                target.url("/tokenize"), json={"content": text, "add_special": True}, allow_redirects=False
            ) as response:
                body = await response.content.read(MAX_PROBE_BYTES)
                data = _json(body)
                if response.status != 200 or not isinstance(data, dict) or not isinstance(data.get("tokens"), list):
                    raise ProbeError(f"/tokenize answered HTTP {response.status}")
                counts.append(len(data["tokens"]))
    return counts


def tokenize(target: Target, texts: list[str], api_key: str = "") -> list[int]:
    return asyncio.run(tokenize_async(target, texts, api_key))
