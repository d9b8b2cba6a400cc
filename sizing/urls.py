from django.urls import path

from . import views

urlpatterns = [
    path("sizing/", views.size_page, name="sizing"),
    path("sizing/gguf/", views.upload_gguf, name="sizing-gguf"),
    path("sizing/explain-log/", views.explain_log, name="sizing-explain-log"),
    path("sizing/share/", views.share, name="sizing-share"),
    path("sizing/explain/<int:pk>/", views.explain_run, name="sizing-explain-run"),
    path("s/<str:slug>/", views.snapshot_page, name="sizing-snapshot"),
]
