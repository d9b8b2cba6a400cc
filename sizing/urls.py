from django.urls import path

from . import views

# The sizing page, its share button and "explain this run" read the history: benchmarks.run_sizing serves them.
urlpatterns = [
    path("sizing/gguf/", views.upload_gguf, name="sizing-gguf"),
    path("sizing/explain-log/", views.explain_log, name="sizing-explain-log"),
    path("s/<str:slug>/", views.snapshot_page, name="sizing-snapshot"),
]
