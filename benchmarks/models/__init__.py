"""Benchmark history (runs, requests, imports) and execution (servers, jobs)."""

from .history import FileImport, RejectedLine, RequestResult, Run
from .jobs import Job, Server
from .sweeps import CalibrationPoint, LaunchHost, Sweep, SweepConfig

__all__ = [
    "CalibrationPoint",
    "FileImport",
    "Job",
    "LaunchHost",
    "RejectedLine",
    "RequestResult",
    "Run",
    "Server",
    "Sweep",
    "SweepConfig",
]
