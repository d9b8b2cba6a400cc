"""At most N of one kind of long request at once per client, counted across every web process.

A slot is an exclusive flock() on a small file: gunicorn's processes and threads all see it (each
open() is its own lock holder), and the kernel drops it when the holder closes it or dies, so a
crashed worker leaves no slot taken and nothing needs expiring. A client (kvlab.clients.client_key:
its real address behind the trusted proxy, an IPv6 /64) is hashed into one of BUCKETS groups of
slot files: the files stay a bounded set, and two clients whose keys share a bucket share its
slots (with 4,096 buckets, rarely).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path

from django.conf import settings
from django.http import HttpRequest

from .clients import client_key

BUCKETS = 4096


def slots_dir() -> Path:
    return Path(getattr(settings, "KVLAB_SLOTS_DIR", settings.VAR_DIR / "slots"))


class Held:
    """One slot, held until close() (idempotent): closing the file releases the lock."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __del__(self) -> None:  # a response dropped without being closed leaves no slot taken
        self.close()

    @property
    def held(self) -> bool:
        return self._fd is not None


def slot_file(kind: str, key: str, slot: int) -> Path:
    """The file whose lock is slot `slot` of this kind for a client key (its bucket's)."""
    bucket = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") % BUCKETS
    return slots_dir() / kind / f"{bucket:04x}-{slot}"


def take(kind: str, request: HttpRequest, per_client: int) -> Held | None:
    """A free one of the client's `per_client` slots of this kind, or None when all are held."""
    key = client_key(request)
    for slot in range(per_client):
        path = slot_file(kind, key, slot)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return Held(fd)
    return None
