"""python manage.py kvsize — KV memory of a llama-server configuration, exact to the byte."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from sizing import catalogue
from sizing.cmdline import parse_command
from sizing.gguf import GGUFError, read_gguf_head
from sizing.hparams import ModelSpecError, model_params
from sizing.render import text_report
from sizing.report import as_json, size
from sizing.workload import Workload

GGUF_HEAD_LIMIT = 256 * 1024 * 1024


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
        parser.add_argument("-ngl", "--gpu-layers", type=int)
        parser.add_argument(
            "--quant", help="catalogue models: the quantization whose weights count (none: the fit is not judged)"
        )
        gpu = parser.add_mutually_exclusive_group()
        gpu.add_argument("--gpu", help="a GPU id from the catalogue")
        gpu.add_argument("--gpu-mib", type=int, help="the GPU's memory in MiB")
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
        parsed = parse_command(shlex.join(self._flag_tokens(options)))
        if parsed.errors:
            raise CommandError("; ".join(parsed.errors))
        workload = self._workload(options)
        gpu_mib = options["gpu_mib"]
        if options["gpu"]:
            gpu = catalogue.gpus().get(options["gpu"])
            if gpu is None:
                raise CommandError(f"unknown GPU {options['gpu']!r}; known: {', '.join(sorted(catalogue.gpus()))}")
            gpu_mib = gpu.memory_mib
        result = size(
            model,
            parsed.flags,
            workload=workload,
            gpu_mib=gpu_mib,
            weights_bytes=weights,
            weights_source=weights_source,
            model_path=model_path,
        )
        if options["json"]:
            self.stdout.write(json.dumps(as_json(result), indent=2))
        else:
            self.stdout.write(text_report(result))
        if result.layout.errors:
            raise CommandError("this configuration will not start: " + "; ".join(result.layout.errors))

    def _model_source(self, options: dict[str, Any]) -> tuple[dict[str, Any], int | None, str, str]:
        if options["gguf"]:
            path = Path(options["gguf"])
            try:
                with path.open("rb") as fh:
                    head = read_gguf_head(fh, limit=GGUF_HEAD_LIMIT)
            except OSError as exc:
                raise CommandError(f"{path}: {exc.strerror}") from None
            except GGUFError as exc:
                raise CommandError(f"{path}: {exc}") from None
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
        if o["gpu_layers"] is not None:
            tokens += ["-ngl", str(o["gpu_layers"])]
        if o["kv_unified"]:
            tokens.append("-kvu")
        if o["no_kv_unified"]:
            tokens.append("--no-kv-unified")
        if o["swa_full"]:
            tokens.append("--swa-full")
        if o["no_kv_offload"]:
            tokens.append("--no-kv-offload")
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
