"""Failed logins slow their sender down; they never lock an account.

Failures are counted per client address (kvlab.clients.client_key: the real client behind a
trusted proxy) and per (account, address): after KVLAB_LOGIN_ADDRESS_MAX_FAILURES failures from
one address, or KVLAB_LOGIN_MAX_FAILURES for one account from one address, within
KVLAB_LOGIN_WINDOW_S, each further attempt waits a pause that doubles with every failure
(1, 2, 4 … seconds, at most KVLAB_LOGIN_BACKOFF_MAX_S) after the last one: an attempt inside
the pause is answered 429 with Retry-After, and its password is not even checked. Nothing is
counted per account alone, so failures from one address never slow a login from another: a
stranger cannot lock anyone out, staff included (the price: many addresses guessing one
account are each slowed, not stopped; the password validators are that defence).

Only a wrong password (or an unknown or inactive user, which Django cannot tell apart) is a
failure: the admin refusing a right password because the user is not staff is not one.

Failures are counted in Django's default cache: with the default LocMemCache each web process
counts on its own, so N processes allow up to N times the failures; a shared cache (Redis) in
CACHES makes it exact.
"""

from __future__ import annotations

import hashlib
import math
import time
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from kvlab.clients import client_key

THROTTLED = "throttled"


def now() -> float:
    return time.time()


def _account(username: str) -> str:
    return hashlib.sha256(username.strip().casefold().encode()).hexdigest()


def _counters(username: str, address: str) -> list[tuple[str, int]]:
    """Each counter a failure adds to: its cache key and the failures it allows before pausing."""
    return [
        (f"kvlab-login-fail:address:{address}", settings.KVLAB_LOGIN_ADDRESS_MAX_FAILURES),
        (f"kvlab-login-fail:pair:{_account(username)}:{address}", settings.KVLAB_LOGIN_MAX_FAILURES),
    ]


def _kept(free: int) -> int:
    """Failures worth remembering: past free + log2(longest pause), one more changes nothing."""
    return free + math.ceil(math.log2(settings.KVLAB_LOGIN_BACKOFF_MAX_S)) + 1


def _recent(key: str) -> list[float]:
    since = now() - settings.KVLAB_LOGIN_WINDOW_S
    return sorted(t for t in cache.get(key, []) if t > since)


def pause(failures: int, free: int) -> float:
    """Seconds an address waits after its latest failure, with this many failures counted."""
    if failures < free:
        return 0.0
    return float(min(settings.KVLAB_LOGIN_BACKOFF_MAX_S, 2 ** (failures - free)))


def retry_after(username: str, address: str) -> int:
    """Seconds until a login for this account from this address may be tried (0: now)."""
    wait = 0.0
    for key, free in _counters(username, address):
        recent = _recent(key)
        if recent:
            wait = max(wait, recent[-1] + pause(len(recent), free) - now())
    return math.ceil(wait) if wait > 0 else 0


def record_failure(username: str, address: str) -> None:
    for key, free in _counters(username, address):
        recent = _recent(key)[-_kept(free) + 1 :]  # bounded, whatever the attempts
        cache.set(key, [*recent, now()], timeout=settings.KVLAB_LOGIN_WINDOW_S)


def forget(username: str, address: str) -> None:
    """The right password clears this account's failures from this address (not the address's)."""
    cache.delete(_counters(username, address)[1][0])


class ThrottledAuthenticationForm(AuthenticationForm):
    """Checks the pause before the password, and counts a wrong one."""

    retry_after_s = 0

    def clean(self) -> dict[str, Any]:
        username = str(self.cleaned_data.get("username") or "")
        address = client_key(self.request)
        wait = retry_after(username, address)
        if wait:
            self.retry_after_s = wait
            raise ValidationError(
                f"Too many failed logins from your address. Try again in {wait} second{'s' if wait != 1 else ''}.",
                code=THROTTLED,
            )
        try:
            cleaned: dict[str, Any] = super().clean()
        except ValidationError:
            if self.user_cache is None:  # a wrong password, an unknown or inactive user
                record_failure(username, address)
            else:  # the right password, refused for another reason (the admin: not staff)
                forget(username, address)
            raise
        forget(username, address)
        return cleaned


class ThrottledAdminAuthenticationForm(ThrottledAuthenticationForm, AdminAuthenticationForm):
    """The admin's login is another front door: the same throttle."""


def _answer_throttled(response: HttpResponse) -> HttpResponse:
    """A refused attempt answers 429 with Retry-After, the form's message on the page."""
    if isinstance(response, TemplateResponse) and response.context_data:
        form = response.context_data.get("form")
        if form is not None and form.has_error("__all__", THROTTLED):
            response.status_code = 429
            response["Retry-After"] = str(form.retry_after_s)
            response.context_data["throttled"] = True
    return response


_login = LoginView.as_view(authentication_form=ThrottledAuthenticationForm)


def login(request: HttpRequest) -> HttpResponse:
    """Django's login view with the throttled form."""
    return _answer_throttled(_login(request))


def admin_login(request: HttpRequest) -> HttpResponse:
    """The admin's login view (its form: ThrottledAdminAuthenticationForm, set in kvlab.urls)."""
    return _answer_throttled(admin.site.login(request))
