"""Parse a pasted `llama-server ...` command line into the flags that decide KV memory.

Flag names and value forms follow common/arg.cpp of the llama.cpp tree kvlab targets.
Flags kvlab does not model are named back to the user with what llama-server does with
them — run with the flag's meaning, or refuse to start — read from llama-server's own
`--help` (llama_server_help.txt beside this file, b11434's, verbatim).
"""

from __future__ import annotations

import functools
import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path

from .ggml_types import KV_CACHE_TYPES
from .kv import MAX_CTX, MAX_PARALLEL, ServerFlags
from .placement import overrides as ot
from .placement.types import MAX_DEVICES, UINT32_MAX

MAX_COMMAND_CHARS = 20_000

_INT_FLAGS = {
    "-c": "ctx_size",
    "--ctx-size": "ctx_size",
    "-np": "parallel",
    "--parallel": "parallel",
    "-b": "n_batch",
    "--batch-size": "n_batch",
    "-ub": "n_ubatch",
    "--ubatch-size": "n_ubatch",
    "-ngl": "n_gpu_layers",
    "--gpu-layers": "n_gpu_layers",
    "--n-gpu-layers": "n_gpu_layers",
}
_TYPE_FLAGS = {"-ctk": "type_k", "--cache-type-k": "type_k", "-ctv": "type_v", "--cache-type-v": "type_v"}
_BOOL_FLAGS = {
    "-kvu": ("kv_unified", True),
    "--kv-unified": ("kv_unified", True),
    "-no-kvu": ("kv_unified", False),
    "--no-kv-unified": ("kv_unified", False),
    "--swa-full": ("swa_full", True),
    "-kvo": ("kv_offload", True),
    "--kv-offload": ("kv_offload", True),
    "-nkvo": ("kv_offload", False),
    "--no-kv-offload": ("kv_offload", False),
    "--repack": ("repack", True),
    "-nr": ("repack", False),
    "--no-repack": ("repack", False),
    "--no-host": ("no_host", True),
}
# Placement and --fit (common/arg.cpp); each takes one value.
_PLACEMENT_FLAGS = {
    "-sm": "split_mode",
    "--split-mode": "split_mode",
    "-ts": "tensor_split",
    "--tensor-split": "tensor_split",
    "-mg": "main_gpu",
    "--main-gpu": "main_gpu",
    "-ot": "override",
    "--override-tensor": "override",
    "-ncmoe": "n_cpu_moe",
    "--n-cpu-moe": "n_cpu_moe",
    "-ncffn": "n_cpu_ffn",
    "--n-cpu-ffn": "n_cpu_ffn",
    "-fitt": "fit_target_mib",
    "--fit-target": "fit_target_mib",
    "-fitc": "fit_ctx",
    "--fit-ctx": "fit_ctx",
    "--kv-unified-per-slot": "kv_unified_per_slot",
}
_CPU_MOE_FLAGS = ("-cmoe", "--cpu-moe")
_FIT_FLAGS = ("-fit", "--fit")
SPLIT_MODES = ("none", "layer", "row", "tensor")
# The -ot buffer types a command may name; kvlab checks them against the GPUs it is sized for.
_BUFFER_TYPES = [f"{backend}{i}" for backend in ("CUDA", "ROCm", "Vulkan", "SYCL") for i in range(MAX_DEVICES)]
_FLASH_FLAGS = ("-fa", "--flash-attn")
_LOAD_MODE_FLAGS = ("-lm", "--load-mode")
LOAD_MODES = ("auto", "none", "mmap", "mlock", "mmap+mlock", "dio")  # arg.cpp:2694-2710
# Flags that take one of a list of values: the attribute, the values, what llama-server says to another.
_CHOICE_FLAGS = {
    **{
        name: (attr, KV_CACHE_TYPES, "unknown cache type (llama-server takes {})") for name, attr in _TYPE_FLAGS.items()
    },
    **{
        name: ("load_mode", LOAD_MODES, "llama-server exits with 'invalid value' (it takes {})")
        for name in _LOAD_MODE_FLAGS
    },
}
# Options of older builds that b11434's -lm replaced (the hint said after its refusal).
REPLACED_BY = {
    "--no-mmap": " b11434 reads the weights without mmap with -lm none.",
    "--mlock": " b11434 locks the weights in RAM with -lm mlock (or -lm mmap+mlock).",
    "--mmap": " b11434 maps the weights by default (-lm auto), or with -lm mmap.",
    "--direct-io": " b11434 reads with direct I/O with -lm dio.",
}
_MODEL_FLAGS = ("-m", "--model")
_FLASH_VALUES = {"on": "on", "off": "off", "auto": "auto", "1": "on", "0": "off", "true": "on", "false": "off"}
_FLASH_VALUES |= {"enabled": "on", "disabled": "off"}
KNOWN_FLAGS = (
    *_INT_FLAGS,
    *_TYPE_FLAGS,
    *_BOOL_FLAGS,
    *_FLASH_FLAGS,
    *_MODEL_FLAGS,
    *_PLACEMENT_FLAGS,
    *_CPU_MOE_FLAGS,
    *_FIT_FLAGS,
    *_LOAD_MODE_FLAGS,
)


HELP_FILE = Path(__file__).resolve().parent / "llama_server_help.txt"
HELP_COLUMN = 40  # where llama-server's --help starts each option's description


@dataclass(frozen=True)
class ServerOption:
    """One option of llama-server's --help: its names, its value (if it takes one), its meaning."""

    names: tuple[str, ...]
    value: str  # the value's placeholder ("N", "PORT"); "" for a switch
    help: str
    negative: frozenset[str] = frozenset()  # the names that switch it off (--no-slots)

    @property
    def n_values(self) -> int:
        words = self.value.split()
        if not words:
            return 0
        return len(words) if all(re.fullmatch(r"[A-Z_]+", w) for w in words) else 1


@functools.cache
def server_options() -> dict[str, ServerOption]:
    """Every option llama-server b11434 accepts, by each of its names, from its --help."""
    options: dict[str, ServerOption] = {}
    current: tuple[list[str], str, list[str]] | None = None

    def close() -> None:
        if current is None:
            return
        names, value, text = current
        negative: set[str] = set()
        if not value and any(n.startswith("--no-") for n in names):
            longs = [i for i, n in enumerate(names) if n.startswith("--") and not n.startswith("--no-")]
            negative = set(names[longs[-1] + 1 :]) if longs else set()
        option = ServerOption(tuple(names), value, " ".join(text), frozenset(negative))
        options.update(dict.fromkeys(names, option))

    for line in HELP_FILE.read_text().splitlines():
        if line.startswith("-----") or not line.strip():
            close()
            current = None
        elif line.startswith("-"):
            close()
            wrapped = len(line) > HELP_COLUMN and line[HELP_COLUMN - 2 : HELP_COLUMN] == "  "
            left, text = (line[:HELP_COLUMN], line[HELP_COLUMN:].strip()) if wrapped else (line, "")
            names, value = [], ""
            for piece in re.split(r",\s+", left.strip()):
                word, _, rest = piece.partition(" ")
                if word.startswith("-"):
                    names.append(word)
                    value = rest.strip() or value
                else:
                    value = f"{value}, {piece}" if value else piece
            current = (names, value, [text] if text else [])
        elif current is not None and not line.strip().startswith("(env:"):
            current[2].append(line.strip())
    close()
    return options


@dataclass(frozen=True)
class ArgNote:
    """An argument kvlab does not model, and what llama-server does with it."""

    arg: str  # as written, with its value: "--port 8080", "--slots 1"
    refused: bool  # llama-server exits with an error instead of starting
    says: str


@dataclass
class ParsedCommand:
    flags: ServerFlags
    model_path: str | None = None
    given: list[str] = field(default_factory=list)  # the known flags as written
    ignored: list[str] = field(default_factory=list)  # flags kvlab does not model, with values
    errors: list[str] = field(default_factory=list)  # kvlab cannot read the command
    notes: list[ArgNote] = field(default_factory=list)  # one per ignored argument, and per refused form
    other_args: list[str] = field(default_factory=list)  # the unmodelled arguments, as tokens, in order

    @property
    def refusals(self) -> list[ArgNote]:
        """What llama-server would refuse to start with."""
        return [n for n in self.notes if n.refused]


def parse_command(text: str, base: ServerFlags | None = None) -> ParsedCommand:
    """Parse a llama-server command line; problems are listed in .errors, never raised."""
    result = ParsedCommand(flags=base or ServerFlags())
    if len(text) > MAX_COMMAND_CHARS:
        result.errors.append(f"the command line is longer than {MAX_COMMAND_CHARS:,} characters")
        return result
    try:
        tokens = shlex.split(text.replace("\\\r\n", " ").replace("\\\n", " "), comments=False)
    except ValueError as exc:
        result.errors.append(f"the command line cannot be split into arguments: {exc}")
        return result
    tokens = _drop_program(tokens)
    values: dict[str, object] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        name, inline = (token.split("=", 1) + [None])[:2] if token.startswith("--") else (token, None)
        i += 1
        if inline is not None and name in KNOWN_FLAGS:
            result.notes.append(
                ArgNote(
                    token,
                    True,
                    f"llama-server does not read --name=value: it exits with 'error: invalid argument: {token}'. "
                    f"Write {name} {inline}.",
                )
            )
        raw: str | None = None
        if name in _INT_FLAGS or name in _CHOICE_FLAGS or name in _MODEL_FLAGS or name in _PLACEMENT_FLAGS:
            raw, i = _value(tokens, i, inline)
            if raw is None:
                result.errors.append(f"{name} needs a value")

        if name in _INT_FLAGS:
            if raw is not None:
                _set_int(result, values, name, _INT_FLAGS[name], raw)
        elif name in _CHOICE_FLAGS:
            if raw is not None:
                attr, choices, refusal = _CHOICE_FLAGS[name]
                if raw not in choices:
                    result.errors.append(f"{name} {raw}: {refusal.format(', '.join(choices))}")
                else:
                    values[attr] = raw
                    result.given.append(f"{name} {raw}")
        elif name in _BOOL_FLAGS:
            attr, value = _BOOL_FLAGS[name]
            values[attr] = value
            result.given.append(name)
        elif name in _FLASH_FLAGS:
            # Current builds take on|off|auto; older ones took a bare -fa meaning on.
            nxt = inline if inline is not None else (tokens[i] if i < len(tokens) else None)
            mode = _FLASH_VALUES.get((nxt or "").lower())
            if mode is not None:
                if inline is None:
                    i += 1
                values["flash_attn"] = mode
                result.given.append(f"{name} {mode}")
            else:
                values["flash_attn"] = "on"
                result.given.append(f"{name} (bare: on, as older builds read it)")
        elif name in _MODEL_FLAGS:
            if raw is not None:
                result.model_path = raw
                result.given.append(f"{name} {raw}")
        elif name in _PLACEMENT_FLAGS:
            if raw is not None:
                _set_placement(result, values, name, _PLACEMENT_FLAGS[name], raw)
        elif name in _CPU_MOE_FLAGS:
            values["overrides"] = (*values.get("overrides", result.flags.overrides), *ot.cpu_moe())  # type: ignore[misc]
            result.given.append(name)
        elif name in _FIT_FLAGS:
            # -fit takes an optional on|off; bare, it means on (arg.cpp:2870-2883)
            nxt = inline if inline is not None else (tokens[i] if i < len(tokens) else None)
            if nxt in ("on", "off"):
                if inline is None:
                    i += 1
                values["fit"] = nxt == "on"
                result.given.append(f"{name} {nxt}")
            elif nxt is not None and not nxt.startswith("-"):
                result.errors.append(
                    f"{name} {nxt}: llama-server exits with \"error: unknown value for --fit: '{nxt}'\""
                )
                i += 1
            else:
                values["fit"] = True
                result.given.append(name)
        else:
            i = _unmodelled(result, tokens, i - 1)
    if not result.errors:
        result.flags = replace(result.flags, **values)  # type: ignore[arg-type]
    return result


def _unmodelled(result: ParsedCommand, tokens: list[str], i: int) -> int:
    """Note the argument at tokens[i] (and its values) with what llama-server does with it;
    returns the index after them. llama-server's parser takes an option's values as the
    next arguments, whatever they look like, and refuses anything that is not an option."""
    token = tokens[i]
    option = server_options().get(token)
    if option is None:
        # Not one of llama-server's options: it stops at the first such argument. A value
        # after it is shown with it.
        end = i + 1
        if token.startswith("-") and end < len(tokens) and (not tokens[end].startswith("-") or _is_number(tokens[end])):
            end += 1
        arg = " ".join(tokens[i:end])
        if token.startswith("-") and not _is_number(token):
            says = f"llama-server b11434 has no option {token}: it exits with 'error: invalid argument: {token}'."
            says += REPLACED_BY.get(token, "")
        else:
            says = f"llama-server takes no positional arguments: it exits with 'error: invalid argument: {token}'."
        _note(result, tokens[i:end], ArgNote(arg, True, says))
        return end
    end = i + 1 + option.n_values
    if end > len(tokens):
        says = f"{token} needs a value ({option.value}): llama-server exits with 'expected value for argument'."
        _note(result, tokens[i:], ArgNote(" ".join(tokens[i:]), True, says))
        return len(tokens)
    meaning = option.help or "(no description)"
    if token in option.negative:
        meaning = f"switched off — {meaning}"
    arg = " ".join(tokens[i:end])
    if option.value or end >= len(tokens) or tokens[end].startswith("-"):
        _note(result, tokens[i:end], ArgNote(arg, False, f"llama-server runs with it: {meaning}"))
        return end
    # A switch followed by a value: llama-server reads the value as an argument of its own
    # and refuses it.
    stray = tokens[end]
    says = (
        f"{token} takes no value ({meaning}); llama-server exits with 'error: invalid argument: {stray}' "
        "and does not start."
    )
    if token == "--slots":
        says = (
            f"--slots takes no value: it exposes the /slots monitoring endpoint (on by default) and does not set "
            f"the number of slots. llama-server exits with 'error: invalid argument: {stray}' and does not start. "
            f"For {stray} slot{'' if stray == '1' else 's'}, write -np {stray}."
        )
    _note(result, tokens[i : end + 1], ArgNote(f"{arg} {stray}", True, says))
    return end + 1


def _note(result: ParsedCommand, args: list[str], note: ArgNote) -> None:
    result.ignored.append(note.arg)
    result.notes.append(note)
    result.other_args.extend(args)


def _value(tokens: list[str], i: int, inline: str | None) -> tuple[str | None, int]:
    """A flag's value: after '=' or the next argument. Returns it and the next index."""
    if inline is not None:
        return inline, i
    if i < len(tokens):
        return tokens[i], i + 1
    return None, i


def _drop_program(tokens: list[str]) -> list[str]:
    """Skip leading VAR=value assignments and the program path."""
    i = 0
    while i < len(tokens) and "=" in tokens[i] and not tokens[i].startswith("-"):
        i += 1
    if i < len(tokens) and not tokens[i].startswith("-"):
        i += 1
    return tokens[i:]


def _is_number(token: str) -> bool:
    try:
        int(token)
    except ValueError:
        return False
    return True


def _set_placement(result: ParsedCommand, values: dict[str, object], name: str, attr: str, raw: str) -> None:
    """-sm, -ts, -mg, -ot, --n-cpu-moe, --n-cpu-ffn, -fitt, -fitc, --kv-unified-per-slot."""
    try:
        if attr == "split_mode":
            if raw not in SPLIT_MODES:
                raise ValueError(f"must be one of {', '.join(SPLIT_MODES)}")
            values[attr] = raw
        elif attr == "tensor_split":
            parts = [p for p in re.split(r"[,/]", raw)]
            if len(parts) > MAX_DEVICES:
                raise ValueError(f"at most {MAX_DEVICES} values")
            split = tuple(float(p) for p in parts)
            if any(not (0 <= v < 1e9) for v in split):
                raise ValueError("each value must be a number from 0 up")
            values[attr] = split
        elif attr == "override":
            values["overrides"] = (*values.get("overrides", result.flags.overrides), *ot.parse_ot(raw, _BUFFER_TYPES))  # type: ignore[misc]
        elif attr in ("n_cpu_moe", "n_cpu_ffn"):
            n = int(raw)
            if not 0 <= n <= 1000:
                raise ValueError("must be 0 to 1,000")
            more = ot.n_cpu_moe(n) if attr == "n_cpu_moe" else ot.n_cpu_ffn(n)
            values["overrides"] = (*values.get("overrides", result.flags.overrides), *more)  # type: ignore[misc]
        elif attr == "fit_target_mib":
            # split on [,/]+; one value applies to every device (arg.cpp:2898-2922)
            targets = tuple(int(p) for p in re.split(r"[,/]+", raw) if p)
            if not targets or len(targets) >= MAX_DEVICES:
                raise ValueError(f"one to {MAX_DEVICES - 1} values in MiB")
            if any(not 0 <= t <= 2**40 for t in targets):
                raise ValueError("each target must be 0 to 2^40 MiB")
            values[attr] = targets
        elif attr == "fit_ctx":
            n = int(raw)
            if not 0 <= n <= UINT32_MAX:
                raise ValueError(f"must be 0 to {UINT32_MAX:,}")
            values[attr] = n
        elif attr == "main_gpu":
            n = int(raw)
            if not -1 <= n < MAX_DEVICES:
                raise ValueError(f"must be -1 to {MAX_DEVICES - 1}")
            values[attr] = n
        elif attr == "kv_unified_per_slot":
            n = int(raw)
            if not 0 <= n <= MAX_CTX:
                raise ValueError(f"must be 0 to {MAX_CTX:,}")
            values[attr] = n
    except (ValueError, ot.OverrideError) as exc:
        text = str(exc)
        if text.startswith("invalid literal") or text.startswith("could not convert"):
            text = "not a number"
        result.errors.append(text if isinstance(exc, ot.OverrideError) else f"{name} {raw}: {text}")
        return
    result.given.append(f"{name} {raw}")


def _set_int(result: ParsedCommand, values: dict[str, object], name: str, attr: str, raw: str) -> None:
    if attr == "n_gpu_layers" and raw.lower() in ("all", "auto"):
        # auto (-1): as many as --fit decides; all (-2): every layer, set by the user (arg.cpp:2791-2808)
        values[attr] = None if raw.lower() == "auto" else -2
        result.given.append(f"{name} {raw.lower()}")
        return
    try:
        value = int(raw)
    except ValueError:
        result.errors.append(f"{name} {raw}: not a whole number")
        return
    if attr == "parallel":
        if value == 0 or value < -1 or value > MAX_PARALLEL:
            result.errors.append(f"{name} {value}: must be -1 (auto) or 1 to {MAX_PARALLEL}")
            return
        values[attr] = None if value == -1 else value
    elif attr == "ctx_size":
        if not 0 <= value <= MAX_CTX:
            result.errors.append(f"{name} {value}: must be 0 (the model's context) to {MAX_CTX:,}")
            return
        values[attr] = value or None
        if value == 0:
            values["fit_ctx"] = UINT32_MAX  # -c 0 asks for the full context: --fit may not shrink it
    elif attr == "n_gpu_layers":
        if not -2 <= value <= 100_000:
            result.errors.append(f"{name} {value}: must be -1 (auto), -2 (all) or 0 to 100,000")
            return
        values[attr] = None if value == -1 else value
    elif attr in ("n_batch", "n_ubatch"):
        if not 1 <= value <= MAX_CTX:
            result.errors.append(f"{name} {value}: must be 1 to {MAX_CTX:,}")
            return
        values[attr] = value
    else:
        values[attr] = value
    result.given.append(f"{name} {value}")


QUANT_IN_NAME = re.compile(
    r"(?<![A-Z0-9])(I?Q\d_[A-Z0-9]+(?:_[A-Z0-9]+)*|Q\d_\d|MXFP4(?:_MOE)?|F16|BF16|F32)(?![A-Z0-9])", re.I
)


def quant_in_file_name(path: str) -> str:
    """The quantization a GGUF file name states (`…-Q4_K_M.gguf` → "Q4_K_M"), or ""."""
    name = path.rsplit("/", 1)[-1]
    name = re.sub(r"(-\d{5}-of-\d{5})?\.gguf$", "", name, flags=re.I)
    found = QUANT_IN_NAME.findall(name)
    return found[-1].upper() if found else ""


def to_command(flags: ServerFlags, model_path: str = "MODEL.gguf") -> list[str]:
    """The llama-server arguments that produce these flags (defaults left out)."""
    args = ["llama-server", "-m", model_path]
    if flags.ctx_size:
        args += ["-c", str(flags.ctx_size)]
    if flags.parallel is not None:
        args += ["-np", str(flags.parallel)]
        if flags.kv_unified:
            args.append("-kvu")
    if flags.type_k != "f16":
        args += ["-ctk", flags.type_k]
    if flags.type_v != "f16":
        args += ["-ctv", flags.type_v]
    if flags.flash_attn != "auto":
        args += ["-fa", flags.flash_attn]
    if flags.swa_full:
        args.append("--swa-full")
    if not flags.kv_offload:
        args.append("--no-kv-offload")
    if flags.n_gpu_layers is not None:
        args += ["-ngl", "all" if flags.n_gpu_layers == -2 else str(flags.n_gpu_layers)]
    if flags.split_mode != "layer":
        args += ["-sm", flags.split_mode]
    if flags.tensor_split:
        args += ["-ts", ",".join(f"{v:g}" for v in flags.tensor_split)]
    if flags.main_gpu:
        args += ["-mg", str(flags.main_gpu)]
    args += override_args(flags.overrides)
    if not flags.fit:
        args += ["-fit", "off"]
    if flags.fit_target_mib:
        args += ["-fitt", ",".join(map(str, flags.fit_target_mib))]
    if flags.fit_ctx == UINT32_MAX:
        if not flags.ctx_size:
            args += ["-c", "0"]  # the full context, which --fit may not shrink
    elif flags.fit_ctx != 4096:
        args += ["-fitc", str(flags.fit_ctx)]
    if flags.kv_unified_per_slot:
        args += ["--kv-unified-per-slot", str(flags.kv_unified_per_slot)]
    if not flags.repack:
        args.append("-nr")
    if flags.no_host:
        args.append("--no-host")
    if flags.load_mode != "auto":
        args += ["-lm", flags.load_mode]
    if flags.n_ubatch != 512:
        args += ["-ub", str(flags.n_ubatch)]
    if flags.n_batch != 2048:
        args += ["-b", str(flags.n_batch)]
    return args


def override_args(overrides: tuple[tuple[str, str], ...]) -> list[str]:
    """Tensor overrides as the flags that make them, in order: `--n-cpu-moe N` for a run of
    the experts of layers 0..N-1, `--cpu-moe` for all experts, `-ot` for the rest."""
    args: list[str] = []
    pending: list[str] = []
    i = 0
    while i < len(overrides):
        n = 0
        while i + n < len(overrides) and overrides[i + n] == ot.n_cpu_moe(n + 1)[n]:
            n += 1
        if n:
            args += _flush(pending) + ["--n-cpu-moe", str(n)]
            i += n
        elif overrides[i] == ot.cpu_moe()[0]:
            args += _flush(pending) + ["--cpu-moe"]
            i += 1
        else:
            pending.append("=".join(overrides[i]))
            i += 1
    return args + _flush(pending)


def _flush(pending: list[str]) -> list[str]:
    out = ["-ot", ",".join(pending)] if pending else []
    pending.clear()
    return out
