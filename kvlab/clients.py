"""Who sent a request: the client's real address, behind a trusted proxy or not.

Behind the TLS proxy deploy/ describes, every request reaches gunicorn from the proxy's own
address; the client's is in the X-Forwarded-For header the proxy appends to
(`proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;`). That header is believed only
when the request comes from an address in KVLAB_TRUSTED_PROXIES (default: none, so a client
cannot name itself), and read from the right: the proxy's own entry is the last, anything to its
left came from the client and may be forged, so the first address that is not a trusted proxy is
the client. Per-client limits (the login back-off, export concurrency) count under client_key():
an IPv6 client is its /64, which one host or one customer holds whole.
"""

from __future__ import annotations

import functools
import ipaddress

from django.conf import settings
from django.http import HttpRequest

UNKNOWN = "unknown"
FORWARDED_FOR = "HTTP_X_FORWARDED_FOR"
_MOST_HOPS = 32  # entries of X-Forwarded-For read from the right; a longer chain is not a real one

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@functools.cache
def _networks(trusted: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(item, strict=False) for item in trusted)


def trusted_proxies() -> tuple[Network, ...]:
    return _networks(tuple(settings.KVLAB_TRUSTED_PROXIES))


def parse_address(text: str) -> Address | None:
    """An IP address as a socket or a proxy writes it (IPv6 may be bracketed), else None."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped  # ::ffff:10.0.0.1 is 10.0.0.1, one client under either spelling
    return address


def _is_trusted(address: Address, proxies: tuple[Network, ...]) -> bool:
    return any(address.version == network.version and address in network for network in proxies)


def real_address(request: HttpRequest) -> Address | None:
    peer = parse_address(str(request.META.get("REMOTE_ADDR") or ""))
    proxies = trusted_proxies()
    if peer is None or not _is_trusted(peer, proxies):
        return peer
    client = peer
    for entry in reversed(str(request.META.get(FORWARDED_FOR) or "").split(",")[-_MOST_HOPS:]):
        hop = parse_address(entry)
        if hop is None:
            break  # garbage: nothing to its left can be believed; the last good hop stands
        client = hop
        if not _is_trusted(hop, proxies):
            break
    return client


def client_address(request: HttpRequest | None) -> str:
    """The address of the client that sent this request, as text ("unknown" if there is none)."""
    address = real_address(request) if request is not None else None
    return str(address) if address is not None else UNKNOWN


def client_key(request: HttpRequest | None) -> str:
    """What per-client limits count under: the address, or an IPv6 address's /64."""
    address = real_address(request) if request is not None else None
    if address is None:
        return UNKNOWN
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)
