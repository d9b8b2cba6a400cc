import socket

import pytest

from conftest import NetworkGuardError


def test_a_connection_outside_loopback_fails_the_test_before_any_packet():
    with socket.socket() as sock, pytest.raises(NetworkGuardError, match="10.255.255.1"):
        sock.connect(("10.255.255.1", 9))
    with socket.socket(socket.AF_INET6) as sock, pytest.raises(NetworkGuardError):
        sock.connect_ex(("2001:db8::1", 9, 0, 0))


def test_loopback_is_allowed():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname(), timeout=2):
            pass
