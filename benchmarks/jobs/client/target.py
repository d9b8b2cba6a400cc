"""Outgoing requests only to allow-listed addresses, resolved once, never redirected.

A server URL must be http(s); its host is resolved here, every address it resolves
to must fall in KVLAB_SERVER_ALLOWLIST (CIDRs; default loopback only), and the
client then connects to that checked address — a DNS answer cannot change between
the check and the connection.

Loopback is allowed for a local llama-server, but never at the port of one of kvlab's own
services (its Redis, its database, its web port): kvlab does not send HTTP to them.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings


class TargetRefused(ValueError):
    """The URL may not be contacted; the message says why."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # as written, for the Host header and TLS
    port: int
    address: str  # the checked IP the client connects to
    base_path: str

    def url(self, path: str) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.base_path}{path}"


def allowlist() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(cidr, strict=False) for cidr in settings.KVLAB_SERVER_ALLOWLIST]


def own_services() -> Iterator[tuple[str, str, int]]:
    """(name, host, port) of each service kvlab itself runs on: from its settings, never a target."""
    broker = urlsplit(str(getattr(settings, "CELERY_BROKER_URL", "") or ""))
    if broker.scheme.startswith("redis"):
        try:
            redis_port = broker.port or 6379
        except ValueError:  # a malformed port: Celery will fail loudly on its own
            redis_port = 6379
        yield "Redis", broker.hostname or "127.0.0.1", redis_port
    database = _database_settings()
    default_ports = {"postgresql": 5432, "mysql": 3306, "oracle": 1521}
    engine = next((name for name in default_ports if name in database.get("ENGINE", "")), None)
    if engine:
        port = int(database.get("PORT") or default_ports[engine])
        host = database.get("HOST") or "127.0.0.1"
        yield "database", "127.0.0.1" if host.startswith("/") else host, port  # "/…": a socket dir, same host
    yield "web server", "127.0.0.1", int(getattr(settings, "KVLAB_PORT", 8000))


def _database_settings() -> dict[str, Any]:
    return dict(settings.DATABASES["default"])


def _addresses(host: str, port: int) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return set()
    return {_unmapped(ipaddress.ip_address(info[4][0])) for info in infos}


def _unmapped(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        return ip.ipv4_mapped
    return ip


def _refuse_own_service(hostname: str, port: int, ips: list[ipaddress.IPv4Address | ipaddress.IPv6Address]) -> None:
    for name, host, service_port in own_services():
        if port != service_port:
            continue
        service_ips = _addresses(host, port)
        on_loopback = not service_ips or any(ip.is_loopback for ip in service_ips)
        for ip in ips:
            if ip in service_ips or (ip.is_loopback and on_loopback):
                raise TargetRefused(f"port {port} is kvlab's own {name} ({host}:{port}), not a llama-server")


def resolve_target(url: str) -> Target:
    try:
        return _resolve(url)
    except ValueError as exc:  # urlsplit and .hostname raise plain ValueErrors for malformed URLs
        if isinstance(exc, TargetRefused):
            raise
        raise TargetRefused(f"the URL cannot be parsed: {exc}") from None


def _resolve(url: str) -> Target:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        raise TargetRefused(f"only http and https servers can be registered, not {parts.scheme or 'no scheme'!r}")
    if parts.username or parts.password:
        raise TargetRefused("credentials in the URL are not allowed; use the API key field")
    if not parts.hostname:
        raise TargetRefused("the URL has no host")
    try:
        port = parts.port
    except ValueError:
        raise TargetRefused("the URL's port is not a number from 1 to 65535") from None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    elif port == 0:
        raise TargetRefused("the URL's port is not a number from 1 to 65535")
    try:
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise TargetRefused(f"{parts.hostname!r} does not resolve: {exc}") from None
    addresses = sorted({info[4][0] for info in infos})
    networks = allowlist()
    ips = []
    for address in addresses:
        ip = _unmapped(ipaddress.ip_address(address))
        ips.append(ip)
        if not any(ip in net for net in networks):
            raise TargetRefused(
                f"{parts.hostname} resolves to {address}, which is outside KVLAB_SERVER_ALLOWLIST "
                f"({', '.join(settings.KVLAB_SERVER_ALLOWLIST)})"
            )
    _refuse_own_service(parts.hostname, port, ips)
    return Target(parts.scheme, parts.hostname, port, addresses[0], parts.path.rstrip("/"))
