from django.urls import path

from . import views

urlpatterns = [
    path("sizing/", views.size_page, name="sizing"),
    path("sizing/share/", views.share, name="sizing-share"),
    path("sizing/explain/<int:pk>/", views.explain_run, name="sizing-explain-run"),
]
