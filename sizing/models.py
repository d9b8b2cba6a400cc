"""Stored sizing artefacts: uploaded GGUF heads and immutable shared snapshots."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import models

from .ggml_types import BY_NAME
from .placement.tensors import WeightTensor

# A stored tensor table's JSON is bounded: the head reader caps the upload (KVLAB_GGUF_HEAD_MAX_BYTES),
# and a table over this many entries is not kept (sizing then spreads the weights' total).
MAX_STORED_TENSORS = 100_000


def new_slug() -> str:
    return secrets.token_urlsafe(9)  # 72 random bits: unguessable, short enough to paste


class GgufHead(models.Model):
    """The metadata of an uploaded GGUF head (never its tensor data)."""

    # URLs name a head by this token, never by its sequential id: heads are readable by anyone
    # who has the link, so the link must not be guessable.
    token = models.CharField(max_length=16, unique=True, default=new_slug)
    filename = models.CharField(max_length=255)
    sha256 = models.CharField(max_length=64)
    size_bytes = models.PositiveBigIntegerField(help_text="bytes of the head that were uploaded")
    metadata = models.JSONField()
    weights_bytes = models.PositiveBigIntegerField(null=True, help_text="sum of tensor sizes, when the table was whole")
    n_tensors = models.PositiveIntegerField(default=0)
    # The tensor table, compactly: [[name, ggml type, [dims...]], ...] in file order. Null for heads
    # uploaded before kvlab kept it, or whose table was cut off: the weights are then spread evenly.
    tensors = models.JSONField(null=True, blank=True, help_text="[name, ggml type, shape] per tensor, when whole")
    uploaded_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.filename

    @staticmethod
    def table_of(tensors: Sequence[Any]) -> list[list[Any]] | None:
        """The compact table of a GGUF head's tensors (sizing.gguf.TensorInfo), or None when too long."""
        if len(tensors) > MAX_STORED_TENSORS:
            return None
        return [[t.name, t.type_name, list(t.shape)] for t in tensors]

    def weight_tensors(self) -> list[WeightTensor] | None:
        """The stored tensor table as sizing.placement reads it; None when there is none (or it is unusable)."""
        if not isinstance(self.tensors, list):
            return None
        try:
            table = [
                WeightTensor(str(name), str(kind), tuple(int(d) for d in shape)) for name, kind, shape in self.tensors
            ]
        except (TypeError, ValueError):
            return None
        return table if all(t.type_name in BY_NAME for t in table) else None


class SizingSnapshot(models.Model):
    """An immutable record of one sizing: its inputs, its results, the formula version."""

    slug = models.CharField(max_length=16, unique=True, default=new_slug)
    inputs = models.JSONField(help_text="the sizing page's query parameters")
    title = models.CharField(max_length=300)
    result = models.JSONField(help_text="sizing.report.as_json at the time of sharing")
    report_text = models.TextField()
    view = models.JSONField(
        null=True, help_text="sizing.render.page_data: what the page showed, rendered by the page's own partial"
    )
    formula_version = models.CharField(max_length=80)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.slug}: {self.title}"
