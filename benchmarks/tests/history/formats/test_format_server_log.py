# ruff: noqa: E501  (real log lines are long)
"""A llama-server start-up log given as an import file: recognised, refused with how to attach it."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.records.formats import Declared, FormatError, Sample, Source
from benchmarks.records.formats import llama_server_log as fmt
from sizing.server_log import parse_startup_log

LOG = b"""\
0.00.009.796 I llama_model_loader: loaded meta data with 18 key-value pairs and 39 tensors from /m/tiny.gguf (version GGUF V3 (latest))
0.00.013.171 I load_tensors:   CPU_Mapped model buffer size =     6.05 MiB
0.00.013.439 I llama_context: n_ctx                 = 2304
0.00.015.917 I llama_kv_cache: size =    2.25 MiB (   768 cells,   4 layers,  3/3 seqs), K (f16):    1.12 MiB, V (f16):    1.12 MiB
"""


def test_the_format_is_named_and_reexports_the_parser():
    assert fmt.NAME == "llama-server-log"
    assert fmt.parse_startup_log is parse_startup_log
    assert fmt.parse_startup_log(LOG).n_ctx == 2304


@pytest.mark.parametrize("head", [LOG, LOG.replace(b"\n", b"\r\n"), b"\n".join(line[15:] for line in LOG.splitlines())])
def test_a_start_up_log_is_sniffed_from_its_content(head):
    assert fmt.sniff(Sample(head=head))


@pytest.mark.parametrize(
    "head",
    [
        b'{"date": "20240101-120000", "backend": "vllm", "completed": 10}',
        b'[{"model_filename": "m.gguf", "n_prompt": 512}]',
        b"build_commit,build_number,model_filename\nabc,1,m.gguf\n",
        b'{"schema": "kvlab.bench/1", "note": "llama_context: n_ctx = 1 load_tensors: x"}\n',
        b"",
        b"llama_context: n_ctx = 2304\n",  # one line is not enough to call a file a log
    ],
    ids=["vllm json", "llama-bench json", "csv", "jsonl quoting a log", "empty", "one line"],
)
def test_result_files_are_not_sniffed_as_a_log(head):
    assert not fmt.sniff(Sample(head=head))


def test_a_directory_is_not_a_log():
    assert not fmt.sniff(Sample(names=("run.log",), is_dir=True))


def test_converting_a_log_refuses_it_saying_how_to_attach_it(tmp_path: Path):
    path = tmp_path / "lab_run.log"
    path.write_bytes(LOG)
    with pytest.raises(FormatError, match="this is a llama-server log, not results: attach it with --server-log"):
        list(fmt.convert(Source(path), Declared()))
