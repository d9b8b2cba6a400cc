"""Refuse an upload over the configured size while it streams in, before it fills the disk.

One mechanism for every form that takes files (imports, the job form's prompt file and dataset):
`uploads_capped` installs SizeLimitUploadHandler first in the request's handler chain and reads the
body before the view does, so an upload stops at its limit, with at most one chunk past it handed
to the handler that writes the temporary file, instead of being written whole and refused after.
(The sizing page's GGUF upload keeps only a head and reads no further: sizing.views._HeadCapHandler.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import wraps
from typing import Any

from django.core.files.uploadhandler import FileUploadHandler, StopUpload
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt, csrf_protect


@dataclass(frozen=True)
class UploadRefused:
    """Why an upload was stopped: the file field past its limit ("" for the request as a whole)."""

    field: str
    limit: int


class SizeLimitUploadHandler(FileUploadHandler):
    """First in the handler chain: counts the bytes and stops the upload past the limit.

    `limit` bounds the files' bytes together, `per_field` (field name -> bytes) each file field's own.
    (A declared Content-Length is checked before parsing, by uploads_capped: a StopUpload raised from
    handle_raw_input would escape Django's parser.)
    Sets ``request.upload_too_large`` and ``request.upload_refused`` (an UploadRefused) so the view
    can answer 413 with a clear message.
    """

    def __init__(self, request: HttpRequest, limit: int, per_field: Mapping[str, int] | None = None) -> None:
        super().__init__(request)
        self.limit = limit
        self.per_field = dict(per_field or {})
        self.received = 0
        self.field = ""
        self.field_received = 0

    def new_file(self, field_name: str, *args: Any, **kwargs: Any) -> None:
        self.field, self.field_received = field_name, 0

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        self.received += len(raw_data)
        self.field_received += len(raw_data)
        field_limit = self.per_field.get(self.field)
        if field_limit is not None and self.field_received > field_limit:
            self._stop(UploadRefused(self.field, field_limit))
        if self.received > self.limit:
            self._stop(UploadRefused("", self.limit))
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None

    def _stop(self, refused: UploadRefused) -> None:
        self.request.upload_too_large = True  # type: ignore[attr-defined]
        self.request.upload_refused = refused  # type: ignore[attr-defined]
        raise StopUpload(connection_reset=True)


def declared_length(request: HttpRequest) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


View = Callable[..., HttpResponse]


def uploads_capped(
    limit: Callable[[], int],
    refuse: Callable[[HttpRequest, UploadRefused], HttpResponse],
    *,
    per_field: Callable[[], Mapping[str, int]] | None = None,
    other_fields: int = 0,
) -> Callable[[View], View]:
    """A view whose POSTed files stop at their limit while they stream in, answered by `refuse`.

    `limit()`: the files' bytes together; `per_field()`: each file field's own limit; `other_fields`:
    what the form's other fields may add to the body, so that a declared Content-Length beyond
    limit + other_fields is refused before a byte is read. The body is read here, before the view
    (and before its CSRF check, which csrf_protect then makes on what was read): the handlers must be
    in place before anything reads request.POST. Put it under login_required, which reads no body.
    """

    def decorate(view: View) -> View:
        checked = csrf_protect(view)

        @csrf_exempt  # checked by `checked`, once the size cap is in place
        @wraps(view)
        def capped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method == "POST":
                most = limit()
                if declared_length(request) > most + other_fields:
                    return refuse(request, UploadRefused("", most))
                fields = per_field() if per_field else {}
                request.upload_handlers.insert(0, SizeLimitUploadHandler(request, most, fields))
                request.POST  # noqa: B018 (read now, through the capped handlers)
                refused: UploadRefused | None = getattr(request, "upload_refused", None)
                if refused is not None:
                    return refuse(request, refused)
            return checked(request, *args, **kwargs)

        return capped

    return decorate
