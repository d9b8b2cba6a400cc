from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from .history import derived, rollups
from .models import FileImport, Run
from .models.rollups import KEY_FIELDS


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["key", "label", "model", "gpu", "started_at", "n_ok", "n_requests"]
    list_filter = ["source", "model", "gpu"]
    search_fields = ["key", "label", "model"]

    # A run edited or deleted here is reported like one an import or a job changes (history.derived).
    # Where it was counted is read first: an edit may move it, a deletion leaves no row to read.
    def save_model(self, request: HttpRequest, obj: Run, form: Any, change: bool) -> None:
        were = _positions(Run.objects.filter(pk=obj.pk)) if change else []
        super().save_model(request, obj, form, change)
        derived.runs_changed([obj.pk], were)

    def delete_model(self, request: HttpRequest, obj: Run) -> None:
        pk, were = obj.pk, _positions(Run.objects.filter(pk=obj.pk))
        super().delete_model(request, obj)
        derived.runs_changed([pk], were)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        pks, were = list(queryset.values_list("pk", flat=True)), _positions(queryset)
        super().delete_queryset(request, queryset)
        derived.runs_changed(pks, were)


def _positions(runs: QuerySet[Run]) -> list[rollups.Position]:
    """Where the timeline's buckets count these runs now (before the admin changes them)."""
    fields = [*KEY_FIELDS, "started_at"]
    return [p for p in (rollups.position(run) for run in runs.only(*fields).order_by()) if p is not None]


@admin.register(FileImport)
class FileImportAdmin(admin.ModelAdmin):
    list_display = ["filename", "status", "origin", "created_at", "n_read", "n_imported", "n_rejected"]
    list_filter = ["status", "origin"]
