"""Failed logins slow down the address they come from, and never lock an account."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client
from django.urls import reverse

from kvlab import throttle

pytestmark = pytest.mark.django_db
PASSWORD = "a-long-test-password"
PROXY = "127.0.0.1"


@pytest.fixture(autouse=True)
def fresh_counts(settings):
    settings.KVLAB_LOGIN_MAX_FAILURES = 5
    settings.KVLAB_LOGIN_ADDRESS_MAX_FAILURES = 20
    settings.KVLAB_LOGIN_BACKOFF_MAX_S = 60
    settings.KVLAB_LOGIN_WINDOW_S = 900
    settings.KVLAB_TRUSTED_PROXIES = []
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast: many logins here
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def clock(monkeypatch):
    class Clock:
        t = 1_800_000_000.0

    monkeypatch.setattr(throttle, "now", lambda: Clock.t)
    return Clock


@pytest.fixture
def behind_proxy(settings):
    """As deploy/ runs it: every request reaches gunicorn from the proxy, the client in X-Forwarded-For."""
    settings.KVLAB_TRUSTED_PROXIES = [PROXY]


def login(username: str, password: str, address: str = "10.0.0.1", *, url: str = "", via: str | None = None):
    """One login attempt from `address`, directly or (`via`) through a proxy at that address."""
    headers = {"REMOTE_ADDR": via, "HTTP_X_FORWARDED_FOR": address} if via else {"REMOTE_ADDR": address}
    client = Client(**headers)
    response = client.post(url or reverse("login"), {"username": username, "password": password})
    return response, client


def logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


@pytest.fixture
def ana(db):
    return User.objects.create_user("ana", password=PASSWORD)


@pytest.fixture
def bob(db):
    return User.objects.create_user("bob", password=PASSWORD)


def test_failures_for_a_missing_user_behind_the_proxy_slow_only_their_sender(ana, clock, behind_proxy):
    for _ in range(10):
        response, _client = login("nobody", "wrong", address="203.0.113.66", via=PROXY)
        assert response.status_code in (200, 429)
    assert login("nobody", "wrong", address="203.0.113.66", via=PROXY)[0].status_code == 429
    response, client = login("ana", PASSWORD, address="203.0.113.7", via=PROXY)
    assert response.status_code == 302 and logged_in(client)


def test_without_a_trusted_proxy_a_forged_forwarded_header_changes_nothing(ana, clock):
    for i in range(5):
        login("ana", "wrong", address="10.0.0.9", via=None)
        Client(REMOTE_ADDR="10.0.0.9", HTTP_X_FORWARDED_FOR=f"192.0.2.{i}").post(
            reverse("login"), {"username": "ana", "password": "wrong"}
        )
    response = Client(REMOTE_ADDR="10.0.0.9", HTTP_X_FORWARDED_FOR="192.0.2.200").post(
        reverse("login"), {"username": "ana", "password": PASSWORD}
    )
    assert response.status_code == 429


def test_no_one_can_lock_an_account_from_another_address(ana, clock):
    for _round in range(5):
        for i in range(10):
            login("ana", "wrong", address=f"198.51.100.{i}")
        clock.t += 60
    response, client = login("ana", PASSWORD, address="10.0.2.1")
    assert response.status_code == 302 and logged_in(client)


def test_no_one_can_lock_a_staff_account_at_the_admin_login(clock):
    User.objects.create_superuser("root", password=PASSWORD)
    for _ in range(50):
        login("root", "wrong", address="198.51.100.1", url="/admin/login/")
    response, client = login("root", PASSWORD, address="10.0.0.5", url="/admin/login/")
    assert response.status_code == 302 and logged_in(client)


def test_five_wrong_passwords_pause_that_account_from_that_address_with_retry_after(ana, clock):
    for _ in range(5):
        response, _client = login("ana", "wrong")
        assert response.status_code == 200 and "didn't match" in response.content.decode()
    response, client = login("ana", PASSWORD)
    assert response.status_code == 429 and not logged_in(client)  # inside the pause: not even checked
    assert response["Retry-After"] == "1"
    assert "Too many failed logins from your address. Try again in 1 second." in response.content.decode()
    clock.t += 1
    response, client = login("ana", PASSWORD)
    assert response.status_code == 302 and logged_in(client)


def test_the_pause_doubles_with_each_failure_up_to_its_limit(ana, clock):
    for _ in range(5):
        login("ana", "wrong")
    pauses = []
    for _ in range(9):
        response, _client = login("ana", "wrong")
        assert response.status_code == 429
        pauses.append(int(response["Retry-After"]))
        clock.t += pauses[-1]
        assert login("ana", "wrong")[0].status_code == 200  # tried once the pause is over: counted
    assert pauses == [1, 2, 4, 8, 16, 32, 60, 60, 60]


def test_attempts_refused_inside_the_pause_do_not_lengthen_it(ana, clock):
    for _ in range(5):
        login("ana", "wrong")
    for _ in range(20):
        assert login("ana", "wrong")[0]["Retry-After"] == "1"


def test_guessing_many_accounts_from_one_address_pauses_that_address(ana, bob, clock):
    for i in range(20):
        login(f"guess{i}", "wrong", address="10.0.0.9")
    assert login("bob", PASSWORD, address="10.0.0.9")[0].status_code == 429
    response, client = login("bob", PASSWORD, address="10.0.0.2")
    assert response.status_code == 302 and logged_in(client)


def test_four_wrong_passwords_then_the_right_one_logs_in(ana, clock):
    for _ in range(4):
        login("ana", "wrong")
    response, client = login("ana", PASSWORD)
    assert response.status_code == 302 and logged_in(client)


def test_failures_leave_the_count_after_the_window(ana, clock):
    for _ in range(5):
        login("ana", "wrong")
    clock.t += 901
    assert login("ana", "wrong")[0].status_code == 200  # counted as the first of a new window: no pause
    response, client = login("ana", PASSWORD)
    assert response.status_code == 302 and logged_in(client)


def test_the_right_password_clears_that_accounts_failures_from_that_address(ana, clock):
    for _ in range(4):
        login("ana", "wrong")
    assert login("ana", PASSWORD)[0].status_code == 302
    for _ in range(4):
        login("ana", "wrong")
    response, client = login("ana", PASSWORD)
    assert response.status_code == 302 and logged_in(client)


def test_a_non_staff_users_right_password_at_the_admin_is_not_a_failure(ana, clock):
    for _ in range(10):
        response, client = login("ana", PASSWORD, url="/admin/login/")
        assert response.status_code == 200 and not logged_in(client)
        assert "for a staff account" in response.content.decode()
    assert throttle.retry_after("ana", "10.0.0.1") == 0
    response, client = login("ana", PASSWORD)
    assert response.status_code == 302 and logged_in(client)


def test_the_admin_login_is_throttled_too_with_429(clock):
    User.objects.create_superuser("root", password=PASSWORD)
    for _ in range(5):
        login("root", "wrong", address="10.0.0.5", url="/admin/login/")
    response, client = login("root", PASSWORD, address="10.0.0.5", url="/admin/login/")
    assert response.status_code == 429 and response["Retry-After"] == "1" and not logged_in(client)
    assert "Too many failed logins from your address" in response.content.decode()


def test_what_is_remembered_is_bounded_whatever_the_attempts(ana, clock):
    for _ in range(60):
        login("ana", "wrong")
        clock.t += 61
    for key, _free in throttle._counters("ana", "10.0.0.1"):
        assert 0 < len(cache.get(key)) <= 20 + 6 + 1
