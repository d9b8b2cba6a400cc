"""Benchmark history (runs, requests, imports) and execution (servers, jobs)."""

from .history import FileImport, RejectedLine, RequestResult, Run
from .jobs import Job, Server

__all__ = ["FileImport", "Job", "RejectedLine", "RequestResult", "Run", "Server"]
