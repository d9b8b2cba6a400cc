"""What a sizing form hands to the sizing: its inputs as the sizing used them, and a run of the history as
the sizing reads it (filled in by benchmarks.run_sizing)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import catalogue
from .cmdline import ArgNote, ParsedCommand
from .hparams import ModelParams
from .kv import ServerFlags
from .placement.tensors import WeightTensor
from .placement.types import Device, Host
from .size import Sizing, size
from .weights import WeightsFigure
from .workload import Workload


@dataclass(frozen=True)
class RunRecord:
    """A run of the history as the sizing reads it: filled in by the history's side of kvlab
    (benchmarks.run_sizing), which sizing never imports."""

    pk: int
    key: str
    label: str
    model: str  # the model file it ran
    workload: Workload | None  # its requests' p95 prompt and output tokens, its concurrency; None: no prompt sizes


@dataclass
class SizingInputs:
    model: ModelParams
    model_label: str
    model_path: str
    weights_bytes: int | None
    weights_source: str
    flags: ServerFlags
    command: ParsedCommand | None
    gpu_mib: int | None
    gpu_label: str
    workload: Workload | None
    catalogue_id: str = ""
    quant: str = ""  # the catalogue quantization whose weights count ("" if none)
    quant_options: list[WeightsFigure] = field(default_factory=list)  # the catalogue's, for this model
    weights_notes: list[str] = field(default_factory=list)  # why a quantization gave no weights
    flags_from: str = "fields"  # "fields" or "command": which one set the flags
    effective: dict[str, Any] = field(default_factory=dict)  # every field as the sizing used it
    run: RunRecord | None = None  # the run whose measured prompts are the workload
    devices: list[Device] = field(default_factory=list)  # the GPUs, in order (CUDA0, CUDA1, ...)
    gpu_sources: list[str] = field(default_factory=list)  # where each GPU's bandwidth comes from
    host: Host | None = None  # system RAM, when its size or bandwidth is given
    host_bandwidth_source: str = ""
    tensors: list[WeightTensor] | None = None  # the weight tensors, when known exactly
    tensors_source: str = ""  # where the tensor table comes from ("" when the weights are spread)
    tensor_notes: list[str] = field(default_factory=list)  # why the tensors are not known exactly
    sm_counts: list[int | None] = field(default_factory=list)  # per GPU, from the catalogue (None: unknown)
    compute_capabilities: list[float | None] = field(default_factory=list)

    @property
    def refusals(self) -> list[ArgNote]:
        return self.command.refusals if self.command else []

    def size(self) -> Sizing:
        return size(
            self.model,
            self.flags,
            workload=self.workload,
            weights_bytes=self.weights_bytes,
            weights_source=self.weights_source,
            model_path=self.model_path,
            devices=self.devices or None,
            host=self.host,
            tensors=self.tensors,
            tensors_in_file_order=self.tensors_source == UPLOADED_TABLE,  # a GGUF's own table: in file order
            sm_counts=self.sm_counts,
            compute_capabilities=self.compute_capabilities,
        )


def catalogue_figures(model_id: str) -> list[WeightsFigure]:
    """The catalogue's weights of a model, one per quantization, in quantizations() order."""
    figures = (catalogue.weights_for(model_id, q) for q in catalogue.quantizations(model_id))
    return [f for f in figures if f is not None]


def weights_source_label(figure: WeightsFigure) -> str:
    if figure.computed:  # the source already says how: "computed from the tensor shapes (...)"
        return f"catalogue {figure.quant}: {figure.source}"
    return f"catalogue {figure.quant}: a published GGUF's file size — {figure.source}"


UPLOADED_TABLE = "the uploaded head's tensor table"  # the tensors' source when they are a GGUF's own
