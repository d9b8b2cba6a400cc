"""The worker machine's NVIDIA GPUs through NVML (package nvidia-ml-py, module pynvml).

NVML calls block, so the sampler makes them from one thread of its own (run_in_executor).
pynvml is imported only when a job samples, so kvlab runs without it; a machine without
the package, the driver's library or a GPU is "none seen: <why>", never an error. What
NVML measures is the machine the worker runs on, which is the server's only when both
run on the same machine.
"""

from __future__ import annotations

import contextlib
from typing import Any

MIB = 1024 * 1024


class Gpus:
    """Opened once (`open`), read at each sample (`read`), closed at the end (`close`)."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._names: list[str] = []
        self._totals: list[int] = []

    def open(self) -> str:
        """ "ok", or "none seen: <why>" (and read() then returns None)."""
        try:
            import pynvml  # noqa: PLC0415 — only where a job samples
        except ImportError:
            return "none seen: nvidia-ml-py is not installed"
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            return f"none seen: {exc}"
        except OSError as exc:  # a broken driver library
            return f"none seen: {type(exc).__name__}: {exc}"
        self._nvml = pynvml
        try:
            count = pynvml.nvmlDeviceGetCount()
            for i in range(count):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                name = pynvml.nvmlDeviceGetName(handle)
                self._handles.append(handle)
                self._names.append(name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name))
                self._totals.append(pynvml.nvmlDeviceGetMemoryInfo(handle).total // MIB)
        except pynvml.NVMLError as exc:
            self.close()
            return f"none seen: {exc}"
        if not self._handles:
            self.close()
            return "none seen: NVML found no GPU"
        return "ok"

    def read(self) -> list[dict[str, Any]] | None:
        """One row per GPU: name, mem_total_mib, mem_mib, util_pct, power_w (None where NVML
        cannot say, e.g. power on some boards)."""
        if self._nvml is None:
            return None
        nvml = self._nvml
        rows = []
        for handle, name, total in zip(self._handles, self._names, self._totals, strict=True):
            row: dict[str, Any] = {"name": name, "mem_total_mib": total, "mem_mib": None, "util_pct": None}
            row["power_w"] = None
            with contextlib.suppress(nvml.NVMLError):
                row["mem_mib"] = nvml.nvmlDeviceGetMemoryInfo(handle).used // MIB
            with contextlib.suppress(nvml.NVMLError):
                row["util_pct"] = nvml.nvmlDeviceGetUtilizationRates(handle).gpu
            with contextlib.suppress(nvml.NVMLError):
                row["power_w"] = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
            rows.append(row)
        return rows

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlShutdown()
        self._nvml = None
        self._handles, self._names, self._totals = [], [], []
