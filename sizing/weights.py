"""A model's weights per quantization: a published GGUF's size, or computed from its tensor shapes.

`WeightsFigure` is one figure of the catalogue (sizing/catalogue): the bytes of one model at
one quantization, with where the figure comes from.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WeightsFigure:
    """The weights of one model at one quantization.

    `bytes` is never an estimate, but it measures one of two things, told apart by `computed`:

    * computed=False: the published GGUF file's size in bytes (split files summed). That is the
      tensor data plus the GGUF header (metadata, tokenizer vocab, tensor table, alignment
      padding), so it is above the tensor data llama.cpp loads by a few MiB at most.
    * computed=True: the tensor data exactly (the sum over the tensor table of ggml's row size
      of each tensor at the type llama-quantize gives it), which is what llama.cpp's model
      buffers hold, before their per-tensor alignment padding.
    """

    quant: str  # llama.cpp's ftype name as in file names: "Q4_K_M", "Q8_0", "F16", "MXFP4", ...
    bytes: int
    source: str  # the published file listing's URL, or "computed from the tensor shapes (...)"
    computed: bool
