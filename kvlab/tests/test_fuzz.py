"""Fuzzing the parsers of untrusted input: no crash, no hang, always a clear error."""

import io
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.records.jsonl import RecordError, decode_line
from benchmarks.records.schema import normalize
from sizing.cmdline import parse_command
from sizing.gguf import GGUFError, read_gguf_head
from sizing.hparams import ModelSpecError, model_params
from sizing.tests.gguf_writer import gguf_head_bytes

FAST = settings(max_examples=300, deadline=500, suppress_health_check=[HealthCheck.too_slow])
VALID_HEAD = gguf_head_bytes(
    {
        "general.architecture": "llama",
        "llama.block_count": 4,
        "llama.embedding_length": 256,
        "llama.context_length": 4096,
        "llama.attention.head_count": 8,
        "llama.attention.head_count_kv": [2, 2, 0, 2],
        "tokenizer.ggml.tokens": ["<s>", "a", "b"],
    },
    [("token_embd.weight", (256, 3), 0), ("blk.0.attn_q.weight", (256, 256), 8)],
)


def read_or_refuse(data: bytes) -> None:
    try:
        head = read_gguf_head(io.BytesIO(data), limit=1 << 20)
    except GGUFError as exc:
        assert str(exc)
        return
    try:
        model_params(head.metadata)
    except ModelSpecError as exc:
        assert str(exc)


@FAST
@given(st.binary(max_size=4096))
def test_random_bytes_are_refused_with_a_reason(data):
    read_or_refuse(data)


@FAST
@given(
    st.lists(st.tuples(st.integers(0, len(VALID_HEAD) - 1), st.integers(0, 255)), max_size=8),
    st.integers(4, len(VALID_HEAD)),
)
def test_corrupted_and_cut_heads_are_refused_or_read(edits, cut):
    data = bytearray(VALID_HEAD)
    for position, value in edits:
        data[position] = value
    read_or_refuse(bytes(data[:cut]))


@FAST
@given(st.text(max_size=400))
def test_any_text_is_a_command_line_or_a_list_of_errors(text):
    parsed = parse_command(text)
    assert isinstance(parsed.errors, list) and isinstance(parsed.ignored, list)


@FAST
@given(
    st.lists(
        st.sampled_from(
            [
                "-c",
                "-np",
                "-ctk",
                "-ctv",
                "-fa",
                "-kvu",
                "--no-kv-unified",
                "--swa-full",
                "-ub",
                "-b",
                "-ngl",
                "-m",
                "0",
                "1",
                "-1",
                "4096",
                "q8_0",
                "on",
                "x",
                "=",
                "'",
            ]
        ),
        max_size=12,
    )
)
def test_flag_soup_never_crashes_the_parser(tokens):
    parsed = parse_command("llama-server " + " ".join(tokens))
    if not parsed.errors:
        assert parsed.flags.parallel is None or parsed.flags.parallel >= 1


@FAST
@given(st.binary(max_size=600))
def test_any_line_is_a_record_or_a_reason(raw):
    try:
        normalize(decode_line(raw))
    except RecordError as exc:
        assert str(exc)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)
KEYS = st.sampled_from(
    [
        "run",
        "model",
        "ok",
        "status",
        "tok_s",
        "prompt_tokens",
        "ts",
        "ctx_size",
        "error",
        "schema",
        "extra",
        "kvu",
        "np",
    ]
)


@FAST
@given(st.dictionaries(KEYS, JSON_VALUES, max_size=8))
def test_any_object_with_record_keys_is_normalised_or_refused(obj):
    try:
        record = normalize(obj)
    except RecordError as exc:
        assert str(exc)
    else:
        assert record.run[0] and record.run[3]  # a run id and a model, always


def test_a_large_random_file_is_read_without_crashing():
    rng = random.Random(7)
    data = bytes(rng.randrange(256) for _ in range(200_000))
    read_or_refuse(b"GGUF" + data)
