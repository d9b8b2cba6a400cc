"""python manage.py kvsize — the sizing page from the command line: KV memory, the fit, the workload.

Another front door to the same sizing (STYLE 13): the options become the sizing page's query and go
through its form (benchmarks.run_sizing's RunSizingForm: sizing.forms.SizingForm, which reads --run from the
history), so every bound, unit and message is the page's, and
`--json` prints what the page's `?format=json` gives for the same inputs. OPTION_OF_FIELD names the
option of each of the form's fields.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks.run_sizing.runs import RunSizingForm
from sizing.cmdline import LOAD_MODES, SPLIT_MODES, parse_command
from sizing.forms import flag_fields, refusal
from sizing.gguf import GGUFError, read_gguf_head
from sizing.models import GgufHead
from sizing.parsers import GPU_FIELDS, MAX_PARAMS_CHARS, as_query
from sizing.placement.cpu import CPU_CHOICES, Cpu, from_cpuinfo
from sizing.render import text_report
from sizing.report import as_json

GGUF_HEAD_LIMIT = 256 * 1024 * 1024  # a local file's head is read whole; an upload sends its first MiBs
MAX_CPUINFO_CHARS = 1_000_000

# Every field of the sizing form and the option that gives it (command_synced is the page's own state).
OPTION_OF_FIELD = {
    "source": "--model/--spec/--gguf",
    "model": "--model",
    "quant": "--quant",
    "weights": "--weights",
    "gguf": "--gguf",
    "params": "--spec",
    "command": "--command",
    "command_synced": "--command",
    "ctx_size": "-c",
    "parallel": "-np",
    "kv_unified": "-kvu/--no-kv-unified",
    "type_k": "-ctk",
    "type_v": "-ctv",
    "flash_attn": "-fa",
    "swa_full": "--swa-full",
    "no_kv_offload": "--no-kv-offload",
    "n_ubatch": "-ub",
    "n_gpu_layers": "-ngl",
    "gpu": "--gpu",
    "gpu_mib": "--gpu",
    "gpu_used": "--gpu",
    "gpu_gbps": "--gpu-gbps",
    "ram_mib": "--ram-mib",
    "ram_gbps": "--ram-gbps",
    "backend": "--backend",
    "cpu": "--cpu",
    "cpu_cores": "--cpu-cores",
    "cpu_ghz": "--cpu-ghz",
    "prompt_tokens": "--prompt-tokens",
    "output_tokens": "--output-tokens",
    "concurrency": "--concurrency",
    "prefer": "--prefer",
    "headroom": "--headroom",
    "run": "--run",
}
_MIB = re.compile(r"\s*\d[\d,_]*\s*")  # a --gpu value that is a size in MiB, not a catalogue id


class Command(BaseCommand):
    help = "Size the KV cache (and memory) of a llama-server configuration, as the sizing page does."

    def add_arguments(self, parser: CommandParser) -> None:
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--gguf", help="a GGUF file (only its head is read; tensor data may be absent)")
        source.add_argument("--spec", help="a JSON file: an object of GGUF metadata keys and values")
        source.add_argument("--model", help="a model id from the built-in catalogue")
        parser.add_argument(
            "--quant", help="catalogue models: the quantization whose weights count (none: the fit is not judged)"
        )
        parser.add_argument(
            "--weights",
            help="the weights' size: 13.35GiB, '13.35 GB', 14334000000 (bytes); a bare number below 1,048,576 "
            "is GiB. Wins over --quant's and the GGUF's (spread evenly over the layers)",
        )
        # The flags the page has fields for: read as the page reads its fields, after --command.
        parser.add_argument("-c", "--ctx-size", help="0: the model's context, which --fit may not shrink")
        parser.add_argument("-np", "--parallel", help="N, or -1 (auto)")
        unified = parser.add_mutually_exclusive_group()
        unified.add_argument("-kvu", "--kv-unified", action="store_true", default=None)
        unified.add_argument("--no-kv-unified", action="store_true", default=None)
        parser.add_argument("-ctk", "--cache-type-k")
        parser.add_argument("-ctv", "--cache-type-v")
        parser.add_argument("-fa", "--flash-attn", help="on, off or auto")
        parser.add_argument("--swa-full", action="store_true")
        parser.add_argument("--no-kv-offload", action="store_true")
        parser.add_argument("-ub", "--ubatch-size")
        parser.add_argument("-ngl", "--gpu-layers", help="N, auto or all")
        # The flags only a command line sets, on the page as here: added to --command, in this order.
        parser.add_argument("-b", "--batch-size")
        parser.add_argument("-sm", "--split-mode", help=", ".join(SPLIT_MODES))
        parser.add_argument("-ts", "--tensor-split", help="the share of each GPU, e.g. 3,1")
        parser.add_argument("-mg", "--main-gpu")
        parser.add_argument("-ot", "--override-tensor", action="append", default=[], help="PATTERN=BUFFER_TYPE,...")
        parser.add_argument("-cmoe", "--cpu-moe", action="store_true")
        parser.add_argument("-ncmoe", "--n-cpu-moe")
        parser.add_argument("--fit", help="on or off")
        parser.add_argument("-fitt", "--fit-target", help="MiB left free per GPU: one value or one per GPU")
        parser.add_argument("-fitc", "--fit-ctx", help="the smallest context --fit may choose")
        parser.add_argument("--kv-unified-per-slot")
        parser.add_argument("-nr", "--no-repack", action="store_true", help="no CPU extra buffer types (AMX, repack)")
        parser.add_argument(
            "--no-host", action="store_true", help="no pinned host buffer: the extra types take CPU weights"
        )
        parser.add_argument("-lm", "--load-mode", help=", ".join(LOAD_MODES))
        parser.add_argument(
            "--command",
            help="a whole llama-server command line, read as llama-server reads it (in order); the flags "
            "above are applied after it, as the page's fields are after its command",
        )
        parser.add_argument(
            "--gpu",
            action="append",
            default=[],
            help="a GPU: a catalogue id or its memory in MiB, with ':USED' for the MiB already in use; "
            "repeat for several (CUDA0, CUDA1, … in order)",
        )
        parser.add_argument("--gpu-mib", help="one more GPU, by its memory in MiB (the same as --gpu MIB)")
        parser.add_argument(
            "--gpu-gbps",
            action="append",
            default=[],
            help="a GPU's memory bandwidth in GB/s, once per --gpu in the same order ('' for the catalogue's)",
        )
        parser.add_argument(
            "--backend",
            help="the llama.cpp backend of every GPU for the speed estimates: cuda, rocm, vulkan, metal or sycl "
            "(default: each catalogue GPU's usual one; CUDA for a GPU given by its memory)",
        )
        parser.add_argument("--ram-mib", help="system RAM in MiB (for a CPU-only fit)")
        parser.add_argument("--ram-gbps", help="system RAM bandwidth in GB/s (default: dual-channel DDR4)")
        parser.add_argument(
            "--cpu",
            help=f"the host's CPU, which decides where llama.cpp keeps weights in RAM (AMX, CPU_REPACK): {CPU_CHOICES} "
            "(host: this machine's /proc/cpuinfo), llama.cpp feature names (AVX2+AVX512) or its system_info line; "
            "unknown if not given",
        )
        parser.add_argument("--cpu-cores", help="the host CPU's physical cores, for its arithmetic peak (default 8)")
        parser.add_argument("--cpu-ghz", help="the host CPU's clock in GHz, for its arithmetic peak (default 3.5)")
        parser.add_argument("--prompt-tokens", help="p95 prompt tokens of the workload")
        parser.add_argument("--output-tokens", help="p95 output tokens of the workload")
        parser.add_argument("--concurrency", help="requests in flight at once (default 1, or the run's)")
        parser.add_argument("--prefer", help="throughput (default) or latency")
        parser.add_argument("--headroom", help="recommend each request's cells this many %% larger (0-100, default 0)")
        parser.add_argument(
            "--run", help="use the measured prompts of this run of the history (p95 prompt and output tokens)"
        )
        parser.add_argument("--json", action="store_true", help="machine-readable output")

    def handle(self, *args: Any, **options: Any) -> None:
        head = self._head(Path(options["gguf"])) if options["gguf"] else None
        cpu = self._this_cpu() if (options["cpu"] or "").strip() == "host" else None
        form = RunSizingForm(self.query(options), head=head, cpu=cpu)
        errors = refusal(form)
        if errors or form.inputs is None:
            if options["json"]:
                self.stdout.write(json.dumps({"input_errors": errors}, indent=2))
            raise CommandError("\n".join(self._told(field, m, options) for field, ms in errors.items() for m in ms))
        result = form.inputs.size()
        if options["json"]:
            self.stdout.write(json.dumps(as_json(result), indent=2))
        else:
            self.stdout.write(text_report(result))
        if result.layout.errors:
            raise CommandError("this configuration will not start: " + "; ".join(result.layout.errors))

    def query(self, o: dict[str, Any]) -> Any:
        """The sizing page's query string for these options."""
        values: dict[str, Any] = {}
        if o["model"] is not None:
            values |= {"source": "catalogue", "model": o["model"]}
        elif o["spec"] is not None:
            values |= {"source": "params", "params": self._spec(Path(o["spec"]))}
        else:
            values["source"] = "gguf"
        values |= {"quant": o["quant"], "weights": o["weights"]}
        command = o["command"] or ""
        placement = self._command_tokens(o)
        if placement:
            command = (command or "llama-server") + " " + shlex.join(placement)
        if command:
            parsed = parse_command(command)
            if not parsed.errors:
                # As the page shows a command it has read: its flags in the fields and the command
                # unchanged, so the flag options below set what they name and the command the rest.
                values |= flag_fields(parsed.flags) | {"command_synced": command}
            values["command"] = command
        unified = "on" if o["kv_unified"] else "off" if o["no_kv_unified"] else None
        fields = {
            "ctx_size": o["ctx_size"],
            "parallel": o["parallel"],
            "kv_unified": unified,
            "type_k": o["cache_type_k"],
            "type_v": o["cache_type_v"],
            "flash_attn": o["flash_attn"],
            "swa_full": o["swa_full"] or None,
            "no_kv_offload": o["no_kv_offload"] or None,
            "n_ubatch": o["ubatch_size"],
            "n_gpu_layers": o["gpu_layers"],
        }
        values |= {name: value for name, value in fields.items() if value is not None}
        values |= self._gpu_columns(o)
        values |= {
            "ram_mib": o["ram_mib"],
            "ram_gbps": o["ram_gbps"],
            "backend": o["backend"],
            "cpu": None if (o["cpu"] or "").strip() == "host" else o["cpu"],
            "cpu_cores": o["cpu_cores"],
            "cpu_ghz": o["cpu_ghz"],
            "prompt_tokens": o["prompt_tokens"],
            "output_tokens": o["output_tokens"],
            "concurrency": o["concurrency"],
            "prefer": o["prefer"],
            "headroom": o["headroom"],
            "run": o["run"],
        }
        return as_query(values)

    @staticmethod
    def _gpu_columns(o: dict[str, Any]) -> dict[str, list[str]]:
        """--gpu ID_OR_MIB[:USED] (and --gpu-mib) as the page's GPU rows, --gpu-gbps aligned with them."""
        columns: dict[str, list[str]] = {name: [] for name in GPU_FIELDS}
        rows = [(*text.partition(":")[::2], False) for text in o["gpu"]]
        if o["gpu_mib"] is not None:
            rows.append((o["gpu_mib"], "", True))
        for name, used, mib in rows:
            size = mib or _MIB.fullmatch(name) is not None
            columns["gpu"].append("" if size else name)
            columns["gpu_mib"].append(name if size else "")
            columns["gpu_used"].append(used)
        columns["gpu_gbps"] = list(o["gpu_gbps"])
        return columns

    @staticmethod
    def _command_tokens(o: dict[str, Any]) -> list[str]:
        """The options that only a command line sets, as llama-server arguments."""
        tokens: list[str] = []
        for flag, key in (
            ("-b", "batch_size"),
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
                tokens += [flag, o[key]]
        for value in o["override_tensor"]:
            tokens += ["-ot", value]
        for flag, key in (("--cpu-moe", "cpu_moe"), ("-nr", "no_repack"), ("--no-host", "no_host")):
            if o[key]:
                tokens.append(flag)
        if o["load_mode"] is not None:
            tokens += ["-lm", o["load_mode"]]
        return tokens

    @staticmethod
    def _told(field: str, message: str, o: dict[str, Any]) -> str:
        """A form error named by its option, unless the message already starts with it (-c 0: …)."""
        if field == "__all__" or (field == "command" and not o["command"]):
            return message
        option = OPTION_OF_FIELD.get(field, field)
        return message if message.startswith(option + " ") else f"{option}: {message}"

    @staticmethod
    def _spec(path: Path) -> str:
        """A --spec file's text: the page's pasted metadata."""
        try:
            with path.open(encoding="utf-8") as fh:
                text = fh.read(MAX_PARAMS_CHARS + 1)
        except OSError as exc:
            raise CommandError(f"{path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise CommandError(f"{path}: not UTF-8 text, so not a JSON object of GGUF metadata") from None
        if len(text) > MAX_PARAMS_CHARS:  # the page's bound on pasted metadata; the file is not read further
            raise CommandError(
                f"--spec {path}: over {MAX_PARAMS_CHARS:,} characters, more than GGUF metadata without the "
                "tokenizer's arrays takes; leave those out"
            )
        return text

    @staticmethod
    def _head(path: Path) -> GgufHead:
        """A GGUF file's head, kept as an upload of it is (unsaved): the page's sizing of that upload."""
        try:
            with path.open("rb") as fh:
                head = read_gguf_head(fh, limit=GGUF_HEAD_LIMIT)
        except OSError as exc:
            raise CommandError(f"{path}: {exc.strerror}") from None
        except GGUFError as exc:
            raise CommandError(f"{path}: {exc}") from None
        return GgufHead(
            filename=path.name,
            metadata=head.metadata_without_vocab(),
            weights_bytes=head.weights_bytes,
            n_tensors=len(head.tensors),
            tensors=GgufHead.table_of(head.tensors) if head.complete else None,
        )

    @staticmethod
    def _this_cpu() -> Cpu:
        try:
            text = Path("/proc/cpuinfo").read_text(errors="replace")[:MAX_CPUINFO_CHARS]
        except OSError as exc:
            raise CommandError(f"--cpu host: cannot read /proc/cpuinfo ({exc.strerror})") from None
        return from_cpuinfo(text, "this machine's /proc/cpuinfo")
