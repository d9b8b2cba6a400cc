from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("", include("benchmarks.urls")),
    path("", include("sizing.urls")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
]
