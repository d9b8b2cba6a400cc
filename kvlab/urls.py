from django.contrib import admin
from django.urls import include, path

from kvlab import throttle

admin.site.login_form = throttle.ThrottledAdminAuthenticationForm

urlpatterns = [
    path("", include("benchmarks.urls")),
    path("", include("benchmarks.run_sizing.urls")),  # the sizing page: sizing beside the history
    path("", include("sizing.urls")),
    path("accounts/login/", throttle.login, name="login"),  # before auth.urls: failed logins are throttled
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/login/", throttle.admin_login),  # before admin.site.urls: a refused attempt answers 429
    path("admin/", admin.site.urls),
]
