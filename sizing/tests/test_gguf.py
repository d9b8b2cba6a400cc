import io

import pytest

from sizing.gguf import GGUFError, read_gguf_head

from .gguf_writer import gguf_head_bytes

META = {
    "general.architecture": "llama",
    "general.name": "tiny",
    "llama.block_count": 4,
    "llama.attention.head_count_kv": [2, 2, 0, 2],
    "llama.rope.freq_base": 10000.0,
    "llama.use_parallel_residual": True,
    "tokenizer.ggml.tokens": ["<s>", "</s>", "a"],
    "llama.big": 1 << 40,
}
TENSORS = [("token_embd.weight", (256, 300), 0), ("blk.0.attn_q.weight", (256, 256), 8), ("out", (256, 3), 12)]


def test_it_reads_metadata_and_the_tensor_table():
    head = read_gguf_head(io.BytesIO(gguf_head_bytes(META, TENSORS)))
    assert head.version == 3 and head.metadata == META
    assert [t.type_name for t in head.tensors] == ["f32", "q8_0", "q4_K"]
    assert head.weights_bytes == 256 * 300 * 4 + 256 * 256 // 32 * 34 + 256 * 3 // 256 * 144


def test_a_head_cut_inside_the_tensor_table_still_gives_the_metadata():
    data = gguf_head_bytes(META, TENSORS)
    head = read_gguf_head(io.BytesIO(data[:-10]))
    assert head.metadata == META and head.complete is False and head.weights_bytes is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty or shorter than a GGUF header"),
        (b"PK\x03\x04 zip", "not a GGUF file"),
        (gguf_head_bytes(META, version=1), "GGUF version 1 is not supported"),
        (gguf_head_bytes(META)[:60], "the head ends inside metadata"),
        (b"GGUF" + (3).to_bytes(4, "little") + (0).to_bytes(8, "little") + (10**9).to_bytes(8, "little"), "corrupt"),
    ],
)
def test_bad_heads_get_a_clear_error(data, message):
    with pytest.raises(GGUFError, match=message):
        read_gguf_head(io.BytesIO(data))


def test_a_read_limit_stops_at_the_cap():
    data = gguf_head_bytes(META, TENSORS)
    with pytest.raises(GGUFError, match="the head ends inside"):
        read_gguf_head(io.BytesIO(data), limit=40)
