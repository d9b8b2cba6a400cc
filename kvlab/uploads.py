"""Refuse an upload over the configured size while it streams in, before it fills the disk."""

from __future__ import annotations

from typing import Any

from django.core.files.uploadhandler import FileUploadHandler, StopUpload
from django.http import HttpRequest


class SizeLimitUploadHandler(FileUploadHandler):
    """First in the handler chain: counts the bytes and stops the upload past the limit.

    Sets ``request.upload_too_large`` so the view can answer 413 with a clear message.
    """

    def __init__(self, request: HttpRequest, limit: int) -> None:
        super().__init__(request)
        self.limit = limit
        self.received = 0

    def handle_raw_input(self, input_data: Any, META: Any, content_length: int, *args: Any, **kwargs: Any) -> None:
        if content_length > self.limit:
            self._stop()

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        self.received += len(raw_data)
        if self.received > self.limit:
            self._stop()
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None

    def _stop(self) -> None:
        self.request.upload_too_large = True  # type: ignore[attr-defined]
        raise StopUpload(connection_reset=True)


def declared_length(request: HttpRequest) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0
