from django.contrib import admin

from .models import FileImport, Run


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["key", "label", "model", "gpu", "started_at", "n_ok", "n_requests"]
    list_filter = ["source", "model", "gpu"]
    search_fields = ["key", "label", "model"]


@admin.register(FileImport)
class FileImportAdmin(admin.ModelAdmin):
    list_display = ["filename", "status", "origin", "created_at", "n_read", "n_imported", "n_rejected"]
    list_filter = ["status", "origin"]
