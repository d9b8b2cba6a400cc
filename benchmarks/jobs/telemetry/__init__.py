"""Telemetry during a job: the server's slots and metrics, and the worker's GPUs, sampled a few
times a second beside the requests (sampler.py), kept as a bounded series (series.py)."""
