"""What strangers are not shown: the names of the machines kvlab reaches, and who did what.

Registered servers are login-only because they name internal hosts (README and docs/security.md, "Who may do what");
the same names show elsewhere, on pages anyone may browse: a job's server or the URL a command-line
job was given, the launch host of a sweep, the worker that ran either, the lines of a chart grouped
by server, an error that quotes a server's address, who imported a file. An anonymous user sees a
neutral placeholder instead; anyone logged in sees the name. One rule, here; the templates ask
through benchmarks/templatetags/visibility.py.

Also here: a rejected upload's reason names the file as it was uploaded, never the temporary path
the web host wrote it to before a converter read it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from django.utils.crypto import salted_hmac

SERVER = "a registered server"
URL = "a server given by its URL"
LAUNCHED = "a server launched by a sweep"
HOST = "a launch host"
WORKER = "a worker"
MODELS_DIR = "a models directory"
BINARY = "llama-server"
PLACEHOLDERS = {"server": SERVER, "url": URL, "host": HOST, "worker": WORKER}


def may_see(user: Any) -> bool:
    """Whether this user is shown internal names: anyone logged in."""
    return bool(getattr(user, "is_authenticated", False))


def job_target(job: Any, user: Any) -> str:
    """The server a job ran against as this user may see it: its name (or URL), else a placeholder."""
    if may_see(user):
        return str(job.target_name)
    if job.server_id:
        return SERVER
    return LAUNCHED if getattr(job, "sweep_config_id", None) else URL


def server_line(name: str | None) -> str:
    """A server's name as a chart line shows it to strangers: a tag that tells servers apart, keyed by the
    secret key so that it names none (a name like gpu-host-1 cannot be guessed back from it)."""
    if not name:
        return "(none)"
    return f"registered server {salted_hmac('kvlab.visibility.server_line', name).hexdigest()[:6]}"


def server_lines(rows: list[dict[str, Any]], user: Any, field: str = "job__server__name") -> None:
    """Rows of a chart or a table that name their server, made fit for this user: strangers see tags."""
    if may_see(user):
        return
    for row in rows:
        if row.get(field):
            row[field] = server_line(row[field])


def address_names(base_url: str) -> list[str]:
    """What of a server's URL may show in a text: the URL, its host:port, its host."""
    if not base_url:
        return []
    parts = urlsplit(base_url)
    found = [base_url.rstrip("/"), parts.netloc, parts.hostname or ""]
    return [name for name in found if name]


def hidden(text: str, names: Iterable[str], placeholder: str) -> str:
    """The text with each of these names (whole, not inside a longer word) replaced by the placeholder."""
    names = sorted({n for n in names if n}, key=len, reverse=True)  # the URL before its host
    if not text or not names:
        return text
    pattern = re.compile(r"(?<![\w.-])(?:" + "|".join(re.escape(n) for n in names) + r")(?![\w-]|\.\w)", re.IGNORECASE)
    return pattern.sub(placeholder, text)


def job_text(text: str, job: Any, user: Any) -> str:
    """A job's error (or one of its requests') as this user may see it: strangers see no server address."""
    if may_see(user) or not text:
        return text
    names = address_names(str(getattr(job, "base_url", "") or ""))
    server = getattr(job, "server", None) if getattr(job, "server_id", None) else None
    if server is not None:
        names += [server.name, *address_names(server.base_url)]
    return hidden(text, names, job_target(job, user))


def worker_names(worker: str) -> list[str]:
    """A Celery worker's name (celery@gpu-host-1) and the host in it."""
    return [worker, worker.rpartition("@")[2]] if worker else []


def sweep_text(text: str, sweep: Any, user: Any) -> str:
    """A sweep's error or a launched server's log as this user may see it: strangers see neither the
    launch host's name nor the worker's, nor the directories and binaries the worker was allowed."""
    if may_see(user) or not text:
        return text
    host = sweep.host
    text = hidden(text, [host.name, *worker_names(sweep.worker), *worker_names(host.worker)], HOST)
    text = hidden(text, [str(b) for b in host.binaries or []], BINARY)
    return hidden(text, [str(d).rstrip("/") for d in host.models_dirs or []], MODELS_DIR)


# --- a rejected upload's reasons ---------------------------------------------------------------

UPLOAD_DIR_PREFIX = "kvlab-upload-"  # benchmarks.history.importer.import_uploads's temporary directory
# From the prefix: the directory's random part, the folder of the files given (upload, upload-2, ...),
# and what follows inside it (a file as it was uploaded, or a file of a folder given), if anything.
# Each part bounded (tempfile's random part is 8 characters of [a-z0-9_]): linear whatever the text.
_UPLOAD_TAIL = re.compile(
    re.escape(UPLOAD_DIR_PREFIX) + r"\w{1,64}[/\\]upload(?:-\d{1,9})?(?:[/\\](?P<inside>[^\s,:;()'\"]+))?"
)
_PATH_STOPS = frozenset(" \t\r\n'\"([{=,;")
GIVEN_TOGETHER = "the files given together"


def as_uploaded(reason: str) -> str:
    """A reason with each temporary upload path replaced by the name the file was uploaded with."""
    if UPLOAD_DIR_PREFIX not in reason:
        return reason
    out, done = [], 0
    at = reason.find(UPLOAD_DIR_PREFIX)
    while at != -1:
        match = _UPLOAD_TAIL.match(reason, at)
        if match is None:
            at = reason.find(UPLOAD_DIR_PREFIX, at + 1)
            continue
        start = at
        while start > done and reason[start - 1] not in _PATH_STOPS:  # back to where the path began
            start -= 1
        out += [reason[done:start], match["inside"] or GIVEN_TOGETHER]
        done = match.end()
        at = reason.find(UPLOAD_DIR_PREFIX, done)
    out.append(reason[done:])
    return "".join(out)
