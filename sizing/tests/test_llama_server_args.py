"""What kvlab says llama-server does with an argument, checked against the real llama-server.

kvlab reads llama-server's options from its own --help (sizing/llama_server_help.txt, b11434).
Each command below goes to the real binary with --version after it: llama-server parses every
argument first, so it either exits 0 (it accepted them) or exits 1 with its error, without
loading a model.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sizing.cmdline import HELP_FILE, parse_command

pytestmark = pytest.mark.llama_server

COMMANDS = [
    # The investigation's published command: the stray 1 after --slots.
    "--model devstral.gguf --ctx-size 12288 --slots 1 -ctk q8_0 -ctv q8_0",
    "--model devstral.gguf --ctx-size 12288 -np 1 -ctk q8_0 -ctv q8_0",  # what kvlab points to
    "-m m.gguf -c 4096 --slots",
    "-m m.gguf -c 4096 --no-slots --metrics --port 8080 --host 127.0.0.1 -t 4",
    "-m m.gguf -c 4096 --metrics 1",
    "-m m.gguf -c 4096 --no-such-flag",
    "-m m.gguf -c 4096 --port=8080",
    "-m m.gguf --ctx-size=4096",
    "-m m.gguf -c 4096 --control-vector-layer-range 1 2",
    "-m m.gguf -c 4096 -ngl all",
]


def _exit_status(binary: Path, args: str) -> tuple[int, str]:
    proc = subprocess.run(
        [str(binary), *args.split(), "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("args", COMMANDS)
def test_llama_server_refuses_exactly_what_kvlab_says_it_refuses(llama_server_binary: Path, args: str) -> None:
    parsed = parse_command(f"llama-server {args}")
    assert parsed.errors == []
    status, output = _exit_status(llama_server_binary, args)
    refusals = parsed.refusals
    assert (status != 0) == bool(refusals), (status, output[-500:], parsed.notes)
    for note in refusals:
        quoted = note.says.split("'")[1]  # the error kvlab says llama-server prints
        assert quoted in output, (quoted, output[-500:])


def test_the_stored_help_is_the_binary_s_own(llama_server_binary: Path) -> None:
    proc = subprocess.run([str(llama_server_binary), "--help"], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0
    assert (proc.stdout + proc.stderr).strip() == HELP_FILE.read_text().strip()
