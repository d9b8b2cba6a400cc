"""What the benchmark scripts share: Django set-up on a scratch database, the small
measuring helpers, and the value pools their synthetic runs are drawn from."""

import math
import os
import socket
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def setup_django(var_dir: Path, allowed_hosts: str | None = None) -> None:
    """Point kvlab at a scratch SQLite database under var_dir, then start Django."""
    os.environ["KVLAB_VAR_DIR"] = str(var_dir)
    if allowed_hosts:
        os.environ["KVLAB_ALLOWED_HOSTS"] = allowed_hosts
    os.environ.pop("DATABASE_URL", None)  # the benchmarks measure the SQLite default
    os.environ.setdefault("KVLAB_LOG_LEVEL", "WARNING")
    os.environ["DJANGO_SETTINGS_MODULE"] = "kvlab.settings"
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def setup_migrated_django(var_dir: Path) -> None:
    """Start Django on a scratch database the test client may reach, and migrate it."""
    setup_django(var_dir, allowed_hosts="testserver,127.0.0.1,localhost")
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def nearest_rank(values: list[float], pct: float) -> float:
    """The pct-th percentile by the nearest-rank method (a value that was measured)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def rerun_ms(sql: str, repeats: int = 3) -> float:
    """Run one captured query again on the raw sqlite3 connection, fetching every row.

    Django's query log times only execute(); SQLite does most of a query's work while
    the rows are fetched, so the log under-reports. Best of `repeats`, in ms.
    """
    from django.db import connection

    raw = connection.connection
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        raw.execute(sql).fetchall()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


MODELS = [
    "Devstral-Small-2-24B-Q4_K_M.gguf",
    "Qwen3-30B-A3B-Instruct-2507-Q4_K_M.gguf",
    "Qwen3-Coder-30B-A3B-Instruct-Q5_K_M.gguf",
    "gemma-3-27b-it-Q4_K_M.gguf",
    "Llama-3.3-70B-Instruct-IQ3_XXS.gguf",
    "gpt-oss-20b-mxfp4.gguf",
    "Mistral-Small-3.2-24B-Instruct-Q6_K.gguf",
    "phi-4-Q8_0.gguf",
]
GPUS = {  # name -> total VRAM (MiB)
    "RTX 5060 Ti 16GB": 16311,
    "RTX 4090": 24564,
    "RTX 3090": 24576,
    "RTX 5090": 32607,
    "A100 80GB": 81920,
}
LABELS = ["original", "unified-kv", "q8-cache", "q4-cache", "no-offload", "fa-on", "big-ctx", "np8", "baseline"]
CTX_SIZES = [4096, 8192, 16384, 32768, 65536, 131072]
