"""Outgoing requests only to allow-listed addresses, resolved once, never redirected.

A server URL must be http(s); its host is resolved here, every address it resolves
to must fall in KVLAB_SERVER_ALLOWLIST (CIDRs; default loopback only), and the
client then connects to that checked address — a DNS answer cannot change between
the check and the connection.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
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
    for address in addresses:
        ip = ipaddress.ip_address(address)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
            ip = ip.ipv4_mapped
        if not any(ip in net for net in networks):
            raise TargetRefused(
                f"{parts.hostname} resolves to {address}, which is outside KVLAB_SERVER_ALLOWLIST "
                f"({', '.join(settings.KVLAB_SERVER_ALLOWLIST)})"
            )
    return Target(parts.scheme, parts.hostname, port, addresses[0], parts.path.rstrip("/"))
