"""One streamed llama-server /completion request, measured and classified.

Timing: TTFT = request sent → first event carrying generated content
(keep-alive ':' lines and empty events do not count); E2E = request sent → last
chunk. Decode tok/s: the server's timings.predicted_per_second, and the client's
(output_tokens - 1) / (E2E - TTFT); both are kept.

Tokens are counted from each event's `tokens_predicted` (the server's own count of
tokens generated so far) when it has one: llama-server holds back a token that ends
in an incomplete UTF-8 sequence and sends it with the next, so events are fewer than
tokens. Inter-token latencies (itl_s) are the gaps between events, each split evenly
over the tokens its event stands for: one value per token after the first, so their
mean is (E2E - TTFT) / (output_tokens - 1) — guidellm's ITL and TPOT definitions.
On an error event the request's own numbers at that moment are kept in
Outcome.at_error (stored as the request's extra["at_error"]): the cells its sequence
held (prompt + decoded), the client's exact account of a shared-pool overflow that no
/slots sample may have seen.

Every outcome is recorded: HTTP 500 "Context size has been exceeded", HTTP 400
exceed_context_size_error, an error event inside a 200 stream, a stream closed
before its final chunk, a server that never answers (a deadline on the whole
request, not only a read timeout), a refused connection, a response of the wrong
shape, a response over the size cap.
"""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import aiohttp.http_exceptions
from aiohttp.abc import AbstractResolver, ResolveResult

from kvlab import bounded_parse

from ...records.errors import DISCONNECT, EXCEED_CONTEXT_SIZE, OTHER, TIMEOUT, classify_error
from ...records.schema import MAX_ERROR_CHARS, MAX_INT, MAX_ITL_VALUES, MAX_TOK_S
from ...records.storable import storable_text
from .target import Target

MAX_RESPONSE_BYTES = 64 * 1024 * 1024
MAX_ERROR_BODY = 64 * 1024


@dataclass
class Outcome:
    ok: bool
    http_status: int | None = None
    error: str = ""
    error_type: str = ""
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    tok_s: float | None = None  # the server's timings.predicted_per_second
    client_tok_s: float | None = None
    ttft_s: float | None = None
    elapsed_s: float | None = None
    started_at: float = 0.0  # time.time() when sent
    extra: dict[str, Any] = field(default_factory=dict)
    itl_s: list[float] | None = None  # one gap per token after the first (None: fewer than 2 tokens)
    # On an error event: {"t_s" (since the wave's t0), "prompt", "decoded", "cells"}; the
    # recorder stores it as the request's extra["at_error"].
    at_error: dict[str, Any] | None = None


@dataclass(slots=True)
class Progress:
    """A request in flight, as far as it has come: written by the request loop as events
    arrive, read by the job's recording thread for the live page (plain attribute writes:
    one per token, nothing the client's speed notices)."""

    sent_at: float = 0.0  # time.perf_counter() when sent
    first_token_at: float | None = None
    tokens: int = 0


class FixedResolver(AbstractResolver):
    """Resolves the target's host to the address that was checked, and nothing else."""

    def __init__(self, target: Target) -> None:
        self.target = target

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if host != self.target.host:
            raise OSError(f"kvlab only connects to {self.target.host}")
        fam = socket.AF_INET6 if ":" in self.target.address else socket.AF_INET
        return [
            {
                "hostname": host,
                "host": self.target.address,
                "port": port or self.target.port,
                "family": fam,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
        ]

    async def close(self) -> None:
        return None


def session_for(
    target: Target, *, limit: int, api_key: str = "", timeout: aiohttp.ClientTimeout | None = None
) -> aiohttp.ClientSession:
    # A fresh connection per request: llama-server (cpp-httplib) closes a keep-alive
    # connection after a number of requests, and a request written to such a connection
    # fails ("Can not write request body") through no fault of the server under test.
    connector = aiohttp.TCPConnector(resolver=FixedResolver(target), limit=limit, force_close=True)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return aiohttp.ClientSession(
        connector=connector,
        headers=headers,
        auto_decompress=False,
        timeout=timeout or aiohttp.ClientTimeout(total=None, sock_connect=10),
    )


async def stream_completion(
    session: aiohttp.ClientSession,
    target: Target,
    payload: dict[str, Any],
    *,
    deadline_s: float,
    progress: Progress | None = None,
    t0: float | None = None,
    prompt_tokens: int | None = None,
) -> Outcome:
    """POST /completion with stream: true and measure it; never raises for server faults.

    progress, when given, follows the tokens as they stream (for a live view). t0: the
    wave's perf_counter origin, from which Outcome.at_error["t_s"] counts (default: this
    request's send); prompt_tokens: the prompt's length, for an error before any event.
    """
    body = {**payload, "stream": True}
    outcome = Outcome(ok=False, started_at=time.time())
    start = time.perf_counter()
    if progress is None:
        progress = Progress()
    progress.sent_at = start
    if prompt_tokens is None and isinstance(payload.get("prompt"), list):
        prompt_tokens = len(payload["prompt"])
    tally = _Tally(start if t0 is None else t0, prompt_tokens)
    try:
        async with asyncio.timeout(deadline_s):
            async with session.post(target.url("/completion"), json=body, allow_redirects=False) as response:
                outcome.http_status = response.status
                if response.status != 200:
                    await _read_error(response, outcome)
                else:
                    await _read_stream(response, outcome, start, progress, tally)
    except TimeoutError:
        outcome.error_type = TIMEOUT
        outcome.error = f"no complete answer within the {deadline_s:g} s deadline"
    except aiohttp.ClientConnectorError as exc:
        outcome.error_type = DISCONNECT
        outcome.error = f"connection failed: {exc.os_error or exc}"
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, ConnectionResetError) as exc:
        outcome.error_type = DISCONNECT
        outcome.error = f"the server closed the connection mid-response: {type(exc).__name__}"
    except aiohttp.ClientError as exc:
        outcome.error_type = OTHER
        outcome.error = f"{type(exc).__name__}: {exc}"
    except aiohttp.http_exceptions.HttpProcessingError as exc:  # e.g. LineTooLong
        outcome.error_type = OTHER
        outcome.error = f"the response cannot be read: {type(exc).__name__}: {exc.message or exc}"
    outcome.elapsed_s = time.perf_counter() - start
    # The server's words are input like any other: bounded, and storable on every engine.
    outcome.error = storable_text(outcome.error[:MAX_ERROR_CHARS])
    if outcome.ok and outcome.output_tokens and outcome.ttft_s is not None and outcome.output_tokens > 1:
        decode_s = outcome.elapsed_s - outcome.ttft_s
        if decode_s > 0:
            outcome.client_tok_s = (outcome.output_tokens - 1) / decode_s
    outcome.itl_s = tally.itl()
    return outcome


class _Tally:
    """The tokens of one stream as its events arrive: how many, when, and the prompt's count."""

    def __init__(self, t0: float, prompt_tokens: int | None) -> None:
        self.t0 = t0
        self.prompt = prompt_tokens
        self.tokens = 0
        self.times: list[tuple[float, int]] = []  # (arrival, tokens this event stands for)

    def event(self, event: dict[str, Any], now: float) -> int:
        """Count one event's tokens; returns how many it stands for."""
        evaluated = _int(event.get("tokens_evaluated"))
        if evaluated is not None:
            self.prompt = evaluated
        predicted = _int(event.get("tokens_predicted"))
        if predicted is not None:
            new = max(0, predicted - self.tokens)
        elif event.get("content") or event.get("tokens"):
            new = len(event["tokens"]) if isinstance(event.get("tokens"), list) else 1
        else:
            new = 0
        if new:
            self.tokens += new
            self.times.append((now, new))
        return new

    def at_error(self, now: float) -> dict[str, Any]:
        prompt = self.prompt or 0
        return {"t_s": round(now - self.t0, 6), "prompt": prompt, "decoded": self.tokens, "cells": prompt + self.tokens}

    def itl(self) -> list[float] | None:
        return split_gaps(self.times)


def split_gaps(events: list[tuple[float, int]]) -> list[float] | None:
    """Per-token gaps from (arrival time, tokens) events: each gap between two events is
    split evenly over the later event's tokens; tokens that came together with the first
    are 0 apart. len = total tokens - 1; None below 2 tokens (or past MAX_ITL_VALUES)."""
    total = sum(n for _, n in events)
    if total < 2 or total - 1 > MAX_ITL_VALUES:
        return None
    gaps = [0.0] * (events[0][1] - 1)
    for (before, _), (at, n) in zip(events, events[1:], strict=False):
        gaps.extend([round((at - before) / n, 7)] * n)
    return gaps


async def _read_error(response: aiohttp.ClientResponse, outcome: Outcome) -> None:
    raw = await response.content.read(MAX_ERROR_BODY)
    text = raw.decode("utf-8", errors="replace")
    refused = ""
    try:
        error = bounded_parse.loads(text, fallback=True).get("error", {})
    except bounded_parse.Refused as exc:
        error, refused = {}, f"HTTP {response.status}: the error body is refused: {exc}"
    except (ValueError, AttributeError):
        error = {}
    if not isinstance(error, dict):
        error = {"message": str(error)}
    message = str(error.get("message") or refused or text.strip()[:500] or f"HTTP {response.status}")
    outcome.error = message
    outcome.error_type = classify_error(response.status, message, error.get("type"))
    if outcome.error_type == EXCEED_CONTEXT_SIZE:
        for key in ("n_prompt_tokens", "n_ctx"):
            if isinstance(error.get(key), int):
                outcome.extra[key] = error[key]
        outcome.prompt_tokens = _int(error.get("n_prompt_tokens"))


async def _read_stream(
    response: aiohttp.ClientResponse, outcome: Outcome, start: float, progress: Progress, tally: _Tally
) -> None:
    received = 0
    events = 0
    final: dict[str, Any] | None = None
    async for raw_line in response.content:
        received += len(raw_line)
        if received > MAX_RESPONSE_BYTES:
            outcome.error_type = OTHER
            outcome.error = f"the response passed the cap of {MAX_RESPONSE_BYTES:,} bytes"
            return
        line = raw_line.strip()
        if not line or line.startswith(b":"):
            continue  # keep-alive lines and event separators are not tokens
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        events += 1
        if data == b"[DONE]":
            break
        try:
            event = bounded_parse.loads(data, fallback=True)
        except bounded_parse.Refused as exc:
            outcome.error_type = OTHER
            outcome.error = f"a stream event is refused: {exc}"
            return
        except ValueError:
            outcome.error_type = OTHER
            outcome.error = f"a stream event is not JSON: {data[:80]!r}"
            return
        if not isinstance(event, dict):
            outcome.error_type = OTHER
            outcome.error = "a stream event is not a JSON object"
            return
        now = time.perf_counter()
        if "error" in event:
            error = event["error"] if isinstance(event["error"], dict) else {"message": str(event["error"])}
            outcome.error = str(error.get("message", "error event in the stream"))
            code = error.get("code")
            outcome.extra["error_event"] = True
            outcome.at_error = tally.at_error(now)
            if isinstance(code, int) and 100 <= code <= 599:
                outcome.http_status = code
            outcome.output_tokens = tally.tokens
            outcome.error_type = classify_error(outcome.http_status, outcome.error, error.get("type"))
            return
        if tally.event(event, now):
            if outcome.ttft_s is None:
                progress.first_token_at = now
                outcome.ttft_s = now - start
            progress.tokens = tally.tokens
        if event.get("stop"):
            final = event
            break
    if final is None:
        outcome.output_tokens = tally.tokens
        if events == 0:
            outcome.error_type = OTHER
            outcome.error = "the response is not an event stream (no 'data:' events)"
        else:
            outcome.error_type = DISCONNECT
            outcome.error = "the stream ended before its final chunk (incomplete, not a success)"
        return
    raw_timings = final.get("timings")
    timings: dict[str, Any] = raw_timings if isinstance(raw_timings, dict) else {}
    outcome.ok = True
    outcome.prompt_tokens = _int(timings.get("prompt_n"))
    outcome.output_tokens = _int(timings.get("predicted_n")) or tally.tokens
    outcome.tok_s = _float(timings.get("predicted_per_second"))
    outcome.extra["timings"] = timings
    for key in ("stop_type", "truncated", "tokens_cached"):
        if key in final:
            outcome.extra[key] = final[key]


def _int(value: Any) -> int | None:
    """A count the server reports, if it is one a column holds."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_INT else None


def _float(value: Any) -> float | None:
    """A token rate the server reports, if it can be a measurement (finite, at most MAX_TOK_S)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= MAX_TOK_S:
        return float(value)  # NaN fails both comparisons
    return None
