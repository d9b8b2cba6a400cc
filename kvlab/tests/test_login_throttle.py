"""Failed logins are throttled per account and per client address."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client
from django.urls import reverse

from kvlab import throttle

pytestmark = pytest.mark.django_db
PASSWORD = "a-long-test-password"


@pytest.fixture(autouse=True)
def fresh_counts(settings):
    settings.KVLAB_LOGIN_MAX_FAILURES = 5
    settings.KVLAB_LOGIN_WINDOW_S = 900
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


def login(username: str, password: str, address: str = "10.0.0.1"):
    client = Client(REMOTE_ADDR=address)
    response = client.post(reverse("login"), {"username": username, "password": password})
    return response, client


def logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


@pytest.fixture
def ana(db):
    return User.objects.create_user("ana", password=PASSWORD)


@pytest.fixture
def bob(db):
    return User.objects.create_user("bob", password=PASSWORD)


def test_the_right_password_after_five_wrong_ones_is_refused(ana, clock):
    for _ in range(5):
        response, _client = login("ana", "wrong")
        assert response.status_code == 200 and "didn't match" in response.content.decode()
    response, client = login("ana", PASSWORD)
    assert response.status_code == 429 and not logged_in(client)
    assert "Too many failed logins for this account or from this address" in response.content.decode()
    assert "Try again in 15 minutes" in response.content.decode()


def test_four_wrong_passwords_then_the_right_one_logs_in(ana, clock):
    for _ in range(4):
        login("ana", "wrong")
    response, client = login("ana", PASSWORD)
    assert response.status_code == 302 and logged_in(client)


def test_the_account_is_throttled_from_every_address(ana, clock):
    for i in range(5):
        login("ana", "wrong", address=f"10.0.1.{i}")
    response, client = login("ana", PASSWORD, address="10.0.2.1")
    assert response.status_code == 429 and not logged_in(client)


def test_the_address_is_throttled_for_every_account(ana, bob, clock):
    for i in range(5):
        login(f"guess{i}", "wrong", address="10.0.0.9")
    response, client = login("bob", PASSWORD, address="10.0.0.9")
    assert response.status_code == 429 and not logged_in(client)


def test_another_account_from_another_address_still_logs_in(ana, bob, clock):
    for _ in range(5):
        login("ana", "wrong", address="10.0.0.1")
    response, client = login("bob", PASSWORD, address="10.0.0.2")
    assert response.status_code == 302 and logged_in(client)


def test_after_the_window_the_right_password_logs_in(ana, clock):
    for _ in range(5):
        login("ana", "wrong")
    clock.t += 899
    assert login("ana", PASSWORD)[0].status_code == 429
    clock.t += 2
    response, client = login("ana", PASSWORD)
    assert response.status_code == 302 and logged_in(client)


def test_a_success_clears_the_accounts_failures(ana, clock):
    for _ in range(4):
        login("ana", "wrong", address="10.0.0.1")
    assert login("ana", PASSWORD, address="10.0.0.2")[0].status_code == 302
    for _ in range(4):
        login("ana", "wrong", address="10.0.0.3")
    response, client = login("ana", PASSWORD, address="10.0.0.4")
    assert response.status_code == 302 and logged_in(client)


def test_the_admin_login_is_throttled_too(clock):
    User.objects.create_superuser("root", password=PASSWORD)
    client = Client(REMOTE_ADDR="10.0.0.5")
    for _ in range(5):
        client.post("/admin/login/", {"username": "root", "password": "wrong"})
    client.post("/admin/login/", {"username": "root", "password": PASSWORD})
    assert not logged_in(client)
    assert (
        "Too many failed logins"
        in client.post("/admin/login/", {"username": "root", "password": PASSWORD}).content.decode()
    )
