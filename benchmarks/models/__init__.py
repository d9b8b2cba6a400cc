"""Benchmark history (runs, requests, imports) and execution (servers, jobs)."""

from .baselines import BaselineComparison, SeriesRun
from .derived import DerivedBacklog
from .history import FileImport, RejectedLine, RequestResult, Run
from .host_calibrations import HostCalibration
from .jobs import Job, Server
from .rollups import TimelineBucket
from .sweeps import CalibrationPoint, LaunchHost, Sweep, SweepConfig

__all__ = [
    "BaselineComparison",
    "CalibrationPoint",
    "DerivedBacklog",
    "FileImport",
    "HostCalibration",
    "Job",
    "LaunchHost",
    "RejectedLine",
    "RequestResult",
    "Run",
    "SeriesRun",
    "Server",
    "Sweep",
    "SweepConfig",
    "TimelineBucket",
]
