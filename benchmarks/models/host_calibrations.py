"""A host's calibration: llama-bench run by the worker on a launch host, its results stored as runs."""

from __future__ import annotations

from django.db import models

from .history import FileImport
from .sweeps import LaunchHost
from .work import Work


class HostCalibration(Work):
    """One llama-bench run of an announced model with the llama-bench beside an announced llama-server.

    params: n_prompt, n_gen, n_gpu_layers, repetitions (benchmarks/sweeps/calibration_form.py bounds them);
    the results are imported as llama-bench runs (file_import), so the sizing page's history finds them.
    """

    host = models.ForeignKey(LaunchHost, on_delete=models.PROTECT, related_name="calibrations")
    model_file = models.CharField(max_length=500, help_text="a GGUF file name inside the host's models directory")
    binary = models.CharField(max_length=500, blank=True, help_text="the llama-server whose llama-bench runs")
    params = models.JSONField(help_text="n_prompt, n_gen, n_gpu_layers, repetitions")
    command = models.TextField(blank=True, help_text="the llama-bench command as the worker ran it")
    output_tail = models.TextField(blank=True, help_text="the end of llama-bench's standard error")
    file_import = models.ForeignKey(FileImport, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # the reaper: running calibrations whose heartbeat stopped
            models.Index(fields=["state", "heartbeat_at"], name="calibration_state_hb_idx"),
        ]

    def __str__(self) -> str:
        return f"calibration {self.pk} ({self.state})"
