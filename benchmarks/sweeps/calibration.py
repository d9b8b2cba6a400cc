"""Calibrate a host: the worker runs llama-bench on one of its announced models and stores the results as runs.

The llama-bench is the one built beside an announced llama-server (scripts/build-llama-server.sh --bench
puts it there): the worker runs only what its own settings list, with the same checks as the server
binary (an absolute, executable file that no other user may replace). Its `-o jsonl` output is imported
as any llama-bench file is (records.formats.llama_bench), so the runs join the history and the sizing
page's "measured against estimated" finds them. While it runs the worker beats, stops it on a cancel, on
the deadline or when its output passes the cap, and the calibration always ends in a final state.
"""

from __future__ import annotations

import logging
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from .. import enqueue
from ..history.importer import import_path
from ..models import FileImport, HostCalibration, LaunchHost
from ..records.formats import Declared, FormatError
from ..records.storable import storable_text
from . import launcher, worker_host

log = logging.getLogger(__name__)

BENCH_NAME = "llama-bench"
MAX_OUTPUT_BYTES = 16 * 1024 * 1024  # a llama-bench result is a few KiB a test
TAIL_CHARS = 4000
POLL_S = 0.5


def create_calibration(
    host: LaunchHost, model_file: str, params: dict[str, int], *, binary: str = "", user: Any = None
) -> HostCalibration:
    """Store a calibration and enqueue it on the host's queue once committed."""
    with transaction.atomic():
        calibration = HostCalibration.objects.create(
            host=host,
            model_file=model_file,
            binary=binary,
            params=params,
            created_by=user if user is not None and user.is_authenticated else None,
        )
        enqueue.calibration(calibration)
    return calibration


def bench_beside(binary: str) -> str:
    """The llama-bench in the same directory as an announced llama-server, checked as that binary is."""
    path = str(Path(binary).with_name(BENCH_NAME))
    problem = worker_host.check_binary(path)
    if problem:
        raise worker_host.NotLaunchable(
            f"no usable llama-bench beside {binary}: {problem}. Build it there with "
            "scripts/build-llama-server.sh --bench (llama.cpp's tools/llama-bench)"
        )
    return path


def bench_command(bench: str, model: Path, params: dict[str, int]) -> list[str]:
    """llama-bench's arguments: one pp and one tg test of the given sizes, -r repetitions, as JSONL."""
    return [
        bench, "-m", str(model),
        "-p", str(params["n_prompt"]), "-n", str(params["n_gen"]),
        "-ngl", str(params["n_gpu_layers"]), "-r", str(params["repetitions"]),
        "-o", "jsonl",
    ]  # fmt: skip


def run_calibration(calibration_id: int, worker: str = "") -> str:
    if not HostCalibration.claim(calibration_id, worker):
        return HostCalibration.objects.filter(pk=calibration_id).values_list("state", flat=True).first() or "missing"
    calibration = HostCalibration.objects.select_related("host").get(pk=calibration_id)
    try:
        machine = worker_host.for_host(calibration.host, "calibration")
        bench = bench_beside(machine.binary(calibration.binary))
        model = machine.model(calibration.model_file)
    except worker_host.NotLaunchable as exc:
        HostCalibration.finish(calibration.pk, HostCalibration.State.FAILED, f"not launchable here: {exc}")
        return HostCalibration.State.FAILED
    command = bench_command(bench, model, calibration.params)
    HostCalibration.objects.filter(pk=calibration.pk).update(command=" ".join(command))
    try:
        return _run(calibration, command)
    except Exception as exc:  # recorded, never a calibration left running
        log.exception("calibration %s failed", calibration_id)
        HostCalibration.finish(calibration.pk, HostCalibration.State.FAILED, f"{type(exc).__name__}: {exc}")
        return HostCalibration.State.FAILED


def _run(calibration: HostCalibration, command: list[str]) -> str:
    deadline_s = settings.KVLAB_CALIBRATION_TIMEOUT_S
    with tempfile.TemporaryDirectory(prefix="kvlab-bench-") as work:
        out_path, err_path = Path(work) / "llama-bench.jsonl", Path(work) / "llama-bench.err"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(  # noqa: S603 - an announced, checked binary; arguments, no shell
                command, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=work,
                preexec_fn=launcher._die_with_parent,  # noqa: PLW1509 - setsid and the parent-death signal only
            )  # fmt: skip
            stopped = _watch(calibration.pk, proc, out_path, deadline_s)
        tail = _tail(err_path)
        if stopped:
            state, why = stopped
            HostCalibration.finish(calibration.pk, state, why, output_tail=tail)
            return state
        if proc.returncode != 0:
            last = next((line for line in reversed(tail.splitlines()) if line.strip()), "no output")
            HostCalibration.finish(
                calibration.pk, HostCalibration.State.FAILED,
                f"llama-bench exited with status {proc.returncode}: {last}", output_tail=tail,
            )  # fmt: skip
            return HostCalibration.State.FAILED
        host = calibration.host
        try:
            imported = import_path(
                out_path,
                origin=FileImport.Origin.CALIBRATION,
                format="llama-bench",
                declared=Declared(gpu=host.gpu),  # the runs keep llama-bench's test names as labels
                filename=f"llama-bench {calibration.model_file} on {host.name}",
                user=calibration.created_by,
            )
        except FormatError as exc:
            HostCalibration.finish(
                calibration.pk, HostCalibration.State.FAILED, f"llama-bench's output cannot be read: {exc}",
                output_tail=tail,
            )  # fmt: skip
            return HostCalibration.State.FAILED
        if imported.status != FileImport.Status.IMPORTED:
            reasons = "; ".join(imported.rejected_lines.values_list("reason", flat=True)[:5])
            HostCalibration.finish(
                calibration.pk, HostCalibration.State.FAILED, f"llama-bench's output was rejected: {reasons}",
                output_tail=tail, file_import=imported,
            )  # fmt: skip
            return HostCalibration.State.FAILED
        HostCalibration.finish(calibration.pk, HostCalibration.State.SUCCEEDED, output_tail=tail, file_import=imported)
        return HostCalibration.State.SUCCEEDED


def _watch(pk: int, proc: subprocess.Popen[bytes], out_path: Path, deadline_s: float) -> tuple[str, str] | None:
    """Wait for llama-bench, beating; (state, why) when it had to be stopped, None when it exited by itself."""
    start = time.monotonic()
    while proc.poll() is None:
        why = None
        if HostCalibration.beat_and_cancel_requested(pk):
            why = (HostCalibration.State.CANCELLED, "cancelled by a user while llama-bench ran")
        elif time.monotonic() - start > deadline_s:
            why = (HostCalibration.State.FAILED, f"llama-bench ran past the {deadline_s:g} s deadline")
        elif out_path.stat().st_size > MAX_OUTPUT_BYTES:
            why = (HostCalibration.State.FAILED, f"llama-bench wrote more than {MAX_OUTPUT_BYTES:,} bytes")
        if why:
            launcher.stop_group(proc, grace_s=5)
            return why
        time.sleep(POLL_S)
    return None


def _tail(path: Path) -> str:
    with path.open("rb") as fh:
        fh.seek(max(0, path.stat().st_size - TAIL_CHARS * 4))
        return storable_text(fh.read().decode("utf-8", "replace")[-TAIL_CHARS:])
