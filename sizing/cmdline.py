"""Parse a pasted `llama-server ...` command line into the flags that decide KV memory.

Flag names and value forms follow common/arg.cpp of the llama.cpp tree kvlab targets.
Flags kvlab does not model are named back to the user, never silently dropped.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, replace

from .ggml_types import KV_CACHE_TYPES
from .kv import MAX_CTX, MAX_PARALLEL, ServerFlags

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
    "-nkvo": ("kv_offload", False),
    "--no-kv-offload": ("kv_offload", False),
}
_FLASH_FLAGS = ("-fa", "--flash-attn")
_MODEL_FLAGS = ("-m", "--model")
_FLASH_VALUES = {"on": "on", "off": "off", "auto": "auto", "1": "on", "0": "off", "true": "on", "false": "off"}
_FLASH_VALUES |= {"enabled": "on", "disabled": "off"}
KNOWN_FLAGS = (*_INT_FLAGS, *_TYPE_FLAGS, *_BOOL_FLAGS, *_FLASH_FLAGS, *_MODEL_FLAGS)


@dataclass
class ParsedCommand:
    flags: ServerFlags
    model_path: str | None = None
    given: list[str] = field(default_factory=list)  # the known flags as written
    ignored: list[str] = field(default_factory=list)  # flags kvlab does not model, with values
    errors: list[str] = field(default_factory=list)


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
        raw: str | None = None
        if name in _INT_FLAGS or name in _TYPE_FLAGS or name in _MODEL_FLAGS:
            raw, i = _value(tokens, i, inline)
            if raw is None:
                result.errors.append(f"{name} needs a value")

        if name in _INT_FLAGS:
            if raw is not None:
                _set_int(result, values, name, _INT_FLAGS[name], raw)
        elif name in _TYPE_FLAGS:
            if raw is not None:
                if raw not in KV_CACHE_TYPES:
                    result.errors.append(
                        f"{name} {raw}: unknown cache type (llama-server takes {', '.join(KV_CACHE_TYPES)})"
                    )
                else:
                    values[_TYPE_FLAGS[name]] = raw
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
        elif token.startswith("-") and not _is_number(token):
            # An unknown flag: keep it, with its value when the next token is one.
            if inline is None and i < len(tokens) and (not tokens[i].startswith("-") or _is_number(tokens[i])):
                result.ignored.append(f"{token} {tokens[i]}")
                i += 1
            else:
                result.ignored.append(token)
        else:
            result.ignored.append(token)
    if not result.errors:
        result.flags = replace(result.flags, **values)  # type: ignore[arg-type]
    return result


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


def _set_int(result: ParsedCommand, values: dict[str, object], name: str, attr: str, raw: str) -> None:
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
    elif attr in ("n_batch", "n_ubatch"):
        if not 1 <= value <= MAX_CTX:
            result.errors.append(f"{name} {value}: must be 1 to {MAX_CTX:,}")
            return
        values[attr] = value
    else:
        values[attr] = value
    result.given.append(f"{name} {value}")


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
        args += ["-ngl", str(flags.n_gpu_layers)]
    if flags.n_ubatch != 512:
        args += ["-ub", str(flags.n_ubatch)]
    if flags.n_batch != 2048:
        args += ["-b", str(flags.n_batch)]
    return args
