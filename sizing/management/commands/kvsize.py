"""python manage.py kvsize — KV memory of a llama-server configuration, exact to the byte."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from sizing import catalogue
from sizing.cmdline import LOAD_MODES, parse_command
from sizing.gguf import GGUFError, read_gguf_head
from sizing.hparams import ModelParams, ModelSpecError, model_params
from sizing.placement import tensors as placement_tensors
from sizing.placement.cpu import CPU_CHOICES, Cpu, CpuSpecError, from_cpuinfo, parse_cpu
from sizing.placement.tensors import WeightTensor
from sizing.placement.types import MAX_DEVICES, Device, Host, MiB
from sizing.render import text_report
from sizing.report import as_json, size
from sizing.workload import Workload

GGUF_HEAD_LIMIT = 256 * 1024 * 1024
MAX_GPU_MIB = 16 * 1024 * 1024  # 16 TiB: far beyond any GPU, small enough to stay exact


def parse_gpu(text: str, index: int) -> Device:
    """`--gpu ID_OR_MIB[:USED_MIB]`: a catalogue GPU or a size in MiB, with the MiB already in use."""
    name, _, used_text = text.partition(":")
    try:
        used = int(used_text) if used_text else 0
    except ValueError:
        raise CommandError(f"--gpu {text}: the memory in use after ':' must be whole MiB") from None
    if name.isdigit():
        total = int(name)
        description, bandwidth = f"a GPU of {total:,} MiB", None
    else:
        gpu = catalogue.gpus().get(name)
        if gpu is None:
            raise CommandError(f"unknown GPU {name!r}; known: {', '.join(sorted(catalogue.gpus()))}, or a size in MiB")
        total, description, bandwidth = gpu.memory_mib, gpu.name, gpu.bandwidth
    if not 1 <= total <= MAX_GPU_MIB or not 0 <= used <= total:
        raise CommandError(f"--gpu {text}: the size must be 1 to {MAX_GPU_MIB:,} MiB and the memory in use 0 to it")
    return Device(f"CUDA{index}", description, total * MiB, used * MiB, bandwidth)


class Command(BaseCommand):
    help = "Size the KV cache (and memory) of a llama-server configuration, as llama.cpp allocates it."

    def add_arguments(self, parser: CommandParser) -> None:
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--gguf", help="a GGUF file (only its head is read; tensor data may be absent)")
        source.add_argument("--spec", help="a JSON file: an object of GGUF metadata keys and values")
        source.add_argument("--model", help="a model id from the built-in catalogue")
        parser.add_argument("-c", "--ctx-size", type=int)
        parser.add_argument("-np", "--parallel", type=int)
        unified = parser.add_mutually_exclusive_group()
        unified.add_argument("-kvu", "--kv-unified", action="store_true", default=None)
        unified.add_argument("--no-kv-unified", action="store_true", default=None)
        parser.add_argument("-ctk", "--cache-type-k")
        parser.add_argument("-ctv", "--cache-type-v")
        parser.add_argument("-fa", "--flash-attn", choices=["on", "off", "auto"])
        parser.add_argument("--swa-full", action="store_true")
        parser.add_argument("-ub", "--ubatch-size", type=int)
        parser.add_argument("-b", "--batch-size", type=int)
        parser.add_argument("--no-kv-offload", action="store_true")
        parser.add_argument("-ngl", "--gpu-layers", help="N, auto or all")
        parser.add_argument("-sm", "--split-mode", choices=["none", "layer", "row", "tensor"])
        parser.add_argument("-ts", "--tensor-split", help="the share of each GPU, e.g. 3,1")
        parser.add_argument("-mg", "--main-gpu", type=int)
        parser.add_argument("-ot", "--override-tensor", action="append", default=[], help="PATTERN=BUFFER_TYPE,...")
        parser.add_argument("-cmoe", "--cpu-moe", action="store_true")
        parser.add_argument("-ncmoe", "--n-cpu-moe", type=int)
        parser.add_argument("--fit", choices=["on", "off"])
        parser.add_argument("-fitt", "--fit-target", help="MiB left free per GPU: one value or one per GPU")
        parser.add_argument("-fitc", "--fit-ctx", type=int, help="the smallest context --fit may choose")
        parser.add_argument("--kv-unified-per-slot", type=int)
        parser.add_argument(
            "--command",
            help="a whole llama-server command line, read as llama-server reads it (in order); "
            "the flags above are applied after it",
        )
        parser.add_argument(
            "--quant", help="catalogue models: the quantization whose weights count (none: the fit is not judged)"
        )
        parser.add_argument(
            "--gpu",
            action="append",
            default=[],
            help="a GPU: a catalogue id or its memory in MiB, with ':USED' for the MiB already in use; "
            "repeat for several (CUDA0, CUDA1, … in order)",
        )
        parser.add_argument("--gpu-mib", type=int, help="one GPU's memory in MiB (the same as --gpu MIB)")
        parser.add_argument("--ram-mib", type=int, help="system RAM in MiB (for a CPU-only fit)")
        parser.add_argument("--ram-gbps", type=float, help="system RAM bandwidth in GB/s (default: dual-channel DDR4)")
        parser.add_argument(
            "--cpu",
            help=f"the host's CPU, which decides where llama.cpp keeps weights in RAM (AMX, CPU_REPACK): {CPU_CHOICES} "
            "(host: this machine's /proc/cpuinfo), llama.cpp feature names (AVX2+AVX512) or its system_info line; "
            "unknown if not given",
        )
        parser.add_argument("-nr", "--no-repack", action="store_true", help="no CPU extra buffer types (AMX, repack)")
        parser.add_argument(
            "--no-host", action="store_true", help="no pinned host buffer: the extra types take CPU weights"
        )
        parser.add_argument("-lm", "--load-mode", choices=LOAD_MODES)
        parser.add_argument("--prompt-tokens", type=int, help="p95 prompt tokens of the workload")
        parser.add_argument("--output-tokens", type=int, help="p95 output tokens of the workload")
        parser.add_argument("--concurrency", type=int, default=1)
        parser.add_argument("--prefer", choices=["throughput", "latency"], default="throughput")
        parser.add_argument("--json", action="store_true", help="machine-readable output")

    def handle(self, *args: Any, **options: Any) -> None:
        metadata, weights, weights_source, model_path = self._model_source(options)
        try:
            model = model_params(metadata)
        except ModelSpecError as exc:
            raise CommandError(str(exc)) from None
        command = (options["command"] or "llama-server") + " " + shlex.join(self._flag_tokens(options)[1:])
        parsed = parse_command(command)
        if parsed.errors:
            raise CommandError("; ".join(parsed.errors))
        workload = self._workload(options)
        gpus = list(options["gpu"]) + ([str(options["gpu_mib"])] if options["gpu_mib"] is not None else [])
        if len(gpus) > MAX_DEVICES:
            raise CommandError(f"at most {MAX_DEVICES} GPUs (llama_max_devices)")
        devices = [parse_gpu(text, i) for i, text in enumerate(gpus)]
        known = [catalogue.gpus().get(text.partition(":")[0]) for text in gpus]  # None: a size in MiB
        host = self._host(options)
        result = size(
            model,
            parsed.flags,
            workload=workload,
            weights_bytes=weights,
            weights_source=weights_source,
            model_path=model_path,
            devices=devices or None,
            host=host,
            tensors=self._tensors(options, model, metadata),
            tensors_in_file_order=bool(options["gguf"]),
            sm_counts=[gpu.sm_count if gpu else None for gpu in known],
            compute_capabilities=[gpu.compute_capability if gpu else None for gpu in known],
        )
        if options["json"]:
            self.stdout.write(json.dumps(as_json(result), indent=2))
        else:
            self.stdout.write(text_report(result))
        if result.layout.errors:
            raise CommandError("this configuration will not start: " + "; ".join(result.layout.errors))

    def _host(self, o: dict[str, Any]) -> Host | None:
        ram, gbps = o["ram_mib"], o["ram_gbps"]
        if ram is not None and not 1 <= ram <= MAX_GPU_MIB:
            raise CommandError(f"--ram-mib must be 1 to {MAX_GPU_MIB:,}")
        if gbps is not None and not 0 < gbps <= 100_000:
            raise CommandError("--ram-gbps must be more than 0 and at most 100,000")
        cpu = self._cpu(o["cpu"])
        if ram is None and gbps is None and cpu is None:
            return None
        total = (ram or 0) * MiB
        return Host(total, total, None if gbps is None else gbps * 1e9, cpu=cpu)

    def _cpu(self, spec: str | None) -> Cpu | None:
        if spec is None:
            return None
        if spec.strip() == "host":
            try:
                text = Path("/proc/cpuinfo").read_text(errors="replace")[:1_000_000]
            except OSError as exc:
                raise CommandError(f"--cpu host: cannot read /proc/cpuinfo ({exc.strerror})") from None
            return from_cpuinfo(text, "this machine's /proc/cpuinfo")
        try:
            return parse_cpu(spec)
        except CpuSpecError as exc:
            raise CommandError(f"--cpu: {exc}") from None

    def _tensors(self, o: dict[str, Any], model: ModelParams, metadata: dict[str, Any]) -> list[WeightTensor] | None:
        """The weight tensors for an exact placement: the GGUF's table, or the catalogue's shapes at --quant."""
        if o["gguf"]:
            head = self._head
            if head is None or not head.complete:
                return None
            try:
                return placement_tensors.from_gguf(head.tensors)
            except ValueError:
                return None
        if o["model"] and o["quant"]:
            entry = catalogue.models()[o["model"]]
            figure = catalogue.weights_for(entry.id, o["quant"])
            if figure is None:
                return None
            try:
                return placement_tensors.computed(
                    entry.metadata, figure.quant, imatrix=entry.imatrix, **entry.tensor_layout
                )
            except (KeyError, ValueError):
                return None
        return None

    def _model_source(self, options: dict[str, Any]) -> tuple[dict[str, Any], int | None, str, str]:
        self._head = None
        if options["gguf"]:
            path = Path(options["gguf"])
            try:
                with path.open("rb") as fh:
                    head = read_gguf_head(fh, limit=GGUF_HEAD_LIMIT)
            except OSError as exc:
                raise CommandError(f"{path}: {exc.strerror}") from None
            except GGUFError as exc:
                raise CommandError(f"{path}: {exc}") from None
            self._head = head
            weights = head.weights_bytes
            return head.metadata, weights, "gguf tensors" if weights is not None else "", path.name
        if options["spec"]:
            try:
                metadata = json.loads(Path(options["spec"]).read_text())
            except OSError as exc:
                raise CommandError(f"{options['spec']}: {exc.strerror}") from None
            except json.JSONDecodeError as exc:
                raise CommandError(f"{options['spec']}: not JSON ({exc.msg} at line {exc.lineno})") from None
            if not isinstance(metadata, dict):
                raise CommandError(f"{options['spec']}: must hold a JSON object of GGUF metadata keys")
            return metadata, None, "", "MODEL.gguf"
        entry = catalogue.models().get(options["model"])
        if entry is None:
            raise CommandError(f"unknown model {options['model']!r}; known: {', '.join(sorted(catalogue.models()))}")
        quant = options["quant"]
        if not quant:  # no default: without weights the fit is not judged (the report says so)
            return entry.metadata, None, "", f"{entry.id}.gguf"
        figure = catalogue.weights_for(entry.id, quant)
        if figure is None:
            known = ", ".join(catalogue.quantizations(entry.id)) or "none"
            raise CommandError(f"{entry.id} has no {quant} weights in the catalogue; known: {known}")
        kind = "computed from the tensor shapes" if figure.computed else "published file size"
        return entry.metadata, figure.bytes, f"catalogue {figure.quant}: {kind}", f"{entry.id}-{figure.quant}.gguf"

    def _flag_tokens(self, o: dict[str, Any]) -> list[str]:
        tokens = ["llama-server"]
        for flag, key in (("-c", "ctx_size"), ("-np", "parallel"), ("-ub", "ubatch_size"), ("-b", "batch_size")):
            if o[key] is not None:
                tokens += [flag, str(o[key])]
        for flag, key in (("-ctk", "cache_type_k"), ("-ctv", "cache_type_v"), ("-fa", "flash_attn")):
            if o[key]:
                tokens += [flag, o[key]]
        for flag, key in (
            ("-ngl", "gpu_layers"),
            ("-sm", "split_mode"),
            ("-ts", "tensor_split"),
            ("-mg", "main_gpu"),
            ("--n-cpu-moe", "n_cpu_moe"),
            ("-fit", "fit"),
            ("-fitt", "fit_target"),
            ("-fitc", "fit_ctx"),
            ("--kv-unified-per-slot", "kv_unified_per_slot"),
        ):
            if o[key] is not None:
                tokens += [flag, str(o[key])]
        for value in o["override_tensor"]:
            tokens += ["-ot", value]
        if o["cpu_moe"]:
            tokens.append("--cpu-moe")
        if o["kv_unified"]:
            tokens.append("-kvu")
        if o["no_kv_unified"]:
            tokens.append("--no-kv-unified")
        if o["swa_full"]:
            tokens.append("--swa-full")
        if o["no_kv_offload"]:
            tokens.append("--no-kv-offload")
        if o["no_repack"]:
            tokens.append("-nr")
        if o["no_host"]:
            tokens.append("--no-host")
        if o["load_mode"]:
            tokens += ["-lm", o["load_mode"]]
        return tokens

    def _workload(self, o: dict[str, Any]) -> Workload | None:
        prompt, output = o["prompt_tokens"], o["output_tokens"]
        if prompt is None and output is None:
            return None
        if prompt is None or output is None:
            raise CommandError("give both --prompt-tokens and --output-tokens to describe the workload")
        if prompt < 1 or output < 0 or o["concurrency"] < 1:
            raise CommandError("prompt tokens and concurrency must be at least 1, output tokens at least 0")
        return Workload(prompt, output, o["concurrency"], o["prefer"])
