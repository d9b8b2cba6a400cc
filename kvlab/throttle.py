"""Failed logins throttled per account and per client address.

After KVLAB_LOGIN_MAX_FAILURES failures within KVLAB_LOGIN_WINDOW_S for one username, or
from one address, further attempts for it are refused (HTTP 429, a form error) until the
oldest of those failures leaves the window; the right password is not even checked.
Failures are counted in Django's default cache: with the default LocMemCache each web
process counts on its own, so N processes allow up to N times the limit — a shared cache
(Redis) in CACHES makes it exact. Behind a proxy every client has the proxy's address:
the per-account limit still holds.
"""

from __future__ import annotations

import hashlib
import math
import time
from typing import Any

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

THROTTLED = "throttled"


def now() -> float:
    return time.time()


def _keys(username: str, address: str) -> list[str]:
    account = hashlib.sha256(username.strip().casefold().encode()).hexdigest()
    return [f"kvlab-login-fail:account:{account}", f"kvlab-login-fail:address:{address}"]


def _recent(key: str) -> list[float]:
    since = now() - settings.KVLAB_LOGIN_WINDOW_S
    return [t for t in cache.get(key, []) if t > since]


def retry_after(username: str, address: str) -> int:
    """Seconds until a login for this account from this address may be tried again (0: now)."""
    wait = 0.0
    for key in _keys(username, address):
        recent = _recent(key)
        if len(recent) >= settings.KVLAB_LOGIN_MAX_FAILURES:
            oldest_counted = sorted(recent)[-settings.KVLAB_LOGIN_MAX_FAILURES]
            wait = max(wait, oldest_counted + settings.KVLAB_LOGIN_WINDOW_S - now())
    return math.ceil(wait) if wait > 0 else 0


def record_failure(username: str, address: str) -> None:
    for key in _keys(username, address):
        recent = _recent(key)[-settings.KVLAB_LOGIN_MAX_FAILURES :]  # bounded, whatever the attempts
        cache.set(key, [*recent, now()], timeout=settings.KVLAB_LOGIN_WINDOW_S)


def forget_account(username: str) -> None:
    """A successful login clears the account's failures (not the address's)."""
    cache.delete(_keys(username, "")[0])


def client_address(request: HttpRequest | None) -> str:
    return str(request.META.get("REMOTE_ADDR") or "unknown") if request else "unknown"


class ThrottledAuthenticationForm(AuthenticationForm):
    """Checks the throttle before the password, and counts a wrong one."""

    def clean(self) -> dict[str, Any]:
        username = str(self.cleaned_data.get("username") or "")
        address = client_address(self.request)
        wait = retry_after(username, address)
        if wait:
            minutes = (wait + 59) // 60
            raise ValidationError(
                "Too many failed logins for this account or from this address. "
                f"Try again in {minutes} minute{'s' if minutes != 1 else ''}.",
                code=THROTTLED,
            )
        try:
            cleaned: dict[str, Any] = super().clean()
        except ValidationError:
            record_failure(username, address)
            raise
        forget_account(username)
        return cleaned


class ThrottledAdminAuthenticationForm(ThrottledAuthenticationForm, AdminAuthenticationForm):
    """The admin's login is another front door: the same throttle."""


_login = LoginView.as_view(authentication_form=ThrottledAuthenticationForm)


def login(request: HttpRequest) -> HttpResponse:
    """Django's login view with the throttled form; a refused attempt answers 429."""
    response = _login(request)
    if isinstance(response, TemplateResponse) and response.context_data:
        form = response.context_data.get("form")
        if form is not None and form.has_error("__all__", THROTTLED):
            response.status_code = 429
            response.context_data["throttled"] = True
    return response
