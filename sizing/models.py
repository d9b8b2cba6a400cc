"""Stored sizing artefacts: uploaded GGUF heads and immutable shared snapshots."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models


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
    uploaded_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.filename


class SizingSnapshot(models.Model):
    """An immutable record of one sizing: its inputs, its results, the formula version."""

    slug = models.CharField(max_length=16, unique=True, default=new_slug)
    inputs = models.JSONField(help_text="the sizing page's query parameters")
    title = models.CharField(max_length=300)
    result = models.JSONField(help_text="sizing.report.as_json at the time of sharing")
    report_text = models.TextField()
    view = models.JSONField(
        null=True, help_text="sizing.render.page_view: what the page showed, rendered by the page's own partial"
    )
    formula_version = models.CharField(max_length=80)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.slug}: {self.title}"
