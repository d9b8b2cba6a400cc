"""How kvlab names a failed request. Pure: one rule for imported records and the benchmark client.

llama-server answers an overflowing unified KV pool with HTTP 500 "Context size has
been exceeded." (or that message in an error event of a 200 stream), and a prompt
longer than its slot with HTTP 400 of type exceed_context_size_error. The two mean
different fixes, so they are counted apart (the failure types the README and docs/charts.md list).
"""

from __future__ import annotations

CONTEXT_EXCEEDED = "context_exceeded"  # HTTP 500: the unified pool ran out while requests were in flight
EXCEED_CONTEXT_SIZE = "exceed_context_size"  # HTTP 400: the prompt does not fit the slot
TIMEOUT = "timeout"
DISCONNECT = "disconnect"
HTTP_ERROR = "http_error"
OTHER = "other"
ERROR_TYPES = (CONTEXT_EXCEEDED, EXCEED_CONTEXT_SIZE, TIMEOUT, DISCONNECT, HTTP_ERROR, OTHER)

SERVER_EXCEED_TYPE = "exceed_context_size_error"
CONTEXT_EXCEEDED_TEXT = "context size has been exceeded"


def error_type_from_server(server_type: object) -> str | None:
    """The failure type an error object's own "type" names, when it names one kvlab counts."""
    return EXCEED_CONTEXT_SIZE if server_type == SERVER_EXCEED_TYPE else None


def classify_error(http_status: int | None, message: str | None, server_type: object = None) -> str:
    """Name a failed request from its HTTP status, its error message and the server's error type."""
    named = error_type_from_server(server_type)
    if named:
        return named
    text = (message or "").lower()
    if CONTEXT_EXCEEDED_TEXT in text and http_status in (None, 200, 500):
        return CONTEXT_EXCEEDED
    if http_status == 400 and ("exceed_context_size" in text or "exceeds the available context" in text):
        return EXCEED_CONTEXT_SIZE
    if "timeout" in text or "timed out" in text:
        return TIMEOUT
    if "disconnect" in text or "connection" in text:
        return DISCONNECT
    if http_status is not None:
        return HTTP_ERROR
    return OTHER
