"""A server's KV pool as the server has it, and what a job's workload will do to it. Pure.

/props reports `total_slots` and each slot's `n_ctx`. With a unified pool (no -np, or
-kvu) every slot is told it may use the whole pool: "4 × 1,024" from /props is then
one pool of 1,024 cells that four slots share, not 4,096 cells. With per-slot caches
it is 1,024 cells each. /props cannot tell which; the launch command can
(sizing.cmdline), and sizing.workload.predict says what a workload does to either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeGuard

from sizing.cmdline import parse_command
from sizing.kv import AUTO_PARALLEL, KVLayout, ServerFlags, pad256
from sizing.workload import Prediction, Workload, predict

UNKNOWN_NOTE = (
    "/props cannot tell one shared pool (unified KV: llama-server's default without -np) from a pool per slot; "
    "register the server's launch command to know"
)


@dataclass(frozen=True)
class Pool:
    slots: int
    cells: int  # what each slot may use: the whole pool when unified, its own cells when not
    unified: bool | None  # None: not known (no launch command, or one that disagrees with the server)
    source: str  # "server" (/props) or "command" (the launch command alone: not probed yet)
    note: str = ""

    @property
    def total_cells(self) -> int | None:
        if self.unified is None:
            return None
        return self.cells if self.unified else self.cells * self.slots

    def describe(self) -> str:
        s = "s" if self.slots != 1 else ""
        if self.unified:
            return f"{self.slots} slot{s} sharing one pool of {self.cells:,} cells"
        if self.unified is False:
            each = f"{self.slots} slot{s} × {self.cells:,} cells each"
            return each if self.slots == 1 else f"{each} ({self.cells * self.slots:,} in all)"
        return (
            f"{self.slots} slot{s}, each allowed {self.cells:,} cells: either one pool of {self.cells:,} they share "
            f"or {self.cells:,} each"
        )


def _declared(launch_command: str) -> ServerFlags | None:
    if not launch_command:
        return None
    parsed = parse_command(launch_command)
    return None if parsed.errors else parsed.flags


def _is_unified(flags: ServerFlags) -> bool:
    auto = flags.parallel is None or flags.parallel < 0
    return auto or bool(flags.kv_unified)  # without -np the 4 automatic slots always share one pool


def server_pool(launch_command: str, probe: dict[str, Any] | None) -> Pool | None:
    """The pool from /props (what the server has) and the launch command (shared or per slot)."""
    props = (probe or {}).get("props") or {}
    slots, cells = props.get("total_slots"), props.get("n_ctx_slot")
    flags = _declared(launch_command)
    if _positive(slots) and _positive(cells):
        if flags is None:
            return Pool(slots, cells, None, "server", UNKNOWN_NOTE)
        declared_slots = AUTO_PARALLEL if flags.parallel is None or flags.parallel < 0 else flags.parallel
        if declared_slots != slots:
            note = (
                f"the launch command gives {declared_slots} slot{'s' if declared_slots != 1 else ''} but the server "
                f"reports {slots}: the registered command may not be the one it runs; {UNKNOWN_NOTE}"
            )
            return Pool(slots, cells, None, "server", note)
        return Pool(slots, cells, _is_unified(flags), "server")
    if flags is None or not flags.ctx_size:
        return None  # without -c the context is the model's (or --fit's): only the server can say
    if _is_unified(flags):
        n_parallel = AUTO_PARALLEL if flags.parallel is None or flags.parallel < 0 else flags.parallel
        return Pool(n_parallel, pad256(flags.ctx_size), True, "command")
    assert flags.parallel is not None
    return Pool(flags.parallel, pad256(pad256(flags.ctx_size) // flags.parallel), False, "command")


@dataclass(frozen=True)
class JobWarning:
    outcome: str  # sizing.workload's: pool_overflow, prompt_too_long, truncated
    message: str
    certain: bool  # False when the pool may or may not be shared


def job_warning(pool: Pool, prompt_tokens: int, n_predict: int, concurrency: int) -> JobWarning | None:
    """What the workload will do to the pool, when it is not simply fine (sizing.workload.predict)."""
    unified = True if pool.unified is None else pool.unified  # unknown: the failure a shared pool would give
    layout = KVLayout(
        n_ctx=pool.cells if unified else pool.cells * pool.slots,
        n_ctx_seq=pool.cells,
        n_stream=1 if unified else pool.slots,
        n_parallel=pool.slots,
        kv_unified=unified,
        auto_parallel=False,
        flash_attn=True,
    )
    prediction: Prediction = predict(layout, Workload(prompt_tokens, n_predict, concurrency))
    if prediction.outcome == "ok":
        return None
    if pool.unified is None and prediction.outcome == "pool_overflow":
        return JobWarning(
            prediction.outcome,
            f"If the slots share one pool: {prediction.message} ({UNKNOWN_NOTE}.)",
            certain=False,
        )
    return JobWarning(prediction.outcome, prediction.message, certain=True)


def _positive(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
