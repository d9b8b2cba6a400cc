"""The client's real address: the proxy's X-Forwarded-For, believed only from a trusted proxy."""

from __future__ import annotations

import pytest
from django.test import RequestFactory

from kvlab.clients import client_address, client_key

PROXY = "127.0.0.1"


def request(peer: str, forwarded: str | None = None):
    extra = {"REMOTE_ADDR": peer}
    if forwarded is not None:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded
    return RequestFactory().get("/", **extra)


@pytest.fixture
def behind_proxy(settings):
    settings.KVLAB_TRUSTED_PROXIES = [PROXY, "10.9.0.0/24"]


def test_by_default_no_forwarded_header_is_believed(settings):
    settings.KVLAB_TRUSTED_PROXIES = []
    assert client_address(request(PROXY, "203.0.113.7")) == PROXY
    assert client_address(request("198.51.100.2", "203.0.113.7")) == "198.51.100.2"


def test_behind_a_trusted_proxy_the_client_is_the_address_it_forwarded(behind_proxy):
    assert client_address(request(PROXY, "203.0.113.7")) == "203.0.113.7"


def test_a_client_cannot_name_itself_by_sending_the_header_through_the_proxy(behind_proxy):
    # nginx's $proxy_add_x_forwarded_for keeps what the client sent and appends the address it saw.
    assert client_address(request(PROXY, "192.0.2.1, 203.0.113.7")) == "203.0.113.7"
    assert client_address(request(PROXY, "127.0.0.1, 203.0.113.7")) == "203.0.113.7"


def test_a_chain_of_trusted_proxies_is_walked_from_the_right(behind_proxy):
    assert client_address(request(PROXY, "192.0.2.1, 203.0.113.7, 10.9.0.4")) == "203.0.113.7"


def test_the_header_from_an_untrusted_peer_is_ignored(behind_proxy):
    assert client_address(request("198.51.100.2", "203.0.113.7")) == "198.51.100.2"


def test_garbage_in_the_header_stops_the_walk(behind_proxy):
    assert client_address(request(PROXY, "not-an-ip")) == PROXY
    assert client_address(request(PROXY, "x" * 10_000 + ", 203.0.113.7")) == "203.0.113.7"
    assert client_address(request(PROXY, "")) == PROXY


def test_spellings_of_one_address_are_one_client(behind_proxy):
    assert client_address(request(PROXY, "[2001:db8::1]")) == "2001:db8::1"
    assert client_address(request(PROXY, "::ffff:203.0.113.7")) == "203.0.113.7"
    assert client_address(request("::ffff:127.0.0.1", "203.0.113.7")) == "203.0.113.7"


def test_no_peer_address_is_unknown():
    assert client_address(None) == "unknown"
    assert client_address(request("")) == "unknown"


def test_limits_count_an_ipv6_client_by_its_64(behind_proxy):
    assert client_key(request(PROXY, "2001:db8:1:2:aaaa::1")) == "2001:db8:1:2::/64"
    assert client_key(request(PROXY, "2001:db8:1:2:bbbb::9")) == "2001:db8:1:2::/64"
    assert client_key(request(PROXY, "203.0.113.7")) == "203.0.113.7"


def test_a_malformed_setting_stops_start_up(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    from kvlab.settings import env_networks

    monkeypatch.setenv("KVLAB_TRUSTED_PROXIES", "127.0.0.1, nginx.internal")
    with pytest.raises(ImproperlyConfigured, match="'nginx.internal' is not an IP address or network"):
        env_networks("KVLAB_TRUSTED_PROXIES", "")
    monkeypatch.setenv("KVLAB_TRUSTED_PROXIES", "127.0.0.1, 10.0.0.0/8")
    assert env_networks("KVLAB_TRUSTED_PROXIES", "") == ["127.0.0.1", "10.0.0.0/8"]
