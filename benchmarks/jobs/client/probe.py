"""Short, capped calls to a llama-server: health, props, slots, metrics, and its tokenizer."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import aiohttp.http_exceptions

from kvlab import bounded_parse

from ...records.storable import storable_json
from .stream import session_for
from .target import Target

PROBE_TIMEOUT_S = 5.0
TOKENIZE_TIMEOUT_S = 30.0  # each /tokenize call, unless the caller gives its own: no request waits forever
SYNTHETIC_TIMEOUT_S = 300.0  # each /tokenize call building a synthetic prompt (up to 1M tokens)
MAX_PROBE_BYTES = 4 * 1024 * 1024
MAX_TOKENIZE_BYTES = 32 * 1024 * 1024  # a 1,048,576-token synthetic prompt's ids, with room
MAX_TEXT_CHARS = 1000  # a build or model path the server names, as stored and shown
MAX_SLOTS = 1024  # slots kept of /slots (llama-server's -np is a few hundred at most)
SYNTHETIC_TEXT = "The quick brown fox jumps over the lazy dog while the benchmark measures every token it reads. "


class ProbeError(RuntimeError):
    pass


async def _get(session: aiohttp.ClientSession, target: Target, path: str) -> tuple[int, bytes]:
    async with session.get(target.url(path), allow_redirects=False) as response:
        body = await response.content.read(MAX_PROBE_BYTES + 1)
        if len(body) > MAX_PROBE_BYTES:
            raise ProbeError(f"{path}: the response passed the {MAX_PROBE_BYTES // 1048576} MiB cap")
        return response.status, body


def _json(body: bytes, path: str) -> Any:
    """The answer's JSON; None when it is not JSON (an HTML error page); ProbeError, with the reason, when
    it is past kvlab's bounds (kvlab.bounded_parse: nested too deep, too many values)."""
    try:
        return bounded_parse.loads(body, fallback=True)
    except bounded_parse.Refused as exc:
        raise ProbeError(f"{path}: the answer is {exc}") from None
    except ValueError:
        return None


def _text(value: Any) -> str | None:
    """A name the server gives (build, model path): a string, cut to what a page shows."""
    return value[:MAX_TEXT_CHARS] if isinstance(value, str) else None


def _count(value: Any) -> int | None:
    return value if type(value) is int else None


def _flag(slot: dict[str, Any]) -> bool | None:
    value = slot.get("is_processing")
    return value if type(value) is bool else None


def _health(value: Any) -> dict[str, Any] | None:
    """What /health says ({"status": "ok"}, or an error while the model loads), not whatever else it holds."""
    if not isinstance(value, dict):
        return None
    error = value.get("error")
    kept = {
        "status": _text(value.get("status")),
        "error": _text(error.get("message")) if isinstance(error, dict) else None,
    }
    return {key: item for key, item in kept.items() if item is not None}


async def probe_async(target: Target, api_key: str = "") -> dict[str, Any]:
    """What the server says about itself; "reachable" False with the reason when it cannot be asked."""
    result: dict[str, Any] = {"reachable": False}
    timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
    try:
        async with session_for(target, limit=4, api_key=api_key, timeout=timeout) as session:
            status, body = await _get(session, target, "/health")
            result["reachable"] = True
            result["health"] = {"status": status, "body": _health(_json(body, "/health"))}
            status, body = await _get(session, target, "/props")
            props = _json(body, "/props") if status == 200 else None
            if isinstance(props, dict):
                settings = props.get("default_generation_settings") or {}
                result["props"] = {
                    "build_info": _text(props.get("build_info")),
                    "model_path": _text(props.get("model_path")),
                    "total_slots": _count(props.get("total_slots")),
                    "n_ctx_slot": _count(settings.get("n_ctx")) if isinstance(settings, dict) else None,
                }
            status, body = await _get(session, target, "/slots")
            slots = _json(body, "/slots") if status == 200 else None
            if isinstance(slots, list):
                result["slots"] = [
                    {"id": _count(s.get("id")), "n_ctx": _count(s.get("n_ctx")), "is_processing": _flag(s)}
                    for s in slots[:MAX_SLOTS]
                    if isinstance(s, dict)
                ]
            status, body = await _get(session, target, "/metrics")
            result["metrics_enabled"] = status == 200
    except ProbeError as exc:  # kvlab's own words: the endpoint and why
        result["error"] = str(exc)
    except (aiohttp.ClientError, aiohttp.http_exceptions.HttpProcessingError, TimeoutError, OSError) as exc:
        result["error"] = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return storable_json(result)  # what a server says is input: stored only once the database can hold it


def probe(target: Target, api_key: str = "") -> dict[str, Any]:
    return asyncio.run(probe_async(target, api_key))


async def _token_ids(session: aiohttp.ClientSession, target: Target, text: str, *, add_special: bool) -> list[int]:
    """The server's own tokenization of text (POST /tokenize), capped like every response."""
    async with session.post(
        target.url("/tokenize"), json={"content": text, "add_special": add_special}, allow_redirects=False
    ) as response:
        body = await response.content.read(MAX_TOKENIZE_BYTES + 1)
        if len(body) > MAX_TOKENIZE_BYTES:
            raise ProbeError(f"/tokenize: the response passed the {MAX_TOKENIZE_BYTES // 1048576} MiB cap")
        data = _json(body, "/tokenize")
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if response.status != 200 or not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
            raise ProbeError(f"/tokenize answered HTTP {response.status} without token ids")
        return tokens


async def tokenize_async(
    target: Target, texts: list[str], api_key: str = "", timeout_s: float | None = None
) -> list[int]:
    """Token counts of texts as /completion will see them (add_special: true); each call within timeout_s
    (TOKENIZE_TIMEOUT_S by default). A server that does not answer in time is a ProbeError."""
    limit_s = timeout_s or TOKENIZE_TIMEOUT_S
    timeout = aiohttp.ClientTimeout(total=limit_s, sock_connect=min(10, limit_s))
    try:
        async with session_for(target, limit=4, api_key=api_key, timeout=timeout) as session:
            return [len(await _token_ids(session, target, text, add_special=True)) for text in texts]
    except TimeoutError:
        raise ProbeError(f"/tokenize: no answer within {limit_s:g} s") from None
    except (aiohttp.ClientError, aiohttp.http_exceptions.HttpProcessingError) as exc:  # said, not a 500
        raise ProbeError(f"/tokenize: {type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from None


def tokenize(target: Target, texts: list[str], api_key: str = "", timeout_s: float | None = None) -> list[int]:
    return asyncio.run(tokenize_async(target, texts, api_key, timeout_s))


async def synthetic_prompt_async(target: Target, n_tokens: int, api_key: str = "") -> list[int]:
    """Exactly n_tokens token ids from the server's own tokenizer, to be sent as given (no BOS added)."""
    text = SYNTHETIC_TEXT
    timeout = aiohttp.ClientTimeout(total=SYNTHETIC_TIMEOUT_S, sock_connect=10)
    async with session_for(target, limit=1, api_key=api_key, timeout=timeout) as session:
        while True:
            ids = await _token_ids(session, target, text, add_special=False)
            if not ids:
                raise ProbeError("/tokenize returned no tokens for the synthetic text")
            if len(ids) >= n_tokens:
                return ids[:n_tokens]
            text = text * (n_tokens // len(ids) + 2)


def synthetic_prompt(target: Target, n_tokens: int, api_key: str = "") -> list[int]:
    return asyncio.run(synthetic_prompt_async(target, n_tokens, api_key))
