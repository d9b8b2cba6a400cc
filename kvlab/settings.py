"""kvlab settings: one module, configured from the environment.

Defaults work on a fresh checkout (SQLite under var/, Redis on localhost); every
environment variable that is set but malformed stops start-up with a clear error.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import sys
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("KVLAB_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None
    if value <= 0:
        raise ImproperlyConfigured(f"{name} must be positive, got {value}")
    return value


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_networks(name: str, default: str) -> list[str]:
    """A comma-separated list of IP addresses or networks (CIDR), each checked."""
    items = env_list(name, default)
    for item in items:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ImproperlyConfigured(f"{name}: {item!r} is not an IP address or network") from None
    return items


def env_paths(name: str, default: str) -> list[str]:
    """A ":"-separated list of paths, like $PATH."""
    return [item for item in os.environ.get(name, default).split(":") if item]


def local_secret_key() -> str:
    """A key generated once per checkout for local runs, kept out of the repo."""
    path = VAR_DIR / "secret_key"
    if not path.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


DEBUG = env_bool("KVLAB_DEBUG", False)
# Production: behind TLS, a secret from the environment, hardened cookies and headers.
PRODUCTION = env_bool("KVLAB_PRODUCTION", False)
if PRODUCTION and not os.environ.get("KVLAB_SECRET_KEY"):
    raise ImproperlyConfigured("KVLAB_PRODUCTION=1 needs KVLAB_SECRET_KEY (50+ random characters) in the environment")
SECRET_KEY = os.environ.get("KVLAB_SECRET_KEY") or local_secret_key()
ALLOWED_HOSTS = env_list("KVLAB_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("KVLAB_CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "benchmarks",
    "sizing",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",  # static files: answers before anything below runs
    # gzip for every page, download and stream when the client asks (Accept-Encoding), with Django's
    # BREACH mitigation (up to 100 random bytes a response); above whatever reads or writes bodies.
    # Static files skip it: collectstatic's .gz/.br copies (production) or as they are (finders).
    "django.middleware.gzip.GZipMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "kvlab.urls"
WSGI_APPLICATION = "kvlab.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# SQLite is the embedded default; DATABASE_URL switches to PostgreSQL.
_sqlite_default = f"sqlite:///{VAR_DIR / 'kvlab.sqlite3'}"
DATABASES = {"default": dj_database_url.parse(os.environ.get("DATABASE_URL") or _sqlite_default)}
# PostgreSQL: each web process keeps a psycopg connection pool (Django's "pool" option,
# docs.djangoproject.com/en/5.2/ref/databases/#connection-pool) instead of opening a
# connection per request, which cost a third of the throughput under load. A gunicorn
# worker serves 2 threads (deploy/gunicorn.conf.py), so it never holds more than 2
# connections at once; the pool is per process and opened lazily, after the fork.
# CONN_HEALTH_CHECKS makes the pool ping a connection as it leaves the pool: one broken by
# a database restart or an idle timeout is replaced, not handed to a request.
# Celery workers keep a connection per task (CONN_MAX_AGE 0): a prefork child must not
# inherit its parent's pooled sockets, and a task lasts minutes, not milliseconds.
# kvlab's backend is Django's with psycopg's compiled timestamptz loader (kvlab/db/postgresql).
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"]["ENGINE"] = "kvlab.db.postgresql"
_celery_process = "celery" in (Path(sys.argv[0]).name, Path(sys.argv[0]).parent.name) if sys.argv else False
KVLAB_DB_POOL = env_bool("KVLAB_DB_POOL", not _celery_process)
if DATABASES["default"]["ENGINE"] == "kvlab.db.postgresql" and KVLAB_DB_POOL:
    _pool_min = env_int("KVLAB_DB_POOL_MIN", 2)
    _pool_max = env_int("KVLAB_DB_POOL_MAX", 4)
    if _pool_max < _pool_min:
        raise ImproperlyConfigured(f"KVLAB_DB_POOL_MAX ({_pool_max}) must be at least KVLAB_DB_POOL_MIN ({_pool_min})")
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # Django refuses persistent connections with a pool
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": _pool_min,
        "max_size": _pool_max,
        "timeout": env_int("KVLAB_DB_POOL_TIMEOUT_S", 10),  # a request waits this long for a free connection
    }
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A web process and workers write at once: WAL lets readers run beside a writer,
    # IMMEDIATE takes the write lock at BEGIN so a transaction never fails to upgrade
    # its lock midway, and the timeout makes a writer wait instead of failing.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # A file, not memory, so that Celery worker processes started by tests share it.
    # Per process, so that two test sessions on one checkout never share a file.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-kvlab-{os.getpid()}.sqlite3")}
    VAR_DIR.mkdir(parents=True, exist_ok=True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "run-list"
LOGOUT_REDIRECT_URL = "run-list"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise expects it even before collectstatic
STATICFILES_DIRS = [BASE_DIR / "static"]
# Without collectstatic (local runs, tests) whitenoise serves from the finders.
WHITENOISE_USE_FINDERS = True

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("KVLAB_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")  # TLS ends at the proxy
    SECURE_HSTS_SECONDS = env_int("KVLAB_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("KVLAB_HSTS_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("KVLAB_HSTS_PRELOAD", True)
    WHITENOISE_USE_FINDERS = False  # collectstatic has run: serve the hashed, compressed copies
    STORAGES = {
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }

# Celery on Redis.
CELERY_BROKER_URL = os.environ.get("KVLAB_REDIS_URL", "redis://127.0.0.1:6379/0")
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_DEFAULT_QUEUE = "kvlab"  # a server may name its own queue, served by a worker on its GPU host
CELERY_TASK_SOFT_TIME_LIMIT = env_int("KVLAB_JOB_SOFT_TIME_LIMIT", 6 * 3600)
CELERY_TASK_TIME_LIMIT = CELERY_TASK_SOFT_TIME_LIMIT + 120
CELERY_BROKER_TRANSPORT_OPTIONS = {"max_retries": 1, "interval_start": 0, "interval_step": 0.5}
# The embedded beat (worker -B) keeps its state under the var directory, never in the checkout.
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE = {
    "reap-stale-jobs": {"task": "benchmarks.tasks.reap_stale_jobs", "schedule": 30.0},
    "reap-stale-sweeps": {"task": "benchmarks.tasks.reap_stale_sweeps", "schedule": 30.0},
    # A large import's runs are counted into the derived tables just after its commit (a message per
    # import); this catches up should a message be lost (benchmarks.history.derived).
    "catch-up-derived": {"task": "benchmarks.tasks.catch_up_derived", "schedule": 60.0},
}

# Benchmark jobs: a running job writes a heartbeat; one silent this long is reaped.
KVLAB_JOB_HEARTBEAT_S = env_int("KVLAB_JOB_HEARTBEAT_S", 2)
KVLAB_JOB_STALE_S = env_int("KVLAB_JOB_STALE_S", 60)
# A host calibration's llama-bench is stopped after this long (a big model's pp and tg at -r 5 take minutes).
KVLAB_CALIBRATION_TIMEOUT_S = env_int("KVLAB_CALIBRATION_TIMEOUT_S", 3600)
# Outgoing requests go only to these networks (CIDRs). Add LAN ranges for GPU hosts.
KVLAB_SERVER_ALLOWLIST = env_list("KVLAB_SERVER_ALLOWLIST", "127.0.0.0/8,::1/128")
# kvlab's own web port (scripts/run.sh serves on it): never a benchmark target, like Redis and the database.
KVLAB_PORT = env_int("KVLAB_PORT", 8000)

# Launch hosts (sweeps): what the worker on THIS machine may start, read by the worker
# from its own environment and announced to the web app; never set from a web form.
# Paths are separated by ":"; a binary must be an executable file that only root or the
# worker's user can change. The default is the llama-server scripts/build-llama-server.sh
# built, and var/models (where the demo model is written).
_built_server = Path.home() / ".cache" / "kvlab" / "llama-server-11434.0.0" / "bin" / "llama-server"
KVLAB_LAUNCH_HOST = os.environ.get("KVLAB_LAUNCH_HOST", "")  # the name announced; the machine's hostname if empty
KVLAB_LAUNCH_BINARIES = env_paths(
    "KVLAB_LAUNCH_BINARIES",
    os.environ.get("KVLAB_LLAMA_SERVER") or (str(_built_server) if _built_server.exists() else ""),
)
KVLAB_LAUNCH_MODELS_DIRS = env_paths("KVLAB_LAUNCH_MODELS_DIRS", str(VAR_DIR / "models"))
KVLAB_LAUNCH_BIND = os.environ.get("KVLAB_LAUNCH_BIND", "127.0.0.1")  # anything but loopback is a choice made here
KVLAB_LAUNCH_PORTS = os.environ.get("KVLAB_LAUNCH_PORTS", "18000-18099")
KVLAB_LAUNCH_QUEUE = os.environ.get("KVLAB_LAUNCH_QUEUE", "")  # the worker's queue announced; derived if empty

# The proxies whose X-Forwarded-For is believed (kvlab/clients.py): addresses or networks, comma-
# separated. Empty (the default): no forwarded header is believed, the socket's peer is the client.
KVLAB_TRUSTED_PROXIES = env_networks("KVLAB_TRUSTED_PROXIES", "")

# Login throttling (kvlab/throttle.py): past this many failed logins for one account from one
# address, or from one address for any accounts, within the window, each further attempt from that
# address waits a pause doubling from 1 s to at most KVLAB_LOGIN_BACKOFF_MAX_S; no account is ever
# locked. Counted in the default cache: per process with the default LocMemCache.
KVLAB_LOGIN_MAX_FAILURES = env_int("KVLAB_LOGIN_MAX_FAILURES", 5)
KVLAB_LOGIN_ADDRESS_MAX_FAILURES = env_int("KVLAB_LOGIN_ADDRESS_MAX_FAILURES", 20)
KVLAB_LOGIN_BACKOFF_MAX_S = env_int("KVLAB_LOGIN_BACKOFF_MAX_S", 60)
KVLAB_LOGIN_WINDOW_S = env_int("KVLAB_LOGIN_WINDOW_S", 15 * 60)

# Imports: a line over this size is rejected; an upload over this size is refused
# while it streams in, before it reaches the disk.
KVLAB_IMPORT_MAX_LINE_BYTES = env_int("KVLAB_IMPORT_MAX_LINE_BYTES", 64 * 1024)
KVLAB_UPLOAD_MAX_BYTES = env_int("KVLAB_UPLOAD_MAX_BYTES", 64 * 1024 * 1024)
# The sizing page reads a GGUF's metadata from the first bytes of the file only.
KVLAB_GGUF_HEAD_MAX_BYTES = env_int("KVLAB_GGUF_HEAD_MAX_BYTES", 32 * 1024 * 1024)
# Django holds at most this much of an upload in memory before spooling it to disk.
FILE_UPLOAD_MAX_MEMORY_SIZE = 2_621_440

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("KVLAB_LOG_LEVEL", "INFO")},
}
