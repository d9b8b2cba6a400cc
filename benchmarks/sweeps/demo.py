"""The built-in demo sweep: the investigation at small scale, on a tiny generated model.

Three concurrent requests of 300 prompt + 300 output tokens against:
1. the default flags (4 automatic slots sharing one 1,024-cell pool): all fail together;
2. per-slot KV (-np 3 --no-kv-unified, 768 cells each): all succeed;
3. one slot with q8_0 KV: all succeed, one after another.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from ..models import LaunchHost

DEMO_MODEL = "kvlab-demo-tiny-llama.gguf"
DEMO_FLAG_SETS = ["-c 1024", "-c 2048 -np 3 --no-kv-unified", "-c 1024 -np 1 -ctk q8_0 -ctv q8_0 -fa on"]
DEMO_PARAMS = {
    "prompt_tokens": 300,
    "n_predict": 300,
    "concurrencies": [3],
    "requests": 3,
    "repeats": 1,
    "timeout_s": 300,
}


def demo_models_dir() -> Path:
    return Path(settings.VAR_DIR) / "models"


def ensure_demo_model() -> Path:
    from sizing.tiny_gguf import write_llama

    path = demo_models_dir() / DEMO_MODEL
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        write_llama(tmp)
        tmp.rename(path)
    return path


def demo_host() -> LaunchHost | None:
    """A host whose worker announced the demo model (a local worker does: var/models is its default)."""
    hosts = LaunchHost.objects.launchable().order_by("-announced_at")
    return next((h for h in hosts[:50] if DEMO_MODEL in h.model_files), None)


NO_DEMO_HOST = (
    "no worker has announced the demo model: start a worker on this machine (make run does) after "
    "scripts/build-llama-server.sh, or list the llama-server binary in its KVLAB_LAUNCH_BINARIES"
)
