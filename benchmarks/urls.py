from django.urls import path

from . import views

urlpatterns = [
    path("", views.home, name="home"),
    path("runs/", views.run_list, name="run-list"),
    path("runs/<int:pk>/", views.run_detail, name="run-detail"),
    path("runs/<int:pk>/export.jsonl", views.run_export, name="run-export"),
    path("compare/", views.run_compare, name="run-compare"),
    path("export.jsonl", views.export_download, name="export"),
    path("imports/", views.import_list, name="import-list"),
    path("imports/new/", views.import_upload, name="import-upload"),
    path("imports/<int:pk>/", views.import_detail, name="import-detail"),
]
