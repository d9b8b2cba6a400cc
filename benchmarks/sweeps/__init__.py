"""Sweeps: launch llama-server with several flag sets, run the workload on each, compare with the prediction."""
