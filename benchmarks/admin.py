from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from .history import derived
from .models import FileImport, Run


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["key", "label", "model", "gpu", "started_at", "n_ok", "n_requests"]
    list_filter = ["source", "model", "gpu"]
    search_fields = ["key", "label", "model"]

    # A run edited or deleted here is reported like one an import or a job changes (history.derived).
    def save_model(self, request: HttpRequest, obj: Run, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        derived.runs_changed([obj.pk])

    def delete_model(self, request: HttpRequest, obj: Run) -> None:
        pk = obj.pk
        super().delete_model(request, obj)
        derived.runs_changed([pk])

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        pks = list(queryset.values_list("pk", flat=True))
        super().delete_queryset(request, queryset)
        derived.runs_changed(pks)


@admin.register(FileImport)
class FileImportAdmin(admin.ModelAdmin):
    list_display = ["filename", "status", "origin", "created_at", "n_read", "n_imported", "n_rejected"]
    list_filter = ["status", "origin"]
