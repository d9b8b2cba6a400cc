"""A run of the history as the sizing reads it: its flags, its measured workload, its catalogue model."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from benchmarks.models import Run
from benchmarks.records.metrics import at_rank
from sizing import catalogue
from sizing.forms import SizingForm
from sizing.inputs import RunRecord
from sizing.kv import ServerFlags
from sizing.workload import Workload


def flags_from_run(run: Run) -> ServerFlags:
    """The llama-server flags a run's record describes."""
    auto = run.parallel == 4 and run.kv_unified is True
    return replace(
        ServerFlags(),
        ctx_size=run.ctx_size or None,
        parallel=None if auto or run.parallel is None else run.parallel,
        kv_unified=None if auto else run.kv_unified,
        type_k=run.cache_type_k or "f16",
        type_v=run.cache_type_v or "f16",
        flash_attn={"on": "on", "off": "off"}.get(run.flash_attn, "auto"),
        kv_offload=run.kv_offload is not False,
    )


def measured_workload(run: Run) -> Workload | None:
    """p95 prompt and output tokens of a run's requests, and its concurrency."""
    rows = list(run.requests.values_list("prompt_tokens", "output_tokens", "n_predict"))
    prompts = sorted(p for p, _, _ in rows if p is not None)
    outputs = sorted(o if o is not None else n for _, o, n in rows if (o if o is not None else n) is not None)
    if not prompts:
        return None
    return Workload(at_rank(prompts, 95), at_rank(outputs, 95) if outputs else 0, run.concurrency or 1)


def _normalized(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def catalogue_id_for(model_name: str) -> str:
    """The catalogue entry a run's model file names, by its id's letters and digits."""
    wanted = _normalized(model_name)
    matches = [m.id for m in catalogue.models().values() if _normalized(m.id) in wanted]
    return max(matches, key=len) if matches else ""


# Words a GPU's name may carry or lack: nvidia-smi says "NVIDIA GeForce RTX 5060 Ti", a lab script "RTX 5060 Ti 16GB".
_VENDOR_WORDS = re.compile(r"nvidia|geforce|amd|radeon")
# Two GPUs whose names differ by a variant's suffix (the RTX 4070 Ti and the 4070 Ti SUPER) are told apart
# by their memory: a prefix of the catalogue's name is the entry only where the memory agrees this closely.
_MEMORY_AGREES = 0.02


def catalogue_gpu_for(gpu_name: str, vram_total_mib: int | None) -> str:
    """The catalogue entry a run's GPU is: the same name (vendor words aside), or a shorter form of one
    whose memory matches the run's total, the nearest where two do; "" where none is, or two equally."""
    wanted = _VENDOR_WORDS.sub("", _normalized(gpu_name))
    if not wanted:
        return ""
    gpus = catalogue.gpus()
    named = {g.id: _VENDOR_WORDS.sub("", _normalized(g.name)) for g in gpus.values()}
    exact = [gpu_id for gpu_id, name in named.items() if name == wanted]
    if len(exact) == 1:
        return exact[0]
    if not vram_total_mib:
        return ""
    close = [
        gpu_id
        for gpu_id, name in named.items()
        if _shorter_form(name, wanted)
        and abs(gpus[gpu_id].memory_mib - vram_total_mib) <= _MEMORY_AGREES * vram_total_mib
    ]
    distance = {gpu_id: abs(gpus[gpu_id].memory_mib - vram_total_mib) for gpu_id in close}
    nearest = sorted(close, key=distance.__getitem__)
    if not nearest or (len(nearest) > 1 and distance[nearest[0]] == distance[nearest[1]]):
        return ""
    return nearest[0]  # of two variants named alike (H100 SXM and PCIe), the one whose memory the run measured


# What may follow a shorter form of a catalogue name (letters and digits only, as _normalized leaves them): its
# memory ("16gb", "80gbhbm3") or a form word, but not a variant's word — an RTX 5060 Ti is not an RTX 5060 with
# its memory, nor is "rtx50" a form of "rtx5060".
_VARIANT = re.compile(r"^(ti|super|xtx|xt|gre|pro|max|ultra|plus|nvl)|^\d+(?!\d|gb)")


def _shorter_form(a: str, b: str) -> bool:
    """One normalized name is the other with a memory or form suffix added."""
    short, long = sorted((a, b), key=len)
    return long.startswith(short) and not _VARIANT.match(long[len(short) :])


class RunSizingForm(SizingForm):
    """The sizing form that reads `run` (use the measured prompts of run #) from the history."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.run: Run | None = None  # the run read for `run`, as a row of the history

    def read_run(self, pk: int) -> RunRecord | None:
        self.run = Run.objects.filter(pk=pk).first()
        if self.run is None:
            return None
        run = self.run
        return RunRecord(pk=run.pk, key=run.key, label=run.label, model=run.model, workload=measured_workload(run))
